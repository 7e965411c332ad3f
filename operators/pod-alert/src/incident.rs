//! The incident state machine of one PodAlert. Pure: each evaluation's
//! findings go in, transitions to notify come out.
//!
//! ```text
//!            grace elapsed             problem gone          resolveAfter healthy
//!  Pending ───────────────▶ Firing ─────────────────▶ Resolving ──────────────▶ Resolved
//!     │ problem gone          ▲   problem back (no notification)  │                 │ restartWindow
//!     ▼                       └───────────────────────────────────┘                 ▼
//!  (dropped: RecoveredInGrace)                                                 (forgotten)
//! ```
//!
//! Notifications: `Opened` (Pending → Firing, unless a cooldown or a log
//! pattern silences it), `Escalated` (restarts pass 3, 10, 50) and
//! `Resolved` (of an incident whose opening was sent). Findings are levels,
//! not edges, so a hundred pod updates of one crash loop give one opening;
//! terminated containers are notified once per incarnation (container ID),
//! remembered across resolves and, through the status, across restarts.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;

use crate::crd::{Reason, SlackThread};
use crate::logs::Tail;
use crate::observe::{Findings, Key, Problem};
use crate::pod::{after, elapsed};
use crate::rules::Rules;
use crate::silence::Silencing;

/// Restart counts whose passing is an escalation.
pub const ESCALATION_LEVELS: [u32; 3] = [3, 10, 50];
/// How long Alertmanager is told of a resolved incident.
pub const RESOLVED_RESEND: Duration = Duration::from_secs(5 * 60);
/// Incarnations remembered per incident, at most (the newest).
const MAX_INCARNATIONS: usize = 32;

/// The highest escalation level `restarts` reached (0 below the first).
pub fn level(restarts: u32) -> u32 {
    ESCALATION_LEVELS.iter().copied().filter(|&l| restarts >= l).max().unwrap_or(0)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Seen, within its grace period: not notified.
    Pending,
    Firing,
    /// Healthy since this time, waiting resolveAfter.
    Resolving {
        healthy_since: Timestamp,
    },
    /// Resolved at this time; kept to remember its incarnations.
    Resolved {
        at: Timestamp,
    },
}

impl Phase {
    pub fn as_str(&self) -> &'static str {
        match self {
            Phase::Pending => "Pending",
            Phase::Firing => "Firing",
            Phase::Resolving { .. } => "Resolving",
            Phase::Resolved { .. } => "Resolved",
        }
    }

    /// Open: notified (or silenced) and not resolved.
    pub fn is_open(&self) -> bool {
        matches!(self, Phase::Firing | Phase::Resolving { .. })
    }
}

/// One incident.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Incident {
    pub key: Key,
    pub phase: Phase,
    /// When the problem started.
    pub since: Timestamp,
    /// When the phase last changed.
    pub changed: Timestamp,
    pub pods: BTreeSet<String>,
    pub message: String,
    pub restarts: u32,
    /// The opening was sent to the sinks.
    pub notified: bool,
    /// The opening was held back (cooldown, log pattern): nothing about
    /// this incident is sent, not its resolve either.
    pub silenced: bool,
    pub notified_level: u32,
    /// Incarnations (terminated container IDs) this incident covered.
    pub incarnations: BTreeSet<String>,
    /// When an opening of this key was last sent (for the cooldown).
    pub last_opened: Option<Timestamp>,
    /// The pod whose log the incident carries, and which run.
    pub log_source: Option<LogSource>,
    /// The log tail, shared with every other PodAlert's incident of this
    /// key ([`crate::logs::Tails`]).
    pub logs: Option<Arc<Tail>>,
    /// The silence covering it at the last evaluation ([`crate::silence`]):
    /// while it lasts, the incident neither opens nor escalates.
    pub silencing: Option<Silencing>,
    /// Its Slack thread (a bot token's sink), once Slack named it: kept in
    /// status, so an operator restart replies in the same thread.
    pub slack_thread: Option<SlackThread>,
}

/// Where an incident's log tail is read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogSource {
    pub pod: String,
    /// The crashed run is the kubelet's `previous` (a new run is alive), as
    /// the evaluation saw the pod.
    pub previous: bool,
    /// The crashed run's container ID, when there is one.
    pub incarnation: Option<String>,
    /// The container to read when the incident's key names none (a failed
    /// Job's incident).
    pub container: Option<String>,
}

impl Incident {
    /// The Warning Events held with the log tail, when `shown`
    /// (spec.logs.events); none when none were read.
    pub fn event_lines(&self, shown: bool) -> Vec<String> {
        match (&self.logs, shown) {
            (Some(t), true) => t.events().map(|e| e.to_vec()).unwrap_or_default(),
            _ => Vec::new(),
        }
    }

    /// The log tail as a PodAlert with `lines` and `max_bytes` sees it.
    pub fn log_text(&self, lines: u32, max_bytes: usize) -> String {
        self.logs.as_ref().map(|t| t.view(lines, max_bytes)).unwrap_or_default()
    }
}

/// What to notify.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// `replaces`: an open incident of the same container had another reason.
    Opened {
        replaces: Option<Reason>,
    },
    Escalated {
        level: u32,
    },
    Resolved,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transition {
    pub key: Key,
    pub change: Change,
    /// The incarnations this transition covers (for the dedupe proof).
    pub incarnations: BTreeSet<String>,
}

/// Causes of held-back notifications, counted since the operator started.
pub const COOLDOWN: &str = "Cooldown";
pub const LOG_PATTERN: &str = "LogPattern";
pub const RECOVERED_IN_GRACE: &str = "RecoveredInGrace";
pub const ALREADY_NOTIFIED: &str = "AlreadyNotified";

/// The incidents of one PodAlert.
#[derive(Debug, Clone, Default)]
pub struct Book {
    pub incidents: BTreeMap<Key, Incident>,
    /// Held-back notifications by cause.
    pub held_back: BTreeMap<&'static str, i64>,
}

/// The problems of one key in one evaluation.
struct Group<'a> {
    problems: Vec<&'a Problem>,
}

impl Group<'_> {
    /// The pods named (a workload's own problem names none, or the failed
    /// Job's pod whose log it shows).
    fn pods(&self) -> BTreeSet<String> {
        self.problems.iter().filter(|p| !p.pod.is_empty()).map(|p| p.pod.clone()).collect()
    }
    fn restarts(&self) -> u32 {
        self.problems.iter().map(|p| p.restarts).max().unwrap_or(0)
    }
    fn since(&self, now: Timestamp) -> Timestamp {
        self.problems.iter().map(|p| p.since).min().unwrap_or(now)
    }
    fn incarnations(&self) -> BTreeSet<String> {
        self.problems.iter().filter_map(|p| p.incarnation.clone()).collect()
    }
    /// The most restarted pod speaks for the group.
    fn representative(&self) -> Option<&Problem> {
        self.problems.iter().copied().max_by(|a, b| a.restarts.cmp(&b.restarts).then(b.pod.cmp(&a.pod)))
    }
}

fn remember(set: &mut BTreeSet<String>, new: &BTreeSet<String>) {
    set.extend(new.iter().cloned());
    while set.len() > MAX_INCARNATIONS {
        set.pop_first();
    }
}

impl Book {
    /// Steps the machine with one evaluation's findings at `now`.
    pub fn step(&mut self, findings: &Findings, rules: &Rules, now: Timestamp) -> Vec<Transition> {
        let mut groups: BTreeMap<&Key, Group<'_>> = BTreeMap::new();
        for p in &findings.problems {
            groups.entry(&p.key).or_insert_with(|| Group { problems: Vec::new() }).problems.push(p);
        }
        let mut out = Vec::new();
        for (key, group) in &groups {
            self.observe(key, group, findings.silenced.get(*key), rules, now, &mut out);
        }
        let absent: Vec<Key> = self.incidents.keys().filter(|k| !groups.contains_key(k)).cloned().collect();
        for key in absent {
            if let Some(inc) = self.incidents.get_mut(&key) {
                inc.silencing = None;
            }
            self.heal(&key, rules, now, &mut out);
        }
        out
    }

    fn observe(
        &mut self,
        key: &Key,
        g: &Group<'_>,
        silencing: Option<&Silencing>,
        rules: &Rules,
        now: Timestamp,
        out: &mut Vec<Transition>,
    ) {
        let incarnations = g.incarnations();
        let rep = g.representative();
        let fresh = |last_opened: Option<Timestamp>| Incident {
            key: key.clone(),
            phase: Phase::Pending,
            since: g.since(now),
            changed: now,
            pods: BTreeSet::new(),
            message: String::new(),
            restarts: 0,
            notified: false,
            silenced: false,
            notified_level: 0,
            incarnations: BTreeSet::new(),
            last_opened,
            log_source: None,
            logs: None,
            silencing: None,
            slack_thread: None,
        };
        let incident = match self.incidents.get(key) {
            // Back after a resolve: an old termination (all its incarnations
            // already notified) is not a new incident.
            Some(old @ Incident { phase: Phase::Resolved { .. }, .. }) => {
                if !incarnations.is_empty() && incarnations.is_subset(&old.incarnations) {
                    *self.held_back.entry(ALREADY_NOTIFIED).or_default() += 1;
                    return;
                }
                let mut new = fresh(old.last_opened);
                new.incarnations = old.incarnations.clone();
                self.incidents.insert(key.clone(), new);
                self.incidents.get_mut(key)
            }
            Some(_) => self.incidents.get_mut(key),
            None => {
                self.incidents.insert(key.clone(), fresh(None));
                self.incidents.get_mut(key)
            }
        };
        let Some(inc) = incident else { return };
        inc.silencing = silencing.cloned();
        inc.pods = g.pods();
        inc.restarts = g.restarts();
        if let Some(r) = rep {
            inc.message = r.message.clone();
            inc.log_source = Some(LogSource {
                pod: r.pod.clone(),
                previous: r.previous_logs,
                incarnation: r.incarnation.clone(),
                container: r.log_container.clone(),
            });
        }
        match inc.phase {
            Phase::Pending => {
                inc.since = inc.since.min(g.since(now));
                // Silenced: it waits, and opens when the silence ends.
                if inc.silencing.is_none() && elapsed(inc.since, now) >= rules.grace(key.reason) {
                    let new_incarnations: BTreeSet<String> =
                        incarnations.difference(&inc.incarnations).cloned().collect();
                    if !incarnations.is_empty() && new_incarnations.is_empty() {
                        // Every termination it shows was notified before.
                        *self.held_back.entry(ALREADY_NOTIFIED).or_default() += 1;
                        self.incidents.remove(key);
                        return;
                    }
                    inc.phase = Phase::Firing;
                    inc.changed = now;
                    inc.notified_level = level(inc.restarts);
                    remember(&mut inc.incarnations, &incarnations);
                    if inc.last_opened.is_some_and(|t| elapsed(t, now) < rules.cooldown) {
                        inc.silenced = true;
                        *self.held_back.entry(COOLDOWN).or_default() += 1;
                    } else {
                        inc.notified = true;
                        inc.last_opened = Some(now);
                        let replaces = self.replaced_reason(key);
                        out.push(Transition {
                            key: key.clone(),
                            change: Change::Opened { replaces },
                            incarnations: new_incarnations,
                        });
                    }
                }
            }
            Phase::Firing | Phase::Resolving { .. } => {
                if matches!(inc.phase, Phase::Resolving { .. }) {
                    inc.phase = Phase::Firing;
                    inc.changed = now;
                }
                let new_incarnations: BTreeSet<String> = incarnations.difference(&inc.incarnations).cloned().collect();
                remember(&mut inc.incarnations, &incarnations);
                let reached = level(inc.restarts);
                // Silenced: no escalation (sent when the silence ends, if still reached).
                if reached > inc.notified_level && inc.silencing.is_none() {
                    inc.notified_level = reached;
                    if inc.notified {
                        out.push(Transition {
                            key: key.clone(),
                            change: Change::Escalated { level: reached },
                            incarnations: new_incarnations,
                        });
                    }
                }
            }
            Phase::Resolved { .. } => {}
        }
    }

    /// Another open, notified incident of the same container with another reason.
    fn replaced_reason(&self, key: &Key) -> Option<Reason> {
        self.incidents
            .values()
            .find(|i| {
                i.key.reason != key.reason
                    && i.key.namespace == key.namespace
                    && i.key.workload == key.workload
                    && i.key.container == key.container
                    && i.phase.is_open()
                    && i.notified
            })
            .map(|i| i.key.reason)
    }

    fn heal(&mut self, key: &Key, rules: &Rules, now: Timestamp, out: &mut Vec<Transition>) {
        let Some(inc) = self.incidents.get_mut(key) else { return };
        match inc.phase {
            Phase::Pending => {
                self.incidents.remove(key);
                *self.held_back.entry(RECOVERED_IN_GRACE).or_default() += 1;
            }
            Phase::Firing => {
                inc.phase = Phase::Resolving { healthy_since: now };
                inc.changed = now;
            }
            Phase::Resolving { healthy_since } => {
                if elapsed(healthy_since, now) >= rules.resolve_after {
                    inc.phase = Phase::Resolved { at: now };
                    inc.changed = now;
                    if inc.notified && !inc.silenced {
                        out.push(Transition {
                            key: key.clone(),
                            change: Change::Resolved,
                            incarnations: BTreeSet::new(),
                        });
                    }
                }
            }
            Phase::Resolved { at } => {
                if elapsed(at, now) >= rules.restart_window.max(RESOLVED_RESEND) {
                    self.incidents.remove(key);
                }
            }
        }
    }

    /// Holds back an opening or escalation just returned by [`Book::step`]
    /// (its log tail matched an ignore.logPatterns entry).
    pub fn silence(&mut self, key: &Key) {
        if let Some(inc) = self.incidents.get_mut(key).filter(|i| i.notified && !i.silenced) {
            inc.silenced = true;
            *self.held_back.entry(LOG_PATTERN).or_default() += 1;
        }
    }

    /// When the machine must be stepped again even if no pod changes: a
    /// grace period, a hold-down or a tombstone ending.
    pub fn next_deadline(&self, rules: &Rules, now: Timestamp) -> Option<Timestamp> {
        self.incidents
            .values()
            .map(|i| match (&i.phase, &i.silencing) {
                // Silenced: it may open when the silence ends.
                (Phase::Pending, Some(s)) => after(i.since, rules.grace(i.key.reason)).max(s.until),
                (Phase::Pending, None) => after(i.since, rules.grace(i.key.reason)),
                // A crash loop ends by its last crash ageing out of the
                // window, which no pod update announces: look again.
                (Phase::Firing, _) => after(now, Duration::from_secs(60)),
                (Phase::Resolving { healthy_since }, _) => after(*healthy_since, rules.resolve_after),
                (Phase::Resolved { at }, _) => after(*at, rules.restart_window.max(RESOLVED_RESEND)),
            })
            .min()
    }

    /// Incidents Alertmanager must hear of now: open and notified ones
    /// (firing), and notified ones resolved within [`RESOLVED_RESEND`].
    pub fn for_alertmanager(&self, now: Timestamp) -> Vec<&Incident> {
        self.incidents
            .values()
            .filter(|i| i.notified && !i.silenced)
            .filter(|i| match i.phase {
                Phase::Firing | Phase::Resolving { .. } => true,
                Phase::Resolved { at } => elapsed(at, now) < RESOLVED_RESEND,
                Phase::Pending => false,
            })
            .collect()
    }

    pub fn firing(&self) -> usize {
        self.incidents.values().filter(|i| i.phase.is_open()).count()
    }

    /// Problems within their grace period (silenced ones aside).
    pub fn pending(&self) -> usize {
        self.incidents.values().filter(|i| i.phase == Phase::Pending && i.silencing.is_none()).count()
    }

    /// Problems a silence holds back from opening.
    pub fn silenced(&self) -> usize {
        self.incidents.values().filter(|i| i.phase == Phase::Pending && i.silencing.is_some()).count()
    }
}

#[cfg(test)]
mod tests;
