//! Whether the ValidatingAdmissionPolicy that guards an operator's wider
//! powers is in place — and, when it is not, refusing those powers.
//!
//! Some of what an operator can do on a custom resource's behalf is safe
//! only because an admission policy let just the right people write it
//! (config-copier's `onConflict: Overwrite`, pod-alert's `allNamespaces`,
//! pod-debugger's debug containers, load-tester's custom images). A policy
//! can go missing without anyone choosing it: a GitOps tool that renders
//! the chart for a cluster without the API, a sync that failed for that one
//! object, a cleanup. Then the operator would grant the powers to anyone
//! who may write the resource. With `--require-admission-policy=<name>`
//! (the charts set it whenever they install the policy) the operator checks,
//! at start and then every minute, that the policy and its binding exist
//! and deny: policy `<name>` with `failurePolicy: Fail`, binding `<name>`
//! naming it with the `Deny` action. Until they do, [`AdmissionGuard::check`]
//! says why, and the operator refuses the guarded powers with that message
//! as a condition (fail closed: a policy the API server says is gone, or
//! that the operator may not read, counts as missing; while the API server
//! cannot answer at all, the last verdict stands).

use std::sync::Arc;
use std::time::Duration;

use futures::Stream;
use k8s_openapi::api::admissionregistration::v1::{ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding};
use kube::{Api, Client};
use prometheus::IntGauge;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// `--require-admission-policy`, for the operators whose powers a policy guards.
#[derive(clap::Args, Debug, Clone)]
pub struct AdmissionPolicyArgs {
    /// Name of the ValidatingAdmissionPolicy (and of its binding) that guards this operator's wider powers.
    /// When set, those powers are refused while the policy or its binding is missing, checked at start and
    /// every --admission-policy-check-interval (the chart sets it whenever it installs the policy). Empty: not
    /// checked.
    #[arg(long, env = "REQUIRE_ADMISSION_POLICY", value_name = "NAME")]
    pub require_admission_policy: Option<String>,

    /// How often the policy of --require-admission-policy is looked at again.
    #[arg(long, env = "ADMISSION_POLICY_CHECK_INTERVAL", default_value = "1m", value_parser = crate::duration::parse_flag, value_name = "DURATION")]
    pub admission_policy_check_interval: Duration,
}

impl AdmissionPolicyArgs {
    /// The policy's name, when one is required.
    pub fn name(&self) -> Option<&str> {
        self.require_admission_policy.as_deref().filter(|n| !n.is_empty())
    }

    pub fn validate(&self) -> Result<(), crate::ConfigError> {
        if self.admission_policy_check_interval < Duration::from_secs(1) {
            return Err(crate::ConfigError::new("admission-policy-check-interval", "must be 1s or more"));
        }
        if let Some(name) = self.name() {
            crate::config::check_dns_subdomain(name)
                .map_err(|m| crate::ConfigError::new("require-admission-policy", m))?;
        }
        Ok(())
    }
}

/// The answer of one check: `None` when the policy is in place (or none is
/// required), else why the guarded powers are refused.
type Verdict = Option<String>;

/// See the module docs. Cheap to clone.
#[derive(Clone)]
pub struct AdmissionGuard {
    verdict: watch::Receiver<Verdict>,
}

impl AdmissionGuard {
    /// No policy required: every check passes.
    pub fn not_required() -> Self {
        let (_, verdict) = watch::channel(None);
        Self { verdict }
    }

    /// The guard `args` ask for, its gauge
    /// `flotilla_admission_policy_in_place{policy}` registered with the
    /// operator's metrics.
    pub async fn for_operator(ctx: &crate::Context, args: &AdmissionPolicyArgs) -> Result<Self, prometheus::Error> {
        let Some(name) = args.name() else { return Ok(Self::not_required()) };
        let opts = prometheus::Opts::new(
            "flotilla_admission_policy_in_place",
            "1 while the admission policy guarding this operator's wider powers (--require-admission-policy) and its \
             binding are in place; 0 while those powers are refused",
        )
        .const_label("policy", name);
        let gauge = ctx.metrics.register(IntGauge::with_opts(opts)?)?;
        let period = args.admission_policy_check_interval;
        Ok(Self::start(ctx.client.clone(), name.to_string(), gauge, ctx.shutdown_token(), period).await)
    }

    /// Checks policy `name` once (so the first reconciles already know), then
    /// every `period` until `shutdown`. `in_place`: a gauge set to 1 while
    /// the policy is in place, 0 while not.
    pub async fn start(
        client: Client,
        name: String,
        in_place: IntGauge,
        shutdown: CancellationToken,
        period: Duration,
    ) -> Self {
        // At start there is no verdict to keep: an unreachable policy is missing.
        let first = match verify(&client, &name).await {
            Check::Read(verdict) => verdict,
            Check::Unreachable(why) => missing(&name, why),
        };
        report(&name, None, &first, &in_place);
        let (tx, verdict) = watch::channel(first);
        let tx = Arc::new(tx);
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    () = shutdown.cancelled() => break,
                    () = tokio::time::sleep(period) => {}
                }
                let before = tx.borrow().clone();
                let now = match verify(&client, &name).await {
                    Check::Read(verdict) => verdict,
                    Check::Unreachable(why) => keep_through_outage(&name, &before, why),
                };
                report(&name, Some(&before), &now, &in_place);
                tx.send_if_modified(|v| {
                    // A new reason for the same refusal is not a change.
                    let changed = v.is_some() != now.is_some();
                    *v = now;
                    changed
                });
            }
        });
        Self { verdict }
    }

    /// `Ok` when the guarded powers may be used; else the message to put
    /// into the refusing condition.
    pub fn check(&self) -> Result<(), String> {
        match self.verdict.borrow().as_deref() {
            None => Ok(()),
            Some(why) => Err(why.to_string()),
        }
    }

    /// Yields each time the policy goes missing or comes back: the
    /// operator reconciles what uses the guarded powers again.
    pub fn changes(&self) -> impl Stream<Item = ()> + Send + 'static {
        let mut rx = self.verdict.clone();
        rx.mark_unchanged();
        futures::stream::unfold(rx, |mut rx| async move { rx.changed().await.ok().map(|()| ((), rx)) })
    }
}

/// Logs a change of verdict (the first one included), not every check.
fn report(name: &str, before: Option<&Verdict>, now: &Verdict, in_place: &IntGauge) {
    in_place.set(i64::from(now.is_none()));
    match (before, now) {
        (Some(b), n) if b == n => {}
        (_, Some(why)) => tracing::warn!(policy = name, "{why}"),
        (Some(Some(_)), None) => {
            tracing::info!(policy = name, "admission policy in place again: guarded powers restored")
        }
        (_, None) => tracing::info!(policy = name, "admission policy in place"),
    }
}

/// What one check found: the policy's verdict, or that the API server could
/// not answer (unreachable, failing, overloaded).
enum Check {
    Read(Verdict),
    Unreachable(String),
}

/// The refusal for policy `name`, saying why.
fn missing(name: &str, what: impl std::fmt::Display) -> Verdict {
    Some(format!(
        "the admission policy {name} that guards this is not in place ({what}); refused until it is restored \
         (--require-admission-policy)"
    ))
}

/// Whether `e` says the API server could not answer for now — no
/// connection, a 5xx, 429 — rather than what it holds or what this operator
/// may read (404, 403: those are answers, and fail closed).
fn unreachable(e: &kube::Error) -> bool {
    match e {
        kube::Error::Api(status) => status.code >= 500 || status.code == 429,
        kube::Error::HyperError(_) | kube::Error::Service(_) => true,
        _ => false,
    }
}

/// The verdict while the API server cannot be asked: the last one. Nobody
/// can create or change a guarded resource through an API server that does
/// not answer, so a policy in place before the outage still guards what
/// exists; taking it as missing refused the powers for every resource at
/// once, and pod-alert then dropped and re-notified the incidents of its
/// `allNamespaces` PodAlerts after an API server restart (issue 28's scale
/// bench).
fn keep_through_outage(name: &str, before: &Verdict, why: String) -> Verdict {
    tracing::warn!(policy = name, error = %why, "the admission policy could not be checked; the last verdict stands");
    before.clone()
}

/// Policy `name` with `failurePolicy: Fail` (the default), and binding
/// `name` naming it with the `Deny` action.
async fn verify(client: &Client, name: &str) -> Check {
    let refused = |what: String| Check::Read(missing(name, what));
    // Fail closed on an answer, and keep the API's words in the log (a
    // refusal names the rule the operator lacks).
    let failed = |what: &str, e: kube::Error| {
        if unreachable(&e) {
            return Check::Unreachable(format!("reading the {what}: {e}"));
        }
        tracing::warn!(policy = name, error = %e, "reading the admission {what}");
        Check::Read(missing(name, format!("its {what} could not be read")))
    };
    let policies: Api<ValidatingAdmissionPolicy> = Api::all(client.clone());
    let bindings: Api<ValidatingAdmissionPolicyBinding> = Api::all(client.clone());
    let policy = match policies.get_opt(name).await {
        Ok(Some(p)) => p,
        Ok(None) => return refused("no ValidatingAdmissionPolicy of that name".into()),
        Err(e) => return failed("policy", e),
    };
    if policy.spec.as_ref().and_then(|s| s.failure_policy.as_deref()) == Some("Ignore") {
        return refused("its failurePolicy is Ignore".into());
    }
    let binding = match bindings.get_opt(name).await {
        Ok(Some(b)) => b,
        Ok(None) => return refused("no ValidatingAdmissionPolicyBinding of that name".into()),
        Err(e) => return failed("policy binding", e),
    };
    let spec = binding.spec;
    if spec.policy_name != name {
        return refused(format!("the binding {name} does not name it"));
    }
    if !spec.validation_actions.iter().any(|a| a == "Deny") {
        return refused(format!("the binding {name} does not deny"));
    }
    Check::Read(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api_error(code: u16) -> kube::Error {
        kube::Error::Api(Box::new(kube::core::Status { code, ..Default::default() }))
    }

    #[test]
    fn an_api_server_that_cannot_answer_keeps_the_last_verdict_and_an_answer_fails_closed() {
        for code in [500, 503, 504, 429] {
            assert!(unreachable(&api_error(code)), "{code}: the API server could not answer");
        }
        for code in [401, 403, 404, 400] {
            assert!(!unreachable(&api_error(code)), "{code}: an answer");
        }
        assert!(unreachable(&kube::Error::Service("connection refused".into())));
        let in_place: Verdict = None;
        assert_eq!(keep_through_outage("p", &in_place, "down".into()), None, "in place before: still in place");
        let gone = missing("p", "no ValidatingAdmissionPolicy of that name");
        assert_eq!(keep_through_outage("p", &gone, "down".into()), gone, "missing before: still missing");
    }

    #[test]
    fn not_required_passes() {
        assert!(AdmissionGuard::not_required().check().is_ok());
    }

    #[test]
    fn a_bad_policy_name_is_refused() {
        use clap::Parser;
        #[derive(clap::Parser)]
        struct Args {
            #[command(flatten)]
            a: AdmissionPolicyArgs,
        }
        let parse = |args: &[&str]| Args::try_parse_from([&["op"], args].concat()).map(|a| a.a);
        assert!(parse(&["--require-admission-policy=Not_A_Name"]).is_ok_and(|a| a.validate().is_err()));
        assert!(parse(&["--require-admission-policy="]).is_ok_and(|a| a.name().is_none()), "empty: not required");
        assert!(parse(&["--admission-policy-check-interval=0s"]).is_ok_and(|a| a.validate().is_err()));
        let ok = parse(&["--require-admission-policy=rel-copyrules"]);
        assert!(ok.is_ok_and(|a| a.validate().is_ok() && a.admission_policy_check_interval == Duration::from_secs(60)));
    }
}
