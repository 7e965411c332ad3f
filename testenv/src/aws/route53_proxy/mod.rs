//! A Route53-faithful, fault-injecting proxy in front of moto, for every
//! test that talks Route53 (and the benchmarks).
//!
//! moto answers like Route53 but does not behave like it: it accepts a
//! CREATE of an existing record set, applies a failing batch partly,
//! refuses a DELETE + CREATE of one record set in one batch, and answers
//! INSYNC at once. The proxy checks every change batch the way Route53 does
//! ([`rules`]: whole, in order, all or nothing, CREATE of an existing set
//! and a DELETE that does not match refused, a CNAME alone at its name) and
//! answers a refusal exactly as Route53 does (`400 InvalidChangeBatch`);
//! only valid batches reach moto. On top, [`Faults`] it can be told to:
//!
//! * be **down** (connections refused) or a **blackhole** (requests read
//!   and never answered, as a network that drops packets);
//! * **delay INSYNC**: changes are `PENDING` for a while;
//! * **throttle**: `400 Throttling` with `Retry-After`;
//! * **fail names**: a batch touching one of them is refused;
//! * **deny zones**: every request on one of them is answered `403
//!   AccessDenied`, as when an IAM policy grants only some zones.
//!
//! [`Stats`] count what went through, for assertions on request counts.
//!
//! ```no_run
//! let moto = flotilla_testenv::aws::moto::shared();
//! let proxy = flotilla_testenv::aws::route53_proxy::Route53Proxy::start(&moto.endpoint).unwrap();
//! proxy.faults().set_insync_delay(std::time::Duration::from_secs(30));
//! // give the operator proxy.endpoint as its Route53 endpoint
//! ```

pub mod http;
pub mod rules;
pub mod xml;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tokio::net::{TcpListener, TcpStream};

use http::Message;

/// Why the proxy did not start.
#[derive(Debug, thiserror::Error)]
#[error("the Route53 proxy did not start: {0}")]
pub struct ProxyError(String);

/// What went through the proxy.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stats {
    /// ChangeResourceRecordSets requests received (whatever the answer).
    pub change_requests: usize,
    /// Of which accepted (applied to moto).
    pub changes_accepted: usize,
    /// Of which refused as Route53 would (`InvalidChangeBatch`).
    pub changes_refused: usize,
    /// Requests answered `Throttling`, and requests never answered.
    pub throttled: usize,
    pub blackholed: usize,
    /// ResourceRecord elements and value characters of the accepted
    /// batches, as Route53 counts them against its limits (UPSERT twice).
    pub accepted_records: usize,
    pub accepted_chars: usize,
    /// ListResourceRecordSets requests that start a listing (no `name=`):
    /// how many times the zone was listed from the top.
    pub listings: usize,
    /// GetChange requests.
    pub get_changes: usize,
    /// The names of every ChangeResourceRecordSets request, in order.
    pub batches: Vec<Vec<String>>,
}

impl Stats {
    /// How many change requests touched `name` (or its records' TXT).
    pub fn requests_naming(&self, name: &str) -> usize {
        self.batches.iter().filter(|b| b.iter().any(|n| n == name || n.ends_with(&format!(".{name}")))).count()
    }
}

#[derive(Debug, Default)]
struct State {
    down: bool,
    blackhole: bool,
    insync_delay: Duration,
    throttle: Option<Duration>,
    fail_names: HashSet<String>,
    denied_zones: HashSet<String>,
    /// Change id → when it was accepted.
    submitted: HashMap<String, Instant>,
    stats: Stats,
}

/// The proxy's switches, shared with its thread.
#[derive(Debug, Clone, Default)]
pub struct Faults(Arc<Mutex<State>>);

impl Faults {
    fn state(&self) -> MutexGuard<'_, State> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Refuse connections (Route53 unreachable); open ones are dropped.
    pub fn set_down(&self, down: bool) {
        self.state().down = down;
    }

    /// Read requests and never answer (a network that drops packets).
    pub fn set_blackhole(&self, on: bool) {
        self.state().blackhole = on;
    }

    /// Changes stay `PENDING` for `delay` after they were accepted.
    pub fn set_insync_delay(&self, delay: Duration) {
        self.state().insync_delay = delay;
    }

    /// Answer every request `400 Throttling` with `Retry-After: <secs>`.
    pub fn set_throttle(&self, retry_after: Option<Duration>) {
        self.state().throttle = retry_after;
    }

    /// Refuse every batch that touches `name` (no trailing dot).
    pub fn fail_name(&self, name: &str) {
        self.state().fail_names.insert(xml::normalize(name));
    }

    pub fn heal_name(&self, name: &str) {
        self.state().fail_names.remove(&xml::normalize(name));
    }

    /// Answer every request on the hosted zone `id` (its records, its
    /// changes, the zone itself) `403 AccessDenied`, or stop (`false`).
    pub fn deny_zone(&self, id: &str, denied: bool) {
        let mut s = self.state();
        if denied {
            s.denied_zones.insert(id.to_string());
        } else {
            s.denied_zones.remove(id);
        }
    }

    pub fn stats(&self) -> Stats {
        self.state().stats.clone()
    }

    pub fn reset_stats(&self) {
        self.state().stats = Stats::default();
    }
}

/// A running proxy; stopped when dropped.
pub struct Route53Proxy {
    /// `http://<host>:<port>`: the operator's Route53 endpoint.
    pub endpoint: String,
    faults: Faults,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Route53Proxy {
    /// Starts a proxy in front of `upstream` (`http://127.0.0.1:<port>`) on
    /// a free loopback port, served by a thread of its own (so a test's own
    /// runtime blocking never stalls it).
    pub fn start(upstream: &str) -> Result<Self, ProxyError> {
        Self::start_on(upstream, "127.0.0.1")
    }

    /// [`start`](Self::start) on a free port of `host`: the node's address,
    /// for operators running as pods.
    pub fn start_on(upstream: &str, host: &str) -> Result<Self, ProxyError> {
        let upstream = upstream.trim_start_matches("http://").trim_end_matches('/').to_string();
        let listener = std::net::TcpListener::bind((host, 0)).map_err(|e| ProxyError(format!("{host}: {e}")))?;
        listener.set_nonblocking(true).map_err(|e| ProxyError(e.to_string()))?;
        let endpoint = format!("http://{}", listener.local_addr().map_err(|e| ProxyError(e.to_string()))?);
        let faults = Faults::default();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| ProxyError(e.to_string()))?;
        let shared = faults.clone();
        let thread = std::thread::Builder::new()
            .name("route53-proxy".into())
            .spawn(move || {
                runtime.block_on(async move {
                    let Ok(listener) = TcpListener::from_std(listener) else { return };
                    let serve = accept_loop(listener, upstream, shared);
                    tokio::select! { _ = serve => {}, _ = stopped => {} }
                });
                runtime.shutdown_background();
            })
            .map_err(|e| ProxyError(e.to_string()))?;
        Ok(Self { endpoint, faults, stop: Some(stop), thread: Some(thread) })
    }

    pub fn faults(&self) -> &Faults {
        &self.faults
    }
}

impl Drop for Route53Proxy {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

async fn accept_loop(listener: TcpListener, upstream: String, faults: Faults) {
    let changes = Arc::new(tokio::sync::Mutex::new(()));
    while let Ok((stream, _)) = listener.accept().await {
        if faults.state().down {
            drop(stream);
            continue;
        }
        tokio::spawn(serve(stream, upstream.clone(), faults.clone(), changes.clone()));
    }
}

/// One client connection: requests in turn, kept alive.
async fn serve(stream: TcpStream, upstream: String, faults: Faults, changes: Arc<tokio::sync::Mutex<()>>) {
    let service = hyper::service::service_fn(move |req| {
        let (upstream, faults, changes) = (upstream.clone(), faults.clone(), Arc::clone(&changes));
        async move { answer(req, &upstream, &faults, &changes).await }
    });
    // Kept alive as Route53's endpoint keeps its connections.
    let _ = hyper::server::conn::http1::Builder::new()
        .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
        .await;
}

/// One request: unanswered while down (the connection closes) or a
/// blackhole (never answered), else [`handle`]d — changes one at a time.
async fn answer(
    req: hyper::Request<hyper::body::Incoming>,
    upstream: &str,
    faults: &Faults,
    changes: &tokio::sync::Mutex<()>,
) -> std::io::Result<hyper::Response<http_body_util::Full<hyper::body::Bytes>>> {
    let req = Message::read_request(req).await.map_err(std::io::Error::other)?;
    let (down, blackhole) = {
        let s = faults.state();
        (s.down, s.blackhole)
    };
    if down {
        return Err(std::io::ErrorKind::ConnectionAborted.into());
    }
    if blackhole {
        faults.state().stats.blackholed += 1;
        std::future::pending::<()>().await;
    }
    let _serial = if is_change(&req) { Some(changes.lock().await) } else { None };
    Ok(handle(upstream, faults, req).await.into_response())
}

fn is_change(req: &Message) -> bool {
    let (method, path) = req.method_path();
    method == "POST"
        && path.contains("/hostedzone/")
        && path.split('?').next().is_some_and(|p| p.trim_end_matches('/').ends_with("/rrset"))
}

fn zone_of(path: &str) -> &str {
    path.split("/hostedzone/").nth(1).and_then(|r| r.split('/').next()).unwrap_or("")
}

async fn handle(upstream: &str, faults: &Faults, req: Message) -> Message {
    let (method, path) = req.method_path();
    let (method, path) = (method.to_string(), path.to_string());
    let throttle = faults.state().throttle;
    if is_change(&req) {
        let names: Vec<String> =
            xml::changes(&req.text()).unwrap_or_default().iter().map(|c| c.rrset.name.clone()).collect();
        let mut s = faults.state();
        s.stats.change_requests += 1;
        s.stats.batches.push(names);
    }
    if let Some(retry) = throttle {
        faults.state().stats.throttled += 1;
        return Message::response(
            400,
            "Bad Request",
            xml::error_response("Throttling", "Rate exceeded"),
            &[("Retry-After", retry.as_secs().max(1).to_string())],
        );
    }
    if faults.state().denied_zones.contains(zone_of(&path)) {
        let message = format!(
            "User: arn:aws:iam::123456789012:user/flotilla is not authorized to perform this action on resource: \
             arn:aws:route53:::hostedzone/{} because no identity-based policy allows it",
            zone_of(&path)
        );
        return Message::response(403, "Forbidden", xml::error_response("AccessDenied", &message), &[]);
    }
    let result = if is_change(&req) {
        change(upstream, faults, &req, zone_of(&path)).await
    } else {
        let is_get_change = method == "GET" && path.contains("/change/");
        if method == "GET" && path.contains("/rrset") && !path.contains("name=") {
            faults.state().stats.listings += 1;
        }
        if is_get_change {
            faults.state().stats.get_changes += 1;
        }
        match http::forward(upstream, &req).await {
            Ok(resp) if is_get_change => Ok(delay_insync(faults, resp, &path)),
            other => other,
        }
    };
    result.unwrap_or_else(|e| {
        Message::response(503, "Service Unavailable", xml::error_response("ServiceUnavailable", &e.to_string()), &[])
    })
}

/// Within the delay, `INSYNC` reads `PENDING`.
fn delay_insync(faults: &Faults, mut resp: Message, path: &str) -> Message {
    let id = path.rsplit('/').next().unwrap_or("").split('?').next().unwrap_or("").to_string();
    let s = faults.state();
    let pending = s.submitted.get(&id).is_some_and(|at| at.elapsed() < s.insync_delay);
    if pending {
        resp.body = resp.text().replace("<Status>INSYNC</Status>", "<Status>PENDING</Status>").into_bytes();
    }
    resp
}

/// Above this many names a batch's current records are read as one listing
/// of the whole zone (a page per 300 record sets) instead of a read per
/// name: a 1,000-change batch cost 1,000 reads, each of which has moto sort
/// the zone, and ran past the SDK's 30 s attempt timeout on a busy machine.
const NAMES_READ_ONE_BY_ONE: usize = 16;

/// Record sets per page of the proxy's own reads from moto. Route53 answers
/// at most 300 (the operators' listings go through [`handle`] and get that);
/// moto sorts the whole zone for every page, so the proxy asks for more.
const PAGE: usize = 1000;

/// One ListResourceRecordSets page from moto, starting at `start` (a name,
/// and a type to start at within it).
async fn list_page(
    upstream: &str,
    req: &Message,
    zone: &str,
    start: Option<(&str, Option<&str>)>,
) -> std::io::Result<String> {
    let query = match start {
        Some((name, Some(rtype))) => format!("name={name}.&type={rtype}&maxitems={PAGE}"),
        Some((name, None)) => format!("name={name}.&maxitems={PAGE}"),
        None => format!("maxitems={PAGE}"),
    };
    let mut get = Message {
        start: format!("GET /2013-04-01/hostedzone/{zone}/rrset?{query} HTTP/1.1"),
        headers: req
            .headers
            .iter()
            .filter(|(k, _)| k.eq_ignore_ascii_case("authorization") || k.eq_ignore_ascii_case("host"))
            .cloned()
            .collect(),
        body: Vec::new(),
    };
    get.headers.push(("X-Flotilla-Proxy".into(), "read".into()));
    let resp = http::forward(upstream, &get).await?;
    if resp.status() != 200 {
        return Err(std::io::Error::other(format!(
            "listing {zone} ({query}): HTTP {}: {}",
            resp.status(),
            resp.text()
        )));
    }
    Ok(resp.text())
}

/// The record sets at `name`, read from moto.
async fn records_at(upstream: &str, req: &Message, zone: &str, name: &str) -> std::io::Result<Vec<xml::Rrset>> {
    let page = list_page(upstream, req, zone, Some((name, None))).await?;
    Ok(xml::rrsets(&page).into_iter().filter(|r| r.name == name).collect())
}

/// The record sets at any of `names`, read from moto as: one read per name
/// for a small batch, the whole zone page by page for a large one.
async fn records_named(upstream: &str, req: &Message, zone: &str, names: &[&str]) -> std::io::Result<Vec<xml::Rrset>> {
    let mut current = Vec::new();
    if names.len() <= NAMES_READ_ONE_BY_ONE {
        for n in names {
            current.extend(records_at(upstream, req, zone, n).await?);
        }
        return Ok(current);
    }
    let wanted: std::collections::HashSet<&str> = names.iter().copied().collect();
    let mut seen = std::collections::HashSet::new();
    let mut next: Option<(String, Option<String>)> = None;
    loop {
        let page = list_page(upstream, req, zone, next.as_ref().map(|(n, t)| (n.as_str(), t.as_deref()))).await?;
        for r in xml::rrsets(&page) {
            // moto pages by (name, type) only, so a page can start again
            // at record sets the last one held (several set identifiers).
            if wanted.contains(r.name.as_str()) && seen.insert(r.key()) {
                current.push(r);
            }
        }
        if !page.contains("<IsTruncated>true</IsTruncated>") {
            return Ok(current);
        }
        let name = xml::between(&page, "<NextRecordName>", "</NextRecordName>").first().map(|n| xml::normalize(n));
        let rtype = xml::between(&page, "<NextRecordType>", "</NextRecordType>").first().map(|t| t.trim().to_string());
        let after = name.map(|n| (n, rtype));
        if after.is_none() || after == next {
            return Err(std::io::Error::other(format!("listing {zone}: a truncated page named no next record")));
        }
        next = after;
    }
}

async fn change(upstream: &str, faults: &Faults, req: &Message, zone: &str) -> std::io::Result<Message> {
    let refuse = |messages: Vec<String>| {
        faults.state().stats.changes_refused += 1;
        Message::response(400, "Bad Request", xml::invalid_change_batch(&messages), &[])
    };
    let Some(changes) = xml::changes(&req.text()) else {
        return Ok(refuse(vec!["Could not parse the change batch".into()]));
    };
    let injected: Vec<String> = {
        let s = faults.state();
        changes
            .iter()
            .filter(|c| s.fail_names.iter().any(|f| c.rrset.name == *f || c.rrset.name.ends_with(&format!(".{f}"))))
            .map(|c| {
                format!("Injected failure for resource record set [name='{}.', type='{}']", c.rrset.name, c.rrset.rtype)
            })
            .collect()
    };
    if !injected.is_empty() {
        return Ok(refuse(injected));
    }
    let mut names: Vec<&str> = changes.iter().map(|c| c.rrset.name.as_str()).collect();
    names.sort();
    names.dedup();
    let current = records_named(upstream, req, zone, &names).await?;
    let net = match rules::check(&current, &changes, zone) {
        Ok(net) => net,
        Err(messages) => return Ok(refuse(messages)),
    };
    let mut to_moto = req.clone();
    to_moto.body = xml::change_request(&net, "via the Route53 proxy").into_bytes();
    let mut resp = http::forward(upstream, &to_moto).await?;
    if resp.status() == 200 {
        let text = resp.text();
        let id = xml::between(&text, "<Id>", "</Id>").first().map(|i| i.rsplit('/').next().unwrap_or(i).to_string());
        let mut s = faults.state();
        s.stats.changes_accepted += 1;
        for c in &changes {
            let weight = if c.action == "UPSERT" { 2 } else { 1 };
            s.stats.accepted_records += c.rrset.values.len().max(1) * weight;
            s.stats.accepted_chars += c.rrset.values.iter().map(String::len).sum::<usize>() * weight;
        }
        if let Some(id) = id {
            s.submitted.insert(id, Instant::now());
        }
        if !s.insync_delay.is_zero() {
            resp.body = text.replace("<Status>INSYNC</Status>", "<Status>PENDING</Status>").into_bytes();
        }
    }
    Ok(resp)
}
