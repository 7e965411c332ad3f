//! The Slack sink with a bot token: Slack's Web API (`chat.postMessage`,
//! `chat.update`) at the operator's `--slack-api-url`, one thread per
//! incident. What to call (a new message, or a reply in the incident's
//! thread and an update of its first message), the documents, and Slack's
//! answers read are pure; the calls go through the sink worker's client,
//! retries and leader gating ([`super::Delivery`]).
//!
//! Slack answers HTTP 200 to a request it refused, with `"ok": false` and
//! an error code: such an answer is a failure with that code (retried only
//! for the codes that say "later"). The token goes in the Authorization
//! header only: never in a URL, a log line, a failure's message or status.
//!
//! A reply whose thread Slack says is gone ([`THREAD_GONE`]) forgets the
//! thread and posts the transition as a new message, which becomes the
//! thread: otherwise every later transition would fail on it, also after a
//! restart (status keeps it). The reply is what notifies; the update of
//! the first message is best effort.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use serde_json::{Value, json};

use super::{
    Delivery, Failure, HTTP_4XX, HTTP_5XX, Payload, check_url, parse_retry_after, read_secret, request_failure,
};
use crate::address::REFUSED;
use crate::crd::{SecretKeyRef, SlackThread};

/// What a Slack notification says of its incident's thread, decided when
/// it was queued.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Threading {
    /// The incident, as its key displays (`ns/Kind/name container c: Reason`).
    pub incident: String,
    /// When the incident's opening was notified: which incarnation of the
    /// incident (one key may resolve and open again) the notification is
    /// about. A thread learned for another opening is another incarnation's.
    pub opening: Option<Timestamp>,
    /// An opening: it starts a new thread.
    pub opens: bool,
    /// The thread the incident was known to have when the notification was
    /// queued (from status after a restart).
    pub known: Option<SlackThread>,
}

/// What a worker learned of an incident's thread: the thread it posted for
/// the incident's `opening`, or none (the thread was gone and no new one
/// could be posted: the next transition starts one).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Learned {
    pub opening: Option<Timestamp>,
    pub thread: Option<SlackThread>,
}

/// Threads one worker learned, by incident: shared with the reconcile,
/// which writes them into status and forgets those of incidents gone. A
/// thread learned here is newer than one a queued notification carries.
#[derive(Debug, Clone, Default)]
pub struct Threads(Arc<Mutex<HashMap<String, Learned>>>);

/// Threads held per worker, at most (the reconcile keeps only those of the
/// incidents it holds; this bounds a burst between two reconciles).
const MAX_THREADS: usize = 1024;

impl Threads {
    pub fn get(&self, incident: &str) -> Option<Learned> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).get(incident).cloned()
    }

    /// Records what `incident`'s thread is now. An older opening's news
    /// (a notification held while the incident opened again) never
    /// replaces a newer opening's thread.
    fn learn(&self, incident: &str, learned: Learned) {
        let mut map = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let room = map.len() < MAX_THREADS;
        match map.get_mut(incident) {
            Some(held) if held.opening <= learned.opening => *held = learned,
            Some(_) => {}
            None if room => {
                map.insert(incident.to_string(), learned);
            }
            None => {}
        }
    }

    /// Every thread held, by incident.
    pub fn snapshot(&self) -> Vec<(String, Learned)> {
        let map = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        map.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
    }

    /// Forgets the threads of the incidents `keep` does not name.
    pub fn retain(&self, keep: impl Fn(&str) -> bool) {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).retain(|k, _| keep(k));
    }
}

/// The calls one notification makes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Calls {
    /// A new message in the channel (an opening, a summary, or a transition
    /// whose thread is unknown or gone): it becomes the incident's thread.
    Post,
    /// A reply in the thread, then the thread's first message updated to
    /// the incident's current state.
    Reply(SlackThread),
}

/// An opening starts a thread; a later transition replies in the thread
/// the worker learned for the same opening (none: it was gone), else in
/// the one its notification knew, else (the opening was never posted)
/// starts one. A thread posted with another channel or token than `bot`'s
/// (the spec changed since) is not replied to.
pub fn choose(threading: Option<&Threading>, learned: Option<Learned>, bot: &Bot<'_>) -> Calls {
    let Some(t) = threading.filter(|t| !t.opens) else { return Calls::Post };
    let thread = match learned.filter(|l| l.opening == t.opening) {
        Some(l) => l.thread,
        None => t.known.clone(),
    };
    thread.filter(|th| th.posted_with(bot.channel, bot.token)).map_or(Calls::Post, Calls::Reply)
}

/// `chat.postMessage`'s document: `message` (`text` and `blocks`) in
/// `channel`, in the thread of `thread_ts` when given.
pub fn post_body(channel: &str, message: &Value, thread_ts: Option<&str>) -> Value {
    let mut doc = json!({"channel": channel, "text": message["text"], "blocks": message["blocks"]});
    if let Some(ts) = thread_ts {
        doc["thread_ts"] = Value::from(ts);
    }
    doc
}

/// `chat.update`'s document: the thread's first message replaced by `message`.
pub fn update_body(thread: &SlackThread, message: &Value) -> Value {
    json!({"channel": thread.channel, "ts": thread.ts, "text": message["text"], "blocks": message["blocks"]})
}

/// Slack's error codes that mean "later": retried as a 5xx is.
const RETRYABLE: [&str; 5] = ["ratelimited", "internal_error", "fatal_error", "service_unavailable", "request_timeout"];

/// Slack's error codes that say a thread can no longer be replied to or
/// its first message updated (deleted, archived, the bot removed from its
/// channel): the incident's thread is forgotten and a new message starts
/// one, rather than every later transition failing on it.
const THREAD_GONE: [&str; 6] = [
    "message_not_found",
    "thread_not_found",
    "channel_not_found",
    "is_archived",
    "not_in_channel",
    "cant_update_message",
];

/// Whether `f` is Slack saying the thread is gone ([`THREAD_GONE`]); the
/// code is read back from the message [`answer`] wrote.
pub fn thread_gone(f: &Failure) -> bool {
    f.message.strip_prefix(SLACK_PREFIX).is_some_and(|code| THREAD_GONE.contains(&code))
}

/// How [`answer`] writes Slack's error code in a failure's message.
const SLACK_PREFIX: &str = "slack: ";

/// Slack's answer to one call: the message's channel and ts, or why not.
/// `retry_after`: the answer's `Retry-After`.
pub fn answer(status: u16, retry_after: Option<Duration>, body: &str) -> Result<SlackThread, Failure> {
    let fail = |message: String, retryable: bool| Failure { message, retryable, retry_after };
    match status {
        200..=299 => {}
        429 => return Err(fail(HTTP_4XX.into(), true)),
        500..=599 => return Err(fail(HTTP_5XX.into(), true)),
        400..=499 => return Err(fail(HTTP_4XX.into(), status == 408)),
        // A redirect (never followed) or no answer at all.
        _ => return Err(fail(REFUSED.into(), false)),
    }
    let v: Value = serde_json::from_str(body).map_err(|_| fail("slack: not a Web API answer".into(), false))?;
    if v["ok"] != Value::Bool(true) {
        // Slack's codes are snake_case words; anything else is not repeated.
        let code = v["error"]
            .as_str()
            .filter(|c| {
                (1..=64).contains(&c.len())
                    && c.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
            })
            .unwrap_or("unknown_error");
        let retryable = RETRYABLE.contains(&code);
        return Err(fail(format!("{SLACK_PREFIX}{code}"), retryable));
    }
    match (v["channel"].as_str(), v["ts"].as_str()) {
        (Some(channel), Some(ts)) if (1..=32).contains(&channel.len()) && (1..=32).contains(&ts.len()) => {
            Ok(SlackThread { channel: channel.to_string(), ts: ts.to_string(), ..SlackThread::default() })
        }
        _ => Err(fail("slack: the answer named no message".into(), false)),
    }
}

/// Whether `token` looks like a Slack bot token (xoxb-, then letters,
/// digits and dashes): anything else would be sent to Slack for nothing.
pub fn check_bot_token(token: &str) -> Result<(), String> {
    let token = token.trim();
    let shaped = token.strip_prefix("xoxb-").is_some_and(|rest| {
        (8..=250).contains(&rest.len()) && rest.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
    });
    if shaped { Ok(()) } else { Err("not a Slack bot token (xoxb-…)".to_string()) }
}

/// How far one notification got: the calls chosen at its first attempt,
/// or a Post once its thread was found gone, so that a retry does not
/// choose again (nor reply in the gone thread).
#[derive(Debug, Default)]
pub struct Progress {
    calls: Option<Calls>,
}

/// Where a bot token's sink posts: its token's Secret key and channel.
pub struct Bot<'a> {
    pub namespace: &'a str,
    pub token: &'a SecretKeyRef,
    pub channel: &'a str,
}

impl Bot<'_> {
    /// A thread Slack named, with what it was posted with.
    fn stamp(&self, posted: SlackThread) -> SlackThread {
        SlackThread {
            spec_channel: Some(self.channel.to_string()),
            bot_token_secret_ref: Some(self.token.clone()),
            ..posted
        }
    }
}

impl Delivery {
    /// One attempt at a notification with a bot token, resuming where the
    /// last attempt stopped.
    pub(super) async fn slack_bot(
        &self,
        bot: Bot<'_>,
        body: &Payload,
        threads: &Threads,
        progress: &mut Progress,
    ) -> Result<(), Failure> {
        let token = read_secret(&self.kube, bot.namespace, bot.token).await?;
        check_bot_token(&token).map_err(|message| Failure { message, retryable: false, retry_after: None })?;
        let token = token.trim();
        let message = body.render();
        let threading = body.thread.as_ref();
        let calls = progress
            .calls
            .get_or_insert_with(|| choose(threading, threading.and_then(|t| threads.get(&t.incident)), &bot))
            .clone();
        let thread = match calls {
            Calls::Post => return self.slack_post(&bot, token, &message, threading, threads).await,
            Calls::Reply(thread) => thread,
        };
        let reply = post_body(&thread.channel, &message, Some(&thread.ts));
        match self.slack_call("chat.postMessage", token, &reply).await {
            Ok(_) => {}
            Err(f) if thread_gone(&f) => {
                // The thread is gone (and would stay so for every later
                // transition, and across restarts through status): forget
                // it and post this transition as the new thread. Retries
                // of this notification post too.
                tracing::info!(sink = "slack", error = %f.message, "the Slack thread is gone; starting a new one");
                if let Some(t) = threading {
                    threads.learn(&t.incident, Learned { opening: t.opening, thread: None });
                }
                progress.calls = Some(Calls::Post);
                return self.slack_post(&bot, token, &message, threading, threads).await;
            }
            Err(f) => return Err(f),
        }
        // The reply is what notifies; the first message's update is best
        // effort: its failure neither fails the notification nor sends the
        // reply again.
        if let Err(f) = self.slack_call("chat.update", token, &update_body(&thread, &message)).await {
            tracing::warn!(sink = "slack", error = %f.message, "the thread's first message was not updated");
        }
        Ok(())
    }

    /// A new message in the sink's channel: it becomes the incident's thread.
    async fn slack_post(
        &self,
        bot: &Bot<'_>,
        token: &str,
        message: &Value,
        threading: Option<&Threading>,
        threads: &Threads,
    ) -> Result<(), Failure> {
        let posted = self.slack_call("chat.postMessage", token, &post_body(bot.channel, message, None)).await?;
        if let Some(t) = threading {
            threads.learn(&t.incident, Learned { opening: t.opening, thread: Some(bot.stamp(posted)) });
        }
        Ok(())
    }

    /// One Web API call at `--slack-api-url`.
    async fn slack_call(&self, method: &str, token: &str, document: &Value) -> Result<SlackThread, Failure> {
        let raw = format!("{}/{method}", self.rules.slack_api_url.trim_end_matches('/'));
        // The admin's URL, checked at start; the address policy again here
        // (and at connect time, after DNS).
        let url = check_url(&raw, "slack-api", &self.rules).map_err(|_| Failure {
            message: REFUSED.into(),
            retryable: false,
            retry_after: None,
        })?;
        let response = self
            .http
            .post(url)
            .bearer_auth(token)
            .json(document)
            .send()
            .await
            .map_err(|e| request_failure("slack", e))?;
        let status = response.status().as_u16();
        let retry_after = response
            .headers()
            .get(http::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| parse_retry_after(v, Timestamp::now()));
        let text = response.text().await.unwrap_or_default();
        answer(status, retry_after, &text).inspect_err(|f| {
            tracing::info!(sink = "slack", method, status, error = %f.message, "Slack refused a call");
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    const INCIDENT: &str = "team-a/Deployment/web container app: CrashLoopBackOff";

    fn token() -> SecretKeyRef {
        SecretKeyRef { name: "slack-bot".into(), key: "token".into() }
    }

    /// A thread posted by the sink of [`bot`].
    fn thread(ts: &str) -> SlackThread {
        SlackThread {
            channel: "C0123456789".into(),
            ts: ts.into(),
            spec_channel: Some("#alerts".into()),
            bot_token_secret_ref: Some(token()),
        }
    }

    fn opening() -> Option<Timestamp> {
        Some(Timestamp::from_second(1_800_000_000).unwrap())
    }

    fn threading(opens: bool, known: Option<SlackThread>) -> Threading {
        Threading { incident: INCIDENT.into(), opening: opening(), opens, known }
    }

    fn learned(thread: Option<SlackThread>) -> Option<Learned> {
        Some(Learned { opening: opening(), thread })
    }

    #[test]
    fn an_opening_posts_and_later_transitions_reply_in_the_thread() {
        let token = token();
        let bot = Bot { namespace: "team-a", token: &token, channel: "#alerts" };
        // An opening starts a thread, whatever was known before.
        assert_eq!(
            choose(Some(&threading(true, Some(thread("1.1")))), learned(Some(thread("2.2"))), &bot),
            Calls::Post
        );
        // A later transition: the thread this worker learned (newest) ...
        assert_eq!(
            choose(Some(&threading(false, Some(thread("1.1")))), learned(Some(thread("2.2"))), &bot),
            Calls::Reply(thread("2.2"))
        );
        // ... else the one the status knew (after a restart) ...
        assert_eq!(choose(Some(&threading(false, Some(thread("1.1")))), None, &bot), Calls::Reply(thread("1.1")));
        // ... else a new message, which becomes the thread.
        assert_eq!(choose(Some(&threading(false, None)), None, &bot), Calls::Post);
        // A summary is about no incident: a message of its own.
        assert_eq!(choose(None, learned(Some(thread("2.2"))), &bot), Calls::Post);
    }

    #[test]
    fn a_thread_found_gone_another_opening_or_another_sink_is_not_replied_to() {
        let token = token();
        let bot = Bot { namespace: "team-a", token: &token, channel: "#alerts" };
        // The worker found the thread gone: a new message, not the one the
        // notification (or status) still knew.
        assert_eq!(choose(Some(&threading(false, Some(thread("1.1")))), learned(None), &bot), Calls::Post);
        // What the worker learned of another opening is another incident's.
        let earlier = Some(Learned { opening: None, thread: Some(thread("0.9")) });
        assert_eq!(choose(Some(&threading(false, Some(thread("1.1")))), earlier, &bot), Calls::Reply(thread("1.1")));
        let earlier = Some(Learned { opening: None, thread: Some(thread("0.9")) });
        assert_eq!(choose(Some(&threading(false, None)), earlier, &bot), Calls::Post);
        // Posted with another channel or token than the sink's now.
        let moved = Bot { namespace: "team-a", token: &token, channel: "#alerts-new" };
        assert_eq!(choose(Some(&threading(false, Some(thread("1.1")))), None, &moved), Calls::Post);
        let other = SecretKeyRef { name: "other-bot".into(), key: "token".into() };
        let rotated = Bot { namespace: "team-a", token: &other, channel: "#alerts" };
        assert_eq!(choose(Some(&threading(false, Some(thread("1.1")))), None, &rotated), Calls::Post);
        let legacy = SlackThread { channel: "C0123456789".into(), ts: "1.1".into(), ..SlackThread::default() };
        assert_eq!(choose(Some(&threading(false, Some(legacy))), None, &bot), Calls::Post);
    }

    #[test]
    fn thread_gone_codes_are_told_apart() {
        for code in THREAD_GONE {
            let f = answer(200, None, &format!(r#"{{"ok": false, "error": "{code}"}}"#)).unwrap_err();
            assert!(thread_gone(&f), "{code}");
        }
        for code in ["invalid_auth", "ratelimited", "msg_too_long", "unknown_error"] {
            let f = answer(200, None, &format!(r#"{{"ok": false, "error": "{code}"}}"#)).unwrap_err();
            assert!(!thread_gone(&f), "{code}");
        }
        assert!(!thread_gone(&answer(404, None, "").unwrap_err()));
    }

    #[test]
    fn documents_for_a_post_a_reply_and_an_update() {
        let message = json!({"text": ":red_circle: Opened: x", "blocks": [{"type": "header"}]});
        assert_eq!(
            post_body("#alerts", &message, None),
            json!({"channel": "#alerts", "text": ":red_circle: Opened: x", "blocks": [{"type": "header"}]})
        );
        assert_eq!(
            post_body("C0123456789", &message, Some("1712345678.000100")),
            json!({"channel": "C0123456789", "thread_ts": "1712345678.000100", "text": ":red_circle: Opened: x", "blocks": [{"type": "header"}]})
        );
        assert_eq!(
            update_body(&thread("1712345678.000100"), &message),
            json!({"channel": "C0123456789", "ts": "1712345678.000100", "text": ":red_circle: Opened: x", "blocks": [{"type": "header"}]})
        );
    }

    #[test]
    fn slacks_answers_are_read() {
        let ok = r#"{"ok": true, "channel": "C0123456789", "ts": "1712345678.000100", "message": {}}"#;
        // Slack's answer names the message; the worker stamps what posted it.
        let named = SlackThread { spec_channel: None, bot_token_secret_ref: None, ..thread("1712345678.000100") };
        assert_eq!(answer(200, None, ok), Ok(named));
        // ok:false at HTTP 200 is a failure with Slack's code: permanent ...
        for code in ["invalid_auth", "channel_not_found", "not_in_channel", "account_inactive", "token_revoked"] {
            let f = answer(200, None, &format!(r#"{{"ok": false, "error": "{code}"}}"#)).unwrap_err();
            assert_eq!((f.message.as_str(), f.retryable), (&*format!("slack: {code}"), false));
        }
        // ... or for later.
        let f = answer(200, Some(Duration::from_secs(3)), r#"{"ok": false, "error": "ratelimited"}"#).unwrap_err();
        assert_eq!(
            (f.message.as_str(), f.retryable, f.retry_after),
            ("slack: ratelimited", true, Some(Duration::from_secs(3)))
        );
        // HTTP 429 with Retry-After, and 5xx: retried.
        let f = answer(429, Some(Duration::from_secs(30)), "").unwrap_err();
        assert_eq!((f.message.as_str(), f.retryable, f.retry_after), (HTTP_4XX, true, Some(Duration::from_secs(30))));
        let f = answer(503, None, "<html>").unwrap_err();
        assert_eq!((f.message.as_str(), f.retryable), (HTTP_5XX, true));
        assert!(!answer(404, None, "").unwrap_err().retryable);
        assert_eq!(answer(302, None, "").unwrap_err().message, REFUSED);
        // An error code is repeated only as Slack's codes are written.
        let f = answer(200, None, r#"{"ok": false, "error": "<!channel> token xoxb-1 Bearer"}"#).unwrap_err();
        assert_eq!(f.message, "slack: unknown_error");
        // Not Slack's shape: a failure, never a panic.
        assert!(!answer(200, None, "ok").unwrap_err().retryable);
        assert!(answer(200, None, r#"{"ok": true}"#).is_err());
        let long = format!(r#"{{"ok": true, "channel": "C1", "ts": "{}"}}"#, "1".repeat(100));
        assert!(answer(200, None, &long).is_err());
    }

    #[test]
    fn bot_tokens_are_checked_before_anything_is_sent() {
        assert!(check_bot_token("xoxb-1234567890-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx").is_ok());
        assert!(check_bot_token(" xoxb-1234-5678-abcdefgh\n").is_ok());
        for bad in ["", "xoxb-", "xoxp-1234-5678-abcdefgh", "https://hooks.slack.com/services/T/B/x", "xoxb-12 34-5678"]
        {
            // The value is never repeated.
            assert_eq!(check_bot_token(bad).unwrap_err(), "not a Slack bot token (xoxb-…)", "{bad}");
        }
    }

    #[test]
    fn threads_are_bounded_and_forgotten_with_their_incidents() {
        let threads = Threads::default();
        for n in 0..MAX_THREADS + 10 {
            threads.learn(&format!("i{n}"), learned(Some(thread(&n.to_string()))).unwrap());
        }
        assert_eq!(threads.snapshot().len(), MAX_THREADS);
        // A known incident's thread is still replaced (it opened again) ...
        let later = Some(Timestamp::from_second(1_800_000_600).unwrap());
        let new = Learned { opening: later, thread: Some(thread("new")) };
        threads.learn("i0", new.clone());
        assert_eq!(threads.get("i0"), Some(new.clone()));
        // ... but not by news of an earlier opening.
        threads.learn("i0", learned(Some(thread("old"))).unwrap());
        assert_eq!(threads.get("i0"), Some(new.clone()));
        threads.retain(|k| k == "i0");
        assert_eq!(threads.snapshot(), vec![("i0".to_string(), new)]);
    }

    /// A fake Slack Web API and Kubernetes API on loopback: the Secret
    /// `team-a/slack-bot` holds a bot token; Slack's calls are answered in
    /// order from `answers` (HTTP status, body) and recorded.
    async fn fake(answers: Vec<(u16, &'static str)>) -> (Delivery, Arc<Mutex<Vec<(String, Value)>>>) {
        use crate::address::Policy;
        use crate::delivery::{Retry, SinkRules, http_client};
        let calls: Arc<Mutex<Vec<(String, Value)>>> = Arc::default();
        let answers = Arc::new(Mutex::new(std::collections::VecDeque::from(answers)));
        let recorded = calls.clone();
        let app = axum::Router::new().fallback(move |uri: http::Uri, body: axum::body::Bytes| {
            let (calls, answers) = (recorded.clone(), answers.clone());
            async move {
                if uri.path() == "/api/v1/namespaces/team-a/secrets/slack-bot" {
                    let secret = json!({
                        "apiVersion": "v1", "kind": "Secret",
                        "metadata": {"name": "slack-bot", "namespace": "team-a"},
                        "data": {"token": "eG94Yi0xMjM0NTY3ODkwLWFiY2RlZmdoaWo="},
                    });
                    return (http::StatusCode::OK, secret.to_string());
                }
                let doc = serde_json::from_slice(&body).unwrap_or(Value::Null);
                calls.lock().unwrap().push((uri.path().to_string(), doc));
                let (status, body) = answers.lock().unwrap().pop_front().unwrap_or((500, ""));
                (http::StatusCode::from_u16(status).unwrap(), body.to_string())
            }
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        let rules = SinkRules {
            addresses: Arc::new(Policy::parse(&["127.0.0.0/8".into()]).unwrap()),
            slack_api_url: format!("http://{addr}/slack").into(),
            ..SinkRules::default()
        };
        let kube = kube::Client::try_from(kube::Config::new(format!("http://{addr}").parse().unwrap())).unwrap();
        let (lead, leading) = tokio::sync::watch::channel(true);
        std::mem::forget(lead);
        let delivery = Delivery {
            http: http_client(Duration::from_secs(5), rules.addresses.clone()).unwrap(),
            kube,
            metrics: crate::metrics::AlertMetrics::new().unwrap(),
            retry: Retry { first: Duration::from_millis(10), ..Retry::default() },
            leadership: flotilla_shared::Leadership::new(leading, tokio_util::sync::CancellationToken::new()),
            rules,
        };
        (delivery, calls)
    }

    async fn send(delivery: &Delivery, threads: &Threads, known: Option<SlackThread>) -> Result<(), Failure> {
        let token = token();
        let target = super::super::Target::SlackBot { namespace: "team-a".into(), token, channel: "#alerts".into() };
        let body = Payload::from(json!({"text": ":red_circle: Escalated: x", "blocks": []}))
            .in_thread(threading(false, known));
        delivery.deliver("slack", &target, "", &body, Timestamp::now(), threads).await
    }

    const POSTED: &str = r#"{"ok": true, "channel": "C0123456789", "ts": "2.2"}"#;

    /// A reply into a thread Slack says is gone forgets the thread and
    /// posts the transition as a new message, which becomes the thread; if
    /// that post fails too, the thread stays forgotten.
    #[tokio::test]
    async fn a_gone_thread_is_forgotten_and_the_transition_starts_a_new_one() {
        let (delivery, calls) = fake(vec![(200, r#"{"ok": false, "error": "thread_not_found"}"#), (200, POSTED)]).await;
        let threads = Threads::default();
        send(&delivery, &threads, Some(thread("1.1"))).await.unwrap();
        let calls = std::mem::take(&mut *calls.lock().unwrap());
        let seen: Vec<(&str, Option<&str>, &str)> = calls
            .iter()
            .map(|(path, b)| (path.as_str(), b["thread_ts"].as_str(), b["channel"].as_str().unwrap_or_default()))
            .collect();
        assert_eq!(
            seen,
            vec![
                ("/slack/chat.postMessage", Some("1.1"), "C0123456789"),
                // Top level, in the sink's channel; no update of a gone message.
                ("/slack/chat.postMessage", None, "#alerts"),
            ]
        );
        // The new message is the incident's thread, with what posted it.
        assert_eq!(threads.get(INCIDENT), learned(Some(thread("2.2"))));

        // Gone, and the channel archived: the notification fails, and the
        // thread is forgotten rather than replied to again.
        let archived = r#"{"ok": false, "error": "is_archived"}"#;
        let (delivery, calls) = fake(vec![(200, archived), (200, archived)]).await;
        let threads = Threads::default();
        let f = send(&delivery, &threads, Some(thread("1.1"))).await.unwrap_err();
        assert_eq!((f.message.as_str(), f.retryable), ("slack: is_archived", false));
        assert_eq!(calls.lock().unwrap().len(), 2);
        assert_eq!(threads.get(INCIDENT), learned(None));
        let next = threading(false, Some(thread("1.1")));
        let token = token();
        let bot = Bot { namespace: "team-a", token: &token, channel: "#alerts" };
        assert_eq!(choose(Some(&next), threads.get(INCIDENT), &bot), Calls::Post);
    }

    /// The reply is what notifies: an update that fails (for good or for
    /// now) is logged, and neither fails the notification nor sends the
    /// reply again.
    #[tokio::test]
    async fn a_failed_update_after_the_reply_is_not_a_failed_notification() {
        let ok_reply = r#"{"ok": true, "channel": "C0123456789", "ts": "3.3"}"#;
        for update in [(200, r#"{"ok": false, "error": "cant_update_message"}"#), (503, "unavailable"), (429, "")] {
            let (delivery, calls) = fake(vec![(200, ok_reply), update]).await;
            let threads = Threads::default();
            send(&delivery, &threads, Some(thread("1.1"))).await.unwrap();
            // Give a wrongful retry the time to show.
            tokio::time::sleep(Duration::from_millis(100)).await;
            let paths: Vec<String> = calls.lock().unwrap().iter().map(|(p, _)| p.clone()).collect();
            assert_eq!(paths, ["/slack/chat.postMessage", "/slack/chat.update"], "{update:?}");
            // The thread is alive: nothing forgotten or learned.
            assert_eq!(threads.get(INCIDENT), None);
        }
    }
}
