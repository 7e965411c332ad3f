//! The durations a LoadTest's spec holds, checked, and the operator's
//! bounds on its runs.

use std::time::Duration;

use crate::schedule::Schedule;

/// Durations the spec holds, checked, and the operator's bounds.
#[derive(Debug, Clone)]
pub struct Limits {
    /// spec.deadline; see [`Limits::run_deadline`] for the one that holds.
    pub deadline: Duration,
    pub start_timeout: Duration,
    /// spec.load.duration: the runners send for this long.
    pub duration: Option<Duration>,
    /// A new run starts no sooner than this after the last one started.
    pub min_rerun_interval: Duration,
    /// Runner pods of one namespace at once, every LoadTest's together.
    pub max_runners_per_namespace: usize,
    /// spec.schedule, checked.
    pub schedule: Option<Schedule>,
}

/// What a fixed-time run may take past its start-up and duration: the
/// runners' grace before the deadline (at most 10 s), the start signal
/// reaching them through the kubelet, their summaries being read.
pub const DURATION_SLACK: Duration = Duration::from_secs(60);

impl Limits {
    /// The deadline that holds, from the run's start: spec.deadline, but
    /// never less than startTimeout + load.duration + [`DURATION_SLACK`]:
    /// a run that started within its startTimeout is never timed out
    /// before its runners have sent for the whole duration.
    pub fn run_deadline(&self) -> Duration {
        match self.duration {
            None => self.deadline,
            Some(d) => self.deadline.max(self.start_timeout.saturating_add(d).saturating_add(DURATION_SLACK)),
        }
    }
}
