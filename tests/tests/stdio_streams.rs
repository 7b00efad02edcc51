//! The embedded stdio session with every kind of stdin and stdout a host can give
//! (issue #31, item 7): a pipe, a regular file, a socket (libuv-based hosts give a
//! UNIX socket pair) and a terminal, in all sixteen pairs. Each pair sends 300 calls
//! (tool calls on the direct path and `tools/list` through rmcp) and every answer must
//! arrive. Before the fix, stdin a file and stdout a pipe lost answers to `EAGAIN`
//! (making the pipe's reactor stream had switched it to non-blocking mode, then the
//! code fell back to blocking writes because stdin was not a pipe).
//!
//! The real binary, started with the stdio the test makes; plain threads and
//! blocking I/O on the test's side, so the test itself cannot mask a reactor bug.

use anyhow::{bail, Context, Result};
use approval_e2e::{bin, World, NOTE_POLICY_ALICE_AND_BOB};
use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::fs::File;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Calls per pair, after `initialize`.
const CALLS: u64 = 300;
/// How long one pair may take on a loaded 2-core machine.
const DEADLINE: Duration = Duration::from_secs(90);

/// What one of the child's standard streams is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    Pipe,
    File,
    Socket,
    Tty,
}

/// `initialize`, `notifications/initialized`, then [`CALLS`] calls with ids 1..=CALLS.
fn requests() -> Vec<u8> {
    let mut msgs = vec![
        json!({"jsonrpc": "2.0", "id": 0, "method": "initialize",
               "params": approval_e2e::initialize_params()}),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    ];
    for id in 1..=CALLS {
        msgs.push(if id % 2 == 0 {
            json!({"jsonrpc": "2.0", "id": id, "method": "tools/list"})
        } else {
            json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                   "params": {"name": "approval_list", "arguments": {}}})
        });
    }
    let mut out = Vec::new();
    for m in msgs {
        out.extend_from_slice(m.to_string().as_bytes());
        out.push(b'\n');
    }
    out
}

/// A terminal pair in raw mode (no echo, no line editing, no `\n` → `\r\n`), so bytes
/// pass through unchanged: `(ours, the child's)`.
fn raw_pty() -> Result<(OwnedFd, OwnedFd)> {
    use nix::sys::termios::{cfmakeraw, tcgetattr, tcsetattr, SetArg};
    let pty = nix::pty::openpty(None, None).context("openpty")?;
    let mut t = tcgetattr(&pty.slave).context("tcgetattr")?;
    cfmakeraw(&mut t);
    tcsetattr(&pty.slave, SetArg::TCSANOW, &t).context("tcsetattr")?;
    Ok((pty.master, pty.slave))
}

/// Writes `bytes` on a thread in ten pieces 200 ms apart (as a host sends calls as
/// they come, so the session finds its input empty now and then), then closes
/// (so a pipe or socket reads end of input).
fn feed(mut w: impl Write + Send + 'static, bytes: Vec<u8>) {
    std::thread::spawn(move || {
        let piece = bytes.len() / 10 + 1;
        for chunk in bytes.chunks(piece) {
            // The first pause lets the session start and find its input empty.
            std::thread::sleep(Duration::from_millis(200));
            if w.write_all(chunk).and_then(|_| w.flush()).is_err() {
                return;
            }
        }
    });
}

/// Sends every line read from `r` to `tx`, on a thread.
fn drain(r: impl Read + Send + 'static, tx: mpsc::Sender<String>) {
    std::thread::spawn(move || {
        for line in BufReader::new(r).lines() {
            match line {
                Ok(l) => {
                    if tx.send(l).is_err() {
                        return;
                    }
                }
                // A terminal whose other side closed reads EIO: the end.
                Err(_) => return,
            }
        }
    });
}

/// Kills the child if the test gives up on it.
struct Reaped(Child);
impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `approval-server stdio` on the world's folder, stderr to `stderr.log` in it.
fn session(w: &World) -> Result<Command> {
    let mut cmd = Command::new(bin("approval-server"));
    cmd.arg("stdio")
        .arg("--data")
        .arg(&w.data)
        .arg("--policies")
        .arg(&w.policies)
        .arg("--keys")
        .arg(&w.keys)
        .args(["--listen", "127.0.0.1:0"])
        .stderr(File::create(w.path().join("stderr.log"))?);
    Ok(cmd)
}

fn run_pair(input: End, output: End) -> Result<()> {
    let w = World::new(&["alice", "bob"])?;
    w.write_policy("note.write.toml", NOTE_POLICY_ALICE_AND_BOB)?;
    let reqs = requests();
    let mut cmd = session(&w)?;

    // Input: what we keep to write with (a pipe is taken from the child after spawn).
    let mut feeder: Option<Box<dyn Write + Send>> = None;
    let mut keep_tty: Option<OwnedFd> = None;
    match input {
        End::Pipe => {
            cmd.stdin(Stdio::piped());
        }
        End::File => {
            let p = w.path().join("requests.jsonl");
            std::fs::write(&p, &reqs)?;
            cmd.stdin(File::open(&p)?);
        }
        End::Socket => {
            let (ours, theirs) = UnixStream::pair()?;
            cmd.stdin(OwnedFd::from(theirs));
            feeder = Some(Box::new(ours));
        }
        End::Tty => {
            let (master, slave) = raw_pty()?;
            cmd.stdin(slave);
            // Closing a terminal's master may discard input not yet read: keep a copy
            // open until the end.
            keep_tty = Some(master.try_clone()?);
            feeder = Some(Box::new(File::from(master)));
        }
    }
    // Output: where answers come back (a file is read after, or while, the child runs).
    let (tx, rx) = mpsc::channel::<String>();
    let out_file = w.path().join("answers.jsonl");
    match output {
        End::Pipe => {
            cmd.stdout(Stdio::piped());
        }
        End::File => {
            cmd.stdout(File::create(&out_file)?);
        }
        End::Socket => {
            let (ours, theirs) = UnixStream::pair()?;
            cmd.stdout(OwnedFd::from(theirs));
            drain(ours, tx.clone());
        }
        End::Tty => {
            let (master, slave) = raw_pty()?;
            cmd.stdout(slave);
            drain(File::from(master), tx.clone());
        }
    }
    let mut child = Reaped(cmd.spawn().context("spawning approval-server stdio")?);
    // The child has its copies of the terminal and socket ends now: the parent's
    // copies were moved into `cmd`, which is dropped with it below.
    drop(cmd);
    if let Some(stdin) = child.0.stdin.take() {
        feed(stdin, reqs);
    } else if let Some(f) = feeder {
        feed(f, reqs);
    }
    if let Some(stdout) = child.0.stdout.take() {
        drain(stdout, tx.clone());
    }
    drop(tx);

    // Every id from 0 to CALLS, each answered once with a result.
    let want: BTreeSet<u64> = (0..=CALLS).collect();
    let mut got = BTreeSet::new();
    let start = Instant::now();
    let take = |got: &mut BTreeSet<u64>, line: &str| -> Result<()> {
        let v: Value = serde_json::from_str(line).with_context(|| format!("answer {line:?}"))?;
        let Some(id) = v.get("id").and_then(Value::as_u64) else {
            return Ok(()); // a notification
        };
        if v.get("result").is_none() {
            bail!("call {id} was not answered with a result: {v}");
        }
        if !got.insert(id) {
            bail!("call {id} was answered twice");
        }
        Ok(())
    };
    if output == End::File {
        if input == End::Tty {
            // A terminal never reads end of input: wait until the answers are there.
            while std::fs::read_to_string(&out_file)?.matches('\n').count() < want.len()
                && start.elapsed() < DEADLINE
            {
                std::thread::sleep(Duration::from_millis(50));
            }
        } else {
            ended_cleanly(&mut child.0, input, output)?;
        }
        for l in std::fs::read_to_string(&out_file)?.lines() {
            take(&mut got, l)?;
        }
    } else {
        while got.len() < want.len() {
            let left = DEADLINE.saturating_sub(start.elapsed());
            match rx.recv_timeout(left) {
                Ok(l) => take(&mut got, &l)?,
                Err(_) => break,
            }
        }
    }
    if got != want {
        let missing: Vec<u64> = want.difference(&got).copied().take(10).collect();
        let log = std::fs::read_to_string(w.path().join("stderr.log")).unwrap_or_default();
        bail!(
            "stdin {input:?}, stdout {output:?}: {} of {} answers arrived (first missing: {missing:?}); \
             the server's stderr:\n{log}",
            got.len(),
            want.len()
        );
    }
    // With an input that ends, the session ends by itself, and cleanly.
    if input != End::Tty && output != End::File {
        ended_cleanly(&mut child.0, input, output)?;
    }
    drop(keep_tty);
    Ok(())
}

/// Waits for the child to end by itself, successfully.
fn ended_cleanly(child: &mut Child, input: End, output: End) -> Result<()> {
    let deadline = Instant::now() + DEADLINE;
    loop {
        if let Some(status) = child.try_wait()? {
            if !status.success() {
                bail!("stdin {input:?}, stdout {output:?}: the session exited with {status}");
            }
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!(
                "stdin {input:?}, stdout {output:?}: the session did not end after its input did"
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

macro_rules! pairs {
    ($($name:ident: $input:ident, $output:ident;)*) => {$(
        #[test]
        fn $name() -> Result<()> {
            run_pair(End::$input, End::$output)
        }
    )*};
}

pairs! {
    stdin_pipe_stdout_pipe: Pipe, Pipe;
    stdin_pipe_stdout_file: Pipe, File;
    stdin_pipe_stdout_socket: Pipe, Socket;
    stdin_pipe_stdout_tty: Pipe, Tty;
    stdin_file_stdout_pipe: File, Pipe;
    stdin_file_stdout_file: File, File;
    stdin_file_stdout_socket: File, Socket;
    stdin_file_stdout_tty: File, Tty;
    stdin_socket_stdout_pipe: Socket, Pipe;
    stdin_socket_stdout_file: Socket, File;
    stdin_socket_stdout_socket: Socket, Socket;
    stdin_socket_stdout_tty: Socket, Tty;
    stdin_tty_stdout_pipe: Tty, Pipe;
    stdin_tty_stdout_file: Tty, File;
    stdin_tty_stdout_socket: Tty, Socket;
    stdin_tty_stdout_tty: Tty, Tty;
}

/// A host that stops reading (closes its end of stdout) while the session still has
/// input: the session ends, with an error naming stdout, instead of reading on and
/// answering nobody (before, the writer stopped without a word and the session went on
/// until stdin closed, then exited 0).
#[test]
fn a_session_whose_stdout_closes_ends_with_an_error() -> Result<()> {
    let w = World::new(&["alice", "bob"])?;
    w.write_policy("note.write.toml", NOTE_POLICY_ALICE_AND_BOB)?;
    let log = w.path().join("stderr.log");
    let mut child = Reaped(
        session(&w)?
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()?,
    );
    let mut stdin = child.0.stdin.take().context("stdin")?;
    let stdout = child.0.stdout.take().context("stdout")?;
    let reqs = requests();
    let mut lines = reqs.split_inclusive(|b| *b == b'\n');
    // initialize, answered; then the host closes stdout.
    stdin.write_all(lines.next().context("initialize")?)?;
    stdin.flush()?;
    let mut first = String::new();
    BufReader::new(stdout).read_line(&mut first)?;
    if !first.contains("\"result\"") {
        bail!("initialize was not answered: {first:?}");
    }
    // The reader was dropped with its BufReader: our end of stdout is closed.
    for l in lines {
        stdin.write_all(l)?;
    }
    stdin.flush()?;
    // stdin stays open: only the failed writes can end the session.
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(s) = child.0.try_wait()? {
            break s;
        }
        if Instant::now() > deadline {
            bail!("the session went on for 20 s after its stdout closed, answering nobody");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let text = std::fs::read_to_string(&log)?;
    if status.success() || !text.contains("cannot write stdout") {
        bail!("want a failure naming stdout, got {status}; stderr:\n{text}");
    }
    drop(stdin);
    Ok(())
}
