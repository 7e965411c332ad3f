//! The proxy's view of an HTTP message (first line, headers, whole body),
//! to and from hyper's: hyper speaks HTTP/1.1 on both sides (kept-alive
//! client connections, one connection per request to the upstream).

use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
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
}

/// Headers hyper writes itself (or that must not pass a hop).
const HOP: [&str; 5] = ["content-length", "transfer-encoding", "connection", "keep-alive", "expect"];

fn headers_of(map: &hyper::HeaderMap) -> Vec<(String, String)> {
    map.iter().map(|(k, v)| (k.as_str().to_string(), String::from_utf8_lossy(v.as_bytes()).into_owned())).collect()
}

impl Message {
    /// A request as the proxy sees it, its body read whole.
    pub async fn read_request(req: Request<Incoming>) -> Result<Self, hyper::Error> {
        let (parts, body) = req.into_parts();
        let path = parts.uri.path_and_query().map_or("/", |p| p.as_str()).to_string();
        let body = body.collect().await?.to_bytes().to_vec();
        Ok(Self { start: format!("{} {path} HTTP/1.1", parts.method), headers: headers_of(&parts.headers), body })
    }

    /// This response for hyper to send.
    pub fn into_response(self) -> Response<Full<Bytes>> {
        let mut out = Response::builder().status(self.status());
        for (k, v) in self.headers.iter().filter(|(k, _)| !HOP.iter().any(|h| k.eq_ignore_ascii_case(h))) {
            out = out.header(k.as_str(), v.as_str());
        }
        out.body(Full::new(Bytes::from(self.body))).unwrap_or_else(|_| {
            let mut r = Response::new(Full::new(Bytes::from_static(b"the proxy made an invalid response")));
            *r.status_mut() = hyper::StatusCode::BAD_GATEWAY;
            r
        })
    }
}

/// Sends `req` to `upstream` (`host:port`) on a connection of its own.
pub async fn forward(upstream: &str, req: &Message) -> std::io::Result<Message> {
    let stream = TcpStream::connect(upstream).await?;
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake(TokioIo::new(stream)).await.map_err(std::io::Error::other)?;
    tokio::spawn(conn);
    let (method, path) = req.method_path();
    let mut out = Request::builder().method(method).uri(path);
    for (k, v) in req.headers.iter().filter(|(k, _)| !HOP.iter().any(|h| k.eq_ignore_ascii_case(h))) {
        out = out.header(k.as_str(), v.as_str());
    }
    let out = out.body(Full::new(Bytes::from(req.body.clone()))).map_err(std::io::Error::other)?;
    let resp = sender.send_request(out).await.map_err(std::io::Error::other)?;
    let (parts, body) = resp.into_parts();
    let body = body.collect().await.map_err(std::io::Error::other)?.to_bytes().to_vec();
    let reason = parts.status.canonical_reason().unwrap_or("");
    Ok(Message {
        start: format!("HTTP/1.1 {} {reason}", parts.status.as_u16()),
        headers: headers_of(&parts.headers),
        body,
    })
}
