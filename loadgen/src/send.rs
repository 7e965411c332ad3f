//! Sending one request and reading its whole answer, for a worker of
//! [`crate::run`].
//!
//! `http://` targets go the fast way: each worker owns one kept-alive
//! HTTP/1.1 connection ([`crate::http1`], made again after a failure or a
//! `Connection: close`) and sends the request serialized once, as wrk
//! does. A shared pooled client (reqwest's) costs a hop between two tasks,
//! a pool lock and a request copy per request: over twice wrk's CPU per
//! request (`cargo xtask bench load-tester`). `https://` targets, and
//! HTTP/2 ([`crate::run::Config::http2`]), go through reqwest (rustls),
//! trusting the CA file given ([`Tls`]) instead of the built-in roots.
//! Either way the answer is judged by the run's [`Checks`]; a body is
//! searched as it is read, never kept.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use reqwest::header::{ACCEPT, CONTENT_LENGTH, HOST, HeaderValue, USER_AGENT};
use tokio::net::TcpStream;

use crate::check::Checks;
use crate::http1::{self, Conn};
use crate::run::Config;
use crate::scenario::{Variant, Wheel};
use crate::summary::ErrorKind;

/// A connection idle longer than this is checked before it is used again.
const IDLE_CHECK: Duration = Duration::from_millis(500);

const AGENT: &str = concat!("flotilla-loadgen/", env!("CARGO_PKG_VERSION"));

/// How an `https://` target's certificate is checked.
#[derive(Debug, Clone, Default)]
pub struct Tls {
    /// PEM certificates trusted instead of the built-in roots (a cluster's
    /// own CA: cert-manager's, a service mesh's).
    pub ca_pem: Option<Vec<u8>>,
    /// Any certificate accepted, and any name (a test server's
    /// self-signed one): the load is still encrypted, the server unproven.
    pub insecure_skip_verify: bool,
}

/// Why a run's client could not be built.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    #[error("the CA file holds no PEM certificate")]
    NoCertificate,
    #[error("the URL, or a request's path on it, is not a URL of the same host and port")]
    Url,
    #[error(transparent)]
    Client(#[from] reqwest::Error),
}

/// What every worker sends, built once per run: one request, or a
/// scenario's ([`crate::scenario`]).
pub struct Target {
    client: reqwest::Client,
    requests: Vec<Prepared>,
    /// Which request the run's i-th one is.
    wheel: Wheel,
    /// Set for `http://` URLs: the fast way.
    plain: Option<Endpoint>,
}

/// One request of the run, built once.
struct Prepared {
    template: reqwest::Request,
    /// Serialized, for the fast way (set when [`Target::plain`] is).
    wire: Option<Wire>,
    /// What its answers must show.
    checks: Checks,
}

/// Where `http://` requests go on the fast way.
struct Endpoint {
    /// The host and port, looked up per connection (`connect_to` unset).
    host: String,
    port: u16,
    connect_to: Option<SocketAddr>,
}

/// An `http://` request, serialized once.
struct Wire {
    bytes: Vec<u8>,
    /// A HEAD request's answer has no body, whatever its length says.
    head_request: bool,
}

impl Target {
    pub fn new(cfg: &Config) -> Result<Self, BuildError> {
        let connections = if cfg.stages.is_empty() { cfg.concurrency } else { cfg.max_connections };
        let mut builder = reqwest::Client::builder();
        let host_port = reqwest::Url::parse(&cfg.url)
            .ok()
            .and_then(|u| Some((u.host_str()?.to_string(), u.port_or_known_default()?)));
        if let (Some(ip), Some((host, port))) = (cfg.connect_to, &host_port) {
            // The host stays in the URL (and so in the Host header) but is
            // never looked up: reqwest takes this address for it, and the
            // port from the URL.
            builder = builder.resolve(host, SocketAddr::new(ip, *port));
        }
        if let Some(pem) = &cfg.tls.ca_pem {
            let certs = reqwest::Certificate::from_pem_bundle(pem)?;
            if certs.is_empty() {
                return Err(BuildError::NoCertificate);
            }
            builder = certs.into_iter().fold(builder.tls_built_in_root_certs(false), |b, c| b.add_root_certificate(c));
        }
        if cfg.tls.insecure_skip_verify {
            builder = builder.danger_accept_invalid_certs(true);
        }
        let cleartext = cfg.url.starts_with("http://");
        builder = match (cfg.http2, cleartext) {
            (true, true) => builder.http2_prior_knowledge(),
            // Over TLS both are offered and the server picks.
            (true, false) => builder,
            (false, _) => builder.http1_only(),
        };
        let client = builder
            .timeout(cfg.timeout)
            .connect_timeout(cfg.timeout)
            // Idle connections kept (https): every one the load may use at once.
            .pool_max_idle_per_host(usize::try_from(connections).unwrap_or(usize::MAX))
            .redirect(reqwest::redirect::Policy::none())
            .user_agent(AGENT)
            .build()?;
        // The single request, or the scenario's (the run's headers first).
        let variants = if cfg.scenario.is_empty() {
            vec![Variant {
                weight: 1,
                method: cfg.method.clone(),
                path: String::new(),
                headers: Vec::new(),
                secret_headers: Vec::new(),
                body: cfg.body.clone(),
                checks: cfg.checks.clone(),
            }]
        } else {
            cfg.scenario.clone()
        };
        let base = reqwest::Url::parse(&cfg.url).map_err(|_| BuildError::Url)?;
        let mut requests = Vec::with_capacity(variants.len());
        for v in &variants {
            // Built once (URL parsed, headers set), cloned for each request.
            let url = if v.path.is_empty() { base.clone() } else { with_path(&base, &v.path)? };
            let mut template = client.request(v.method.clone(), url);
            // The run's headers first, then the request's; each literal
            // then from files.
            let headers =
                [(&cfg.headers, false), (&cfg.secret_headers, true), (&v.headers, false), (&v.secret_headers, true)];
            for (list, secret) in headers {
                for (k, value) in list {
                    match HeaderValue::from_str(value) {
                        Ok(mut value) => {
                            value.set_sensitive(secret);
                            template = template.header(k, value);
                        }
                        // As before: a literal is refused by the build, a
                        // file's value was checked when it was read.
                        Err(_) if !secret => template = template.header(k, value),
                        Err(_) => {}
                    }
                }
            }
            if !v.body.is_empty() {
                template = template.body(v.body.clone());
            }
            let template = template.build()?;
            requests.push(Prepared { wire: None, template, checks: v.checks.clone() });
        }
        let mut plain = host_port.filter(|_| !cfg.http2).map(|(host, port)| Endpoint {
            connect_to: cfg.connect_to.map(|ip| SocketAddr::new(ip, port)),
            host,
            port,
        });
        // The fast way only when every request can take it.
        if let Some(endpoint) = &plain {
            for r in &mut requests {
                r.wire = Wire::of(&r.template, &endpoint.host);
            }
            if requests.iter().any(|r| r.wire.is_none()) {
                plain = None;
            }
        }
        let wheel = Wheel::new(&variants.iter().map(|v| v.weight).collect::<Vec<_>>());
        Ok(Self { client, requests, wheel, plain })
    }

    /// Which request (of a scenario; 0 otherwise) the run's `i`-th one is.
    pub fn pick(&self, i: u64) -> usize {
        self.wheel.pick(i)
    }

    /// How many requests the run sends in turn (1 without a scenario).
    pub fn len(&self) -> usize {
        self.requests.len()
    }

    /// Never: a run sends at least one request.
    pub fn is_empty(&self) -> bool {
        self.requests.is_empty()
    }

    /// A worker's sender (its own connection, on the fast way).
    pub fn sender(self: &Arc<Self>) -> Sender {
        Sender { target: self.clone(), conn: None }
    }
}

/// `base` with its path and query replaced by `path_and_query`, never its
/// scheme, host or port: a path is only ever a path (`Url::join` would read
/// `//other.host/x` as another host, the load sent where DNS says).
fn with_path(base: &reqwest::Url, path_and_query: &str) -> Result<reqwest::Url, BuildError> {
    let (path, query) = match path_and_query.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (path_and_query, None),
    };
    let mut url = base.clone();
    url.set_path(path);
    url.set_query(query);
    url.set_fragment(None);
    let same = |u: &reqwest::Url| (u.scheme().to_string(), u.host_str().map(str::to_string), u.port_or_known_default());
    if same(&url) != same(base) {
        return Err(BuildError::Url);
    }
    Ok(url)
}

impl Wire {
    /// The fast way's request for `template`, when it is `http://`.
    fn of(template: &reqwest::Request, host: &str) -> Option<Self> {
        let url = template.url();
        if url.scheme() != "http" {
            return None;
        }
        let body = match template.body() {
            Some(b) => b.as_bytes()?,
            None => &[],
        };
        let mut headers = template.headers().clone();
        // What reqwest adds: Host (with the port when it is not the
        // scheme's), the agent, Accept, and the body's length.
        let authority = match url.port() {
            Some(p) => format!("{host}:{p}"),
            None => host.to_string(),
        };
        headers.entry(HOST).or_insert(HeaderValue::from_str(&authority).ok()?);
        headers.entry(USER_AGENT).or_insert(HeaderValue::from_static(AGENT));
        headers.entry(ACCEPT).or_insert(HeaderValue::from_static("*/*"));
        if !body.is_empty() {
            headers.entry(CONTENT_LENGTH).or_insert(HeaderValue::from(body.len()));
        }
        let mut wire = format!("{} {}", template.method(), url.path()).into_bytes();
        if let Some(q) = url.query() {
            wire.push(b'?');
            wire.extend_from_slice(q.as_bytes());
        }
        wire.extend_from_slice(b" HTTP/1.1\r\n");
        for (name, value) in &headers {
            wire.extend_from_slice(name.as_str().as_bytes());
            wire.extend_from_slice(b": ");
            wire.extend_from_slice(value.as_bytes());
            wire.extend_from_slice(b"\r\n");
        }
        wire.extend_from_slice(b"\r\n");
        wire.extend_from_slice(body);
        Some(Self { bytes: wire, head_request: template.method() == reqwest::Method::HEAD })
    }
}

impl Endpoint {
    async fn connect(&self) -> Result<Conn, std::io::Error> {
        let stream = match self.connect_to {
            Some(addr) => TcpStream::connect(addr).await?,
            None => TcpStream::connect((self.host.as_str(), self.port)).await?,
        };
        // Requests are small writes answered at once: no Nagle delay.
        stream.set_nodelay(true)?;
        Ok(Conn::new(stream))
    }
}

/// One worker's way to send: its own connection on the fast way.
pub struct Sender {
    target: Arc<Target>,
    conn: Option<Conn>,
}

impl Sender {
    /// Sends request `k` ([`Target::pick`]) and reads the whole answer,
    /// within `timeout`; the error's kind, if it failed.
    pub async fn send(&mut self, timeout: Duration, k: usize) -> Option<ErrorKind> {
        let target = self.target.clone();
        let Some(request) = target.requests.get(k).or(target.requests.first()) else {
            return Some(ErrorKind::Other);
        };
        let (Some(endpoint), Some(wire)) = (target.plain.as_ref(), request.wire.as_ref()) else {
            return slow(&target.client, request, timeout).await;
        };
        match tokio::time::timeout(timeout, self.plain(endpoint, wire, &request.checks)).await {
            Ok(result) => result,
            Err(_) => {
                // Cut mid-request: the connection's state is unknown.
                self.conn = None;
                Some(ErrorKind::Timeout)
            }
        }
    }

    async fn plain(&mut self, endpoint: &Endpoint, wire: &Wire, checks: &Checks) -> Option<ErrorKind> {
        // A server may close a connection left idle (an open model at a
        // low rate): looked at before it is used again, not found by
        // losing a request on it. Not on a busy one: that costs a read.
        if self.conn.as_mut().is_some_and(|c| c.idle() > IDLE_CHECK && c.closed_by_peer()) {
            self.conn = None;
        }
        // Once more on a new connection when a kept-alive one turns out
        // closed before any byte of the answer (the server's idle timeout
        // raced the request), as HTTP clients do.
        let mut search = checks.body_contains.as_ref().map(|n| n.search());
        let mut tries = 0;
        let result = loop {
            tries += 1;
            let conn = match self.conn.as_mut() {
                Some(c) => c,
                None => match endpoint.connect().await {
                    Ok(c) => self.conn.insert(c),
                    Err(_) => return Some(ErrorKind::Connect),
                },
            };
            match conn.exchange(&wire.bytes, wire.head_request, search.as_mut()).await {
                Err(http1::Error::Stale) if tries == 1 => self.conn = None,
                other => break other,
            }
        };
        match result {
            Ok((status, reusable)) => {
                if !reusable {
                    self.conn = None;
                }
                checks.verdict(status, search.is_some_and(|s| s.found()))
            }
            Err(_) => {
                // A broken connection: made again next time.
                self.conn = None;
                Some(ErrorKind::Other)
            }
        }
    }
}

fn classify(e: &reqwest::Error) -> ErrorKind {
    if e.is_timeout() {
        ErrorKind::Timeout
    } else if e.is_connect() {
        ErrorKind::Connect
    } else {
        ErrorKind::Other
    }
}

/// Through reqwest's pooled client (`https://`).
async fn slow(client: &reqwest::Client, request: &Prepared, timeout: Duration) -> Option<ErrorKind> {
    // The body is bytes: a clone always exists.
    let Some(mut req) = request.template.try_clone() else { return Some(ErrorKind::Other) };
    *req.timeout_mut() = Some(timeout);
    let checks = &request.checks;
    match client.execute(req).await {
        Ok(mut resp) => {
            let status = resp.status().as_u16();
            // Read the body: the latency is the whole answer's.
            let Some(needle) = checks.body_contains.as_ref() else {
                if let Err(e) = resp.bytes().await {
                    return Some(classify(&e));
                }
                return checks.verdict(status, false);
            };
            // Searched piece by piece as it comes, never held whole.
            let mut search = needle.search();
            loop {
                match resp.chunk().await {
                    Ok(Some(piece)) => search.feed(&piece),
                    Ok(None) => break,
                    Err(e) => return Some(classify(&e)),
                }
            }
            checks.verdict(status, search.found())
        }
        Err(e) => Some(classify(&e)),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// A request's path never names another host: `//victim/x` and
    /// `/\victim/x` are paths on the pinned Service (joined, they were the
    /// load sent to `victim`, resolved by DNS).
    #[test]
    fn a_path_is_only_ever_a_path() {
        let base = reqwest::Url::parse("https://web.shop.svc.cluster.local:8443/ignored?old=1#f").unwrap();
        for (path, want_path, want_query) in [
            ("/cart?item=1", "/cart", Some("item=1")),
            ("//victim.example/api?x=1", "//victim.example/api", Some("x=1")),
            ("/\\victim.example/api", "//victim.example/api", None),
            ("/", "/", None),
        ] {
            let url = with_path(&base, path).unwrap();
            assert_eq!(url.host_str(), Some("web.shop.svc.cluster.local"), "{path}");
            assert_eq!((url.port(), url.scheme()), (Some(8443), "https"), "{path}");
            assert_eq!((url.path(), url.query(), url.fragment()), (want_path, want_query, None), "{path}");
        }
    }
}
