//! Where the server and the secret key come from, and loading the key safely.
//!
//! Precedence, first found wins: the flags `--server`/`--key`, the environment
//! variables `SIGNER_SERVER`/`SIGNER_KEY` (both handled by clap), then the config file
//! `$XDG_CONFIG_HOME/approval-signer/config.toml` (or `~/.config/approval-signer/`)
//! with `server = "..."` and `key = "..."`. Without any key setting, the one `*.key`
//! file in that folder is used when there is exactly one (what `keygen` made). An
//! `https://` server is checked against the system's roots plus, for a private
//! deployment, the certificates of `--tls-ca`/`SIGNER_TLS_CA`/`tls_ca = "..."`.
//!
//! A secret key file readable or writable by group or others is refused, like ssh
//! does, with the `chmod` that fixes it.

use crate::failure::{refused, usage};
use anyhow::Result;
use approval_core::keyring::SecretKey;
use reqwest::Url;
use serde::Deserialize;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The config file's contents.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    /// The approver API base URL.
    pub server: Option<String>,
    /// The secret key file (`~/` and paths relative to the config folder accepted).
    pub key: Option<String>,
    /// Extra trusted CA or self-signed certificates for `https://` servers (PEM; `~/`
    /// and paths relative to the config folder accepted).
    pub tls_ca: Option<String>,
}

/// Settings from the global flags, resolved against the config file when needed.
#[derive(Debug, Clone)]
pub struct Settings {
    /// `--server` or `SIGNER_SERVER`.
    pub server: Option<String>,
    /// `--key` or `SIGNER_KEY`.
    pub key: Option<PathBuf>,
    /// `--json`: machine-readable output.
    pub json: bool,
    /// `--known-servers` or `SIGNER_KNOWN_SERVERS` (default `<config dir>/known_servers`).
    pub known_servers: Option<PathBuf>,
    /// Time-out of each network call.
    pub timeout: Duration,
    /// `--tls-ca` or `SIGNER_TLS_CA`: extra trusted certificates (PEM) for https.
    pub tls_ca: Option<PathBuf>,
    /// `--ssh-agent` or `SIGNER_SSH_AGENT`: the OpenSSH public key line whose key in
    /// the agent at `$SSH_AUTH_SOCK` signs decisions (issue #35); `--key` still signs
    /// reads.
    pub ssh_agent: Option<String>,
}

/// `$XDG_CONFIG_HOME/approval-signer`, or `~/.config/approval-signer`.
pub fn config_dir() -> Result<PathBuf> {
    if let Some(x) = std::env::var_os("XDG_CONFIG_HOME") {
        let p = PathBuf::from(x);
        if p.is_absolute() {
            return Ok(p.join("approval-signer"));
        }
    }
    match std::env::var_os("HOME") {
        Some(h) if !h.is_empty() => Ok(PathBuf::from(h).join(".config").join("approval-signer")),
        _ => Err(usage(
            "neither XDG_CONFIG_HOME nor HOME is set: pass the file explicitly (--key FILE, or --out FILE for keygen)",
        )),
    }
}

/// Reads the config file; a missing file is an empty config.
pub fn load_file() -> Result<(FileConfig, PathBuf)> {
    let dir = config_dir()?;
    let path = dir.join("config.toml");
    match std::fs::read_to_string(&path) {
        Ok(text) => {
            let cfg: FileConfig = toml::from_str(&text).map_err(|e| {
                usage(format!(
                    "{}: {} (expected `server = \"http://...\"`, `key = \"path\"` and optionally `tls_ca = \"path\"`)",
                    path.display(),
                    e.message()
                ))
            })?;
            Ok((cfg, dir))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok((FileConfig::default(), dir)),
        Err(e) => Err(usage(format!("cannot read {}: {e}", path.display()))),
    }
}

fn expand(p: &str, base: &Path) -> PathBuf {
    if let Some(rest) = p.strip_prefix("~/") {
        if let Some(h) = std::env::var_os("HOME") {
            return PathBuf::from(h).join(rest);
        }
    }
    let p = PathBuf::from(p);
    if p.is_absolute() {
        p
    } else {
        base.join(p)
    }
}

/// Checks and normalises a server base URL (`http(s)://host:port[/prefix]`).
pub fn parse_server(s: &str) -> Result<Url> {
    let bad = |why: &str| {
        usage(format!(
            "invalid server URL {}: {why} (expected the base URL that `approval-server serve` prints as \"Approver API\", like http://127.0.0.1:4800)",
            crate::display::quote(s)
        ))
    };
    let mut url = Url::parse(s.trim()).map_err(|e| bad(&e.to_string()))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(bad("use http:// or https://"));
    }
    if url.host_str().is_none() {
        return Err(bad("no host"));
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err(bad("no query or fragment"));
    }
    let path = url.path().trim_end_matches('/').to_owned();
    url.set_path(&path);
    Ok(url)
}

impl Settings {
    /// The server base URL, from the flag, the environment or the config file.
    pub fn server_url(&self) -> Result<Url> {
        if let Some(s) = &self.server {
            return parse_server(s);
        }
        let (cfg, dir) = load_file()?;
        match cfg.server {
            Some(s) => parse_server(&s),
            None => Err(usage(format!(
                "no server configured: pass --server URL, set SIGNER_SERVER, or put `server = \"http://...\"` in {}",
                dir.join("config.toml").display()
            ))),
        }
    }

    /// The secret key file's path, from the flag, the environment, the config file,
    /// or the only `*.key` file in the config folder.
    pub fn key_path(&self) -> Result<PathBuf> {
        if let Some(k) = &self.key {
            return Ok(k.clone());
        }
        let (cfg, dir) = load_file()?;
        if let Some(k) = cfg.key {
            return Ok(expand(&k, &dir));
        }
        let mut keys: Vec<PathBuf> = std::fs::read_dir(&dir)
            .map(|rd| {
                rd.filter_map(|e| e.ok().map(|e| e.path()))
                    .filter(|p| p.extension().is_some_and(|x| x == "key"))
                    .collect()
            })
            .unwrap_or_default();
        keys.sort();
        match keys.len() {
            1 => Ok(keys.remove(0)),
            0 => Err(usage(format!(
                "no key configured: pass --key FILE, set SIGNER_KEY, put `key = \"...\"` in {}, or make one with `signer-cli keygen --name NAME`",
                dir.join("config.toml").display()
            ))),
            _ => Err(usage(format!(
                "several keys in {}: choose one with --key FILE, SIGNER_KEY or `key = \"...\"` in config.toml",
                dir.display()
            ))),
        }
    }

    /// The extra certificates to trust for an `https://` server, from the flag, the
    /// environment or the config file; none by default (the system's roots only).
    /// They only let the channel be set up: the server's pinned identity key is still
    /// checked before anything is signed.
    pub fn tls_roots(&self) -> Result<Vec<reqwest::Certificate>> {
        let path = match &self.tls_ca {
            Some(p) => p.clone(),
            None => {
                let (cfg, dir) = load_file()?;
                match cfg.tls_ca {
                    Some(p) => expand(&p, &dir),
                    None => return Ok(vec![]),
                }
            }
        };
        load_roots(&path)
    }

    /// Loads the configured secret key (see [`load_key`]).
    pub fn secret_key(&self) -> Result<SecretKey> {
        load_key(&self.key_path()?)
    }
}

/// Reads a PEM file of certificates to trust (a private CA, or a server's own
/// self-signed certificate), refusing a file that holds none.
pub fn load_roots(path: &Path) -> Result<Vec<reqwest::Certificate>> {
    let pem = std::fs::read(path).map_err(|e| {
        usage(format!(
            "cannot read the TLS CA file {}: {e}: --tls-ca takes a PEM file of the certificates to trust",
            path.display()
        ))
    })?;
    let certs = reqwest::Certificate::from_pem_bundle(&pem).map_err(|e| {
        usage(format!(
            "{}: not a PEM certificate file ({e}): --tls-ca takes `-----BEGIN CERTIFICATE-----` blocks",
            path.display()
        ))
    })?;
    if certs.is_empty() {
        return Err(usage(format!(
            "{}: no certificate found: --tls-ca takes `-----BEGIN CERTIFICATE-----` blocks (the CA's, or the server's own self-signed one)",
            path.display()
        )));
    }
    Ok(certs)
}

/// Reads a secret key file, refusing one that group or others may read or write.
pub fn load_key(path: &Path) -> Result<SecretKey> {
    let file = std::fs::File::open(path)
        .map_err(|e| usage(format!("cannot open key file {}: {e}", path.display())))?;
    let meta = file
        .metadata()
        .map_err(|e| usage(format!("cannot read key file {}: {e}", path.display())))?;
    if !meta.is_file() {
        return Err(usage(format!("{} is not a file", path.display())));
    }
    check_private(path, &meta)?;
    let mut text = String::new();
    file.take(64 * 1024)
        .read_to_string(&mut text)
        .map_err(|e| usage(format!("cannot read key file {}: {e}", path.display())))?;
    SecretKey::parse(&text).map_err(|e| usage(format!("{}: {e}", path.display())))
}

#[cfg(unix)]
fn check_private(path: &Path, meta: &std::fs::Metadata) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(refused(format!(
            "key file {} is accessible by others (mode {mode:04o}): a secret key must be private; run `chmod 600 {}`",
            path.display(),
            path.display()
        )));
    }
    Ok(())
}

#[cfg(not(unix))]
fn check_private(_path: &Path, _meta: &std::fs::Metadata) -> Result<()> {
    Ok(())
}
