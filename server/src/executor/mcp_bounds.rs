//! Bounds on what a downstream MCP server can make the gate hold in memory.
//!
//! A downstream server is a third party: the gate talks to it at start and on every
//! reload (`payload_schema_from_tool`), for `import-tools`, and at every execute. The
//! review behind issue #31 (item 2) showed two ways one could sink the whole gate:
//! `tools/list` pages with a `nextCursor` forever (rmcp's `list_all_tools` follows them
//! without end: RSS grew 165 MB/s to 3.4 GB), and one 15 MB stdio line of `[{},{},...]`
//! (rmcp's stdio reader takes lines up to 16 MiB and parses them whole, through
//! serde's buffered untagged enums: an 847 MB peak). This module bounds both:
//!
//! - [`BoundedLines`] reads a child's stdout and fails the transport, before the line
//!   is parsed, once one message passes [`MAX_MESSAGE_BYTES`] (4 MiB, the same as the
//!   HTTP client's JSON limit) or [`MAX_MESSAGE_VALUES`] JSON values (what parsing
//!   costs is per value, not per byte: an empty object is 3 bytes and ~170 bytes
//!   once parsed). A pending request then fails at once instead of waiting for its
//!   time-out; the reason is kept in an [`Overflow`] for the log and the outcome.
//! - [`list_tools`] follows at most [`MAX_LIST_PAGES`] pages, [`MAX_LISTED_TOOLS`]
//!   tools and [`MAX_LISTING_BYTES`] of tool definitions, and stops as soon as the
//!   tool it looks for is listed.

use rmcp::model::{PaginatedRequestParams, Tool};
use rmcp::service::Peer;
use rmcp::RoleClient;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{ready, Context, Poll};
use tokio::io::{AsyncRead, ReadBuf};

/// The largest one message (one stdio line) from a downstream server.
pub const MAX_MESSAGE_BYTES: usize = 4 * 1024 * 1024;
/// The most JSON values (objects, arrays and the members and elements they hold,
/// counted as `{`, `[` and `,` outside strings) in one message.
pub const MAX_MESSAGE_VALUES: usize = 256 * 1024;
/// The most `tools/list` pages followed for one listing.
pub const MAX_LIST_PAGES: usize = 20;
/// The most tools one listing may hold.
pub const MAX_LISTED_TOOLS: usize = 10_000;
/// The most bytes of tool definitions (as JSON) one listing may hold.
pub const MAX_LISTING_BYTES: usize = 4 * 1024 * 1024;

/// Why a downstream's transport was cut, when [`BoundedLines`] cut it.
#[derive(Debug, Clone, Default)]
pub struct Overflow(Arc<Mutex<Option<String>>>);

impl Overflow {
    fn set(&self, why: &str) {
        if let Ok(mut slot) = self.0.lock() {
            slot.get_or_insert_with(|| why.to_owned());
        }
    }

    /// The reason, if the transport was cut for a message over the bounds.
    pub fn get(&self) -> Option<String> {
        self.0.lock().ok().and_then(|s| s.clone())
    }
}

/// A reader of newline-delimited JSON that fails, mid-line, once a line passes
/// [`MAX_MESSAGE_BYTES`] or [`MAX_MESSAGE_VALUES`]: the line is never parsed.
pub struct BoundedLines<R> {
    inner: R,
    max_bytes: usize,
    max_values: usize,
    line_bytes: usize,
    values: usize,
    in_string: bool,
    escaped: bool,
    failed: Option<String>,
    overflow: Overflow,
}

impl<R> BoundedLines<R> {
    /// Wraps `inner` with the module's bounds, reporting a cut into `overflow`.
    pub fn new(inner: R, overflow: Overflow) -> Self {
        Self::with_bounds(inner, overflow, MAX_MESSAGE_BYTES, MAX_MESSAGE_VALUES)
    }

    fn with_bounds(inner: R, overflow: Overflow, max_bytes: usize, max_values: usize) -> Self {
        Self {
            inner,
            max_bytes,
            max_values,
            line_bytes: 0,
            values: 0,
            in_string: false,
            escaped: false,
            failed: None,
            overflow,
        }
    }

    /// Accounts for `bytes`; the reason when the current line went over a bound.
    fn scan(&mut self, bytes: &[u8]) -> Result<(), String> {
        for &b in bytes {
            if b == b'\n' {
                self.line_bytes = 0;
                self.values = 0;
                self.in_string = false;
                self.escaped = false;
                continue;
            }
            self.line_bytes += 1;
            if self.line_bytes > self.max_bytes {
                return Err(format!(
                    "the downstream sent a message longer than {} bytes; the gate takes at most that much in one message",
                    self.max_bytes
                ));
            }
            if self.in_string {
                if self.escaped {
                    self.escaped = false;
                } else if b == b'\\' {
                    self.escaped = true;
                } else if b == b'"' {
                    self.in_string = false;
                }
                continue;
            }
            match b {
                b'"' => self.in_string = true,
                b'{' | b'[' | b',' => self.values += 1,
                _ => {}
            }
            if self.values > self.max_values {
                return Err(format!(
                    "the downstream sent a message of more than {} JSON values; the gate takes at most that many in one message",
                    self.max_values
                ));
            }
        }
        Ok(())
    }
}

impl<R: AsyncRead + Unpin> AsyncRead for BoundedLines<R> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if let Some(why) = &this.failed {
            return Poll::Ready(Err(io::Error::new(io::ErrorKind::InvalidData, why.clone())));
        }
        let before = buf.filled().len();
        ready!(Pin::new(&mut this.inner).poll_read(cx, buf))?;
        if let Err(why) = this.scan(&buf.filled()[before..]) {
            // An error reads nothing: the bytes just read are taken back.
            buf.set_filled(before);
            tracing::warn!(reason = %why, "downstream MCP transport cut");
            this.overflow.set(&why);
            this.failed = Some(why.clone());
            return Poll::Ready(Err(io::Error::new(io::ErrorKind::InvalidData, why)));
        }
        Poll::Ready(Ok(()))
    }
}

/// Why a listing failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ListFailure {
    /// It passed one of the gate's bounds (which bound, in words that name no
    /// configuration: fit for the agent).
    OverBound(String),
    /// The downstream failed or refused (its own words, which may name it: for the log).
    Failed(String),
}

impl std::fmt::Display for ListFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ListFailure::OverBound(why) | ListFailure::Failed(why) => f.write_str(why),
        }
    }
}

/// The downstream's tools, page by page within the module's bounds; with `want`, stops
/// at the first page that lists that tool.
pub async fn list_tools(
    peer: &Peer<RoleClient>,
    want: Option<&str>,
) -> Result<Vec<Tool>, ListFailure> {
    use ListFailure::OverBound;
    let mut tools = Vec::new();
    let mut bytes = 0usize;
    let mut cursor = None;
    for _ in 0..MAX_LIST_PAGES {
        let page = peer
            .list_tools(Some(PaginatedRequestParams::default().with_cursor(cursor)))
            .await
            .map_err(|e| ListFailure::Failed(format!("tools/list failed: {e}")))?;
        for t in page.tools {
            bytes += serde_json::to_vec(&t).map(|v| v.len()).unwrap_or(0);
            tools.push(t);
        }
        if tools.len() > MAX_LISTED_TOOLS {
            return Err(OverBound(format!(
                "tools/list returned more than {MAX_LISTED_TOOLS} tools; the gate reads at most that many"
            )));
        }
        if bytes > MAX_LISTING_BYTES {
            return Err(OverBound(format!(
                "tools/list returned more than {MAX_LISTING_BYTES} bytes of tool definitions; the gate reads at most that much"
            )));
        }
        if want.is_some_and(|w| tools.iter().any(|t| t.name == w)) {
            return Ok(tools);
        }
        match page.next_cursor {
            Some(c) => cursor = Some(c),
            None => return Ok(tools),
        }
    }
    Err(OverBound(format!(
        "tools/list went on for more than {MAX_LIST_PAGES} pages; the gate follows at most that many"
    )))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;

    async fn read_all(
        input: &[u8],
        max_bytes: usize,
        max_values: usize,
    ) -> (Vec<u8>, Option<String>) {
        let overflow = Overflow::default();
        let mut r = BoundedLines::with_bounds(input, overflow.clone(), max_bytes, max_values);
        let mut out = Vec::new();
        let _ = r.read_to_end(&mut out).await;
        (out, overflow.get())
    }

    #[tokio::test]
    async fn a_line_over_a_bound_cuts_the_stream_and_lines_within_pass() {
        // Within the bounds, line after line: each line's count starts again.
        let ok = b"{\"a\":[1,2]}\n{\"b\":\"x,{[\\\",[\"}\n".repeat(100);
        let (out, why) = read_all(&ok, 40, 4).await;
        assert_eq!(out, ok);
        assert_eq!(why, None);
        // Commas and brackets inside strings are not values.
        let (_, why) = read_all(b"{\"s\":\",,,,,,,,,[[[[{{{{\"}\n", 100, 2).await;
        assert_eq!(why, None);
        // Too many values on one line.
        let (_, why) = read_all(b"[{},{},{},{},{}]\n", 100, 4).await;
        assert!(why.unwrap().contains("more than 4 JSON values"));
        // Too long a line, between two short ones, or without a newline ever coming.
        let (_, why) = read_all(b"1\n22222222\n3\n", 5, 4).await;
        assert!(why.unwrap().contains("longer than 5 bytes"));
        let (_, why) = read_all(&[b'1'; 1000], 100, 4).await;
        assert!(why.unwrap().contains("longer than 100 bytes"));
    }
}
