//! `<data>/endpoint.json`: where the server that holds a data folder listens.
//!
//! The server publishes it once it listens ([`crate::run`]) and withdraws it at
//! shutdown; `approval-server stdio` reads it to join that server rather than start a
//! second one ([`crate::stdio`]). Both import this file; it imports neither (the
//! store's `server_id` is handed in), nor anything above the core.

use anyhow::Context;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// `<data>/endpoint.json`: where the server that holds the folder listens.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Endpoint {
    /// The server's process id (informative: liveness is checked over HTTP).
    pub pid: u32,
    /// The store's `server_id`, as `/healthz` reports it.
    pub server_id: String,
    /// The MCP endpoint, e.g. `http://127.0.0.1:4800/mcp`.
    pub mcp: String,
    /// The approver API base URL, e.g. `http://127.0.0.1:4800`.
    pub approver: String,
}

/// The file name of the endpoint file inside the data folder.
pub const ENDPOINT_FILE: &str = "endpoint.json";

/// A published endpoint file; removed when dropped (at shutdown).
#[derive(Debug)]
pub struct Published {
    path: PathBuf,
}

impl Published {
    /// Removes the endpoint file (the service stopped listening).
    pub fn withdraw(self) {}
}

impl Drop for Published {
    fn drop(&mut self) {
        if let Err(e) = std::fs::remove_file(&self.path) {
            if e.kind() != std::io::ErrorKind::NotFound {
                tracing::warn!(path = %self.path.display(), error = %e, "cannot remove the endpoint file");
            }
        }
    }
}

/// An address a local client can connect to: the unspecified address becomes loopback.
fn connectable(addr: SocketAddr) -> SocketAddr {
    match addr.ip() {
        IpAddr::V4(ip) if ip.is_unspecified() => {
            SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), addr.port())
        }
        IpAddr::V6(ip) if ip.is_unspecified() => {
            SocketAddr::new(IpAddr::V6(Ipv6Addr::LOCALHOST), addr.port())
        }
        _ => addr,
    }
}

fn url_host(addr: SocketAddr) -> String {
    match addr {
        SocketAddr::V4(a) => format!("{}:{}", a.ip(), a.port()),
        SocketAddr::V6(a) => format!("[{}]:{}", a.ip(), a.port()),
    }
}

/// Whether `url` is `http://` to a loopback address (the only kind we publish), read
/// by the same URL parser the HTTP client uses, so that what is checked is what is
/// dialled: `http://127.0.0.1:1@evil.example/` has the host `evil.example`. A URL with
/// user information is refused outright (we never publish one).
fn is_loopback_url(url: &str) -> bool {
    let Ok(u) = reqwest::Url::parse(url) else {
        return false;
    };
    if u.scheme() != "http" || !u.username().is_empty() || u.password().is_some() {
        return false;
    }
    let host = u.host_str().unwrap_or_default();
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    host == "localhost" || bare.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

impl Endpoint {
    /// Writes `<data>/endpoint.json` (atomically: a temporary file renamed over it).
    pub fn publish(
        data: &Path,
        scheme: &str,
        mcp: SocketAddr,
        approver: SocketAddr,
        server_id: &str,
    ) -> anyhow::Result<Published> {
        let ep = Endpoint {
            pid: std::process::id(),
            server_id: server_id.to_owned(),
            mcp: format!("{scheme}://{}/mcp", url_host(connectable(mcp))),
            approver: format!("{scheme}://{}", url_host(connectable(approver))),
        };
        let path = data.join(ENDPOINT_FILE);
        let tmp = data.join(format!("{ENDPOINT_FILE}.{}.tmp", std::process::id()));
        let text = serde_json::to_string(&ep)? + "\n";
        std::fs::write(&tmp, text)
            .and_then(|_| std::fs::rename(&tmp, &path))
            .with_context(|| format!("cannot write the endpoint file {}", path.display()))?;
        Ok(Published { path })
    }

    /// Reads `<data>/endpoint.json`: `Ok(None)` when there is none.
    pub fn read(data: &Path) -> Result<Option<Endpoint>, String> {
        let path = data.join(ENDPOINT_FILE);
        match std::fs::read_to_string(&path) {
            Ok(t) => serde_json::from_str(&t)
                .map(Some)
                .map_err(|e| format!("{} is not an endpoint file: {e}", path.display())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(format!("cannot read {}: {e}", path.display())),
        }
    }

    /// Whether the server this file names is up: a loopback address whose
    /// `/healthz` answers with the same `server_id`. `Err` says why not.
    pub async fn check_live(&self) -> Result<(), String> {
        if self.mcp.starts_with("https://") {
            return Err(format!(
                "the server on this folder serves HTTPS ({}); stdio joins only a plain-HTTP loopback endpoint: pass --connect URL to use it",
                self.mcp
            ));
        }
        if !is_loopback_url(&self.mcp) || !is_loopback_url(&self.approver) {
            return Err(format!(
                "the endpoint file names a non-loopback address ({}); only loopback endpoints are joined: pass --connect URL to use it",
                self.mcp
            ));
        }
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(3))
            .build()
            .map_err(|e| e.to_string())?;
        let resp = client
            .get(format!("{}/healthz", self.approver))
            .send()
            .await
            .map_err(|e| format!("nothing answers at {}: {e}", self.approver))?;
        let v: Value = resp
            .json()
            .await
            .map_err(|e| format!("{}/healthz is not ours: {e}", self.approver))?;
        match v.get("server_id").and_then(Value::as_str) {
            Some(id) if id == self.server_id => Ok(()),
            other => Err(format!(
                "{}/healthz reports server_id {other:?}, the endpoint file {:?}",
                self.approver, self.server_id
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_loopback_endpoints_are_joined() {
        assert!(is_loopback_url("http://127.0.0.1:4800/mcp"));
        assert!(is_loopback_url("http://[::1]:4800"));
        assert!(is_loopback_url("http://localhost:4800/mcp"));
        assert!(!is_loopback_url("http://10.0.0.1:4800/mcp"));
        assert!(!is_loopback_url("https://127.0.0.1:4800/mcp"));
        assert!(!is_loopback_url("http://127.0.0.1.evil.example/mcp"));
        // User information before the host (review finding: the old text split read the
        // host as 127.0.0.1 while a URL parser dials evil.example).
        assert!(!is_loopback_url("http://127.0.0.1:1@evil.example/mcp"));
        assert!(!is_loopback_url("http://localhost:x@10.0.0.5:4800/mcp"));
        assert!(!is_loopback_url("http://[::1]@evil.example/mcp"));
        assert!(!is_loopback_url("http://user@127.0.0.1:4800/mcp"));
    }

    #[test]
    fn unspecified_listen_addresses_are_published_as_loopback() {
        let a: SocketAddr = "0.0.0.0:4800".parse().unwrap();
        assert_eq!(url_host(connectable(a)), "127.0.0.1:4800");
        let b: SocketAddr = "[::]:9".parse().unwrap();
        assert_eq!(url_host(connectable(b)), "[::1]:9");
    }
}
