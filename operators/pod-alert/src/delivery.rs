//! Sending notifications over HTTP: one worker per PodAlert and sink, with
//! its own queue, so a failing or slow sink never blocks another sink or the
//! controller. Failures are retried with exponential backoff (1 s doubling
//! to 5 min, at most 8 attempts, never for a notification older than 30 min)
//! and honour `Retry-After`; redirects are not followed; a sink's state
//! (last success, last error) is kept for the PodAlert's status.
//!
//! Where a sink may send is the admin's decision ([`SinkRules`]): the
//! address policy of [`crate::address`] (also after DNS, at connect time),
//! for a Slack webhook only the `--slack-hosts`, and a Slack bot token only
//! to the `--slack-api-url` (`delivery/slack_api.rs`: one thread per
//! incident). What a failure says in status is its class only ([`class`]):
//! `refused by policy`, `unreachable`, `timeout`, `HTTP 4xx`, `HTTP 5xx`
//! (or, for a bot token's call Slack refused, Slack's error code) — never
//! an address, the URL or the OS's error text, which would make the
//! operator a port scanner for the PodAlert's author.
//!
//! A queued notification is rendered when it is sent ([`Payload`]), so what
//! waits holds the shared log tail, not a copy. Alertmanager's sink keeps
//! only the newest document (its full list of alerts): it never queues.
//!
//! No attempt starts while this replica does not lead (its term suspended):
//! a successor may already be sending the same incidents, and a sink has no
//! way to tell the two apart. The notifications wait, and go out when the
//! term resumes (the 30 min age limit still applies); an attempt already in
//! flight finishes, since cutting it could not take back what was sent and
//! would only lose its answer.

use std::sync::{Arc, Mutex, PoisonError};

use k8s_openapi::jiff::Timestamp;
use serde_json::Value;
use tokio::sync::{Notify, mpsc};

use flotilla_shared::Leadership;

use crate::address::REFUSED;
use crate::crd::{SecretKeyRef, SinkStatus};
use crate::metrics::AlertMetrics;

mod destination;
mod failure;
mod retry;
mod slack_api;

pub use destination::{
    DEFAULT_PAGERDUTY_URL, DEFAULT_SLACK_API_URL, DEFAULT_SLACK_HOST, DEFAULT_TEAMS_HOSTS, SinkRules, check_url,
    http_client,
};
use failure::request_failure;
pub use failure::{Failure, class, read_secret};
pub use retry::{Retry, delay, parse_retry_after};
pub use slack_api::{
    Bot, Calls, Learned, Threading, Threads, answer, check_bot_token, choose, post_body, thread_gone, update_body,
};

/// The failure classes `status.sinks[].lastError` may hold for a request
/// that was attempted (besides configuration problems: a missing Secret).
pub const UNREACHABLE: &str = "unreachable";
pub const TIMEOUT: &str = "timeout";
pub const HTTP_4XX: &str = "HTTP 4xx";
pub const HTTP_5XX: &str = "HTTP 5xx";
pub const CLASSES: [&str; 5] = [REFUSED, UNREACHABLE, TIMEOUT, HTTP_4XX, HTTP_5XX];

/// Where a sink's URL comes from.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Target {
    /// Fixed (Alertmanager's, from the spec), with the path to POST to.
    Url(String),
    /// A Secret key in the PodAlert's namespace.
    Secret { namespace: String, secret: SecretKeyRef },
    /// The operator's `--pagerduty-url`, with a routing key read from a
    /// Secret key in the PodAlert's namespace into each document's
    /// `routing_key` when it is sent (it never sits in a queue or a log).
    RoutingKey { namespace: String, secret: SecretKeyRef },
    /// The operator's `--slack-api-url` (Slack's Web API), with a bot token
    /// read from a Secret key in the PodAlert's namespace into each
    /// request's Authorization header when it is sent, posting to `channel`
    /// one thread per incident (`delivery/slack_api.rs`).
    SlackBot { namespace: String, token: SecretKeyRef, channel: String },
}

/// Whether `key` looks like a PagerDuty integration key (32 letters and
/// digits): anything else would be sent to PagerDuty for nothing.
pub fn check_routing_key(key: &str) -> Result<(), String> {
    let key = key.trim();
    if key.len() == 32 && key.bytes().all(|b| b.is_ascii_alphanumeric()) {
        Ok(())
    } else {
        Err("not a PagerDuty integration key (32 letters and digits)".to_string())
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

/// What a sink sends, rendered when it is sent: a queued notification holds
/// the shared log tail, not a rendered copy of it. A Slack notification of
/// an incident also says which thread it belongs to (used with a bot token).
#[derive(Clone)]
pub struct Payload {
    render: Arc<dyn Fn() -> Value + Send + Sync>,
    pub thread: Option<Threading>,
}

impl Payload {
    pub fn new(render: impl Fn() -> Value + Send + Sync + 'static) -> Self {
        Self { render: Arc::new(render), thread: None }
    }

    /// With the incident's thread, for a Slack sink with a bot token.
    #[must_use]
    pub fn in_thread(mut self, thread: Threading) -> Self {
        self.thread = Some(thread);
        self
    }

    pub fn render(&self) -> Value {
        (self.render)()
    }
}

impl From<Value> for Payload {
    fn from(v: Value) -> Self {
        Self::new(move || v.clone())
    }
}

impl std::fmt::Debug for Payload {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Payload")
    }
}

type Job = (Payload, Timestamp);

/// The newest document of a coalescing sink, and its worker's wake-up.
#[derive(Default)]
struct Latest {
    slot: Mutex<Option<Job>>,
    notify: Notify,
    closed: std::sync::atomic::AtomicBool,
}

impl Latest {
    fn put(&self, job: Job) {
        *self.slot.lock().unwrap_or_else(PoisonError::into_inner) = Some(job);
        self.notify.notify_one();
    }

    fn take(&self) -> Option<Job> {
        self.slot.lock().unwrap_or_else(PoisonError::into_inner).take()
    }

    /// The next document; None once the sink is dropped and nothing waits.
    async fn next(&self) -> Option<Job> {
        loop {
            if let Some(job) = self.take() {
                return Some(job);
            }
            if self.closed.load(std::sync::atomic::Ordering::Acquire) {
                return None;
            }
            self.notify.notified().await;
        }
    }
}

enum Inbox {
    Queue(mpsc::Sender<Job>),
    Latest(Arc<Latest>),
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
    pub rules: SinkRules,
}

/// A running sink worker; dropping it ends the worker once its queue is
/// drained (the current attempt finishes).
pub struct Sink {
    inbox: Inbox,
    pub state: Arc<Mutex<SinkState>>,
    pub target: Target,
    /// The Slack threads its worker posted (a bot token's sink).
    pub threads: Threads,
}

impl Drop for Sink {
    fn drop(&mut self) {
        if let Inbox::Latest(l) = &self.inbox {
            l.closed.store(true, std::sync::atomic::Ordering::Release);
            l.notify.notify_one();
        }
    }
}

/// Notifications waiting per sink, at most; beyond, new ones are dropped
/// (counted) rather than held without bound while a sink is down.
const QUEUE: usize = 256;

impl Sink {
    /// Queues a document; false (and counted) when the queue is full. A
    /// coalescing sink replaces what waited.
    pub fn send(&self, body: impl Into<Payload>, metrics: &AlertMetrics, name: &str) -> bool {
        let job = (body.into(), Timestamp::now());
        match &self.inbox {
            Inbox::Latest(l) => {
                l.put(job);
                true
            }
            Inbox::Queue(tx) => match tx.try_send(job) {
                Ok(()) => true,
                Err(_) => {
                    metrics.notified(name, "dropped");
                    let mut s = self.state.lock().unwrap_or_else(PoisonError::into_inner);
                    s.failed += 1;
                    false
                }
            },
        }
    }

    pub fn state(&self) -> SinkState {
        self.state.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }
}

impl Delivery {
    /// Starts a worker for sink `name` posting to `target` (+ `path`).
    /// `coalesce`: only the newest document matters (Alertmanager's full
    /// alert list): it replaces what waited. `changed` is called after each
    /// outcome.
    pub fn start(
        &self,
        name: &'static str,
        target: Target,
        path: &'static str,
        coalesce: bool,
        changed: impl Fn() + Send + Sync + 'static,
    ) -> Sink {
        let state = Arc::new(Mutex::new(SinkState { healthy: true, ..Default::default() }));
        let (inbox, mut rx, latest) = if coalesce {
            let l = Arc::new(Latest::default());
            (Inbox::Latest(Arc::clone(&l)), None, Some(l))
        } else {
            let (tx, rx) = mpsc::channel::<Job>(QUEUE);
            (Inbox::Queue(tx), Some(rx), None)
        };
        let this = self.clone();
        let st = state.clone();
        let tgt = target.clone();
        let threads = Threads::default();
        let learned = threads.clone();
        tokio::spawn(async move {
            loop {
                let next = match (&mut rx, &latest) {
                    (Some(rx), _) => rx.recv().await,
                    (None, Some(l)) => l.next().await,
                    (None, None) => None,
                };
                let Some(mut job) = next else { break };
                // While the term is suspended, wait before coalescing, so that
                // what goes out when it resumes is the newest (Alertmanager's
                // full list), not the one that waited.
                if !this.leadership.is_leading() {
                    this.leadership.leading().await;
                }
                if let Some(newer) = latest.as_ref().and_then(|l| l.take()) {
                    job = newer;
                }
                let result = this.deliver(name, &tgt, path, &job.0, job.1, &learned).await;
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
        Sink { inbox, state, target, threads }
    }

    /// Delivers one document, retrying as the policy says.
    async fn deliver(
        &self,
        name: &str,
        target: &Target,
        path: &str,
        body: &Payload,
        queued: Timestamp,
        threads: &Threads,
    ) -> Result<(), Failure> {
        let mut attempt = 0;
        // A Slack notification's calls are chosen once: a retry neither
        // replies in a thread found gone nor chooses again.
        let mut progress = slack_api::Progress::default();
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
            let outcome = match target {
                Target::SlackBot { namespace, token, channel } => {
                    let bot = slack_api::Bot { namespace, token, channel };
                    self.slack_bot(bot, body, threads, &mut progress).await
                }
                _ => self.attempt(name, target, path, body).await,
            };
            let failure = match outcome {
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

    async fn url(&self, name: &str, target: &Target) -> Result<reqwest::Url, Failure> {
        let raw = match target {
            Target::Url(u) => u.clone(),
            Target::Secret { namespace, secret } => read_secret(&self.kube, namespace, secret).await?,
            Target::RoutingKey { .. } => self.rules.pagerduty_url.to_string(),
            // Posted by `slack_bot`, never here.
            Target::SlackBot { .. } => return Err(Failure::refused()),
        };
        check_url(&raw, name, &self.rules).map_err(|message| {
            // The condition (SinkMisconfigured) says why; the sink's own
            // last error is the class.
            if message.starts_with(REFUSED) {
                Failure::refused()
            } else {
                Failure { message, retryable: false, retry_after: None }
            }
        })
    }

    async fn attempt(&self, name: &str, target: &Target, path: &str, body: &Payload) -> Result<(), Failure> {
        let mut url = self.url(name, target).await?;
        if !path.is_empty() {
            let joined = format!("{}{path}", url.path().trim_end_matches('/'));
            url.set_path(&joined);
        }
        let mut document = body.render();
        if let Target::RoutingKey { namespace, secret } = target {
            let key = read_secret(&self.kube, namespace, secret).await?;
            check_routing_key(&key).map_err(|message| Failure { message, retryable: false, retry_after: None })?;
            document["routing_key"] = Value::String(key.trim().to_string());
        }
        let response = self.http.post(url).json(&document).send().await.map_err(|e| request_failure(name, e))?;
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
        let message = if status.is_server_error() {
            HTTP_5XX
        } else if status.is_client_error() {
            HTTP_4XX
        } else {
            // A redirect (never followed: it could lead anywhere) or an
            // answer that is no answer.
            REFUSED
        };
        // The status and body (Slack's `invalid_payload`, say) are for the
        // operator's log only; see `Failure::message`.
        let text: String = response.text().await.unwrap_or_default().chars().take(200).collect();
        tracing::info!(sink = name, status = status.as_u16(), body = %text.trim(), "a sink refused a notification");
        Err(Failure { message: message.to_string(), retryable, retry_after })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use crate::address::Policy;
    use std::time::Duration;

    #[test]
    fn urls() {
        let rules = SinkRules::default();
        assert!(check_url("https://hooks.slack.example/services/T/B/x", "webhook", &rules).is_ok());
        assert!(check_url("http://alertmanager.monitoring:9093", "webhook", &rules).is_ok());
        assert!(check_url("ftp://x", "webhook", &rules).unwrap_err().contains("scheme"));
        for refused in [
            "http://169.254.169.254/latest/meta-data",
            "http://[fe80::1]/",
            "http://[fd00:ec2::254]/latest/meta-data",
            "http://[::ffff:169.254.169.254]/",
            "http://127.0.0.1:15000/quitquitquit",
            "http://[::1]:4191/shutdown",
            "http://0.0.0.0:15000/",
            "http://[::]/",
            "http://10.96.0.1/",
            "http://100.64.0.1/",
            "http://[::ffff:7f00:1]/",
            // url normalises these spellings to 127.0.0.1 and 10.0.0.1.
            "http://2130706433/",
            "http://0x7f.1/",
            "http://012.0.0.1/",
        ] {
            let err = check_url(refused, "webhook", &rules).unwrap_err();
            assert!(err.starts_with(REFUSED), "{refused}: {err}");
            assert!(!err.contains("169.254") && !err.contains("127.") && !err.contains("fe80"), "{err}");
        }
        assert!(check_url("not a url", "webhook", &rules).is_err());
        let admitted = SinkRules { addresses: Arc::new(Policy::parse(&["127.0.0.1/32".into()]).unwrap()), ..rules };
        assert!(check_url("http://127.0.0.1:9093", "webhook", &admitted).is_ok());
        assert!(check_url("http://127.0.0.2:9093", "webhook", &admitted).is_err());
    }

    #[test]
    fn slack_posts_only_to_the_slack_hosts() {
        let rules = SinkRules::default();
        assert!(check_url("https://hooks.slack.com/services/T/B/x", "slack", &rules).is_ok());
        assert!(check_url("https://HOOKS.slack.com./services/T/B/x", "slack", &rules).is_ok());
        for other in [
            "https://hooks.slack.com.evil.example/services/T/B/x",
            "https://evil.example/hooks.slack.com",
            "https://hooks.slack.com@evil.example/",
            "https://user:hooks.slack.com@evil.example/",
        ] {
            let err = check_url(other, "slack", &rules).unwrap_err();
            assert!(err.starts_with(REFUSED) && !err.contains("evil"), "{other}: {err}");
        }
        // The same URL is fine for a webhook.
        assert!(check_url("https://evil.example/hooks.slack.com", "webhook", &rules).is_ok());
    }

    #[test]
    fn teams_posts_only_to_the_teams_hosts() {
        let rules = SinkRules::default();
        for ok in [
            "https://prod-27.westeurope.logic.azure.com:443/workflows/abc/triggers/manual/paths/invoke?sig=x",
            "https://default0a1b.c2.environment.api.powerplatform.com/powerautomate/automations/direct/workflows/x",
            "https://PROD-1.WESTUS.LOGIC.AZURE.COM./workflows/x",
        ] {
            assert!(check_url(ok, "teams", &rules).is_ok(), "{ok}");
        }
        for other in [
            "https://logic.azure.com/workflows/x",
            "https://evil-logic.azure.com.evil.example/",
            "https://evillogic.azure.com/",
            "https://hooks.slack.com/services/T/B/x",
            "https://x.logic.azure.com@evil.example/",
        ] {
            let err = check_url(other, "teams", &rules).unwrap_err();
            assert!(err.starts_with(REFUSED) && err.contains("--teams-hosts"), "{other}: {err}");
        }
        // An exact name admits that host only.
        let exact = SinkRules { teams_hosts: Arc::new(vec!["teams.example".into()]), ..SinkRules::default() };
        assert!(check_url("https://teams.example/x", "teams", &exact).is_ok());
        assert!(check_url("https://a.teams.example/x", "teams", &exact).is_err());
    }

    #[test]
    fn routing_keys_are_checked_before_anything_is_sent() {
        assert!(check_routing_key("R0123456789abcdefABCDEF012345678").is_ok());
        assert!(check_routing_key(" R0123456789abcdefABCDEF012345678\n").is_ok());
        for bad in ["", "short", "R0123456789abcdefABCDEF01234567/", "R0123456789abcdefABCDEF0123456789"] {
            assert!(check_routing_key(bad).is_err(), "{bad:?}");
        }
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
            http: http_client(Duration::from_secs(10), loopback().addresses).unwrap(),
            kube,
            metrics: AlertMetrics::new().unwrap(),
            retry: Retry { first: Duration::from_millis(10), ..Retry::default() },
            leadership: Leadership::new(lead_rx, tokio_util::sync::CancellationToken::new()),
            rules: loopback(),
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
            rules: loopback(),
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

    /// Rules admitting loopback, as the tests' receivers need.
    fn loopback() -> SinkRules {
        SinkRules {
            addresses: Arc::new(Policy::parse(&["127.0.0.0/8".into()]).unwrap()),
            slack_hosts: Arc::new(vec!["127.0.0.1".into(), "localhost".into()]),
            teams_hosts: Arc::new(vec!["127.0.0.1".into()]),
            pagerduty_url: "http://127.0.0.1:1/v2/enqueue".into(),
            slack_api_url: "http://127.0.0.1:1/api".into(),
        }
    }

    fn delivery_with(rules: SinkRules, timeout: Duration) -> Delivery {
        let kube = kube::Client::try_from(kube::Config::new("http://127.0.0.1:1".parse().unwrap())).unwrap();
        let (lead, leading) = tokio::sync::watch::channel(true);
        std::mem::forget(lead);
        Delivery {
            http: http_client(timeout, rules.addresses.clone()).unwrap(),
            kube,
            metrics: AlertMetrics::new().unwrap(),
            retry: Retry { attempts: 1, ..Retry::default() },
            leadership: Leadership::new(leading, tokio_util::sync::CancellationToken::new()),
            rules,
        }
    }

    /// A local server: `/403` answers 403 with a secret in its body, `/500`
    /// 500, `/slow` after 3 s, `/redirect` 302 to `/target`; every path it
    /// was asked for is counted.
    async fn server() -> (std::net::SocketAddr, Arc<Mutex<Vec<String>>>) {
        let asked: Arc<Mutex<Vec<String>>> = Arc::default();
        let a = asked.clone();
        let app = axum::Router::new().fallback(move |uri: http::Uri| {
            let a = a.clone();
            async move {
                a.lock().unwrap().push(uri.path().to_string());
                match uri.path() {
                    "/403" => (
                        http::StatusCode::FORBIDDEN,
                        [(http::header::LOCATION, "")],
                        "internal: db password is hunter2",
                    ),
                    "/500" => (http::StatusCode::INTERNAL_SERVER_ERROR, [(http::header::LOCATION, "")], "stack trace"),
                    "/slow" => {
                        tokio::time::sleep(Duration::from_secs(3)).await;
                        (http::StatusCode::OK, [(http::header::LOCATION, "")], "")
                    }
                    "/redirect" => (http::StatusCode::FOUND, [(http::header::LOCATION, "/target")], ""),
                    _ => (http::StatusCode::OK, [(http::header::LOCATION, "")], "ok"),
                }
            }
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        (addr, asked)
    }

    async fn last_error(delivery: &Delivery, name: &'static str, url: String) -> String {
        let sink = delivery.start(name, Target::Url(url), "", false, || {});
        assert!(sink.send(serde_json::json!({}), &delivery.metrics, name));
        eventually("the failure", || sink.state().failed == 1).await;
        sink.state().last_error
    }

    /// What a failure says in status is its class: never the URL (a Slack
    /// webhook URL is the credential), an address, the OS's error text, nor
    /// what the sink answered.
    #[tokio::test]
    async fn failures_say_their_class_only() {
        let (addr, asked) = server().await;
        let port = addr.port();
        let d = delivery_with(loopback(), Duration::from_secs(1));
        // Nothing listens on port 1: connection refused, reported as unreachable.
        let closed = "http://localhost:1/services/T0/B0/s3cr3t-token".to_string();
        assert_eq!(last_error(&d, "slack", closed).await, UNREACHABLE);
        assert_eq!(last_error(&d, "webhook", format!("http://{addr}/403")).await, HTTP_4XX);
        assert_eq!(last_error(&d, "webhook", format!("http://{addr}/500")).await, HTTP_5XX);
        assert_eq!(last_error(&d, "webhook", format!("http://{addr}/slow")).await, TIMEOUT);
        // A redirect is not followed.
        assert_eq!(last_error(&d, "webhook", format!("http://127.0.0.1:{port}/redirect")).await, REFUSED);
        assert!(!asked.lock().unwrap().iter().any(|p| p == "/target"), "the redirect was followed");
        // A Slack sink elsewhere than its hosts.
        assert_eq!(last_error(&d, "slack", format!("http://127.0.0.2:{port}/hook")).await, REFUSED);
        for e in [UNREACHABLE, TIMEOUT, HTTP_4XX, HTTP_5XX, REFUSED] {
            assert!(CLASSES.contains(&e));
        }
    }

    /// With the default policy, loopback is refused however it is written,
    /// and the server is never asked.
    #[tokio::test]
    async fn the_default_policy_sends_nothing_to_loopback() {
        let (addr, asked) = server().await;
        let port = addr.port();
        let d = delivery_with(SinkRules::default(), Duration::from_secs(1));
        for url in [
            format!("http://127.0.0.1:{port}/quitquitquit"),
            format!("http://localhost:{port}/shutdown"),
            format!("http://[::ffff:127.0.0.1]:{port}/"),
            format!("http://2130706433:{port}/"),
            format!("http://0.0.0.0:{port}/"),
            format!("http://127.0.0.1.nip.io:{port}/"),
        ] {
            let e = last_error(&d, "webhook", url.clone()).await;
            // A name that does not resolve offline is unreachable: still not sent.
            assert!(e == REFUSED || (url.contains("nip.io") && e == UNREACHABLE), "{url}: {e}");
        }
        assert!(asked.lock().unwrap().is_empty(), "the server was asked: {:?}", asked.lock().unwrap());
    }
}
