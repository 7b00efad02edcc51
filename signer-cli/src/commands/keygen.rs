//! `keygen` and `pubkey`: the approver's own key, made and kept on their machine.

use super::outln;
use crate::config::{config_dir, Settings};
use crate::failure::{refused, usage};
use anyhow::Result;
use approval_core::keyring::SecretKey;
use approval_core::ApproverName;
use serde_json::json;
use std::io::Write;
use std::path::{Path, PathBuf};

/// `signer-cli keygen --name NAME [--out FILE]`.
pub fn keygen(settings: &Settings, name: &str, out: Option<&Path>) -> Result<()> {
    let name =
        ApproverName::parse(name).map_err(|e| usage(crate::display::escape(&e.to_string())))?;
    let path: PathBuf = match out {
        Some(p) => p.to_owned(),
        None => config_dir()?.join(format!("{name}.key")),
    };
    let mut seed = [0u8; 32];
    getrandom::fill(&mut seed)
        .map_err(|e| refused(format!("cannot get random bytes from the OS: {e}")))?;
    let key = SecretKey::from_seed(name, seed);
    seed.fill(0);
    write_new_private(&path, key.to_file_text().as_bytes())?;
    let line = key.keyring_line();
    if settings.json {
        outln(&crate::display::to_json(&json!({
            "name": key.name.as_str(),
            "public_key": key.public_key().to_base64(),
            "keyring_line": line,
            "key_file": path.display().to_string(),
        })));
    } else {
        outln(&line);
    }
    eprintln!(
        "signer-cli: secret key written to {} (mode 0600, never share it); send the keyring line printed above to whoever runs the server, for its keys file",
        path.display()
    );
    Ok(())
}

/// Creates `path` with mode 0600, refusing to overwrite anything.
fn write_new_private(path: &Path, bytes: &[u8]) -> Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        let mut b = std::fs::DirBuilder::new();
        b.recursive(true);
        #[cfg(unix)]
        std::os::unix::fs::DirBuilderExt::mode(&mut b, 0o700);
        b.create(dir)
            .map_err(|e| usage(format!("cannot create {}: {e}", dir.display())))?;
    }
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut opts, 0o600);
    let mut f = opts.open(path).map_err(|e| {
        if e.kind() == std::io::ErrorKind::AlreadyExists {
            refused(format!(
                "{} already exists: a key is never overwritten; choose another --name or --out",
                path.display()
            ))
        } else {
            usage(format!("cannot create {}: {e}", path.display()))
        }
    })?;
    f.write_all(bytes)
        .and_then(|_| f.sync_all())
        .map_err(|e| usage(format!("cannot write {}: {e}", path.display())))?;
    Ok(())
}

/// `signer-cli pubkey`: the keyring line of the configured key.
pub fn pubkey(settings: &Settings) -> Result<()> {
    let key = settings.secret_key()?;
    let line = key.keyring_line();
    if settings.json {
        outln(&crate::display::to_json(&json!({
            "name": key.name.as_str(),
            "public_key": key.public_key().to_base64(),
            "keyring_line": line,
        })));
    } else {
        outln(&line);
    }
    Ok(())
}
