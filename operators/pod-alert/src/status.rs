//! A PodAlert's status from its incident book, and the book back from the
//! status (an operator restart keeps open incidents and what was notified).
//! Pure.

use std::collections::{BTreeMap, BTreeSet};

use flotilla_shared::Conditions;
use flotilla_shared::conditions::INVALID_SPEC;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

use crate::crd::{
    IncidentStatus, MAX_INCIDENTS_LISTED, MAX_PODS_LISTED, PodAlertStatus, Reason, SilenceStatus, SinkStatus,
};
use crate::incident::{Book, Incident, Phase};
use crate::observe::Key;
use crate::pod::Workload;

pub const SINKS_HEALTHY: &str = "SinksHealthy";
/// Notifications of this PodAlert wait for its namespace's rate limit.
pub const THROTTLED: &str = "Throttled";

/// An incident's log tail in status, at most, JSON-escaped (the full tail,
/// up to `logs.maxBytes`, goes to the sinks only).
pub const MAX_STATUS_TAIL: usize = 4 << 10;
/// The whole status, at most, serialized: far from etcd's 1.5 MiB object
/// limit (past it the status write fails for good), and what the operator
/// and every client watching PodAlerts holds per PodAlert.
pub const MAX_STATUS_BYTES: usize = 256 << 10;

/// What the status says besides the incidents.
#[derive(Debug, Clone, Default)]
pub struct Summary {
    /// Why the spec cannot be used: (reason, message).
    pub invalid: Option<(String, String)>,
    pub paused: bool,
    /// Pods in scope at the last evaluation.
    pub pods: usize,
    /// Skips of the last evaluation, by cause.
    pub skipped: BTreeMap<String, i64>,
    pub sinks: Vec<SinkStatus>,
    /// Sink configuration problems: (sink, message).
    pub sink_problems: Vec<(String, String)>,
    /// The PodAlert's `logs.tailLines` and `logs.maxBytes`: how much of a
    /// shared tail it shows.
    pub log_lines: u32,
    pub log_bytes: usize,
    /// spec.logs.events: the incidents' Warning Events shown.
    pub events: bool,
    /// Notifications waiting for the namespace's rate limit, and how many
    /// it merged into summaries or could not hold, since the last status.
    pub throttled: Option<String>,
    /// spec.silences as the last evaluation applied them.
    pub silences: Vec<SilenceStatus>,
}

fn n(v: usize) -> i32 {
    i32::try_from(v).unwrap_or(i32::MAX)
}

fn rank(p: &Phase) -> u8 {
    match p {
        Phase::Firing => 0,
        Phase::Resolving { .. } => 1,
        Phase::Pending => 2,
        Phase::Resolved { .. } => 3,
    }
}

fn incident_status(i: &Incident, lines: u32, bytes: usize, events: bool) -> IncidentStatus {
    let state = match (&i.phase, &i.silencing) {
        (Phase::Pending, Some(_)) => "Silenced",
        (phase, _) => phase.as_str(),
    };
    IncidentStatus {
        state: state.to_string(),
        namespace: i.key.namespace.clone(),
        workload: i.key.workload.to_string(),
        container: i.key.container.clone(),
        reason: i.key.reason.to_string(),
        message: i.message.clone(),
        pods: i.pods.iter().take(MAX_PODS_LISTED).cloned().collect(),
        pod_count: n(i.pods.len()),
        restarts: i32::try_from(i.restarts).unwrap_or(i32::MAX),
        since: Time(i.since),
        changed: Some(Time(i.changed)),
        notified_level: i32::try_from(i.notified_level).unwrap_or(0),
        notified: i.notified && !i.silenced,
        incarnations: i.incarnations.iter().cloned().collect(),
        logs: crate::logs::cap_escaped(&i.log_text(lines, bytes), MAX_STATUS_TAIL),
        // Bounded where read: 5 lines of 256 bytes.
        events: i.event_lines(events),
        silenced_by: i.silencing.as_ref().map(|s| s.by.clone()).unwrap_or_default(),
        silenced_until: i.silencing.as_ref().map(|s| Time(s.until)),
        slack_thread: i.slack_thread.clone(),
    }
}

fn size(s: &PodAlertStatus) -> usize {
    serde_json::to_vec(s).map_or(usize::MAX, |v| v.len())
}

/// Makes `s` fit in `limit` bytes serialized: log tails are cut (the last
/// incidents' first: they are listed firing first), then left out (with
/// their Events), long
/// messages cut, and last the last incidents dropped.
pub fn fit(s: &mut PodAlertStatus, limit: usize) {
    if size(s) <= limit {
        return;
    }
    let steps: [&dyn Fn(&mut IncidentStatus); 3] = [
        &|i| i.logs = crate::logs::cap_escaped(&i.logs, 512),
        &|i| {
            i.logs.clear();
            i.events.clear();
        },
        &|i| {
            if i.message.len() > 256 {
                i.message = crate::logs::cap_escaped(&i.message, 256);
            }
        },
    ];
    for step in steps {
        for n in (0..s.incidents.len()).rev() {
            step(&mut s.incidents[n]);
            if size(s) <= limit {
                return;
            }
        }
    }
    while size(s) > limit && s.incidents.pop().is_some() {}
}

/// The Ready=False reasons (`Invalid::reason`) that make a PodAlert
/// Stalled: its spec cannot be used, or asks for a cluster scope the
/// operator is configured never to grant here; only an edit changes that.
pub const STALLED_ON: [&str; 3] = [INVALID_SPEC, "NoAlertSet", "ClusterScopeRefused"];

/// The status to write; `previous`: the conditions last written.
pub fn build(previous: Option<&[Condition]>, generation: Option<i64>, book: &Book, s: &Summary) -> PodAlertStatus {
    let mut c = Conditions::new(previous, generation);
    if let Some((reason, message)) = &s.invalid {
        c.set("Ready", false, reason, message.clone());
    } else if s.paused {
        c.set("Ready", true, "Paused", "alerts.checkRunningPods is false: nothing is checked");
    } else {
        c.set(
            "Ready",
            true,
            "Evaluating",
            match book.silenced() {
                0 => format!("{} pods checked; {} incidents firing, {} pending", s.pods, book.firing(), book.pending()),
                n => format!(
                    "{} pods checked; {} incidents firing, {} pending, {n} silenced",
                    s.pods,
                    book.firing(),
                    book.pending()
                ),
            },
        );
    }
    let unhealthy: Vec<String> = s
        .sink_problems
        .iter()
        .map(|(sink, m)| format!("{sink}: {m}"))
        .chain(s.sinks.iter().filter(|x| !x.healthy).map(|x| format!("{}: {}", x.name, x.last_error)))
        .collect();
    if unhealthy.is_empty() {
        c.set(SINKS_HEALTHY, true, "Delivered", "every sink delivered its last notification");
    } else {
        let reason = if s.sink_problems.is_empty() { "DeliveryFailed" } else { "SinkMisconfigured" };
        c.set(SINKS_HEALTHY, false, reason, unhealthy.join("; "));
    }
    match &s.throttled {
        Some(m) => c.set(THROTTLED, true, "NamespaceRateLimit", m.clone()),
        None => c.set(THROTTLED, false, "WithinRateLimit", "no notification is waiting for the namespace's rate limit"),
    };
    c.stall_on(&STALLED_ON);
    let mut incidents: Vec<&Incident> = book.incidents.values().collect();
    incidents.sort_by(|a, b| (rank(&a.phase), &a.key).cmp(&(rank(&b.phase), &b.key)));
    let mut suppressed = s.skipped.clone();
    for (cause, count) in &book.held_back {
        *suppressed.entry((*cause).to_string()).or_default() += count;
    }
    let mut out = PodAlertStatus {
        observed_generation: generation,
        conditions: c.into_vec(),
        firing: n(book.firing()),
        pending: n(book.pending()),
        incidents: incidents
            .into_iter()
            .take(MAX_INCIDENTS_LISTED)
            .map(|i| incident_status(i, s.log_lines, s.log_bytes, s.events))
            .collect(),
        suppressed,
        sinks: s.sinks.clone(),
        silences: s.silences.clone(),
    };
    fit(&mut out, MAX_STATUS_BYTES);
    out
}

fn parse_workload(s: &str) -> Option<Workload> {
    let (kind, name) = s.split_once('/')?;
    Some(Workload { kind: kind.to_string().into(), name: name.into() })
}

fn parse_reason(s: &str) -> Option<Reason> {
    Reason::ALL.into_iter().find(|r| r.as_str() == s)
}

/// An incident's log tail and Warning Events as the status held them.
pub type Restored = (Key, String, Vec<String>);

/// The book as the status left it: incidents with their phase, what was
/// notified and their incarnations, and their log tails and Warning Events
/// apart (to be held in the shared store). Unreadable entries are skipped.
pub fn restore(status: &PodAlertStatus) -> (Book, Vec<Restored>) {
    let mut book = Book::default();
    let mut tails = Vec::new();
    for i in &status.incidents {
        let (Some(workload), Some(reason)) = (parse_workload(&i.workload), parse_reason(&i.reason)) else { continue };
        let changed = i.changed.as_ref().map_or(i.since.0, |t| t.0);
        let phase = match i.state.as_str() {
            // A silenced problem waits as a pending one does.
            "Pending" | "Silenced" => Phase::Pending,
            "Firing" => Phase::Firing,
            "Resolving" => Phase::Resolving { healthy_since: changed },
            "Resolved" => Phase::Resolved { at: changed },
            _ => continue,
        };
        let key = Key { namespace: i.namespace.clone(), workload, container: i.container.clone(), reason };
        let incident = Incident {
            key: key.clone(),
            phase,
            since: i.since.0,
            changed,
            pods: i.pods.iter().cloned().collect(),
            message: i.message.clone(),
            restarts: u32::try_from(i.restarts).unwrap_or(0),
            notified: i.notified,
            // Open but not notified: held back (the book cannot tell why any more).
            silenced: !i.notified && phase != Phase::Pending,
            notified_level: u32::try_from(i.notified_level).unwrap_or(0),
            incarnations: i.incarnations.iter().cloned().collect::<BTreeSet<_>>(),
            last_opened: i.notified.then_some(changed),
            log_source: None,
            logs: None,
            // Found again by the next evaluation.
            silencing: None,
            slack_thread: i.slack_thread.clone(),
        };
        if !i.logs.is_empty() || !i.events.is_empty() {
            tails.push((key.clone(), i.logs.clone(), i.events.clone()));
        }
        book.incidents.insert(key, incident);
    }
    (book, tails)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use crate::observe::tests::{crashing, pod, rules, t};
    use crate::observe::{RestartHistory, evaluate};

    fn book_with_incident() -> Book {
        let r = rules(serde_json::json!({}));
        let mut book = Book::default();
        let pods = [crashing(pod("web-1", "web"), 4, 95, "Error"), crashing(pod("web-2", "web"), 3, 96, "Error")];
        let f = evaluate(pods.iter(), &r, &mut RestartHistory::default(), t(100));
        book.step(&f, &r, t(100));
        book
    }

    #[test]
    fn status_lists_the_incident_and_counts() {
        let book = book_with_incident();
        let s = build(None, Some(2), &book, &Summary { pods: 2, ..Default::default() });
        assert_eq!((s.firing, s.pending), (1, 0));
        let i = &s.incidents[0];
        assert_eq!(
            (i.state.as_str(), i.workload.as_str(), i.reason.as_str()),
            ("Firing", "Deployment/web", "CrashLoopBackOff")
        );
        assert_eq!(i.pods, vec!["web-1", "web-2"]);
        assert!(i.notified);
        let ready = s.conditions.iter().find(|c| c.type_ == "Ready").unwrap();
        assert_eq!((ready.status.as_str(), ready.observed_generation), ("True", Some(2)));
    }

    #[test]
    fn restore_round_trips_what_matters() {
        let mut book = book_with_incident();
        let thread = crate::crd::SlackThread {
            channel: "C0123456789".into(),
            ts: "1712345678.000100".into(),
            spec_channel: Some("#alerts".into()),
            bot_token_secret_ref: Some(crate::crd::SecretKeyRef { name: "slack-bot".into(), key: "token".into() }),
        };
        book.incidents.values_mut().for_each(|i| i.slack_thread = Some(thread.clone()));
        let s = build(None, Some(1), &book, &Summary::default());
        assert_eq!(
            serde_json::to_value(&s.incidents[0]).unwrap()["slackThread"],
            serde_json::json!({
                "channel": "C0123456789", "ts": "1712345678.000100",
                "specChannel": "#alerts", "botTokenSecretRef": {"name": "slack-bot", "key": "token"},
            })
        );
        // A status written before threads said what posted them still reads.
        let old: crate::crd::SlackThread =
            serde_json::from_value(serde_json::json!({"channel": "C0123456789", "ts": "1712345678.000100"})).unwrap();
        assert_eq!((old.spec_channel, old.bot_token_secret_ref), (None, None));
        let (back, _) = restore(&s);
        let (a, b) = (book.incidents.values().next().unwrap(), back.incidents.values().next().unwrap());
        assert_eq!(a.key, b.key);
        assert_eq!(a.phase, b.phase);
        // A restart replies in the same Slack thread.
        assert_eq!(b.slack_thread.as_ref(), Some(&thread));
        assert_eq!((a.notified, a.notified_level, &a.incarnations), (b.notified, b.notified_level, &b.incarnations));
        // The restored book does not notify the open incident again.
        let r = rules(serde_json::json!({}));
        let mut back = back;
        let pods = [crashing(pod("web-1", "web"), 5, 120, "Error")];
        let f = evaluate(pods.iter(), &r, &mut RestartHistory::default(), t(130));
        assert!(back.step(&f, &r, t(130)).is_empty());
    }

    #[test]
    fn a_status_of_quoted_logs_fits_its_limits() {
        let r = rules(serde_json::json!({}));
        let mut book = Book::default();
        // 30 crash-looping workloads, each with 64 KiB of quotes in its tail.
        let pods: Vec<_> =
            (0..30).map(|n| crashing(pod(&format!("w{n}-1"), &format!("w{n}")), 4, 95, "Error")).collect();
        let f = evaluate(pods.iter(), &r, &mut RestartHistory::default(), t(100));
        book.step(&f, &r, t(100));
        for inc in book.incidents.values_mut() {
            inc.logs = Some(crate::logs::Tail::detached(&"\"".repeat(65536)));
            inc.message = "m".repeat(10_000);
            inc.incarnations = (0..32).map(|i| format!("containerd://{}{i}", "f".repeat(64))).collect();
        }
        let summary = Summary { log_lines: 1000, log_bytes: 65536, ..Default::default() };
        let s = build(None, Some(1), &book, &summary);
        let bytes = serde_json::to_vec(&s).unwrap().len();
        assert!(bytes <= MAX_STATUS_BYTES, "{bytes}");
        assert_eq!(s.incidents.len(), MAX_INCIDENTS_LISTED, "cut, not dropped");
        for i in &s.incidents {
            assert!(serde_json::to_string(&i.logs).unwrap().len() - 2 <= MAX_STATUS_TAIL);
        }
        // The first incidents keep the most.
        assert!(s.incidents[0].logs.len() >= s.incidents[19].logs.len());
        // A small status is left alone.
        let small = build(
            None,
            Some(1),
            &book_with_incident(),
            &Summary { log_lines: 50, log_bytes: 8192, ..Default::default() },
        );
        assert_eq!(small.incidents.len(), 1);
    }

    #[test]
    fn incidents_carry_their_events_in_status_when_shown() {
        let mut book = book_with_incident();
        let tail = crate::logs::Tail::detached("panic");
        tail.set_events(vec!["BackOff: Back-off restarting failed container app (x2)".into()]);
        for inc in book.incidents.values_mut() {
            inc.logs = Some(std::sync::Arc::clone(&tail));
        }
        let on = Summary { log_lines: 50, log_bytes: 8192, events: true, ..Default::default() };
        let s = build(None, Some(1), &book, &on);
        assert_eq!(s.incidents[0].events, vec!["BackOff: Back-off restarting failed container app (x2)"]);
        // An operator restart holds them again, with the tail.
        let (_, held) = restore(&s);
        assert_eq!(held[0].2, s.incidents[0].events);
        let off = Summary { events: false, ..on };
        assert!(build(None, Some(1), &book, &off).incidents[0].events.is_empty());
    }

    #[test]
    fn invalid_specs_and_sink_problems_are_conditions() {
        let s = build(
            None,
            None,
            &Book::default(),
            &Summary {
                invalid: Some(("ClusterScopeRefused".into(), "no".into())),
                sink_problems: vec![("slack".into(), "Secret team-a/hook not found".into())],
                ..Default::default()
            },
        );
        let get = |t: &str| s.conditions.iter().find(|c| c.type_ == t).unwrap().clone();
        assert_eq!((get("Ready").status.as_str(), get("Ready").reason.as_str()), ("False", "ClusterScopeRefused"));
        assert_eq!((get("Stalled").status.as_str(), get("Stalled").reason.as_str()), ("True", "ClusterScopeRefused"));
        assert_eq!(get(SINKS_HEALTHY).reason, "SinkMisconfigured");
        assert!(get(SINKS_HEALTHY).message.contains("not found"));
    }

    #[test]
    fn every_unusable_spec_is_stalled_and_a_usable_one_is_not() {
        use crate::rules::Invalid;
        for invalid in
            [Invalid::NoAlert, Invalid::Spec("x".into()), Invalid::ClusterScopeRefused { allowed: "a".into() }]
        {
            let summary =
                Summary { invalid: Some((invalid.reason().into(), invalid.to_string())), ..Default::default() };
            let s = build(None, None, &Book::default(), &summary);
            let stalled = s.conditions.iter().find(|c| c.type_ == "Stalled");
            assert_eq!(stalled.map(|c| c.reason.as_str()), Some(invalid.reason()), "{invalid:?}");
            let fixed = build(Some(&s.conditions), None, &Book::default(), &Summary::default());
            assert!(!fixed.conditions.iter().any(|c| c.type_ == "Stalled"), "{:?}", fixed.conditions);
        }
    }
}
