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
    /// An opening: it starts a new thread.
    pub opens: bool,
    /// The thread the incident was known to have when the notification was
    /// queued (from status after a restart).
    pub known: Option<SlackThread>,
}

/// Threads one worker learned, by incident: shared with the reconcile,
/// which writes them into status and forgets those of incidents gone. A
/// thread learned here is newer than one a queued notification carries.
#[derive(Debug, Clone, Default)]
pub struct Threads(Arc<Mutex<HashMap<String, SlackThread>>>);

/// Threads held per worker, at most (the reconcile keeps only those of the
/// incidents it holds; this bounds a burst between two reconciles).
const MAX_THREADS: usize = 1024;

impl Threads {
    pub fn get(&self, incident: &str) -> Option<SlackThread> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).get(incident).cloned()
    }

    fn learn(&self, incident: &str, thread: SlackThread) {
        let mut map = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if map.len() < MAX_THREADS || map.contains_key(incident) {
            map.insert(incident.to_string(), thread);
        }
    }

    /// Every thread held, by incident.
    pub fn snapshot(&self) -> Vec<(String, SlackThread)> {
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
    /// whose thread is unknown): it becomes the incident's thread.
    Post,
    /// A reply in the thread, then the thread's first message updated to
    /// the incident's current state.
    Reply(SlackThread),
}

/// An opening starts a thread; a later transition replies in the thread
/// the worker learned, else in the one its notification knew, else (the
/// opening was never posted) starts one.
pub fn choose(threading: Option<&Threading>, learned: Option<SlackThread>) -> Calls {
    match threading {
        Some(t) if !t.opens => learned.or_else(|| t.known.clone()).map_or(Calls::Post, Calls::Reply),
        _ => Calls::Post,
    }
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
        return Err(fail(format!("slack: {code}"), retryable));
    }
    match (v["channel"].as_str(), v["ts"].as_str()) {
        (Some(channel), Some(ts)) if (1..=32).contains(&channel.len()) && (1..=32).contains(&ts.len()) => {
            Ok(SlackThread { channel: channel.to_string(), ts: ts.to_string() })
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
/// and whether its reply went out (a retry then only updates).
#[derive(Debug, Default)]
pub struct Progress {
    calls: Option<Calls>,
    replied: bool,
}

/// Where a bot token's sink posts: its token's Secret key and channel.
pub struct Bot<'a> {
    pub namespace: &'a str,
    pub token: &'a SecretKeyRef,
    pub channel: &'a str,
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
            .get_or_insert_with(|| choose(threading, threading.and_then(|t| threads.get(&t.incident))))
            .clone();
        match calls {
            Calls::Post => {
                let posted =
                    self.slack_call("chat.postMessage", token, &post_body(bot.channel, &message, None)).await?;
                if let Some(t) = threading {
                    threads.learn(&t.incident, posted);
                }
            }
            Calls::Reply(thread) => {
                if !progress.replied {
                    let reply = post_body(&thread.channel, &message, Some(&thread.ts));
                    self.slack_call("chat.postMessage", token, &reply).await?;
                    progress.replied = true;
                }
                self.slack_call("chat.update", token, &update_body(&thread, &message)).await?;
            }
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

    fn thread(ts: &str) -> SlackThread {
        SlackThread { channel: "C0123456789".into(), ts: ts.into() }
    }

    fn threading(opens: bool, known: Option<SlackThread>) -> Threading {
        Threading { incident: "team-a/Deployment/web container app: CrashLoopBackOff".into(), opens, known }
    }

    #[test]
    fn an_opening_posts_and_later_transitions_reply_in_the_thread() {
        // An opening starts a thread, whatever was known before.
        assert_eq!(choose(Some(&threading(true, Some(thread("1.1")))), Some(thread("2.2"))), Calls::Post);
        // A later transition: the thread this worker learned (newest) ...
        assert_eq!(
            choose(Some(&threading(false, Some(thread("1.1")))), Some(thread("2.2"))),
            Calls::Reply(thread("2.2"))
        );
        // ... else the one the status knew (after a restart) ...
        assert_eq!(choose(Some(&threading(false, Some(thread("1.1")))), None), Calls::Reply(thread("1.1")));
        // ... else a new message, which becomes the thread.
        assert_eq!(choose(Some(&threading(false, None)), None), Calls::Post);
        // A summary is about no incident: a message of its own.
        assert_eq!(choose(None, Some(thread("2.2"))), Calls::Post);
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
        assert_eq!(answer(200, None, ok), Ok(thread("1712345678.000100")));
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
            threads.learn(&format!("i{n}"), thread(&n.to_string()));
        }
        assert_eq!(threads.snapshot().len(), MAX_THREADS);
        // A known incident's thread is still replaced (it opened again).
        threads.learn("i0", thread("new"));
        assert_eq!(threads.get("i0"), Some(thread("new")));
        threads.retain(|k| k == "i0");
        assert_eq!(threads.snapshot(), vec![("i0".to_string(), thread("new"))]);
    }
}
