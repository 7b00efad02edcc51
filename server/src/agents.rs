//! Agent identity: bearer tokens from an agents file.
//!
//! The file holds `<name> <sha256 hex of token>` lines, never tokens, so reading
//! it does not let anyone act as an agent. `approval-server agent add NAME` makes
//! a token, prints it once and appends its hash. Tokens are compared by hash in
//! constant time, so response timing does not reveal how much of a guess was
//! right. The identity found here is what goes into `requested_by`; tool
//! arguments can never set it.

use approval_core::ids::AgentName;
use approval_core::Sha256Hex;
use subtle::ConstantTimeEq;

/// Known agents and the hashes of their tokens.
#[derive(Debug, Clone, Default)]
pub struct Agents {
    entries: Vec<(AgentName, [u8; 32])>,
}

impl Agents {
    /// Parses the agents file. Errors carry the 1-based line.
    pub fn parse(text: &str) -> Result<Self, (usize, String)> {
        let mut entries: Vec<(AgentName, [u8; 32])> = Vec::new();
        for (i, l) in text.lines().enumerate() {
            let l = l.trim();
            if l.is_empty() || l.starts_with('#') {
                continue;
            }
            let mut f = l.split_whitespace();
            let (Some(name), Some(hash), None) = (f.next(), f.next(), f.next()) else {
                return Err((i + 1, "expected `<name> <sha256 hex of token>`".into()));
            };
            let name = AgentName::parse(name).map_err(|e| (i + 1, e.to_string()))?;
            if name.as_str() == approval_core::governance::CONFIG_PROPOSER {
                return Err((
                    i + 1,
                    format!("{name} is the gate's own name for configuration changes: choose another agent name"),
                ));
            }
            let hash = Sha256Hex::parse(hash).map_err(|e| (i + 1, e.to_string()))?;
            if entries.iter().any(|(n, _)| n == &name) {
                return Err((i + 1, format!("agent {name} appears twice")));
            }
            entries.push((name, *hash.as_bytes()));
        }
        Ok(Self { entries })
    }

    /// The agent whose token this is. Every entry is compared, in constant time.
    pub fn authenticate(&self, token: &str) -> Option<AgentName> {
        let h = Sha256Hex::digest(token.as_bytes());
        let mut found = None;
        for (name, hash) in &self.entries {
            if bool::from(hash.ct_eq(h.as_bytes())) {
                found = Some(name.clone());
            }
        }
        found
    }

    /// Whether a name is taken.
    pub fn contains(&self, name: &AgentName) -> bool {
        self.entries.iter().any(|(n, _)| n == name)
    }
}

/// Makes a new random token (256 bits, hex).
pub fn new_token() -> std::io::Result<String> {
    let mut b = [0u8; 32];
    getrandom::fill(&mut b).map_err(|e| std::io::Error::other(e.to_string()))?;
    Ok(format!("agt_{}", hex::encode(b)))
}

/// The agents-file line for a token.
pub fn line(name: &AgentName, token: &str) -> String {
    format!("{name} {}", Sha256Hex::digest(token.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_authenticate_by_hash_only() {
        let t = new_token().unwrap();
        let a = AgentName::parse("ci-bot").unwrap();
        let agents = Agents::parse(&format!("# agents\n{}\n", line(&a, &t))).unwrap();
        assert_eq!(agents.authenticate(&t), Some(a));
        assert_eq!(agents.authenticate("agt_wrong"), None);
        assert_eq!(agents.authenticate(""), None);
        assert!(Agents::parse("bot").is_err());
        assert!(Agents::parse("bot abc").is_err());
        let dup = format!(
            "{}\n{}\n",
            line(&AgentName::parse("x").unwrap(), "a"),
            line(&AgentName::parse("x").unwrap(), "b")
        );
        assert_eq!(Agents::parse(&dup).unwrap_err().0, 2);
    }
}
