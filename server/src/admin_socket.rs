//! `<data>/admin.sock`: how `approval-server backup` gets a consistent copy of the
//! embedded store from the server that holds it (sled locks the folder, so no other
//! process can open it while the server runs). PROTOCOL §16.1.
//!
//! It answers one request, `backup 1`, with the backup file's bytes, and nothing
//! else: no path, no option, nothing written where a caller says (the CLI writes
//! its own file). Who can reach it: the socket is made 0600 inside the data
//! folder, which `run::start` keeps 0700, and a peer whose uid (`SO_PEERCRED`) is
//! not the server's is refused, so only the server's own user (who can read the
//! store's files anyway) and root get a backup. What it can cost the server: at
//! most [`MAX_CONNECTIONS`] connections, each sending its request line of at most
//! [`MAX_REQUEST`] bytes within [`REQUEST_DEADLINE`]; one backup at a time; the copy
//! is taken into an unnamed file in the data folder under the store's writer lock,
//! and only then streamed, so a slow reader holds no lock, only its own file, and is
//! dropped after [`WRITE_IDLE`] without progress or [`TRANSFER_DEADLINE`] in all.
//!
//! A transport: it calls the store's `snapshot` and imports nothing above it.

use crate::store::Store;
use approval_core::Code;
use std::io::{Seek, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{UnixListener, UnixStream};

/// The socket's name in the data folder.
pub const SOCKET_FILE: &str = "admin.sock";
/// The one request: ask for a backup in format 1.
pub const REQUEST: &str = "backup 1";
/// The most a request line may take, newline included.
pub const MAX_REQUEST: usize = 64;
/// How long a connection may take to send its request line.
pub const REQUEST_DEADLINE: Duration = Duration::from_secs(5);
/// Connections served at once; more are closed as soon as they are accepted.
pub const MAX_CONNECTIONS: usize = 8;
/// How long a write of the backup may wait for the reader.
pub const WRITE_IDLE: Duration = Duration::from_secs(30);
/// The longest a backup may take to be read, in all.
pub const TRANSFER_DEADLINE: Duration = Duration::from_secs(30 * 60);
/// A sockaddr_un path holds at most 107 bytes and its NUL.
const MAX_PATH: usize = 107;

/// The bound socket; its file is removed when this is dropped.
pub struct AdminSocket {
    path: PathBuf,
    listener: UnixListener,
}

impl AdminSocket {
    /// Binds `<data>/admin.sock`, owner-only. A socket left by a server that died is
    /// replaced; anything else at that path (a file, a link, a folder, a socket
    /// another process listens on) refuses the start, since we did not make it. A
    /// data folder whose path is too long for a Unix socket gets none, with a
    /// warning: backups then need the server stopped.
    pub fn bind(data: &Path) -> anyhow::Result<Option<Self>> {
        use std::os::unix::fs::{FileTypeExt, PermissionsExt};
        let path = data.join(SOCKET_FILE);
        if path.as_os_str().len() > MAX_PATH {
            tracing::warn!(
                "no admin socket: {} is longer than a Unix socket path may be ({MAX_PATH} bytes); \
                 approval-server backup needs this server stopped",
                path.display()
            );
            return Ok(None);
        }
        match std::fs::symlink_metadata(&path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => anyhow::bail!("cannot look at {}: {e}", path.display()),
            Ok(m) if m.file_type().is_socket() => {
                if std::os::unix::net::UnixStream::connect(&path).is_ok() {
                    anyhow::bail!(
                        "{} is a socket another process listens on: is another server running on this --data folder? Stop it first",
                        path.display()
                    );
                }
                std::fs::remove_file(&path).map_err(|e| {
                    anyhow::anyhow!("cannot remove the stale {}: {e}", path.display())
                })?;
            }
            Ok(m) => anyhow::bail!(
                "{} exists and is not this server's admin socket (it is a {}): the server makes \
                 that path itself; move whatever is there away, then start again",
                path.display(),
                kind_of(&m.file_type())
            ),
        }
        let listener = UnixListener::bind(&path)
            .map_err(|e| anyhow::anyhow!("cannot listen on {}: {e}", path.display()))?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))
            .map_err(|e| anyhow::anyhow!("cannot restrict {}: {e}", path.display()))?;
        Ok(Some(Self { path, listener }))
    }

    /// Answers connections until `stop` completes.
    pub async fn serve(
        self,
        store: Arc<dyn Store>,
        data: PathBuf,
        stop: impl std::future::Future<Output = ()>,
    ) {
        let slots = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
        let one_backup = Arc::new(tokio::sync::Mutex::new(()));
        let me = nix::unistd::geteuid().as_raw();
        tokio::pin!(stop);
        loop {
            let stream = tokio::select! {
                () = &mut stop => break,
                accepted = self.listener.accept() => match accepted {
                    Ok((s, _)) => s,
                    Err(e) => {
                        tracing::warn!(error = %e, "admin socket: accept failed");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                },
            };
            let Ok(slot) = slots.clone().try_acquire_owned() else {
                // Over the cap: closed unanswered, at no cost.
                continue;
            };
            let (store, data, one) = (store.clone(), data.clone(), one_backup.clone());
            tokio::spawn(async move {
                let _slot = slot;
                if let Err(e) = answer(stream, me, store, data, one).await {
                    tracing::info!(error = %e, "admin socket: connection ended");
                }
            });
        }
    }
}

impl Drop for AdminSocket {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

fn kind_of(t: &std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if t.is_symlink() {
        "symbolic link"
    } else if t.is_dir() {
        "folder"
    } else if t.is_file() {
        "regular file"
    } else if t.is_fifo() {
        "named pipe"
    } else {
        "special file"
    }
}

async fn refuse(stream: &mut UnixStream, code: Code, why: &str) -> std::io::Result<()> {
    let line = format!("error: {}: {why}\n", code.as_str());
    let _ = tokio::time::timeout(REQUEST_DEADLINE, stream.write_all(line.as_bytes())).await;
    Err(std::io::Error::other(line.trim_end().to_owned()))
}

/// Reads the request line: at most [`MAX_REQUEST`] bytes, within the deadline.
async fn request_line(stream: &mut UnixStream) -> Result<String, &'static str> {
    let mut buf = Vec::with_capacity(MAX_REQUEST);
    let read = async {
        let mut byte = [0u8; 1];
        loop {
            match stream.read(&mut byte).await {
                Ok(0) | Err(_) => return Err("the request ended before its newline"),
                Ok(_) if byte[0] == b'\n' => return Ok(()),
                Ok(_) if buf.len() + 1 >= MAX_REQUEST => {
                    return Err("the request line is too long")
                }
                Ok(_) => buf.push(byte[0]),
            }
        }
    };
    match tokio::time::timeout(REQUEST_DEADLINE, read).await {
        Err(_) => Err("no request line within 5 s"),
        Ok(Err(e)) => Err(e),
        Ok(Ok(())) => String::from_utf8(buf).map_err(|_| "the request is not text"),
    }
}

async fn answer(
    mut stream: UnixStream,
    me: u32,
    store: Arc<dyn Store>,
    data: PathBuf,
    one: Arc<tokio::sync::Mutex<()>>,
) -> std::io::Result<()> {
    let peer = stream.peer_cred()?.uid();
    if peer != me && peer != 0 {
        let why = format!("uid {peer} is not the server's user (uid {me})");
        return refuse(&mut stream, Code::Unauthorized, &why).await;
    }
    let line = match request_line(&mut stream).await {
        Ok(l) => l,
        Err(why) => return refuse(&mut stream, Code::BadRequest, why).await,
    };
    if line != REQUEST {
        let why = format!("the only request is {REQUEST:?}");
        return refuse(&mut stream, Code::BadRequest, &why).await;
    }
    let Ok(_held) = one.try_lock() else {
        let why = "another backup is being taken: retry when it has ended";
        return refuse(&mut stream, Code::LimitExceeded, why).await;
    };
    let copy = tokio::task::spawn_blocking(move || take(store.as_ref(), &data))
        .await
        .map_err(std::io::Error::other)
        .and_then(|r| r);
    let file = match copy {
        Ok(f) => f,
        Err(e) => {
            tracing::error!(error = %e, "admin socket: the backup could not be taken");
            let why = format!("the backup could not be taken: {e}");
            return refuse(&mut stream, Code::Internal, &why).await;
        }
    };
    let send = stream_file(&mut stream, file);
    match tokio::time::timeout(TRANSFER_DEADLINE, send).await {
        Ok(r) => r?,
        Err(_) => return Err(std::io::Error::other("the reader took over 30 min")),
    }
    tracing::info!("admin socket: backup sent");
    Ok(())
}

/// The copy, in an unnamed file of the data folder (gone when closed).
fn take(store: &dyn Store, data: &Path) -> std::io::Result<std::fs::File> {
    let key = crate::identity::KEY_FILE;
    let files = match std::fs::read(data.join(key)) {
        Ok(b) => vec![(key, b)],
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => vec![],
        Err(e) => return Err(e),
    };
    let mut file = tempfile::tempfile_in(data)?;
    let made_at = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let made_by = concat!("approval-server ", env!("CARGO_PKG_VERSION"));
    {
        let mut out = std::io::BufWriter::new(&mut file);
        store
            .snapshot(&made_at, made_by, &files, &mut out)
            .map_err(std::io::Error::other)?;
        out.flush()?;
    }
    file.rewind()?;
    Ok(file)
}

async fn stream_file(stream: &mut UnixStream, file: std::fs::File) -> std::io::Result<()> {
    let mut file = tokio::fs::File::from_std(file);
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = file.read(&mut buf).await?;
        if n == 0 {
            break;
        }
        tokio::time::timeout(WRITE_IDLE, stream.write_all(&buf[..n]))
            .await
            .map_err(|_| std::io::Error::other("the reader stalled for 30 s"))??;
    }
    stream.shutdown().await
}
