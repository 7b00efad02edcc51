//! Our stdin and stdout as async streams, whatever kind of file each one is.
//!
//! A host gives an MCP server pipes (most hosts), sockets (libuv-based hosts, such as
//! Node's `child_process` with `stdio: 'pipe'` on some platforms, give a UNIX socket
//! pair), files (a recorded session replayed, output captured to a file), or a
//! terminal (someone trying it by hand). Each of the two is decided **on its own**,
//! from the file itself, before anything about it is changed:
//!
//! - a pipe is read or written in non-blocking mode on the runtime's reactor
//!   (`tokio::net::unix::pipe`), and a socket the same way (`tokio::net::UnixStream`);
//!   tokio's `stdin()`/`stdout()` would run every call on a blocking-pool thread, two
//!   thread hand-offs per call that a sequential client pays in full;
//! - anything else (a regular file, a terminal, a character device such as
//!   `/dev/null`) is read and written with tokio's blocking streams, after making sure
//!   the file is in blocking mode.
//!
//! Why each on its own, decided first (issue #31, item 7): the earlier code tried to
//! make *both* reactor streams and fell back to blocking streams for both when either
//! failed. Making a pipe's reactor stream switches that pipe to non-blocking mode, so
//! with stdin a pipe and stdout a file (or the reverse) the fallback did blocking reads
//! or writes on a non-blocking pipe: `EAGAIN` the first time the pipe was empty or
//! full, the writer gave up and answers were lost (120 of 301 with stdout a pipe that
//! the reader drained a little late).
//!
//! Non-blocking mode is a property of the open file, shared with any other process
//! holding the same end: a host gives each server its own pipes or sockets, and
//! nothing else in this process reads stdin or writes stdout while a session runs.
//! A file handed to us in non-blocking mode (a terminal a previous program left so)
//! is switched back to blocking mode, because the blocking streams read it on a thread
//! and would otherwise see `EAGAIN` as an error.

use nix::fcntl::{fcntl, FcntlArg, OFlag};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::FileTypeExt;
use tokio::io::{AsyncRead, AsyncWrite};

/// The session's input.
pub type Reader = Box<dyn AsyncRead + Unpin + Send>;
/// The session's output.
pub type Writer = Box<dyn AsyncWrite + Unpin + Send>;

/// What one standard stream is, as far as how to drive it goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// A FIFO: driven on the reactor.
    Pipe,
    /// A socket (UNIX or TCP): driven on the reactor.
    Socket,
    /// Anything else: read or written on tokio's blocking pool.
    Blocking,
}

/// Looks at the file behind `fd` without changing it.
fn kind_of(fd: BorrowedFd<'_>) -> Kind {
    let file = match fd.try_clone_to_owned() {
        Ok(owned) => std::fs::File::from(owned),
        Err(_) => return Kind::Blocking,
    };
    match file.metadata().map(|m| m.file_type()) {
        Ok(t) if t.is_fifo() => Kind::Pipe,
        Ok(t) if t.is_socket() => Kind::Socket,
        _ => Kind::Blocking,
    }
}

/// Puts the file behind `fd` in blocking mode if something left it non-blocking.
fn ensure_blocking(fd: BorrowedFd<'_>) {
    let Ok(bits) = fcntl(fd, FcntlArg::F_GETFL) else {
        return;
    };
    let flags = OFlag::from_bits_truncate(bits);
    if flags.contains(OFlag::O_NONBLOCK) {
        if let Err(e) = fcntl(fd, FcntlArg::F_SETFL(flags - OFlag::O_NONBLOCK)) {
            tracing::warn!(error = %e, "cannot put a standard stream back in blocking mode");
        }
    }
}

/// A socket's duplicate as a tokio stream on the reactor.
fn socket_stream(fd: OwnedFd) -> std::io::Result<tokio::net::UnixStream> {
    // Reading and writing a socket are the same calls whatever its family, so a TCP
    // socket (inetd style) is driven through the UNIX stream type as well; nothing
    // here asks for an address.
    let std_stream = std::os::unix::net::UnixStream::from(fd);
    std_stream.set_nonblocking(true)?;
    tokio::net::UnixStream::from_std(std_stream)
}

/// Our stdin as an async reader (see the module doc).
pub fn stdin() -> Reader {
    let stdin = std::io::stdin();
    drive(
        stdin.as_fd(),
        "stdin",
        |fd| tokio::net::unix::pipe::Receiver::from_owned_fd(fd).map(|r| Box::new(r) as Reader),
        |s| Box::new(s) as Reader,
        || Box::new(tokio::io::stdin()),
    )
}

/// Our stdout as an async writer (see the module doc).
pub fn stdout() -> Writer {
    let stdout = std::io::stdout();
    drive(
        stdout.as_fd(),
        "stdout",
        |fd| tokio::net::unix::pipe::Sender::from_owned_fd(fd).map(|w| Box::new(w) as Writer),
        |s| Box::new(s) as Writer,
        || Box::new(tokio::io::stdout()),
    )
}

/// The one decision for either stream: `pipe`, `socket` or `blocking` makes the
/// stream for what `fd` is; a reactor stream that cannot be made falls back to a
/// blocking one, on a file in blocking mode.
fn drive<T>(
    fd: BorrowedFd<'_>,
    name: &str,
    pipe: impl FnOnce(OwnedFd) -> std::io::Result<T>,
    socket: impl FnOnce(tokio::net::UnixStream) -> T,
    blocking: impl FnOnce() -> T,
) -> T {
    let kind = kind_of(fd);
    let made = match kind {
        Kind::Pipe => fd.try_clone_to_owned().and_then(pipe),
        Kind::Socket => fd.try_clone_to_owned().and_then(socket_stream).map(socket),
        Kind::Blocking => Err(std::io::ErrorKind::Unsupported.into()),
    };
    made.unwrap_or_else(|e| {
        if kind != Kind::Blocking {
            tracing::debug!(error = %e, ?kind, "{name} on the reactor failed: using a thread");
        }
        ensure_blocking(fd);
        blocking()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_are_told_apart_without_changing_the_file() {
        let (a, _b) = std::os::unix::net::UnixStream::pair().expect("socket pair");
        assert_eq!(kind_of(a.as_fd()), Kind::Socket);
        let file = tempfile::tempfile().expect("temp file");
        assert_eq!(kind_of(file.as_fd()), Kind::Blocking);
        let (rx, tx) = std::io::pipe().expect("pipe");
        assert_eq!(kind_of(rx.as_fd()), Kind::Pipe);
        assert_eq!(kind_of(tx.as_fd()), Kind::Pipe);
        // Looking did not make the pipe non-blocking.
        let bits = fcntl(rx.as_fd(), FcntlArg::F_GETFL).expect("flags");
        assert!(!OFlag::from_bits_truncate(bits).contains(OFlag::O_NONBLOCK));
    }

    #[test]
    fn a_non_blocking_file_is_put_back_in_blocking_mode() {
        let (rx, _tx) = std::io::pipe().expect("pipe");
        let bits = fcntl(rx.as_fd(), FcntlArg::F_GETFL).expect("flags");
        fcntl(
            rx.as_fd(),
            FcntlArg::F_SETFL(OFlag::from_bits_truncate(bits) | OFlag::O_NONBLOCK),
        )
        .expect("set non-blocking");
        ensure_blocking(rx.as_fd());
        let bits = fcntl(rx.as_fd(), FcntlArg::F_GETFL).expect("flags");
        assert!(!OFlag::from_bits_truncate(bits).contains(OFlag::O_NONBLOCK));
    }
}
