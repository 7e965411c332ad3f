//! A minimal HTTP/1.1 exchange on a connection a worker owns, for the
//! fast way of [`crate::send`]: the request is bytes serialized once, the
//! answer's head is parsed with `httparse` and its body is framed
//! (Content-Length, chunked, or to the end of the connection) and
//! discarded as it arrives — what wrk does, with no per-request
//! allocation. With a body check its bytes pass through a
//! [`Search`] on their way out, still never held. Pure framing logic here is unit-tested; the I/O is a loop
//! of reads around it.

use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::check::Search;

/// The most an answer's head may take (status line and headers).
const MAX_HEAD: usize = 64 * 1024;
/// Headers parsed per answer; more is a malformed answer.
const MAX_HEADERS: usize = 100;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("the connection closed before the answer was whole")]
    Closed,
    /// A connection used before ended (closed or reset by the server)
    /// before any byte of this answer: the request can go again on a new
    /// one.
    #[error("the kept-alive connection was closed by the server")]
    Stale,
    #[error("malformed answer: {0}")]
    Malformed(&'static str),
}

/// How an answer's body ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Framing {
    /// No body (HEAD, 1xx, 204, 304, or Content-Length: 0).
    None,
    Length(u64),
    Chunked,
    /// To the end of the connection (neither length nor chunked).
    Close,
}

/// An answer's head: its status, how its body ends, whether the
/// connection may be used again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Head {
    pub status: u16,
    framing: Framing,
    keep_alive: bool,
}

/// Parses an answer's head from the start of `buf`: `Ok(None)` when more
/// bytes are needed, else the head and its length in bytes.
fn parse_head(buf: &[u8], head_request: bool) -> Result<Option<(Head, usize)>, Error> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut resp = httparse::Response::new(&mut headers);
    let len = match resp.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(_) => return Err(Error::Malformed("head")),
    };
    let status = resp.code.ok_or(Error::Malformed("status"))?;
    let mut keep_alive = resp.version == Some(1);
    let (mut length, mut chunked) = (None, false);
    for h in resp.headers.iter() {
        if h.name.eq_ignore_ascii_case("content-length") {
            let v = std::str::from_utf8(h.value).ok().and_then(|v| v.trim().parse::<u64>().ok());
            let v = v.ok_or(Error::Malformed("content-length"))?;
            if length.is_some_and(|l| l != v) {
                return Err(Error::Malformed("content-length"));
            }
            length = Some(v);
        } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
            // chunked is the last coding when present (RFC 9112 6.1).
            chunked = h
                .value
                .split(|b| *b == b',')
                .next_back()
                .is_some_and(|c| c.trim_ascii().eq_ignore_ascii_case(b"chunked"));
        } else if h.name.eq_ignore_ascii_case("connection") {
            for token in h.value.split(|b| *b == b',').map(<[u8]>::trim_ascii) {
                if token.eq_ignore_ascii_case(b"close") {
                    keep_alive = false;
                } else if token.eq_ignore_ascii_case(b"keep-alive") {
                    keep_alive = true;
                }
            }
        }
    }
    let framing = if head_request || (100..200).contains(&status) || status == 204 || status == 304 {
        Framing::None
    } else if chunked {
        Framing::Chunked
    } else {
        match length {
            Some(0) => Framing::None,
            Some(n) => Framing::Length(n),
            None => Framing::Close,
        }
    };
    if framing == Framing::Close {
        keep_alive = false;
    }
    Ok(Some((Head { status, framing, keep_alive }, len)))
}

/// Where a chunked body's decoder is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Chunk {
    /// In a chunk's size line: hex digits, then extensions (skipped).
    Size {
        value: u64,
        digits: bool,
        ext: bool,
    },
    SizeLf(u64),
    Data(u64),
    DataCr,
    DataLf,
    /// At the start of a trailer line (or of the final empty line).
    TrailerStart,
    TrailerLine,
    FinalLf,
    Done,
}

impl Chunk {
    const START: Chunk = Chunk::Size { value: 0, digits: false, ext: false };

    fn after_size(value: u64) -> Chunk {
        if value == 0 { Chunk::TrailerStart } else { Chunk::Data(value) }
    }

    /// Consumes what it can of `input`: the bytes consumed (all of them
    /// unless the body ends inside it).
    fn feed(&mut self, input: &[u8]) -> Result<usize, Error> {
        self.feed_data(input, |_| {})
    }

    /// As [`Chunk::feed`], handing the body's own bytes (the chunks'
    /// data, without their framing) to `data` as they go by.
    fn feed_data(&mut self, input: &[u8], mut data: impl FnMut(&[u8])) -> Result<usize, Error> {
        let mut i = 0;
        while i < input.len() && *self != Chunk::Done {
            if let Chunk::Data(n) = *self {
                let take = usize::try_from(n).unwrap_or(usize::MAX).min(input.len() - i);
                data(&input[i..i + take]);
                i += take;
                let left = n - take as u64;
                *self = if left == 0 { Chunk::DataCr } else { Chunk::Data(left) };
                continue;
            }
            let b = input[i];
            i += 1;
            *self = match (*self, b) {
                (Chunk::Size { value, ext: false, .. }, b) if b.is_ascii_hexdigit() => {
                    let d = u64::from((b as char).to_digit(16).unwrap_or(0));
                    let value = value.checked_mul(16).and_then(|v| v.checked_add(d));
                    Chunk::Size { value: value.ok_or(Error::Malformed("chunk size"))?, digits: true, ext: false }
                }
                (Chunk::Size { digits: false, .. }, _) => return Err(Error::Malformed("chunk size")),
                (Chunk::Size { value, .. }, b'\r') => Chunk::SizeLf(value),
                (Chunk::Size { value, .. }, b'\n') | (Chunk::SizeLf(value), b'\n') => Chunk::after_size(value),
                (Chunk::Size { value, .. }, _) => Chunk::Size { value, digits: true, ext: true },
                (Chunk::DataCr, b'\r') => Chunk::DataLf,
                (Chunk::DataCr | Chunk::DataLf, b'\n') => Chunk::START,
                (Chunk::TrailerStart, b'\r') => Chunk::FinalLf,
                (Chunk::TrailerStart | Chunk::FinalLf, b'\n') => Chunk::Done,
                (Chunk::TrailerLine, b'\n') => Chunk::TrailerStart,
                (Chunk::TrailerStart | Chunk::TrailerLine, _) => Chunk::TrailerLine,
                _ => return Err(Error::Malformed("chunked body")),
            };
        }
        Ok(i)
    }
}

/// A worker's connection: the stream and a read buffer kept between
/// exchanges.
pub struct Conn {
    stream: TcpStream,
    buf: Vec<u8>,
    last_used: Instant,
    /// Whether an exchange went on it already.
    used: bool,
}

impl Conn {
    pub fn new(stream: TcpStream) -> Self {
        Self { stream, buf: vec![0; 16 * 1024], last_used: Instant::now(), used: false }
    }

    /// How long since the last answer ended.
    pub fn idle(&self) -> Duration {
        self.last_used.elapsed()
    }

    /// Whether the server closed the connection (or sent what nobody asked
    /// for) while it was idle: a read that does not wait.
    pub fn closed_by_peer(&mut self) -> bool {
        match self.stream.try_read(&mut self.buf) {
            Err(e) => e.kind() != std::io::ErrorKind::WouldBlock,
            Ok(_) => true,
        }
    }

    /// Sends `request` (whole, serialized) and reads the whole answer:
    /// its status, and whether the connection may carry the next request.
    /// The final answer's body goes through `search`, when there is one.
    pub async fn exchange(
        &mut self,
        request: &[u8],
        head_request: bool,
        search: Option<&mut Search<'_>>,
    ) -> Result<(u16, bool), Error> {
        let reused = self.used;
        self.used = true;
        let stale = |e: std::io::Error| {
            use std::io::ErrorKind::{BrokenPipe, ConnectionAborted, ConnectionReset};
            if reused && matches!(e.kind(), BrokenPipe | ConnectionReset | ConnectionAborted) {
                Error::Stale
            } else {
                Error::Io(e)
            }
        };
        self.stream.write_all(request).await.map_err(stale)?;
        let mut filled = 0;
        loop {
            let (head, len) = loop {
                if let Some(parsed) = parse_head(&self.buf[..filled], head_request)? {
                    break parsed;
                }
                if filled == self.buf.len() {
                    if self.buf.len() >= MAX_HEAD {
                        return Err(Error::Malformed("head too long"));
                    }
                    self.buf.resize((self.buf.len() * 2).min(MAX_HEAD), 0);
                }
                let n = match self.stream.read(&mut self.buf[filled..]).await {
                    Ok(n) => n,
                    Err(e) if filled == 0 => return Err(stale(e)),
                    Err(e) => return Err(e.into()),
                };
                if n == 0 {
                    return Err(if filled == 0 && reused { Error::Stale } else { Error::Closed });
                }
                filled += n;
            };
            // An interim answer (100 Continue, 103 Early Hints): the real
            // one follows.
            if (100..200).contains(&head.status) && head.status != 101 {
                self.buf.copy_within(len..filled, 0);
                filled -= len;
                continue;
            }
            let rest = filled - len;
            let whole = self.body(head.framing, len, rest, search).await?;
            self.last_used = Instant::now();
            return Ok((head.status, head.keep_alive && whole));
        }
    }

    /// Reads and discards the body whose first `rest` bytes are in the
    /// buffer at `at`, passing its bytes to `search` if there is one;
    /// whether the answer ended exactly at its end (no byte beyond, so the
    /// connection is clean for the next).
    async fn body(
        &mut self,
        framing: Framing,
        at: usize,
        rest: usize,
        mut search: Option<&mut Search<'_>>,
    ) -> Result<bool, Error> {
        match framing {
            Framing::None => Ok(rest == 0),
            Framing::Length(n) => {
                let mut left = n;
                let mut have = rest as u64;
                let mut from = at;
                loop {
                    if let Some(s) = search.as_mut() {
                        // Within the buffer: `have` bytes were read there.
                        let body = usize::try_from(have.min(left)).unwrap_or(usize::MAX);
                        s.feed(&self.buf[from..from + body]);
                    }
                    if have >= left {
                        return Ok(have == left);
                    }
                    left -= have;
                    have = self.read_some().await? as u64;
                    from = 0;
                }
            }
            Framing::Chunked => {
                let mut state = Chunk::START;
                let (mut from, mut to) = (at, at + rest);
                loop {
                    let used = match search.as_mut() {
                        Some(s) => state.feed_data(&self.buf[from..to], |data| s.feed(data))?,
                        None => state.feed(&self.buf[from..to])?,
                    };
                    if state == Chunk::Done {
                        return Ok(from + used == to);
                    }
                    from = 0;
                    to = self.read_some().await?;
                }
            }
            Framing::Close => {
                if let Some(s) = search.as_mut() {
                    s.feed(&self.buf[at..at + rest]);
                }
                loop {
                    let n = self.stream.read(&mut self.buf).await?;
                    if n == 0 {
                        return Ok(false);
                    }
                    if let Some(s) = search.as_mut() {
                        s.feed(&self.buf[..n]);
                    }
                }
            }
        }
    }

    /// Reads into the buffer from its start: the bytes read (an early end
    /// of the connection is an error).
    async fn read_some(&mut self) -> Result<usize, Error> {
        match self.stream.read(&mut self.buf).await? {
            0 => Err(Error::Closed),
            n => Ok(n),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use proptest::prelude::*;

    use super::*;

    fn head(text: &str) -> Head {
        parse_head(text.as_bytes(), false).unwrap().expect("a whole head").0
    }

    #[test]
    fn heads_say_how_the_body_ends() {
        let h = head("HTTP/1.1 200 OK\r\nContent-Length: 12\r\n\r\n");
        assert_eq!((h.status, h.framing, h.keep_alive), (200, Framing::Length(12), true));
        let h = head("HTTP/1.1 503 Busy\r\ncontent-length: 0\r\nConnection: close\r\n\r\n");
        assert_eq!((h.status, h.framing, h.keep_alive), (503, Framing::None, false));
        let h = head("HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\nContent-Length: 5\r\n\r\n");
        assert_eq!(h.framing, Framing::Chunked);
        // HTTP/1.0 closes unless it says keep-alive; no length: to the end.
        let h = head("HTTP/1.0 200 OK\r\n\r\n");
        assert_eq!((h.framing, h.keep_alive), (Framing::Close, false));
        let h = head("HTTP/1.0 200 OK\r\nConnection: Keep-Alive\r\nContent-Length: 2\r\n\r\n");
        assert_eq!((h.framing, h.keep_alive), (Framing::Length(2), true));
        // No body, whatever the length says.
        assert_eq!(head("HTTP/1.1 204 No Content\r\nContent-Length: 9\r\n\r\n").framing, Framing::None);
        assert_eq!(head("HTTP/1.1 304 Not Modified\r\n\r\n").framing, Framing::None);
        let (h, _) = parse_head(b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\n", true).unwrap().unwrap();
        assert_eq!(h.framing, Framing::None);
    }

    #[test]
    fn a_head_is_whole_or_waits_or_is_refused() {
        let text = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
        let (_, len) = parse_head(text, false).unwrap().unwrap();
        assert_eq!(&text[len..], b"ok");
        assert!(parse_head(&text[..20], false).unwrap().is_none());
        assert!(parse_head(b"garbage\r\n\r\n", false).is_err());
        assert!(parse_head(b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n", false).is_err());
        assert!(parse_head(b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n", false).is_err());
    }

    #[test]
    fn chunked_bodies_end_where_they_end() {
        let body = b"4;ext=1\r\nWiki\r\n5\r\npedia\r\nE\r\n in\r\n\r\nchunks.\r\n0\r\nX-Trailer: 1\r\n\r\nNEXT";
        let mut c = Chunk::START;
        let used = c.feed(body).unwrap();
        assert_eq!(c, Chunk::Done);
        assert_eq!(&body[used..], b"NEXT");
        // Bare LF line ends are taken too.
        let mut c = Chunk::START;
        assert_eq!(c.feed(b"2\nok\n0\n\n").unwrap(), 8);
        assert_eq!(c, Chunk::Done);
        // The data alone reaches a body check, without the framing.
        let mut c = Chunk::START;
        let mut data = Vec::new();
        c.feed_data(body, |d| data.extend_from_slice(d)).unwrap();
        assert_eq!(data, b"Wikipedia in\r\n\r\nchunks.");
        for bad in [&b"zz\r\n"[..], b"2\r\nokX", b"\r\n", b"fffffffffffffffff\r\n"] {
            let mut c = Chunk::START;
            assert!(c.feed(bad).is_err(), "{:?}", String::from_utf8_lossy(bad));
        }
    }

    proptest! {
        /// However the bytes arrive, the decoder ends exactly at the
        /// body's end.
        #[test]
        fn chunked_bodies_split_anywhere(sizes in prop::collection::vec(1usize..300, 0..8), cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..6)) {
            let mut body = Vec::new();
            for n in &sizes {
                body.extend_from_slice(format!("{n:x}\r\n").as_bytes());
                body.extend(std::iter::repeat_n(b'a', *n));
                body.extend_from_slice(b"\r\n");
            }
            body.extend_from_slice(b"0\r\n\r\n");
            let mut points: Vec<usize> = cuts.iter().map(|i| i.index(body.len())).collect();
            points.extend([0, body.len()]);
            points.sort_unstable();
            let mut c = Chunk::START;
            let mut total = 0;
            for w in points.windows(2) {
                prop_assert_ne!(c, Chunk::Done);
                total += c.feed(&body[w[0]..w[1]]).unwrap();
            }
            prop_assert_eq!(c, Chunk::Done);
            prop_assert_eq!(total, body.len());
        }
    }
}
