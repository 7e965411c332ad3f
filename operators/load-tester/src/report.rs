//! What a LoadTest's reconcile tells: its status (the Ready condition from
//! the state and what it waits for), the Events of the step — only once
//! the status that caused them is written —, and the runs counted in the
//! metrics when they end.

use flotilla_shared::conditions::{INVALID_SPEC, READY, Status};
use flotilla_shared::status::apply_status_if_changed;
use kube::api::Api;

use crate::controller::Data;
use crate::crd::{LoadTest, LoadTestStatus, State, Verdict};
use crate::error::Error;
use crate::metrics::LoadMetrics;

/// The condition saying whether a run's runners kept up (from its results).
pub const RUNNER_SATURATED: &str = "RunnerSaturated";

/// The Ready condition: what the run waits for, else its state; and
/// RunnerSaturated once a run has results.
fn ready_condition(
    old: Option<&LoadTestStatus>,
    new: &mut LoadTestStatus,
    generation: Option<i64>,
    waiting: Option<&(&'static str, String)>,
) {
    let mut c = flotilla_shared::Conditions::new(old.map(|s| s.conditions.as_slice()), generation);
    let (status, reason, message) = match (new.state, waiting) {
        (_, Some((reason, message))) => (Status::False, (*reason).to_string(), message.clone()),
        (State::Pending, None) => {
            (Status::False, "Pending".to_string(), format!("run {}: starting the runners", new.run))
        }
        (State::Executing, None) => {
            (Status::False, "Executing".to_string(), format!("run {}: the runners are sending", new.run))
        }
        (State::Finished, None) => {
            (Status::from(new.verdict != Verdict::Failed), new.reason.clone(), new.message.clone())
        }
        (State::Failed, None) => (Status::False, new.reason.clone(), new.message.clone()),
    };
    c.set(READY, status, &reason, message);
    // Whether the runners kept up, once a run's results say: a slow runner
    // must not pass for a slow server.
    match new.results.as_ref() {
        Some(r) if !r.saturated.is_empty() => {
            c.set(
                RUNNER_SATURATED,
                Status::True,
                "RunnerSaturated",
                format!("run {}: {}", new.run, r.saturated.join("; ")),
            );
        }
        Some(_) => {
            c.set(RUNNER_SATURATED, Status::False, "RunnersKeptUp", format!("run {}: every runner kept up", new.run));
        }
        None => {
            c.remove(RUNNER_SATURATED);
        }
    }
    // A spec that cannot run stays Failed until it is edited: Stalled.
    c.stall_on(&[INVALID_SPEC]);
    new.conditions = c.into_vec();
    new.observed_generation = generation;
}

/// Counts a run that has just ended (once: when its status says so first).
pub(crate) fn count_ended_run(old: Option<&LoadTestStatus>, new: &LoadTestStatus, metrics: &LoadMetrics, name: &str) {
    let was_terminal = old.is_some_and(|s| s.state.is_terminal() && s.run == new.run);
    if !new.state.is_terminal() || was_terminal {
        return;
    }
    metrics.runs.with_label_values(&[new.state.as_str(), &format!("{:?}", new.verdict)]).inc();
    if let Some(r) = &new.results {
        let errors = r.errors.values().fold(0i64, |a, b| a.saturating_add(*b));
        metrics
            .requests
            .with_label_values(&["ok"])
            .inc_by(u64::try_from(r.requests.saturating_sub(errors)).unwrap_or(0));
        for (kind, n) in &r.errors {
            metrics.requests.with_label_values(&[kind]).inc_by(u64::try_from(*n).unwrap_or(0));
        }
    }
    tracing::info!(loadtest = %name, run = new.run, state = new.state.as_str(), reason = %new.reason, "run ended");
}

#[allow(clippy::too_many_arguments)]
pub(crate) async fn write_status(
    test: &LoadTest,
    ns: &str,
    name: &str,
    mut st: LoadTestStatus,
    data: &Data,
    oref: &k8s_openapi::api::core::v1::ObjectReference,
    events: Vec<(bool, &'static str, String)>,
    waiting: Option<&(&'static str, String)>,
) -> Result<Option<LoadTestStatus>, Error> {
    ready_condition(test.status.as_ref(), &mut st, test.metadata.generation, waiting);
    let written = st.clone();
    let api: Api<LoadTest> = Api::namespaced(data.ctx.client.clone(), ns);
    let wrote = apply_status_if_changed(&api, name, &data.ctx.field_manager, test.status.as_ref(), &st)
        .await
        .map_err(|e| Error::Kube("status", e))?;
    if wrote {
        // Events only once the status that caused them is written: a
        // failed write is retried and must not repeat them.
        for (warning, reason, note) in events {
            if warning {
                data.ctx.events.warning(oref, reason, "Run", note);
            } else {
                data.ctx.events.normal(oref, reason, "Run", note);
            }
        }
    }
    Ok(Some(written))
}
