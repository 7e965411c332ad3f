//! Just enough HTTP/1.1 for the proxy: requests with a Content-Length or
//! chunked body, kept-alive client connections, and a one-shot request to
//! the upstream (`Connection: close`, read to the end).

use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

/// A request or a response: the first line, headers, body.
#[derive(Debug, Clone, Default)]
pub struct Message {
    pub start: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Message {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }

    /// `(method, path with query)` of a request.
    pub fn method_path(&self) -> (&str, &str) {
        let mut parts = self.start.split_whitespace();
        (parts.next().unwrap_or(""), parts.next().unwrap_or(""))
    }

    /// The status code of a response.
    pub fn status(&self) -> u16 {
        self.start.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0)
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// A response with `status`, an XML body and extra headers.
    pub fn response(status: u16, reason: &str, body: String, extra: &[(&str, String)]) -> Self {
        let mut headers = vec![("Content-Type".to_string(), "text/xml".to_string())];
        headers.extend(extra.iter().map(|(k, v)| (k.to_string(), v.clone())));
        Self { start: format!("HTTP/1.1 {status} {reason}"), headers, body: body.into_bytes() }
    }

    /// Serialized with a fresh Content-Length and `connection`.
    fn to_bytes(&self, connection: &str) -> Vec<u8> {
        let mut out = format!("{}\r\n", self.start);
        for (k, v) in &self.headers {
            let skip = ["content-length", "transfer-encoding", "connection", "keep-alive"];
            if !skip.iter().any(|s| k.eq_ignore_ascii_case(s)) {
                out.push_str(&format!("{k}: {v}\r\n"));
            }
        }
        out.push_str(&format!("Content-Length: {}\r\nConnection: {connection}\r\n\r\n", self.body.len()));
        let mut bytes = out.into_bytes();
        bytes.extend_from_slice(&self.body);
        bytes
    }
}

/// Reads one message; `Ok(None)` at a clean end of the stream. `response`:
/// a body without a length runs to the end of the stream.
pub async fn read<R: AsyncRead + Unpin>(r: &mut BufReader<R>, response: bool) -> std::io::Result<Option<Message>> {
    let mut start = String::new();
    if r.read_line(&mut start).await? == 0 {
        return Ok(None);
    }
    let mut msg = Message { start: start.trim_end().to_string(), ..Default::default() };
    loop {
        let mut line = String::new();
        if r.read_line(&mut line).await? == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        if let Some((k, v)) = line.split_once(':') {
            msg.headers.push((k.trim().to_string(), v.trim().to_string()));
        }
    }
    let chunked = msg.header("transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked"));
    if chunked {
        loop {
            let mut size = String::new();
            r.read_line(&mut size).await?;
            let n = usize::from_str_radix(size.trim().split(';').next().unwrap_or("0"), 16)
                .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))?;
            let mut chunk = vec![0; n + 2];
            r.read_exact(&mut chunk).await?;
            if n == 0 {
                break;
            }
            msg.body.extend_from_slice(&chunk[..n]);
        }
    } else if let Some(len) = msg.header("content-length").and_then(|v| v.parse::<usize>().ok()) {
        msg.body = vec![0; len];
        r.read_exact(&mut msg.body).await?;
    } else if response {
        r.read_to_end(&mut msg.body).await?;
    }
    Ok(Some(msg))
}

pub async fn write<W: AsyncWrite + Unpin>(w: &mut W, msg: &Message, keep_alive: bool) -> std::io::Result<()> {
    w.write_all(&msg.to_bytes(if keep_alive { "keep-alive" } else { "close" })).await?;
    w.flush().await
}

/// Sends `req` to `upstream` (`host:port`) on a connection of its own.
pub async fn forward(upstream: &str, req: &Message) -> std::io::Result<Message> {
    let stream = TcpStream::connect(upstream).await?;
    let mut reader = BufReader::new(stream);
    let mut req = req.clone();
    req.headers.retain(|(k, _)| !k.eq_ignore_ascii_case("expect"));
    write(reader.get_mut(), &req, false).await?;
    read(&mut reader, true).await?.ok_or_else(|| std::io::ErrorKind::UnexpectedEof.into())
}
