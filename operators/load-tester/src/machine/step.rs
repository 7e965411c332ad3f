//! What a step of the machine ([`super::step`]) is given and gives back:
//! what the controller looked at, what it must look at next, and what it
//! must do.

use std::time::Duration;

use crate::crd::{BaselineStatus, LoadTestStatus};
use crate::runner::Runner;

use super::Target;
use super::progress::{Live, RunnerLog};

/// What the controller looked at for this step.
#[derive(Debug, Clone, Copy)]
pub struct Seen<'a> {
    /// The test's runner pods (of every run).
    pub runners: &'a [Runner],
    pub target: &'a Target,
    /// Runner pods that are not this run's and not done (Succeeded or
    /// Failed) in the namespace, of every LoadTest (None: not counted).
    pub others_in_namespace: Option<usize>,
    /// spec.baseline's LoadTest (another than this one) as a baseline
    /// (None: not looked at).
    pub baseline: Option<&'a BaselineStatus>,
    /// The last lines of the running runners' logs (None: not read); once
    /// every runner ended, those of the runners whose fuller summary is
    /// there ([`Need::Summaries`]).
    pub progress: Option<&'a [RunnerLog]>,
}

/// What the step needs looked at before it can decide; the controller
/// looks and steps again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Need {
    /// The target Service; with its EndpointSlices when `endpoints`.
    Target { endpoints: bool },
    /// The namespace's runner pods ([`Seen::others_in_namespace`]).
    Room,
    /// spec.baseline's LoadTest, when a run starts ([`Seen::baseline`]).
    Baseline,
    /// The logs of these runners, for the run's progress ([`Seen::progress`]).
    Progress(Vec<String>),
    /// The logs of these ended runners, for the fuller summaries their
    /// termination messages had no room for ([`Seen::progress`]).
    Summaries(Vec<String>),
}

/// What the controller must do.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Step {
    pub status: LoadTestStatus,
    /// Runner indices of the current run to create.
    pub create: Vec<usize>,
    /// Runner pods to give the start signal.
    pub signal: Vec<String>,
    /// Runner pods to delete.
    pub delete: Vec<String>,
    /// Runner pods to give the stop signal (thresholds.abortOnFail).
    pub stop: Vec<String>,
    /// The run's figures so far, when its progress was read in this step.
    pub live: Option<Live>,
    /// Events: (warning, reason, note).
    pub events: Vec<(bool, &'static str, String)>,
    /// Look again at the latest then.
    pub requeue: Option<Duration>,
    /// Look at this, then step again.
    pub needs: Option<Need>,
    /// Why the wanted run waits (Ready=False with this reason and message).
    pub waiting: Option<(&'static str, String)>,
}
