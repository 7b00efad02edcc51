//! `approval-server backup --data DIR --out FILE` and `restore FILE --data NEWDIR`:
//! the embedded store copied whole and checked, while the server runs or not
//! (PROTOCOL §16.1).
//!
//! backup asks the server that holds the folder over `<data>/admin.sock`
//! (`admin_socket.rs`) or, when none runs, opens the store itself; either way the
//! file is written here, by the operator's command, under a temporary name, read
//! back and checked (checksum, records, audit chain), and only then given its name,
//! never over an existing file. restore builds the folder under a temporary name
//! beside the target, checks it the same way and opens it as the server would,
//! then renames it: a failed restore leaves nothing behind.

use crate::admin_socket::{REQUEST, SOCKET_FILE};
use crate::backup::{BackupError, Reader};
use crate::identity::{ServerIdentity, KEY_FILE};
use crate::run::StoreSpec;
use crate::store::{SledStore, Store, StoreError, Summary, Tally};
use anyhow::{bail, Context};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

/// How long `backup` waits for the running server between two reads.
const READ_IDLE: Duration = Duration::from_secs(60);

/// The flags of `backup`.
#[derive(clap::Args)]
pub struct BackupArgs {
    /// The server's data folder (the server may be running).
    #[arg(long, default_value = "./data")]
    data: PathBuf,
    /// sled:DIR, the same as --data. A PostgreSQL store is backed up with pg_dump
    /// (README, Backups).
    #[arg(long, value_name = "STORE")]
    store: Option<StoreSpec>,
    /// The backup file to write; it must not exist (backup never overwrites).
    #[arg(long, value_name = "FILE")]
    out: PathBuf,
}

/// The flags of `restore`.
#[derive(clap::Args)]
pub struct RestoreArgs {
    /// A file written by `approval-server backup`.
    #[arg(value_name = "FILE")]
    file: PathBuf,
    /// The data folder to make: it must not exist or be empty.
    #[arg(long, value_name = "NEWDIR")]
    data: PathBuf,
}

/// `backup`.
pub async fn backup(args: BackupArgs) -> anyhow::Result<ExitCode> {
    tokio::task::spawn_blocking(move || take(args)).await?
}

/// `restore`.
pub async fn restore(args: RestoreArgs) -> anyhow::Result<ExitCode> {
    tokio::task::spawn_blocking(move || make(args)).await?
}

fn parent_of(p: &Path) -> PathBuf {
    match p.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

fn take(args: BackupArgs) -> anyhow::Result<ExitCode> {
    let data = match args.store {
        Some(StoreSpec::Postgres(_)) => bail!(
            "backup copies the embedded store; back up a PostgreSQL store with pg_dump \
             (README, Backups), then check the restored database with approval-server \
             audit verify --store URL"
        ),
        Some(StoreSpec::Sled(dir)) => dir,
        None => args.data,
    };
    let out = args.out;
    if std::fs::symlink_metadata(&out).is_ok() {
        bail!(
            "{} exists: backup never overwrites a file; give a new --out, or move the old one away",
            out.display()
        );
    }
    let dir = parent_of(&out);
    let mut tmp = tempfile::Builder::new()
        .prefix(".approval-backup-")
        .tempfile_in(&dir)
        .with_context(|| format!("cannot write in {}", dir.display()))?;
    let via = copy_into(&data, tmp.as_file_mut())?;
    tmp.as_file().sync_all()?;
    let (summary, checksum) = check_file(tmp.path())
        .with_context(|| "the copy just written does not check out; nothing was kept")?;
    let bytes = tmp.as_file().metadata()?.len();
    tmp.persist_noclobber(&out).map_err(|e| {
        anyhow::anyhow!(
            "cannot name the backup {}: {} (nothing was kept)",
            out.display(),
            e.error
        )
    })?;
    sync_dir(&dir);
    println!(
        "ok: backup of {} taken from {via}: {}; {bytes} bytes, sha256 {checksum}, written to {}",
        summary.server_id,
        described(&summary),
        out.display()
    );
    Ok(ExitCode::SUCCESS)
}

fn described(s: &Summary) -> String {
    let plural = |n: u64, one: &str, many: &str| format!("{n} {}", if n == 1 { one } else { many });
    format!(
        "{}, {}, chain intact{}",
        plural(s.proposals, "proposal", "proposals"),
        plural(s.audit_entries, "audit entry", "audit entries"),
        s.head
            .as_ref()
            .map(|h| format!(", head {h}"))
            .unwrap_or_default()
    )
}

/// Writes the copy into `file`: from the running server, or from the store.
fn copy_into(data: &Path, file: &mut std::fs::File) -> anyhow::Result<&'static str> {
    let sock = data.join(SOCKET_FILE);
    match std::os::unix::net::UnixStream::connect(&sock) {
        Ok(s) => {
            from_server(s, file).with_context(|| format!("backup over {}", sock.display()))?;
            Ok("the running server")
        }
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::NotFound | std::io::ErrorKind::ConnectionRefused
            ) =>
        {
            from_store(data, file)?;
            Ok("the store (no server running)")
        }
        Err(e) => bail!(
            "cannot connect to {}: {e}: run backup as the server's user",
            sock.display()
        ),
    }
}

fn from_server(
    mut s: std::os::unix::net::UnixStream,
    file: &mut std::fs::File,
) -> anyhow::Result<()> {
    s.set_read_timeout(Some(READ_IDLE))?;
    s.set_write_timeout(Some(READ_IDLE))?;
    s.write_all(format!("{REQUEST}\n").as_bytes())?;
    // A refusal is one line starting `error: `; a backup starts with its magic.
    let mut start = Vec::new();
    (&mut s).take(16).read_to_end(&mut start)?;
    if start.is_empty() {
        bail!(
            "the server closed the connection without answering (it serves a few admin \
             connections at a time): retry in a moment"
        );
    }
    if start.starts_with(b"error: ") {
        let mut rest = Vec::new();
        (&mut s).take(1024).read_to_end(&mut rest)?;
        start.extend(rest);
        let line = String::from_utf8_lossy(&start);
        bail!(
            "the server refused: {}",
            line.trim_end().trim_start_matches("error: ")
        );
    }
    file.write_all(&start)?;
    std::io::copy(&mut s, file).context("the server's copy was cut short")?;
    Ok(())
}

fn from_store(data: &Path, file: &mut std::fs::File) -> anyhow::Result<()> {
    // Opening makes a store where there is none: a mistyped --data would be "backed
    // up" as a new, empty store, and left behind.
    if !data.join("store").is_dir() {
        bail!(
            "no store in {}: name the data folder a server ran with (--data DIR)",
            data.display()
        );
    }
    let store = SledStore::open(&data.join("store")).with_context(|| {
        format!(
            "cannot open the store in {} (no server answered on {SOCKET_FILE}; if one runs \
             there, it is locking the store: check that it runs this build, and that you are its user)",
            data.display()
        )
    })?;
    let files = match std::fs::read(data.join(KEY_FILE)) {
        Ok(b) => vec![(KEY_FILE, b)],
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => vec![],
        Err(e) => return Err(e).with_context(|| format!("cannot read {KEY_FILE}")),
    };
    let made_at = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let by = concat!("approval-server ", env!("CARGO_PKG_VERSION"));
    let mut out = std::io::BufWriter::new(file);
    store.snapshot_to(&made_at, by, &files, &mut out, None)?;
    out.flush()?;
    Ok(())
}

/// Reads a backup file through: checksum, records, audit chain.
fn check_file(path: &Path) -> anyhow::Result<(Summary, String)> {
    let f = std::fs::File::open(path)?;
    let (mut r, header) = Reader::open(std::io::BufReader::new(f))?;
    let mut tally = Tally::default();
    while let Some(item) = r.item()? {
        if let crate::backup::Item::Entry(k, v) = item {
            tally.add(&k, &v)?;
        }
    }
    let checksum = r.checksum().unwrap_or_default().to_owned();
    Ok((tally.finish(&header.server_id)?, checksum))
}

fn sync_dir(dir: &Path) {
    if let Ok(d) = std::fs::File::open(dir) {
        let _ = d.sync_all();
    }
}

fn make(args: RestoreArgs) -> anyhow::Result<ExitCode> {
    let target = args.data;
    match std::fs::read_dir(&target) {
        Ok(mut d) => {
            if d.next().is_some() {
                bail!(
                    "{} is not empty: restore makes a new data folder and never mixes a backup \
                     with what is there; give a new or empty --data",
                    target.display()
                );
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => bail!("cannot look at {}: {e}", target.display()),
    }
    let parent = parent_of(&target);
    let tmp = tempfile::Builder::new()
        .prefix(".approval-restore-")
        .tempdir_in(&parent)
        .with_context(|| format!("cannot make a folder in {}", parent.display()))?;
    // The store holds every payload, the key file the server's secret: owner-only
    // from the start, as the server keeps its data folder.
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o700))?;
    }
    let input = std::fs::File::open(&args.file)
        .with_context(|| format!("cannot read {}", args.file.display()))?;
    let (summary, checksum) = fill(tmp.path(), input).with_context(|| {
        format!(
            "{} is not restored (nothing was written)",
            args.file.display()
        )
    })?;
    let made = tmp.keep();
    // rename(2) replaces an empty directory atomically; anything else fails here and
    // the restored folder (which holds the identity key) is removed.
    if let Err(e) = std::fs::rename(&made, &target) {
        let _ = std::fs::remove_dir_all(&made);
        bail!("cannot name the restored folder {}: {e}", target.display());
    }
    sync_dir(&parent);
    println!(
        "ok: restored {} from {} (sha256 {checksum}): {}; into {}. Start it with approval-server serve --data {}",
        summary.server_id,
        args.file.display(),
        described(&summary),
        target.display(),
        target.display()
    );
    Ok(ExitCode::SUCCESS)
}

/// Writes the backup into `dir` and checks it as a server would open it.
fn fill(dir: &Path, input: std::fs::File) -> anyhow::Result<(Summary, String)> {
    let (mut reader, header) = Reader::open(std::io::BufReader::new(input))?;
    let mut failed: Option<BackupError> = None;
    let mut items = || match reader.item() {
        Ok(i) => Ok(i),
        Err(e) => {
            failed = Some(e);
            Err(StoreError::Backend("the backup file".into()))
        }
    };
    let mut file = |name: &str, bytes: &[u8]| -> Result<(), StoreError> {
        write_private(&dir.join(name), bytes).map_err(|e| StoreError::Backend(e.to_string()))
    };
    let r = SledStore::restore_into(&dir.join("store"), &header, &mut items, &mut file);
    if let Some(e) = failed {
        return Err(e.into());
    }
    let store = r?;
    let checksum = reader
        .checksum()
        .map(str::to_owned)
        .context("the backup file has no end")?;
    let summary = store.check()?;
    if summary.server_id != header.server_id {
        bail!(
            "its header names server {} but its store is server {}",
            header.server_id,
            summary.server_id
        );
    }
    ServerIdentity::open(dir, &store).context("its identity key does not match its store")?;
    store.flush_blocking()?;
    Ok((summary, checksum))
}

fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)?;
    f.write_all(bytes)?;
    f.sync_all()
}
