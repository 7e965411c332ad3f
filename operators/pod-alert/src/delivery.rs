//! Sending notifications over HTTP: one worker per PodAlert and sink, with
//! its own queue, so a failing or slow sink never blocks another sink or the
//! controller. Failures are retried with exponential backoff (1 s doubling
//! to 5 min, at most 8 attempts, never for a notification older than 30 min)
//! and honour `Retry-After`; redirects are not followed; a sink's state
//! (last success, last error) is kept for the PodAlert's status.
//!
//! No attempt starts while this replica does not lead (its term suspended):
//! a successor may already be sending the same incidents, and a sink has no
//! way to tell the two apart. The notifications wait, and go out when the
//! term resumes (the 30 min age limit still applies); an attempt already in
//! flight finishes, since cutting it could not take back what was sent and
//! would only lose its answer.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use serde_json::Value;
use tokio::sync::mpsc;

use flotilla_shared::Leadership;

use crate::crd::{SecretKeyRef, SinkStatus};
use crate::metrics::AlertMetrics;

/// Where a sink's URL comes from.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Target {
    /// Fixed (Alertmanager's, from the spec), with the path to POST to.
    Url(String),
    /// A Secret key in the PodAlert's namespace.
    Secret { namespace: String, secret: SecretKeyRef },
}

/// Retry policy of a worker.
#[derive(Debug, Clone, Copy)]
pub struct Retry {
    pub first: Duration,
    pub max_delay: Duration,
    pub attempts: u32,
    pub max_age: Duration,
    /// Retry-After values above this are cut to it.
    pub max_retry_after: Duration,
}

impl Default for Retry {
    fn default() -> Self {
        Self {
            first: Duration::from_secs(1),
            max_delay: Duration::from_secs(300),
            attempts: 8,
            max_age: Duration::from_secs(1800),
            max_retry_after: Duration::from_secs(600),
        }
    }
}

/// A sink's delivery state, shared with the reconciler.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SinkState {
    pub healthy: bool,
    pub last_success: Option<Timestamp>,
    pub last_error: String,
    pub last_error_time: Option<Timestamp>,
    pub delivered: i64,
    pub failed: i64,
    /// Whether anything was attempted yet.
    pub used: bool,
}

impl SinkState {
    pub fn to_status(&self, name: &str) -> SinkStatus {
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
        SinkStatus {
            name: name.to_string(),
            healthy: self.healthy || !self.used,
            last_success: self.last_success.map(Time),
            last_error: self.last_error.clone(),
            last_error_time: self.last_error_time.map(Time),
            delivered: self.delivered,
            failed: self.failed,
        }
    }
}

/// Why one attempt failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// For the PodAlert's status and Events: never the URL (a Slack webhook
    /// URL is itself the credential, and may come from a Secret the author
    /// cannot read) nor the response's body (the sink may be a service the
    /// author cannot reach: its answers are not theirs to read).
    pub message: String,
    pub retryable: bool,
    pub retry_after: Option<Duration>,
}

/// Shared by every worker.
#[derive(Clone)]
pub struct Delivery {
    pub http: reqwest::Client,
    pub kube: kube::Client,
    pub metrics: AlertMetrics,
    pub retry: Retry,
    /// Attempts start only while this replica leads.
    pub leadership: Leadership,
}

/// A running sink worker; dropping it ends the worker once its queue is
/// drained (the current attempt finishes).
pub struct Sink {
    tx: mpsc::Sender<(Value, Timestamp)>,
    pub state: Arc<Mutex<SinkState>>,
    pub target: Target,
}

/// Notifications waiting per sink, at most; beyond, new ones are dropped
/// (counted) rather than held without bound while a sink is down.
const QUEUE: usize = 256;

impl Sink {
    /// Queues a document; false (and counted) when the queue is full.
    pub fn send(&self, body: Value, metrics: &AlertMetrics, name: &str) -> bool {
        match self.tx.try_send((body, Timestamp::now())) {
            Ok(()) => true,
            Err(_) => {
                metrics.notified(name, "dropped");
                let mut s = self.state.lock().unwrap_or_else(PoisonError::into_inner);
                s.failed += 1;
                false
            }
        }
    }

    pub fn state(&self) -> SinkState {
        self.state.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }
}

/// The sinks' HTTP client: `timeout` per attempt, no redirects (a sink
/// cannot send us elsewhere), and host names resolved without the refused
/// addresses.
pub fn http_client(timeout: Duration) -> reqwest::Result<reqwest::Client> {
    reqwest::Client::builder()
        .timeout(timeout)
        .connect_timeout(Duration::from_secs(5))
        .redirect(reqwest::redirect::Policy::none())
        .dns_resolver(Arc::new(crate::address::SafeResolver))
        .user_agent(concat!("flotilla-pod-alert/", env!("CARGO_PKG_VERSION")))
        .build()
}

/// Checks a sink URL: http or https with a host, and not a link-local
/// address (cloud metadata endpoints live there; a host name that resolves
/// there is refused at connect time, `address::SafeResolver`). The messages
/// do not repeat the URL: it may come from a Secret.
pub fn check_url(raw: &str) -> Result<reqwest::Url, String> {
    let url = reqwest::Url::parse(raw.trim()).map_err(|e| format!("not a URL: {e}"))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err("the scheme is not http or https".into());
    }
    let literal = match url.host() {
        None => return Err("the URL has no host".into()),
        Some(url::Host::Ipv4(ip)) => Some(std::net::IpAddr::V4(ip)),
        Some(url::Host::Ipv6(ip)) => Some(std::net::IpAddr::V6(ip)),
        Some(url::Host::Domain(_)) => None,
    };
    if literal.is_some_and(crate::address::refused) {
        return Err("the address is link-local (cloud metadata); never sent to".into());
    }
    Ok(url)
}

/// Parses `Retry-After`: seconds, or an HTTP date.
pub fn parse_retry_after(value: &str, now: Timestamp) -> Option<Duration> {
    let v = value.trim();
    if let Ok(secs) = v.parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    let at = k8s_openapi::jiff::fmt::rfc2822::parse(v).ok()?.timestamp();
    Some(crate::pod::elapsed(now, at))
}

/// The wait before attempt `n` (1-based retry number) after `failure`.
pub fn delay(retry: &Retry, n: u32, failure: &Failure) -> Duration {
    if let Some(ra) = failure.retry_after {
        return ra.min(retry.max_retry_after);
    }
    let exp = retry.first.saturating_mul(2u32.saturating_pow(n.saturating_sub(1)));
    exp.min(retry.max_delay)
}

impl Delivery {
    /// Starts a worker for sink `name` posting to `target` (+ `path`).
    /// `coalesce`: only the newest queued document matters (Alertmanager's
    /// full alert list). `changed` is called after each outcome.
    pub fn start(
        &self,
        name: &'static str,
        target: Target,
        path: &'static str,
        coalesce: bool,
        changed: impl Fn() + Send + Sync + 'static,
    ) -> Sink {
        let (tx, mut rx) = mpsc::channel::<(Value, Timestamp)>(QUEUE);
        let state = Arc::new(Mutex::new(SinkState { healthy: true, ..Default::default() }));
        let this = self.clone();
        let st = state.clone();
        let tgt = target.clone();
        tokio::spawn(async move {
            while let Some(mut job) = rx.recv().await {
                // While the term is suspended, wait before coalescing, so that
                // what goes out when it resumes is the newest (Alertmanager's
                // full list), not the one that waited.
                if !this.leadership.is_leading() {
                    this.leadership.leading().await;
                }
                if coalesce {
                    while let Ok(newer) = rx.try_recv() {
                        job = newer;
                    }
                }
                let result = this.deliver(&tgt, path, &job.0, job.1).await;
                {
                    let mut s = st.lock().unwrap_or_else(PoisonError::into_inner);
                    s.used = true;
                    match &result {
                        Ok(()) => {
                            s.healthy = true;
                            s.last_success = Some(Timestamp::now());
                            s.delivered += 1;
                        }
                        Err(e) => {
                            s.healthy = false;
                            s.last_error = e.message.clone();
                            s.last_error_time = Some(Timestamp::now());
                            s.failed += 1;
                        }
                    }
                }
                this.metrics.notified(name, if result.is_ok() { "success" } else { "error" });
                if let Err(e) = &result {
                    tracing::warn!(sink = name, error = %e.message, "notification given up");
                }
                changed();
            }
        });
        Sink { tx, state, target }
    }

    /// Delivers one document, retrying as the policy says.
    async fn deliver(&self, target: &Target, path: &str, body: &Value, queued: Timestamp) -> Result<(), Failure> {
        let mut attempt = 0;
        loop {
            if !self.leadership.is_leading() {
                tracing::info!("notification held: leadership suspended; it goes out when the term resumes");
                if !self.leadership.leading().await {
                    return Err(Failure {
                        message: "not sent: the operator stopped while its leadership was suspended".into(),
                        retryable: false,
                        retry_after: None,
                    });
                }
                let age = crate::pod::elapsed(queued, Timestamp::now());
                if age >= self.retry.max_age {
                    return Err(Failure {
                        message: format!(
                            "not sent: held {}s while leadership was suspended, past the age limit",
                            age.as_secs()
                        ),
                        retryable: false,
                        retry_after: None,
                    });
                }
            }
            attempt += 1;
            let failure = match self.attempt(target, path, body).await {
                Ok(()) => return Ok(()),
                Err(f) => f,
            };
            let age = crate::pod::elapsed(queued, Timestamp::now());
            if !failure.retryable || attempt >= self.retry.attempts || age >= self.retry.max_age {
                return Err(failure);
            }
            let wait = delay(&self.retry, attempt, &failure);
            tracing::debug!(error = %failure.message, ?wait, attempt, "sink failed; retrying");
            tokio::time::sleep(wait).await;
        }
    }

    async fn url(&self, target: &Target) -> Result<reqwest::Url, Failure> {
        let raw = match target {
            Target::Url(u) => u.clone(),
            Target::Secret { namespace, secret } => read_secret(&self.kube, namespace, secret).await?,
        };
        check_url(&raw).map_err(|message| Failure { message, retryable: false, retry_after: None })
    }

    async fn attempt(&self, target: &Target, path: &str, body: &Value) -> Result<(), Failure> {
        let mut url = self.url(target).await?;
        if !path.is_empty() {
            let joined = format!("{}{path}", url.path().trim_end_matches('/'));
            url.set_path(&joined);
        }
        let response = self.http.post(url).json(body).send().await.map_err(|e| Failure {
            message: format!("sending: {}", flotilla_shared::controller::DisplayChain(&e.without_url())),
            retryable: true,
            retry_after: None,
        })?;
        let status = response.status();
        if status.is_success() {
            return Ok(());
        }
        let retry_after = response
            .headers()
            .get(http::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| parse_retry_after(v, Timestamp::now()));
        let retryable = status.is_server_error() || status.as_u16() == 429 || status.as_u16() == 408;
        let mut message = format!("HTTP {}", status.as_u16());
        if let Some(ra) = retry_after {
            message.push_str(&format!(" (retry after {}s)", ra.as_secs()));
        }
        // The body (Slack's `invalid_payload`, say) is for the operator's
        // log only; see `Failure::message`.
        let text: String = response.text().await.unwrap_or_default().chars().take(200).collect();
        if !text.trim().is_empty() {
            tracing::info!(status = status.as_u16(), body = %text.trim(), "a sink refused a notification");
        }
        Err(Failure { message, retryable, retry_after })
    }
}

/// Reads a sink URL from a Secret key (get only: the operator never lists
/// or watches Secrets).
pub async fn read_secret(client: &kube::Client, namespace: &str, r: &SecretKeyRef) -> Result<String, Failure> {
    let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let secret = match api.get_opt(&r.name).await {
        Ok(Some(s)) => s,
        Ok(None) => {
            return Err(Failure {
                message: format!("Secret {namespace}/{} not found", r.name),
                retryable: true,
                retry_after: None,
            });
        }
        Err(e) => {
            return Err(Failure {
                message: format!("reading Secret {}: {e}", r.name),
                retryable: true,
                retry_after: None,
            });
        }
    };
    let value =
        secret.data.as_ref().and_then(|d| d.get(&r.key)).map(|b| String::from_utf8_lossy(&b.0).trim().to_string());
    match value {
        Some(v) if !v.is_empty() => Ok(v),
        _ => Err(Failure {
            message: format!("Secret {namespace}/{} has no key {:?}", r.name, r.key),
            retryable: false,
            retry_after: None,
        }),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn urls() {
        assert!(check_url("https://hooks.slack.example/services/T/B/x").is_ok());
        assert!(check_url("http://alertmanager.monitoring:9093").is_ok());
        assert!(check_url("ftp://x").unwrap_err().contains("scheme"));
        for metadata in [
            "http://169.254.169.254/latest/meta-data",
            "http://[fe80::1]/",
            "http://[fd00:ec2::254]/latest/meta-data",
            "http://[::ffff:169.254.169.254]/",
        ] {
            let err = check_url(metadata).unwrap_err();
            assert!(err.contains("link-local") && !err.contains("169.254") && !err.contains("fe80"), "{err}");
        }
        assert!(check_url("not a url").is_err());
    }

    #[test]
    fn retry_after_seconds_and_dates() {
        let now = Timestamp::from_second(1_800_000_000).unwrap();
        assert_eq!(parse_retry_after("30", now), Some(Duration::from_secs(30)));
        let date = "Fri, 15 Jan 2027 08:00:30 GMT";
        let at = k8s_openapi::jiff::fmt::rfc2822::parse(date).unwrap().timestamp();
        let base = Timestamp::from_second(at.as_second() - 30).unwrap();
        assert_eq!(parse_retry_after(date, base), Some(Duration::from_secs(30)));
        assert_eq!(parse_retry_after("soon", now), None);
    }

    #[test]
    fn backoff_doubles_to_the_cap_and_retry_after_wins() {
        let r = Retry::default();
        let f = Failure { message: String::new(), retryable: true, retry_after: None };
        assert_eq!(delay(&r, 1, &f), Duration::from_secs(1));
        assert_eq!(delay(&r, 4, &f), Duration::from_secs(8));
        assert_eq!(delay(&r, 20, &f), Duration::from_secs(300));
        let f = Failure { retry_after: Some(Duration::from_secs(7)), ..f };
        assert_eq!(delay(&r, 1, &f), Duration::from_secs(7));
        let f = Failure { retry_after: Some(Duration::from_secs(86_400)), ..f };
        assert_eq!(delay(&r, 1, &f), Duration::from_secs(600));
    }

    /// Polls `done` every 20 ms for up to 10 s.
    async fn eventually(what: &str, done: impl Fn() -> bool) {
        for _ in 0..500 {
            if done() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!("timed out waiting for {what}");
    }

    /// The sink fails the first request, and the leader's term is suspended
    /// while it answers: the retry (due 10 ms later) must wait until the
    /// term resumes, and then go out.
    #[tokio::test]
    async fn a_suspended_leader_sends_no_retry_until_its_term_resumes() {
        use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
        let (lead_tx, lead_rx) = tokio::sync::watch::channel(true);
        let lead_tx = Arc::new(lead_tx);
        let requests = Arc::new(AtomicUsize::new(0));
        let app = axum::Router::new().route(
            "/hook",
            axum::routing::post({
                let (requests, lead_tx) = (requests.clone(), lead_tx.clone());
                move || {
                    let (requests, lead_tx) = (requests.clone(), lead_tx.clone());
                    async move {
                        if requests.fetch_add(1, SeqCst) == 0 {
                            lead_tx.send_replace(false);
                            http::StatusCode::SERVICE_UNAVAILABLE
                        } else {
                            http::StatusCode::OK
                        }
                    }
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });

        // Never called: the target is a fixed URL, not a Secret.
        let kube = kube::Client::try_from(kube::Config::new("http://127.0.0.1:1".parse().unwrap())).unwrap();
        let delivery = Delivery {
            http: http_client(Duration::from_secs(10)).unwrap(),
            kube,
            metrics: AlertMetrics::new().unwrap(),
            retry: Retry { first: Duration::from_millis(10), ..Retry::default() },
            leadership: Leadership::new(lead_rx, tokio_util::sync::CancellationToken::new()),
        };
        // By name: the sinks' own client resolves it (loopback is allowed).
        let url = format!("http://localhost:{}/hook", addr.port());
        let sink = delivery.start("webhook", Target::Url(url), "", false, || {});
        assert!(sink.send(serde_json::json!({"text": "pod crashed"}), &delivery.metrics, "webhook"));
        eventually("the first request", || requests.load(SeqCst) == 1).await;

        // Fifty retry delays later: still one request, nothing settled.
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_eq!(requests.load(SeqCst), 1, "a retry went out while leadership was suspended");
        assert_eq!(sink.state().delivered + sink.state().failed, 0, "{:?}", sink.state());

        lead_tx.send_replace(true);
        eventually("the retry once the term resumed", || sink.state().delivered == 1).await;
        assert_eq!(requests.load(SeqCst), 2);
        assert_eq!(sink.state().failed, 0);
    }

    /// A notification queued while the term is suspended waits for it too.
    #[tokio::test]
    async fn a_notification_queued_while_suspended_waits_for_the_term() {
        use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
        let (lead_tx, lead_rx) = tokio::sync::watch::channel(false);
        let requests = Arc::new(AtomicUsize::new(0));
        let app = axum::Router::new().route(
            "/hook",
            axum::routing::post({
                let requests = requests.clone();
                move || {
                    requests.fetch_add(1, SeqCst);
                    async { http::StatusCode::OK }
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        let kube = kube::Client::try_from(kube::Config::new("http://127.0.0.1:1".parse().unwrap())).unwrap();
        let shutdown = tokio_util::sync::CancellationToken::new();
        let delivery = Delivery {
            http: reqwest::Client::new(),
            kube,
            metrics: AlertMetrics::new().unwrap(),
            retry: Retry::default(),
            leadership: Leadership::new(lead_rx, shutdown.clone()),
        };
        let sink = delivery.start("webhook", Target::Url(format!("http://{addr}/hook")), "", false, || {});
        assert!(sink.send(serde_json::json!({"text": "one"}), &delivery.metrics, "webhook"));
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(requests.load(SeqCst), 0, "sent while leadership was suspended");
        lead_tx.send_replace(true);
        eventually("the held notification", || sink.state().delivered == 1).await;

        // Suspended again, then stopped: the held one is given up, not sent.
        lead_tx.send_replace(false);
        assert!(sink.send(serde_json::json!({"text": "two"}), &delivery.metrics, "webhook"));
        tokio::time::sleep(Duration::from_millis(100)).await;
        shutdown.cancel();
        eventually("the held notification given up", || sink.state().failed == 1).await;
        assert_eq!(requests.load(SeqCst), 1);
        assert!(sink.state().last_error.contains("stopped while its leadership was suspended"), "{:?}", sink.state());
    }

    /// What a failure says in status names neither the URL (a Slack webhook
    /// URL is the credential) nor what the sink answered.
    #[tokio::test]
    async fn failures_reveal_neither_the_url_nor_the_answer() {
        let app = axum::Router::new().route(
            "/hook",
            axum::routing::post(|| async { (http::StatusCode::FORBIDDEN, "internal: db password is hunter2") }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        let kube = kube::Client::try_from(kube::Config::new("http://127.0.0.1:1".parse().unwrap())).unwrap();
        let (_lead, leading) = tokio::sync::watch::channel(true);
        let delivery = Delivery {
            http: http_client(Duration::from_secs(10)).unwrap(),
            kube,
            metrics: AlertMetrics::new().unwrap(),
            retry: Retry { attempts: 1, ..Retry::default() },
            leadership: Leadership::new(leading, tokio_util::sync::CancellationToken::new()),
        };
        // Nothing listens on port 1: a connection error.
        let closed = "http://localhost:1/services/T0/B0/s3cr3t-token";
        let refused = delivery.start("slack", Target::Url(closed.into()), "", false, || {});
        assert!(refused.send(serde_json::json!({}), &delivery.metrics, "slack"));
        eventually("the connection error", || refused.state().failed == 1).await;
        let error = refused.state().last_error;
        assert!(error.starts_with("sending:") && !error.contains("s3cr3t") && !error.contains("services"), "{error}");

        let answered = delivery.start("webhook", Target::Url(format!("http://{addr}/hook")), "", false, || {});
        assert!(answered.send(serde_json::json!({}), &delivery.metrics, "webhook"));
        eventually("the refusal", || answered.state().failed == 1).await;
        assert_eq!(answered.state().last_error, "HTTP 403");
    }
}
