//! Pinning each server's identity on first use, like SSH's `known_hosts`.
//!
//! A server's `/healthz` says who it is (`server_id`) and which key signs its
//! execution attestations (`server_key`). Believing that on every call would only
//! compare the server with itself, so the first answer for a server URL is pinned
//! in a file, and every later one must match it or the command stops before
//! anything is signed. After an intended change (a rebuilt server, a new data
//! folder), `signer-cli trust-server` re-pins explicitly.
//!
//! The file is `<config dir>/known_servers` (override: `--known-servers FILE` or
//! `SIGNER_KNOWN_SERVERS`), one server a line: `<url> <server_id> <server_key>`,
//! where the URL is the normalised `--server` base and the key is standard base64
//! of its 32 bytes. `#` starts a comment line.

use crate::failure::{refused, usage};
use anyhow::Result;
use approval_core::{PublicKey, ServerId};
use std::path::{Path, PathBuf};

/// The file's name in the config folder.
pub const FILE_NAME: &str = "known_servers";

/// What a server says it is (or what was pinned for it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    /// `server_id`.
    pub server_id: ServerId,
    /// `server_key`.
    pub server_key: PublicKey,
}

impl std::fmt::Display for Identity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} with key {}", self.server_id, self.server_key)
    }
}

/// What [`check`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// The server matches its pin.
    Known,
    /// The server was not pinned; it is now.
    Pinned,
}

fn parse(path: &Path, text: &str) -> Result<Vec<(String, Identity)>> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let bad = || {
            usage(format!(
                "{} line {}: expected `<url> <server_id> <server_key>`; fix or remove the line",
                path.display(),
                i + 1
            ))
        };
        let mut f = line.split_whitespace();
        let (Some(url), Some(id), Some(key), None) = (f.next(), f.next(), f.next(), f.next())
        else {
            return Err(bad());
        };
        let server_id = ServerId::parse(id).map_err(|_| bad())?;
        let server_key = PublicKey::parse(key).map_err(|_| bad())?;
        out.push((
            url.to_owned(),
            Identity {
                server_id,
                server_key,
            },
        ));
    }
    Ok(out)
}

/// Reads every pin; a missing file has none.
pub fn load(path: &Path) -> Result<Vec<(String, Identity)>> {
    match std::fs::read_to_string(path) {
        Ok(text) => parse(path, &text),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(e) => Err(usage(format!("cannot read {}: {e}", path.display()))),
    }
}

/// The pin for a server URL, if any.
pub fn lookup(path: &Path, url: &str) -> Result<Option<Identity>> {
    Ok(load(path)?
        .into_iter()
        .find(|(u, _)| u == url)
        .map(|(_, id)| id))
}

/// Pins `id` for `url`, replacing any earlier pin (written to a temporary file and
/// renamed, so a reader never sees half a file).
pub fn pin(path: &Path, url: &str, id: &Identity) -> Result<()> {
    let mut pins: Vec<(String, Identity)> =
        load(path)?.into_iter().filter(|(u, _)| u != url).collect();
    pins.push((url.to_owned(), id.clone()));
    let mut text = String::from(
        "# signer-cli known servers: <url> <server_id> <server_key>, pinned on first use.\n\
         # Change a pin only with `signer-cli --server URL trust-server`.\n",
    );
    for (u, i) in &pins {
        text.push_str(&format!("{u} {} {}\n", i.server_id, i.server_key));
    }
    if let Some(dir) = path.parent() {
        if !dir.as_os_str().is_empty() {
            std::fs::create_dir_all(dir)
                .map_err(|e| usage(format!("cannot create {}: {e}", dir.display())))?;
        }
    }
    let tmp = path.with_extension(format!("tmp-{}", std::process::id()));
    std::fs::write(&tmp, text)
        .map_err(|e| usage(format!("cannot write {}: {e}", tmp.display())))?;
    std::fs::rename(&tmp, path).map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        usage(format!("cannot write {}: {e}", path.display()))
    })
}

/// Compares what the server at `url` says with its pin, pinning it on first use.
/// A changed identity is refused with both values and the command that re-pins.
pub fn check(path: &Path, url: &str, seen: &Identity) -> Result<Verdict> {
    match lookup(path, url)? {
        Some(pinned) if &pinned == seen => Ok(Verdict::Known),
        Some(pinned) => Err(refused(format!(
            "SERVER IDENTITY CHANGED for {url}: pinned as {pinned} in {}, but it now says it is \
             {seen}. Refused, nothing signed. Someone may be impersonating the server; if the \
             change is intended (a new data folder or a restored key), check the new key with \
             the server's operator and re-pin with `signer-cli --server {url} trust-server`",
            path.display()
        ))),
        None => {
            pin(path, url, seen)?;
            Ok(Verdict::Pinned)
        }
    }
}

/// The known-servers file: the override, else `<config dir>/known_servers`.
pub fn path(overridden: Option<&Path>) -> Result<PathBuf> {
    match overridden {
        Some(p) => Ok(p.to_path_buf()),
        None => crate::config::config_dir()
            .map(|d| d.join(FILE_NAME))
            .map_err(|_| {
                usage(
                    "neither XDG_CONFIG_HOME nor HOME is set, so there is no known_servers file \
                     to pin the server in: pass --known-servers FILE or set SIGNER_KNOWN_SERVERS",
                )
            }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ed25519_dalek::SigningKey;

    fn id(n: u8, srv: &str) -> Identity {
        Identity {
            server_id: ServerId::parse(srv).unwrap(),
            server_key: PublicKey::from_signing_key(&SigningKey::from_bytes(&[n; 32])),
        }
    }

    #[test]
    fn pins_on_first_use_and_refuses_a_change() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("sub/known_servers");
        let (a, b) = (id(1, "srv-a"), id(2, "srv-a"));
        assert_eq!(check(&p, "http://x:1", &a).unwrap(), Verdict::Pinned);
        assert_eq!(check(&p, "http://x:1", &a).unwrap(), Verdict::Known);
        // Another server is pinned on its own.
        assert_eq!(check(&p, "http://y:2", &b).unwrap(), Verdict::Pinned);
        let e = check(&p, "http://x:1", &b).unwrap_err().to_string();
        assert!(e.contains("SERVER IDENTITY CHANGED"), "{e}");
        assert!(e.contains(&a.server_key.to_base64()) && e.contains(&b.server_key.to_base64()));
        assert!(e.contains("trust-server"), "{e}");
        // Re-pinning replaces only that server's line.
        pin(&p, "http://x:1", &b).unwrap();
        assert_eq!(lookup(&p, "http://x:1").unwrap(), Some(b.clone()));
        assert_eq!(lookup(&p, "http://y:2").unwrap(), Some(b));
        assert_eq!(load(&p).unwrap().len(), 2);
    }

    #[test]
    fn a_broken_line_is_refused_by_number() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("known_servers");
        std::fs::write(&p, "# c\nhttp://x srv-a\n").unwrap();
        let e = load(&p).unwrap_err().to_string();
        assert!(e.contains("line 2"), "{e}");
    }
}
