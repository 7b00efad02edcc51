//! `ui [--listen 127.0.0.1:0] [--no-open]`: serve the approver's page (see
//! [`crate::ui`]) until Ctrl-C.
//!
//! Order: the listen address is checked (loopback only) and the server reached and
//! its identity pinned before anything is printed, so a wrong `--server` fails here,
//! not later in the browser. The URL with the secret goes to stdout only; the
//! browser is opened through a private file (mode 0600) that redirects to it, so the
//! secret never appears in a process's arguments, which other local users can read.

use super::{connect, outln};
use crate::config::Settings;
use crate::failure::{network, usage};
use crate::ui::{app, UiState};
use anyhow::Result;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// How long the private redirect file lives (the browser reads it at once).
const OPEN_FILE_LIFETIME: Duration = Duration::from_secs(60);

/// `signer-cli ui`.
pub async fn ui(settings: &Settings, listen: &str, open: bool) -> Result<()> {
    let addr: SocketAddr = listen.parse().map_err(|_| {
        usage(format!(
            "--listen {} is not an address with a port (e.g. 127.0.0.1:0)",
            crate::display::quote(listen)
        ))
    })?;
    if !addr.ip().is_loopback() {
        return Err(usage(format!(
            "--listen {addr} is not a loopback address: the page signs with your key, so it is only served on this machine (127.0.0.1, ::1)"
        )));
    }
    let client = connect(settings)?;
    let me = client
        .key()
        .map(|k| k.name.clone())
        .ok_or_else(|| usage("ui needs your key (--key FILE)"))?;
    client.server_id().await?;
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| usage(format!("cannot listen on {addr}: {e}")))?;
    let local = listener
        .local_addr()
        .map_err(|e| usage(format!("cannot read the listening address: {e}")))?;
    let (tx, rx) = tokio::sync::watch::channel(0u64);
    let state = Arc::new(UiState::new(client, me.clone(), local, rx)?);
    let url = state.url();
    outln(&format!("Approver UI: {url}"));
    eprintln!(
        "signer-cli: serving the approver page for {me} on {local} (Ctrl-C to stop); the URL above holds its secret: do not share it"
    );
    let opened = if open { open_browser(&url) } else { None };
    let live = {
        let st = state.clone();
        async move {
            if let Err(e) = crate::commands::watch::follow_changes(&st.client, me, tx).await {
                let why = format!("live updates stopped: {e:#}");
                eprintln!("signer-cli: {why}");
                if let Ok(mut p) = st.live_problem.lock() {
                    *p = Some(why);
                }
            }
            std::future::pending::<()>().await;
        }
    };
    let serve = axum::serve(listener, app(state));
    let result = tokio::select! {
        r = serve => r.map_err(|e| network(format!("the page's server stopped: {e}"))),
        () = live => Ok(()),
        () = stop_signal() => Ok(()),
    };
    // Stopped before the clean-up thread's time: the redirect file goes now.
    if let Some(f) = opened {
        let _ = std::fs::remove_file(f);
    }
    result
}

/// Opens the default browser on `url` (xdg-open, or open on macOS) through a
/// private redirect file, removed after [`OPEN_FILE_LIFETIME`] or when the page stops (Ctrl-C, SIGTERM, SIGHUP);
/// returns that file. A failure is a note on stderr, not an error.
fn open_browser(url: &str) -> Option<PathBuf> {
    let file = match redirect_file(url) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("signer-cli: cannot open a browser ({e}); open the URL above yourself");
            return None;
        }
    };
    let opener = if cfg!(target_os = "macos") {
        "open"
    } else {
        "xdg-open"
    };
    match std::process::Command::new(opener)
        .arg(&file)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
    {
        Ok(_) => {}
        Err(e) => eprintln!("signer-cli: cannot run {opener} ({e}); open the URL above yourself"),
    }
    let later = file.clone();
    std::thread::spawn(move || {
        std::thread::sleep(OPEN_FILE_LIFETIME);
        let _ = std::fs::remove_file(&later);
    });
    Some(file)
}

/// A file readable only by this user that sends the browser to `url`.
#[cfg(not(unix))]
fn redirect_file(_url: &str) -> std::io::Result<PathBuf> {
    Err(std::io::Error::other(
        "no private file on this system; open the URL yourself",
    ))
}

/// A file readable only by this user that sends the browser to `url`.
#[cfg(unix)]
fn redirect_file(url: &str) -> std::io::Result<PathBuf> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut n = [0u8; 8];
    getrandom::fill(&mut n).map_err(|e| std::io::Error::other(e.to_string()))?;
    let name: String = n.iter().map(|b| format!("{b:02x}")).collect();
    let path = std::env::temp_dir().join(format!("signer-cli-ui-{name}.html"));
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)?;
    write!(
        f,
        "<!doctype html><meta charset=\"utf-8\"><meta http-equiv=\"refresh\" content=\"0;url={url}\"><title>Approver UI</title>"
    )?;
    Ok(path)
}

/// Ctrl-C, SIGTERM or SIGHUP (a closed terminal): each stops the page cleanly, so
/// the private redirect file never outlives the run.
async fn stop_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        let term = signal(SignalKind::terminate());
        let hup = signal(SignalKind::hangup());
        if let (Ok(mut term), Ok(mut hup)) = (term, hup) {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
                _ = hup.recv() => {}
            }
            return;
        }
    }
    let _ = tokio::signal::ctrl_c().await;
}
