//! A PodAlert's findings kept namespace by namespace, so that a pod change
//! costs the evaluation of its own namespace, not of every pod the PodAlert
//! reads (issue 28). A cluster-wide PodAlert evaluated every pod of the
//! cluster at each reconcile, and under churn it is reconciled every 2 s
//! (the debounce's bound): 209 ms a reconcile at 150,000 pods, 0.1 CPU
//! second a second for that one PodAlert (`cargo xtask bench
//! pod-alert-evaluation`).
//!
//! What may be kept: a namespace's findings change only when one of its
//! pods does (its views change: the pod watch names the namespace), when
//! its silence annotation or one of its workloads' does (the namespace and
//! workload watches name it), when the
//! rules do (the PodAlert's generation), or with time — and time only at
//! moments the evaluation knows (`Findings::recheck_at`: a crash leaving
//! the restart window, a silence ending or coming within seven days), so a
//! namespace is read again when named or when that moment has come.
//! Everything is read again after a list (the first, one for new label
//! keys, a re-list after a watch error) and at least every [`FULL_EVERY`].
//! A property test holds the kept evaluation to what one evaluation of
//! every pod finds. (One difference it does not exercise: a problem whose
//! start is unknown — a pod without a creation time, a container without a
//! finish time, which API servers always set — counts from when it was
//! found, not from each evaluation.)

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;

use crate::observe::{Findings, Problem, RestartHistory, Skip, evaluate};
use crate::pod::{PodView, elapsed};
use crate::rules::Rules;

/// Every namespace is evaluated again at least this often, whatever was
/// named: a safety net that costs one full pass (~200 ms at 150,000 pods).
pub const FULL_EVERY: Duration = Duration::from_secs(600);

/// Namespaces named for one PodAlert beyond this many are "all of them":
/// reading that many costs about what a full pass does, and the set stays
/// bounded whatever the churn.
const MAX_NAMED: usize = 2048;

/// What changed since a PodAlert's last evaluation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Dirty {
    /// Anything may have (a list completed): evaluate everything.
    All,
    /// The pods or silences of these namespaces did.
    Namespaces(BTreeSet<Box<str>>),
}

impl Default for Dirty {
    fn default() -> Self {
        Dirty::Namespaces(BTreeSet::new())
    }
}

impl Dirty {
    fn add(&mut self, namespaces: &[&str]) {
        if let Dirty::Namespaces(set) = self {
            set.extend(namespaces.iter().map(|n| Box::from(*n)));
            if set.len() > MAX_NAMED {
                *self = Dirty::All;
            }
        }
    }
}

/// The namespaces changed for each cluster-wide PodAlert (by UID) since its
/// last reconcile took them: filled by the watches, taken by the reconcile.
#[derive(Debug, Default)]
pub struct Changes {
    by_alert: Mutex<HashMap<String, Dirty>>,
}

impl Changes {
    /// Notes what a watch event touched for the PodAlert `uid`.
    pub fn touched(&self, uid: &str, namespaces: &[&str], listed: bool) {
        if namespaces.is_empty() && !listed {
            return;
        }
        let mut map = self.by_alert.lock().unwrap_or_else(PoisonError::into_inner);
        let dirty = map.entry(uid.to_string()).or_default();
        if listed {
            *dirty = Dirty::All;
        } else {
            dirty.add(namespaces);
        }
    }

    /// What changed for `uid` since the last call (nothing noted: nothing).
    pub fn take(&self, uid: &str) -> Dirty {
        self.by_alert.lock().unwrap_or_else(PoisonError::into_inner).remove(uid).unwrap_or_default()
    }

    /// Forgets the PodAlerts `live` says are gone.
    pub fn retain(&self, live: impl Fn(&str) -> bool) {
        self.by_alert.lock().unwrap_or_else(PoisonError::into_inner).retain(|uid, _| live(uid));
    }
}

/// Where an evaluation reads pods: the PodAlert's scope of the pod cache.
pub trait Pods {
    /// The pods of `namespace` that `keep` keeps.
    fn in_namespace(&self, namespace: &str, keep: &mut dyn FnMut(&PodView) -> bool) -> Vec<Arc<PodView>>;
    /// Every pod of the scope that `keep` keeps.
    fn all(&self, keep: &mut dyn FnMut(&PodView) -> bool) -> Vec<Arc<PodView>>;
}

/// The whole pod cache (every namespace).
impl Pods for flotilla_shared::projection::Store<PodView, flotilla_shared::projection::Own<PodView>> {
    fn in_namespace(&self, namespace: &str, keep: &mut dyn FnMut(&PodView) -> bool) -> Vec<Arc<PodView>> {
        flotilla_shared::projection::Store::in_namespace(self, namespace, keep)
    }

    fn all(&self, keep: &mut dyn FnMut(&PodView) -> bool) -> Vec<Arc<PodView>> {
        self.matching(keep)
    }
}

/// The pods of one namespace of `P` (a namespace's PodAlert): "all" is
/// that namespace's.
pub struct OneNamespace<'a, P>(pub &'a P, pub &'a str);

impl<P: Pods> Pods for OneNamespace<'_, P> {
    fn in_namespace(&self, namespace: &str, keep: &mut dyn FnMut(&PodView) -> bool) -> Vec<Arc<PodView>> {
        self.0.in_namespace(namespace, keep)
    }

    fn all(&self, keep: &mut dyn FnMut(&PodView) -> bool) -> Vec<Arc<PodView>> {
        self.0.in_namespace(self.1, keep)
    }
}

/// What identifies the rules a kept evaluation was made with: the
/// PodAlert's generation (its spec) and whether it reads every namespace.
pub type Fingerprint = (Option<i64>, bool);

/// One evaluation's result over the whole scope.
#[derive(Debug, PartialEq, Eq)]
pub struct Outcome<'a> {
    /// As one evaluation of every pod of the scope would find them.
    pub findings: &'a Findings,
    /// Pods evaluated (selected).
    pub pods: usize,
    /// Pods whose labels were too many to keep (matched by no selector).
    pub cut: usize,
    /// Namespaces evaluated this time (for the figures and the tests).
    pub evaluated: usize,
}

/// One namespace's part of the whole: what it added, to take it out again
/// when it is evaluated anew. Its problems and silenced keys are found in
/// the whole by namespace (they sort by it), not held twice.
#[derive(Debug, Default)]
struct Slice {
    pods: u32,
    cut: u32,
    /// None when there is nothing to say (most namespaces): not allocated.
    part: Option<Box<Part>>,
    history: RestartHistory,
}

#[derive(Debug, Default)]
struct Part {
    problems: usize,
    skipped: Vec<(Skip, u32)>,
    silence_counts: Vec<u32>,
    refused_annotations: Vec<String>,
    refused_workloads: Vec<String>,
    refused_namespaces: Vec<String>,
    recheck_at: Option<Timestamp>,
}

impl Slice {
    /// Whether time alone may have changed its findings by `now`.
    fn due(&self, now: Timestamp) -> bool {
        self.part.as_ref().and_then(|p| p.recheck_at).is_some_and(|at| at <= now)
    }

    fn is_empty(&self) -> bool {
        self.pods == 0 && self.cut == 0 && self.part.is_none() && self.history.is_empty()
    }
}

/// A PodAlert's evaluation, kept per namespace between reconciles.
#[derive(Debug, Default)]
pub struct Evaluation {
    made_with: Option<Fingerprint>,
    last_full: Option<Timestamp>,
    slices: HashMap<Box<str>, Slice>,
    /// Every namespace's findings together (problems in key order).
    whole: Findings,
    pods: usize,
    cut: usize,
}

impl Evaluation {
    /// Evaluates again what `dirty` names and the namespaces whose findings
    /// time may have changed, or everything when the rules changed, a list
    /// completed or the last full pass is [`FULL_EVERY`] old; returns the
    /// findings of the whole scope.
    pub fn update(
        &mut self,
        made_with: Fingerprint,
        dirty: Dirty,
        rules: &Rules,
        pods: &dyn Pods,
        now: Timestamp,
    ) -> Outcome<'_> {
        let stale = self.last_full.is_none_or(|t| elapsed(t, now) >= FULL_EVERY);
        let evaluated = match dirty {
            Dirty::Namespaces(mut names) if self.made_with == Some(made_with) && !stale => {
                names.extend(self.slices.iter().filter(|(_, s)| s.due(now)).map(|(n, _)| n.clone()));
                for ns in &names {
                    let mut cut = 0;
                    let found = pods.in_namespace(ns, &mut |p| selected(rules, p, &mut cut));
                    let history = match self.slices.remove(&**ns) {
                        Some(old) => self.take_out(ns, old),
                        None => RestartHistory::default(),
                    };
                    self.put_in(ns, &found, cut, history, rules, now);
                }
                names.len()
            }
            _ => {
                self.made_with = Some(made_with);
                self.last_full = Some(now);
                self.full(rules, pods, now)
            }
        };
        self.whole.recheck_at = self.slices.values().filter_map(|s| s.part.as_ref()?.recheck_at).min();
        Outcome { findings: &self.whole, pods: self.pods, cut: self.cut, evaluated }
    }

    /// Every namespace of the scope, each with its restart history kept.
    fn full(&mut self, rules: &Rules, pods: &dyn Pods, now: Timestamp) -> usize {
        let mut cuts: HashMap<Box<str>, u32> = HashMap::new();
        let all = pods.all(&mut |p| {
            let mut cut = 0;
            let keep = selected(rules, p, &mut cut);
            if cut > 0 {
                *cuts.entry(p.namespace().into()).or_default() += cut;
            }
            keep
        });
        let mut groups: HashMap<&str, Vec<Arc<PodView>>> = HashMap::new();
        for p in &all {
            groups.entry(p.namespace()).or_default().push(Arc::clone(p));
        }
        let mut old = std::mem::take(&mut self.slices);
        self.whole = Findings { silence_counts: vec![0; rules.silences.len()], ..Findings::default() };
        (self.pods, self.cut) = (0, 0);
        let mut names: BTreeSet<Box<str>> = old.keys().cloned().collect();
        names.extend(groups.keys().map(|n| Box::from(*n)));
        names.extend(cuts.keys().cloned());
        for ns in &names {
            let found = groups.remove(&**ns).unwrap_or_default();
            let history = old.remove(&**ns).map(|s| s.history).unwrap_or_default();
            self.put_in(ns, &found, cuts.get(ns).copied().unwrap_or(0), history, rules, now);
        }
        names.len()
    }

    /// Takes a namespace's last findings out of the whole; its restart
    /// history goes on.
    fn take_out(&mut self, ns: &str, old: Slice) -> RestartHistory {
        self.pods -= old.pods as usize;
        self.cut -= old.cut as usize;
        let Some(part) = old.part else { return old.history };
        let whole = &mut self.whole;
        if part.problems > 0 {
            let (from, to) = range_of(&whole.problems, ns);
            whole.problems.drain(from..to);
            whole.silenced.retain(|k, _| &*k.namespace != ns);
        }
        for (skip, n) in part.skipped {
            if let Some(sum) = whole.skipped.get_mut(&skip) {
                *sum = sum.saturating_sub(n);
                if *sum == 0 {
                    whole.skipped.remove(&skip);
                }
            }
        }
        for (sum, n) in whole.silence_counts.iter_mut().zip(&part.silence_counts) {
            *sum = sum.saturating_sub(*n);
        }
        for pod in &part.refused_annotations {
            whole.refused_annotations.remove(pod);
        }
        for w in &part.refused_workloads {
            whole.refused_workloads.remove(w);
        }
        for n in &part.refused_namespaces {
            whole.refused_namespaces.remove(n);
        }
        old.history
    }

    /// Evaluates one namespace's selected pods and adds its findings to the
    /// whole (moved, not copied).
    fn put_in(
        &mut self,
        ns: &str,
        found: &[Arc<PodView>],
        cut: u32,
        mut history: RestartHistory,
        rules: &Rules,
        now: Timestamp,
    ) {
        let f = evaluate(found.iter().map(AsRef::as_ref), rules, &mut history, now);
        let pods = u32::try_from(found.len()).unwrap_or(u32::MAX);
        (self.pods, self.cut) = (self.pods + pods as usize, self.cut + cut as usize);
        let part = (!says_nothing(&f)).then(|| {
            let whole = &mut self.whole;
            let part = Part {
                problems: f.problems.len(),
                skipped: f.skipped.iter().map(|(k, n)| (*k, *n)).collect(),
                silence_counts: f.silence_counts.clone(),
                refused_annotations: f.refused_annotations.iter().cloned().collect(),
                refused_workloads: f.refused_workloads.iter().cloned().collect(),
                refused_namespaces: f.refused_namespaces.iter().cloned().collect(),
                recheck_at: f.recheck_at,
            };
            let (at, _) = range_of(&whole.problems, ns);
            whole.problems.splice(at..at, f.problems);
            whole.silenced.extend(f.silenced);
            for (skip, n) in f.skipped {
                *whole.skipped.entry(skip).or_default() += n;
            }
            for (sum, n) in whole.silence_counts.iter_mut().zip(&f.silence_counts) {
                *sum += n;
            }
            whole.refused_annotations.extend(f.refused_annotations);
            whole.refused_workloads.extend(f.refused_workloads);
            whole.refused_namespaces.extend(f.refused_namespaces);
            Box::new(part)
        });
        let slice = Slice { pods, cut, part, history };
        if !slice.is_empty() {
            self.slices.insert(ns.into(), slice);
        }
    }

    /// When time alone may next change the findings (None: only a change
    /// of the pods, their namespaces or the rules can).
    pub fn recheck_at(&self) -> Option<Timestamp> {
        self.whole.recheck_at
    }

    /// Namespaces kept (for the figures and the tests).
    pub fn namespaces(&self) -> usize {
        self.slices.len()
    }
}

/// Where `ns`'s problems are in problems sorted by key (the namespace first).
fn range_of(problems: &[Problem], ns: &str) -> (usize, usize) {
    let from = problems.partition_point(|p| &*p.key.namespace < ns);
    let to = from + problems[from..].partition_point(|p| &*p.key.namespace == ns);
    (from, to)
}

/// Whether `rules` select `p`; a pod whose labels were too many to keep
/// matches no selector and is counted in `cut`.
fn selected(rules: &Rules, p: &PodView, cut: &mut u32) -> bool {
    match rules.selector.as_ref() {
        None => true,
        Some(_) if p.labels().is_cut() => {
            *cut += 1;
            false
        }
        Some(s) => p.labels().matched_by(s),
    }
}

/// Findings with nothing in them (silence counts all zero).
fn says_nothing(f: &Findings) -> bool {
    f.problems.is_empty()
        && f.skipped.is_empty()
        && f.silenced.is_empty()
        && f.refused_annotations.is_empty()
        && f.refused_workloads.is_empty()
        && f.refused_namespaces.is_empty()
        && f.silence_counts.iter().all(|&n| n == 0)
        && f.recheck_at.is_none()
}

#[cfg(test)]
mod tests;
