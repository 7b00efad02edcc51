//! The backup file (PROTOCOL §16.1): a versioned header, the store's entries and the
//! data folder's identity key, and a SHA-256 of every byte before it.
//!
//! Why a format of our own rather than a tarball of the data folder: sled's files
//! are only consistent when nothing writes, and the running server must keep
//! writing. A snapshot is the store's entries read under its writer lock
//! (`store/sled/backup.rs`), which is what this file carries. Why the limits: a
//! restore reads a file someone handed over; no length in it makes us allocate
//! more than the largest value the store can hold, and nothing but `server.key`
//! is ever written beside the store.
//!
//! The checksum catches a truncated or damaged copy, not a forged one: anyone who
//! can write the file can recompute it. Keep backups where only the operator
//! writes, as the data folder itself.
//!
//! A leaf: imports nothing of the crate.

use sha2::{Digest, Sha256};
use std::io::{Read, Write};
use thiserror::Error;

/// The file's first 16 bytes.
pub const MAGIC: &[u8; 16] = b"APPROVAL-BACKUP\n";
/// The format this build writes and reads.
pub const FORMAT: u32 = 1;
/// The most a header may take.
pub const MAX_HEADER: u32 = 4096;
/// The most a store key may take (the store's keys are ids and names: far less).
pub const MAX_KEY: u32 = 4096;
/// The most a store value may take: a record holds a payload of at most the 5 MiB
/// of one MCP request, escaped; 64 MiB leaves room and bounds what a restore holds.
pub const MAX_VALUE: u32 = 64 * 1024 * 1024;
/// The most a file of the data folder may take (`server.key` is under 200 bytes).
pub const MAX_FILE: u32 = 64 * 1024;
/// The only files of the data folder a backup carries.
pub const FILES: [&str; 1] = ["server.key"];

const TAG_ENTRY: u8 = b'K';
const TAG_FILE: u8 = b'F';
const TAG_END: u8 = b'E';

/// What the file says about itself, as one JSON object.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Header {
    /// [`FORMAT`].
    pub format: u32,
    /// The backend the entries come from: `sled`.
    pub store: String,
    /// The store's layout (`m:layout`) when the copy was taken.
    pub layout: String,
    /// The server the copy is of.
    pub server_id: String,
    /// When it was taken (RFC 3339, UTC).
    pub made_at: String,
    /// The build that took it (`approval-server X.Y.Z`).
    pub made_by: String,
}

/// One item of the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Item {
    /// A store entry: key and value as stored.
    Entry(Vec<u8>, Vec<u8>),
    /// A file of the data folder, by name (one of [`FILES`]).
    File(String, Vec<u8>),
}

/// Why a backup file is refused.
#[derive(Debug, Error)]
pub enum BackupError {
    /// Reading or writing failed.
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// The file is not a backup, or is damaged.
    #[error("not a usable backup file: {0}")]
    Bad(String),
    /// A backup of a format this build does not read.
    #[error("backup format {0}, which this build (format {FORMAT}) does not read: restore it with the build that made it, or a newer one")]
    Format(u32),
}

fn bad(why: impl Into<String>) -> BackupError {
    BackupError::Bad(why.into())
}

/// Writes a backup: [`Writer::start`], the items, [`Writer::finish`].
pub struct Writer<W: Write> {
    out: W,
    hash: Sha256,
    count: u64,
}

impl<W: Write> Writer<W> {
    /// Writes the magic and the header.
    pub fn start(out: W, header: &Header) -> std::io::Result<Self> {
        let json = serde_json::to_vec(header)?;
        let mut w = Self {
            out,
            hash: Sha256::new(),
            count: 0,
        };
        w.put(MAGIC)?;
        w.put(&u32::try_from(json.len()).unwrap_or(u32::MAX).to_be_bytes())?;
        w.put(&json)?;
        Ok(w)
    }

    fn put(&mut self, b: &[u8]) -> std::io::Result<()> {
        self.hash.update(b);
        self.out.write_all(b)
    }

    fn len32(n: usize, max: u32, what: &str) -> std::io::Result<[u8; 4]> {
        match u32::try_from(n) {
            Ok(n) if n <= max => Ok(n.to_be_bytes()),
            _ => Err(std::io::Error::other(format!(
                "{what} of {n} bytes is over the backup format's {max}"
            ))),
        }
    }

    /// One store entry.
    pub fn entry(&mut self, key: &[u8], value: &[u8]) -> std::io::Result<()> {
        let (k, v) = (
            Self::len32(key.len(), MAX_KEY, "a key")?,
            Self::len32(value.len(), MAX_VALUE, "a value")?,
        );
        self.put(&[TAG_ENTRY])?;
        self.put(&k)?;
        self.put(key)?;
        self.put(&v)?;
        self.put(value)?;
        self.count += 1;
        Ok(())
    }

    /// One file of the data folder (a name of [`FILES`]).
    pub fn file(&mut self, name: &str, bytes: &[u8]) -> std::io::Result<()> {
        if !FILES.contains(&name) {
            return Err(std::io::Error::other(format!(
                "{name} is not a file a backup carries"
            )));
        }
        let len = Self::len32(bytes.len(), MAX_FILE, "a file")?;
        self.put(&[TAG_FILE])?;
        self.put(&u16::try_from(name.len()).unwrap_or(u16::MAX).to_be_bytes())?;
        self.put(name.as_bytes())?;
        self.put(&len)?;
        self.put(bytes)?;
        self.count += 1;
        Ok(())
    }

    /// The end mark, the count of items and the checksum; returns the output and
    /// the checksum (hex).
    pub fn finish(mut self) -> std::io::Result<(W, String)> {
        self.put(&[TAG_END])?;
        let count = self.count.to_be_bytes();
        self.put(&count)?;
        let digest = self.hash.finalize();
        self.out.write_all(&digest)?;
        self.out.flush()?;
        Ok((self.out, hex::encode(digest)))
    }
}

/// Reads a backup item by item; the checksum is checked when the end is reached,
/// so a caller must treat nothing as restored before [`Reader::item`] returned
/// `Ok(None)`.
pub struct Reader<R: Read> {
    input: R,
    hash: Sha256,
    count: u64,
    done: Option<String>,
}

impl<R: Read> Reader<R> {
    /// Reads the magic and the header; refuses another format.
    pub fn open(input: R) -> Result<(Self, Header), BackupError> {
        let mut r = Self {
            input,
            hash: Sha256::new(),
            count: 0,
            done: None,
        };
        let magic: [u8; 16] = r.fixed("the file's start")?;
        if &magic != MAGIC {
            return Err(bad(
                "it does not start with APPROVAL-BACKUP (is it a file made by approval-server backup?)",
            ));
        }
        let len = u32::from_be_bytes(r.fixed("the header's length")?);
        if len > MAX_HEADER {
            return Err(bad(format!(
                "its header claims {len} bytes, over {MAX_HEADER}"
            )));
        }
        let json = r.bytes(len, "the header")?;
        #[derive(serde::Deserialize)]
        struct Version {
            format: u32,
        }
        let v: Version = serde_json::from_slice(&json)
            .map_err(|e| bad(format!("its header is not JSON with a format: {e}")))?;
        if v.format != FORMAT {
            return Err(BackupError::Format(v.format));
        }
        let header: Header = serde_json::from_slice(&json)
            .map_err(|e| bad(format!("its header cannot be read: {e}")))?;
        Ok((r, header))
    }

    fn exact(&mut self, buf: &mut [u8], what: &str) -> Result<(), BackupError> {
        self.input.read_exact(buf).map_err(|e| match e.kind() {
            std::io::ErrorKind::UnexpectedEof => bad(format!(
                "it ends inside {what} (truncated: was the copy cut short?)"
            )),
            _ => BackupError::Io(e),
        })?;
        self.hash.update(&*buf);
        Ok(())
    }

    fn fixed<const N: usize>(&mut self, what: &str) -> Result<[u8; N], BackupError> {
        let mut b = [0u8; N];
        self.exact(&mut b, what)?;
        Ok(b)
    }

    /// `len` bytes, read in steps so that a false length allocates no more than the
    /// bytes really there.
    fn bytes(&mut self, len: u32, what: &str) -> Result<Vec<u8>, BackupError> {
        let mut out = Vec::new();
        let mut left = len as usize;
        let mut chunk = [0u8; 64 * 1024];
        while left > 0 {
            let n = left.min(chunk.len());
            self.exact(&mut chunk[..n], what)?;
            out.extend_from_slice(&chunk[..n]);
            left -= n;
        }
        Ok(out)
    }

    /// The next item; `Ok(None)` once the end mark, the count and the checksum were
    /// read and agree, and nothing follows them.
    pub fn item(&mut self) -> Result<Option<Item>, BackupError> {
        if self.done.is_some() {
            return Ok(None);
        }
        let [tag] = self.fixed::<1>("an item's tag")?;
        match tag {
            TAG_ENTRY => {
                let klen = u32::from_be_bytes(self.fixed("a key's length")?);
                if klen > MAX_KEY {
                    return Err(bad(format!("a key claims {klen} bytes, over {MAX_KEY}")));
                }
                let key = self.bytes(klen, "a key")?;
                let vlen = u32::from_be_bytes(self.fixed("a value's length")?);
                if vlen > MAX_VALUE {
                    return Err(bad(format!(
                        "a value claims {vlen} bytes, over {MAX_VALUE}"
                    )));
                }
                let value = self.bytes(vlen, "a value")?;
                self.count += 1;
                Ok(Some(Item::Entry(key, value)))
            }
            TAG_FILE => {
                let nlen = u16::from_be_bytes(self.fixed("a file name's length")?);
                let name = self.bytes(u32::from(nlen.min(64)), "a file name")?;
                let name = String::from_utf8(name)
                    .ok()
                    .filter(|n| nlen <= 64 && FILES.contains(&n.as_str()))
                    .ok_or_else(|| bad("it names a file other than server.key"))?;
                let len = u32::from_be_bytes(self.fixed("a file's length")?);
                if len > MAX_FILE {
                    return Err(bad(format!("{name} claims {len} bytes, over {MAX_FILE}")));
                }
                let bytes = self.bytes(len, "a file")?;
                self.count += 1;
                Ok(Some(Item::File(name, bytes)))
            }
            TAG_END => {
                let count = u64::from_be_bytes(self.fixed("the item count")?);
                let expected = self.hash.clone().finalize();
                let mut digest = [0u8; 32];
                self.input.read_exact(&mut digest).map_err(|_| {
                    bad("it ends before its checksum (truncated: was the copy cut short?)")
                })?;
                if digest[..] != expected[..] {
                    return Err(bad(
                        "its SHA-256 checksum does not match its contents (damaged or edited)",
                    ));
                }
                if count != self.count {
                    return Err(bad(format!(
                        "it says {count} items but holds {}",
                        self.count
                    )));
                }
                let mut more = [0u8; 1];
                if self.input.read(&mut more)? != 0 {
                    return Err(bad("bytes follow its checksum"));
                }
                self.done = Some(hex::encode(digest));
                Ok(None)
            }
            other => Err(bad(format!("unknown item tag {other:#04x}"))),
        }
    }

    /// The checksum (hex), once [`Reader::item`] has returned `Ok(None)`.
    pub fn checksum(&self) -> Option<&str> {
        self.done.as_deref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header() -> Header {
        Header {
            format: FORMAT,
            store: "sled".into(),
            layout: "3".into(),
            server_id: "srv-0011223344556677".into(),
            made_at: "2026-12-07T00:00:00Z".into(),
            made_by: "approval-server test".into(),
        }
    }

    fn sample() -> Vec<u8> {
        let mut w = Writer::start(Vec::new(), &header()).unwrap();
        w.entry(b"p:one", b"{\"a\":1}").unwrap();
        w.entry(b"l:\0\0\0\0\0\0\0\x01", b"{}").unwrap();
        w.file("server.key", b"secret").unwrap();
        w.finish().unwrap().0
    }

    fn read_all(bytes: &[u8]) -> Result<Vec<Item>, BackupError> {
        let (mut r, _) = Reader::open(bytes)?;
        let mut out = Vec::new();
        while let Some(i) = r.item()? {
            out.push(i);
        }
        Ok(out)
    }

    #[test]
    fn what_is_written_reads_back_item_for_item() {
        let bytes = sample();
        let (_, h) = Reader::open(&bytes[..]).unwrap();
        assert_eq!(h, header());
        let items = read_all(&bytes).unwrap();
        assert_eq!(items.len(), 3);
        assert_eq!(
            items[2],
            Item::File("server.key".into(), b"secret".to_vec())
        );
    }

    #[test]
    fn every_flipped_byte_and_every_truncation_is_refused() {
        let bytes = sample();
        for i in 0..bytes.len() {
            let mut b = bytes.clone();
            b[i] ^= 0x01;
            assert!(read_all(&b).is_err(), "a flip at byte {i} went unnoticed");
            assert!(
                read_all(&bytes[..i]).is_err(),
                "a cut at byte {i} went unnoticed"
            );
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(read_all(&longer).is_err(), "a trailing byte went unnoticed");
    }

    #[test]
    fn a_newer_format_is_refused_by_number() {
        let mut h = header();
        h.format = 2;
        let bytes = Writer::start(Vec::new(), &h).unwrap().finish().unwrap().0;
        let e = read_all(&bytes).err().unwrap().to_string();
        assert!(e.contains("backup format 2"), "{e}");
    }

    #[test]
    fn a_huge_claimed_length_allocates_nothing_and_is_refused() {
        let mut w = Writer::start(Vec::new(), &header()).unwrap();
        w.put(&[TAG_ENTRY]).unwrap();
        w.put(&4u32.to_be_bytes()).unwrap();
        w.put(b"p:xx").unwrap();
        w.put(&u32::MAX.to_be_bytes()).unwrap();
        let e = read_all(&w.out).err().unwrap().to_string();
        assert!(e.contains("over"), "{e}");
        // A length under the cap but beyond the file's end: refused as truncated.
        let mut w = Writer::start(Vec::new(), &header()).unwrap();
        w.put(&[TAG_ENTRY]).unwrap();
        w.put(&4u32.to_be_bytes()).unwrap();
        w.put(b"p:xx").unwrap();
        w.put(&(MAX_VALUE).to_be_bytes()).unwrap();
        let e = read_all(&w.out).err().unwrap().to_string();
        assert!(e.contains("truncated"), "{e}");
    }

    #[test]
    fn a_file_other_than_the_identity_key_is_refused_both_ways() {
        let mut w = Writer::start(Vec::new(), &header()).unwrap();
        assert!(w.file("../etc/passwd", b"x").is_err());
        w.put(&[TAG_FILE]).unwrap();
        w.put(&13u16.to_be_bytes()).unwrap();
        w.put(b"../etc/passwd").unwrap();
        w.put(&1u32.to_be_bytes()).unwrap();
        w.put(b"x").unwrap();
        let bytes = w.finish().unwrap().0;
        let e = read_all(&bytes).err().unwrap().to_string();
        assert!(e.contains("other than server.key"), "{e}");
    }
}
