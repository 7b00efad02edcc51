//! Decisions signed by an OpenSSH key held in ssh-agent (issue #35): a key the agent
//! keeps unlocked, or a FIDO token (`sk-ssh-ed25519@openssh.com`) that the agent asks
//! for a touch.
//!
//! The agent protocol (draft-miller-ssh-agent) is two requests here, over the unix
//! socket at `$SSH_AUTH_SOCK`: `SSH2_AGENTC_REQUEST_IDENTITIES` (11), to say clearly
//! when the key is not in the agent, then `SSH2_AGENTC_SIGN_REQUEST` (13) over
//! PROTOCOL.sshsig's signed data for the decision text ([`approval_core::ssh::signed_data`]).
//! Core wraps the agent's signature into the SSHSIG blob and checks it before it is
//! sent. No agent client crate is used: the two messages are a few SSH strings, and
//! the encoding is ssh-key's own (`ssh-encoding`).

use approval_core::keyring::{ApproverKey, KeyPartError};
use approval_core::message::{decision_message, Decision, Proof, SignedDecision};
use approval_core::ssh::{self, SshKey, SshSignature};
use approval_core::{ApproverName, Sha256Hex};
use ssh_encoding::Decode;
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

const REQUEST_IDENTITIES: u8 = 11;
const IDENTITIES_ANSWER: u8 = 12;
const SIGN_REQUEST: u8 = 13;
const SIGN_RESPONSE: u8 = 14;
const FAILURE: u8 = 5;
/// The longest agent answer read (the agent's own limit is 256 KiB).
const MAX_ANSWER: usize = 256 * 1024;
/// How long the agent may take: a FIDO token waits for a touch.
const WAIT: Duration = Duration::from_secs(120);

/// Reads the `--ssh-agent` value: an OpenSSH public key line (`ssh-ed25519 AAAA...`,
/// `sk-ssh-ed25519@openssh.com AAAA...`), as the `.pub` file or `ssh-add -L` has it;
/// a trailing comment is ignored here (it never reaches the keyring).
pub fn parse_key_line(line: &str) -> Result<SshKey, String> {
    let fields: Vec<&str> = line.split_whitespace().collect();
    let [word, blob, ..] = fields[..] else {
        return Err("--ssh-agent takes an OpenSSH public key line: `ssh-ed25519 AAAA...` (from `ssh-add -L` or the .pub file)".into());
    };
    match ApproverKey::parse_fields(&[word, blob]) {
        Ok(ApproverKey::Ssh(k)) => Ok(k),
        Ok(_) => Err("--ssh-agent takes an ssh-ed25519 or sk-ssh-ed25519@openssh.com key".into()),
        Err(KeyPartError::Malformed(m)) => Err(format!("--ssh-agent key: {m}")),
        Err(KeyPartError::Key(e)) => Err(format!("--ssh-agent key: {e}")),
    }
}

/// Signs `decision` on `preview_sha256` with `key` through the agent at `socket`, and
/// checks the result verifies under `key` before returning it.
pub fn sign_decision(
    socket: &Path,
    key: &SshKey,
    approver: ApproverName,
    decision: Decision,
    preview_sha256: &Sha256Hex,
    reason: &str,
) -> Result<SignedDecision, String> {
    let msg = decision_message(decision, preview_sha256, reason).map_err(|e| e.to_string())?;
    let data = ssh::signed_data(msg.as_bytes())?;
    let at = socket.display();
    let fp = key.fingerprint();
    let mut conn = UnixStream::connect(socket)
        .map_err(|e| format!("cannot reach the ssh-agent at {at} ($SSH_AUTH_SOCK): {e}"))?;
    let _ = conn.set_read_timeout(Some(WAIT));
    let _ = conn.set_write_timeout(Some(WAIT));
    let answer = request(&mut conn, &[REQUEST_IDENTITIES])
        .map_err(|e| format!("the ssh-agent at {at}: {e}"))?;
    if !holds(&answer, key.blob()).map_err(|e| format!("the ssh-agent at {at}: {e}"))? {
        return Err(format!(
            "the ssh-agent at {at} does not hold the key {} {fp}: add it (`ssh-add`), or name the key the agent holds (`ssh-add -L`)",
            key.word()
        ));
    }
    let mut req = vec![SIGN_REQUEST];
    put_string(&mut req, key.blob());
    put_string(&mut req, &data);
    req.extend(0u32.to_be_bytes());
    let answer = request(&mut conn, &req).map_err(|e| format!("the ssh-agent at {at}: {e}"))?;
    let sig = match answer.split_first() {
        Some((&SIGN_RESPONSE, mut rest)) => {
            let blob = Vec::<u8>::decode(&mut rest)
                .map_err(|e| format!("the ssh-agent at {at} sent a bad signature: {e}"))?;
            SshSignature::from_agent(key, &blob)?
        }
        Some((&FAILURE, _)) => {
            return Err(format!(
                "the ssh-agent at {at} refused to sign with the key {fp} (confirmation declined, token not touched, or key removed): nothing signed"
            ))
        }
        _ => return Err(format!("the ssh-agent at {at} gave an unexpected answer to a sign request")),
    };
    let d = SignedDecision {
        approver,
        decision,
        reason: reason.to_owned(),
        proof: Proof::SshSig(Box::new(sig)),
    };
    d.verify(&ApproverKey::Ssh(key.clone()), preview_sha256)
        .map_err(|e| format!("the ssh-agent at {at} signed with the key {fp}, but: {e}"))?;
    Ok(d)
}

fn put_string(out: &mut Vec<u8>, s: &[u8]) {
    out.extend((s.len() as u32).to_be_bytes());
    out.extend_from_slice(s);
}

/// Sends one message (length-prefixed) and reads one answer.
fn request(conn: &mut UnixStream, body: &[u8]) -> Result<Vec<u8>, String> {
    let mut m = Vec::with_capacity(body.len() + 4);
    put_string(&mut m, body);
    conn.write_all(&m)
        .map_err(|e| format!("cannot write: {e}"))?;
    let mut len = [0u8; 4];
    conn.read_exact(&mut len)
        .map_err(|e| format!("no answer: {e}"))?;
    let len = u32::from_be_bytes(len) as usize;
    if len == 0 || len > MAX_ANSWER {
        return Err(format!("an answer of {len} bytes"));
    }
    let mut answer = vec![0u8; len];
    conn.read_exact(&mut answer)
        .map_err(|e| format!("a cut answer: {e}"))?;
    Ok(answer)
}

/// Whether an identities answer lists `blob`.
fn holds(answer: &[u8], blob: &[u8]) -> Result<bool, String> {
    let Some((&IDENTITIES_ANSWER, mut r)) = answer.split_first() else {
        return Err("unexpected answer to a list of keys".into());
    };
    let bad = |e: ssh_encoding::Error| format!("a bad list of keys: {e}");
    let n = u32::decode(&mut r).map_err(bad)?;
    for _ in 0..n {
        let k = Vec::<u8>::decode(&mut r).map_err(bad)?;
        let _comment = Vec::<u8>::decode(&mut r).map_err(bad)?;
        if k == blob {
            return Ok(true);
        }
    }
    Ok(false)
}
