//! The per-namespace rate limit on notifications
//! (`--max-notifications-per-minute-per-namespace`): one tenant's crashing
//! pods cannot make the operator flood a receiver other teams share. Pure.
//!
//! A token bucket per namespace, as large as a minute's allowance and
//! refilled evenly; buckets that are full again are forgotten, so the map
//! holds only namespaces that notified within the last minute.
//!
//! Over the limit nothing is lost silently: a notification waits, in order,
//! per PodAlert and sink ([`Held`]), and goes out when a token comes. When
//! several wait for one sink, the next token sends them together, as one
//! summary (Slack: their headlines; webhook: a `PodAlertNotificationSummary`
//! of their documents without logs). At most [`MAX_HELD`] wait per sink;
//! beyond, the newest are counted, and the summary says how many it could
//! not list. Each is counted in `flotilla_pod_alert_notifications_total`
//! (`held`, `summarized`, `dropped`) and the PodAlert shows `Throttled=True`.

use std::collections::{HashMap, VecDeque};
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use serde_json::{Value, json};

use crate::notify::{API_VERSION, Notification, mrkdwn_escape};
use crate::pod::{after, elapsed};

/// Notifications waiting per PodAlert and sink, at most.
pub const MAX_HELD: usize = 100;
/// More than this many waiting when a token comes: they go as one summary.
pub const SUMMARY_FROM: usize = 2;
/// Headlines a summary lists, at most.
const SUMMARY_LINES: usize = 50;

/// The buckets of every namespace.
#[derive(Debug, Clone)]
pub struct Limiter {
    per_minute: u32,
    buckets: HashMap<String, Bucket>,
}

#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    at: Timestamp,
}

impl Limiter {
    /// `per_minute` notifications per namespace (0: no limit).
    pub fn new(per_minute: u32) -> Self {
        Self { per_minute, buckets: HashMap::new() }
    }

    fn capacity(&self) -> f64 {
        f64::from(self.per_minute)
    }

    fn refill(&self, b: &mut Bucket, now: Timestamp) {
        let secs = elapsed(b.at, now).as_secs_f64();
        b.tokens = (b.tokens + secs * self.capacity() / 60.0).min(self.capacity());
        b.at = now;
    }

    /// Takes a token of `namespace` if there is one.
    pub fn try_take(&mut self, namespace: &str, now: Timestamp) -> bool {
        if self.per_minute == 0 {
            return true;
        }
        let cap = self.capacity();
        let mut b = self.buckets.get(namespace).copied().unwrap_or(Bucket { tokens: cap, at: now });
        self.refill(&mut b, now);
        let took = b.tokens >= 1.0;
        if took {
            b.tokens -= 1.0;
        }
        self.buckets.insert(namespace.to_string(), b);
        took
    }

    /// Tokens `namespace` has now (`u32::MAX` without a limit).
    pub fn available(&self, namespace: &str, now: Timestamp) -> u32 {
        if self.per_minute == 0 {
            return u32::MAX;
        }
        let Some(mut b) = self.buckets.get(namespace).copied() else { return self.per_minute };
        self.refill(&mut b, now);
        // Whole tokens, at most a minute's worth: the cast cannot truncate.
        b.tokens.floor().clamp(0.0, self.capacity()) as u32
    }

    /// When `namespace` has a token again (now when it has one).
    pub fn next_token(&self, namespace: &str, now: Timestamp) -> Timestamp {
        let Some(mut b) = self.buckets.get(namespace).copied() else { return now };
        if self.per_minute == 0 {
            return now;
        }
        self.refill(&mut b, now);
        let missing = (1.0 - b.tokens).max(0.0);
        after(now, Duration::from_secs_f64(missing * 60.0 / self.capacity()))
    }

    /// Forgets the namespaces whose bucket is full again.
    pub fn forget_idle(&mut self, now: Timestamp) {
        let (cap, per_second) = (self.capacity(), self.capacity() / 60.0);
        self.buckets.retain(|_, b| b.tokens + elapsed(b.at, now).as_secs_f64() * per_second < cap);
    }

    pub fn len(&self) -> usize {
        self.buckets.len()
    }

    pub fn is_empty(&self) -> bool {
        self.buckets.is_empty()
    }
}

/// Notifications of one PodAlert's sink waiting for a token.
#[derive(Debug, Clone, Default)]
pub struct Held {
    pub waiting: VecDeque<Notification>,
    /// Not kept (past [`MAX_HELD`]), to be named in the next summary.
    pub overflow: usize,
}

/// What to send when a token comes.
#[derive(Debug, Clone, PartialEq)]
pub enum Release {
    One(Box<Notification>),
    /// Several, as one summary: the notifications, and how many more could
    /// not be kept.
    Summary(Vec<Notification>, usize),
}

impl Held {
    /// Adds one; false when it could not be kept (counted for the summary).
    pub fn hold(&mut self, n: Notification) -> bool {
        if self.waiting.len() >= MAX_HELD {
            self.overflow += 1;
            return false;
        }
        self.waiting.push_back(n);
        true
    }

    pub fn is_empty(&self) -> bool {
        self.waiting.is_empty() && self.overflow == 0
    }

    /// What one token sends, with `tokens` available now: each alone when
    /// the tokens cover every one waiting, else the oldest alone (two or
    /// fewer waiting) or everything as one summary.
    pub fn release(&mut self, tokens: u32) -> Option<Release> {
        let waiting = u32::try_from(self.waiting.len()).unwrap_or(u32::MAX);
        if self.overflow == 0 && waiting <= tokens {
            return self.waiting.pop_front().map(|n| Release::One(Box::new(n)));
        }
        if self.waiting.len() > SUMMARY_FROM || (self.overflow > 0 && !self.waiting.is_empty()) {
            let all: Vec<Notification> = self.waiting.drain(..).collect();
            return Some(Release::Summary(all, std::mem::take(&mut self.overflow)));
        }
        if let Some(n) = self.waiting.pop_front() {
            return Some(Release::One(Box::new(n)));
        }
        // Only dropped ones: a summary saying so.
        (self.overflow > 0).then(|| Release::Summary(Vec::new(), std::mem::take(&mut self.overflow)))
    }
}

/// The summary's first line.
fn summary_title(podalert: &(String, String), n: usize, more: usize) -> String {
    let total = n + more;
    format!("{total} notifications of PodAlert {}/{} waited for the namespace's rate limit", podalert.0, podalert.1)
}

/// A Slack message listing the held notifications' headlines.
pub fn slack_summary(podalert: &(String, String), held: &[Notification], more: usize) -> Value {
    let title = summary_title(podalert, held.len(), more);
    // Slack's section limit is 3000 characters: as many headlines as fit.
    let mut body = String::new();
    let mut listed = 0;
    for n in held.iter().take(SUMMARY_LINES) {
        let line = format!("• {}: {}\n", n.event(), mrkdwn_escape(&n.headline()));
        if body.chars().count() + line.chars().count() > 2800 {
            break;
        }
        body.push_str(&line);
        listed += 1;
    }
    let unlisted = held.len() - listed + more;
    if unlisted > 0 {
        body.push_str(&format!("… and {unlisted} more (see the PodAlert's status)"));
    }
    json!({
        "text": format!(":hourglass: {}", mrkdwn_escape(&title)),
        "blocks": [
            {"type": "header", "text": {"type": "plain_text", "text": title.chars().take(150).collect::<String>(), "emoji": true}},
            {"type": "section", "text": {"type": "mrkdwn", "text": body}},
        ]
    })
}

/// A Teams card listing the held notifications' headlines (as text runs:
/// never read as markdown).
pub fn teams_summary(podalert: &(String, String), held: &[Notification], more: usize) -> Value {
    let title = summary_title(podalert, held.len(), more);
    let mut lines: Vec<String> =
        held.iter().take(SUMMARY_LINES).map(|n| format!("• {}: {}", n.event(), n.headline())).collect();
    let unlisted = held.len().saturating_sub(lines.len()) + more;
    if unlisted > 0 {
        lines.push(format!("… and {unlisted} more (see the PodAlert's status)"));
    }
    let run = |text: String, bold: bool| {
        let mut r = json!({"type": "TextRun", "text": text});
        if bold {
            r["weight"] = json!("Bolder");
        }
        json!({"type": "RichTextBlock", "inlines": [r]})
    };
    json!({
        "type": "message",
        "attachments": [{"contentType": "application/vnd.microsoft.card.adaptive", "contentUrl": null, "content": {
            "$schema": "http://adaptivecards.io/schemas/adaptive-card.json",
            "type": "AdaptiveCard",
            "version": "1.4",
            "body": [run(title, true), run(lines.join("\n"), false)],
        }}],
    })
}

/// The webhook's summary document: the held documents without their logs
/// and Warning Events (each may be large; status keeps them).
pub fn webhook_summary(podalert: &(String, String), held: &[Notification], more: usize, now: Timestamp) -> Value {
    let docs: Vec<Value> = held
        .iter()
        .map(|n| {
            let mut d = n.webhook();
            if let Some(i) = d.get_mut("incident").and_then(Value::as_object_mut) {
                i.remove("logs");
                i.remove("events");
            }
            d
        })
        .collect();
    json!({
        "apiVersion": API_VERSION,
        "kind": "PodAlertNotificationSummary",
        "podAlert": {"namespace": podalert.0, "name": podalert.1},
        "reason": "NamespaceRateLimit",
        "notifications": docs,
        "notListed": more,
        "sentAt": now.to_string(),
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::incident::{Change, Phase};
    use crate::notify::IncidentView;
    use crate::observe::tests::{crashing, pod, rules, t};

    fn note(n: usize) -> Notification {
        let r = rules(serde_json::json!({}));
        let mut book = crate::incident::Book::default();
        let p = [crashing(pod(&format!("w{n}-1"), &format!("w{n}")), 4, 95, "Error")];
        let f = crate::observe::evaluate(p.iter(), &r, &mut crate::observe::RestartHistory::default(), t(100));
        book.step(&f, &r, t(100));
        let inc = book.incidents.values().next().unwrap();
        assert_eq!(inc.phase, Phase::Firing);
        Notification {
            podalert: ("a".into(), "pa".into()),
            change: Change::Opened { replaces: None },
            incident: IncidentView::of(inc, 50, 8192),
            at: t(100),
        }
    }

    #[test]
    fn a_namespace_gets_its_allowance_per_minute_and_others_theirs() {
        let mut l = Limiter::new(60);
        let now = t(0);
        assert_eq!((0..100).filter(|_| l.try_take("a", now)).count(), 60);
        assert!(l.try_take("b", now), "another namespace is not slowed");
        assert_eq!((l.available("a", now), l.available("b", now), l.available("c", now)), (0, 59, 60));
        assert_eq!(l.next_token("a", now), after(now, Duration::from_secs(1)));
        assert!(!l.try_take("a", after(now, Duration::from_millis(500))));
        assert!(l.try_take("a", after(now, Duration::from_millis(1000))));
        // Full again after a minute: forgotten (b at once, a not yet).
        l.forget_idle(t(30));
        assert_eq!(l.len(), 1);
        l.forget_idle(t(120));
        assert!(l.is_empty());
        let mut off = Limiter::new(0);
        assert!((0..1000).all(|_| off.try_take("a", now)));
    }

    #[test]
    fn held_notifications_go_one_by_one_or_as_a_summary() {
        let mut h = Held::default();
        assert_eq!(h.release(1), None);
        h.hold(note(1));
        assert!(matches!(h.release(1), Some(Release::One(_))));
        // Tokens for all: each alone.
        for n in 0..5 {
            h.hold(note(n));
        }
        assert!(matches!(h.release(5), Some(Release::One(_))));
        assert_eq!(h.waiting.len(), 4);
        // One token for four: a summary of them all.
        assert!(matches!(h.release(1), Some(Release::Summary(all, 0)) if all.len() == 4));
        for n in 0..(MAX_HELD + 5) {
            h.hold(note(n));
        }
        assert_eq!(h.overflow, 5);
        let Some(Release::Summary(all, more)) = h.release(1000) else { panic!("a summary") };
        assert_eq!((all.len(), more), (MAX_HELD, 5));
        assert!(h.is_empty());
        let s = slack_summary(&("a".into(), "pa".into()), &all, more);
        let text = s["blocks"][1]["text"]["text"].as_str().unwrap();
        assert!(text.contains("a/Deployment/w0") && text.contains(" more (see the PodAlert's status)"), "{text}");
        assert!(text.chars().count() <= 3000);
        assert!(s["text"].as_str().unwrap().contains("105 notifications"));
        let w = webhook_summary(&("a".into(), "pa".into()), &all, more, t(200));
        assert_eq!(w["kind"], "PodAlertNotificationSummary");
        assert_eq!(w["notifications"].as_array().unwrap().len(), MAX_HELD);
        assert!(w["notifications"][0]["incident"].get("logs").is_none());
        assert_eq!(w["notListed"], 5);
    }
}
