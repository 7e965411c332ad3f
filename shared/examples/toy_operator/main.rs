//! A complete, tiny operator on flotilla-shared: it reconciles `Widget`s by
//! writing a `Ready` condition and a `Normal` Event. The shared crate's tests
//! run it as a process (leader election, metrics, readiness, SIGTERM).
//!
//! `toy_operator --print-crd` prints its CRD.

mod widget;

use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use flotilla_shared::{CommonArgs, Conditions, Context, Controller, Operator, WatchNamespaceArgs, apply_status};
use kube::runtime::controller::Action;
use kube::runtime::watcher;
use kube::{Api, CustomResourceExt, Resource, ResourceExt};
use widget::{Widget, WidgetStatus};

#[derive(Parser)]
// The last of a repeated flag wins, as in every Flotilla operator.
#[command(about = "Toy operator: marks Widgets Ready (an example of flotilla-shared)", args_override_self = true)]
struct Args {
    #[command(flatten)]
    common: CommonArgs,
    #[command(flatten)]
    watch: WatchNamespaceArgs,
    /// Print the Widget CRD as YAML and exit.
    #[arg(long)]
    print_crd: bool,
    /// At most this many reconciles at once (0: no limit).
    #[arg(long, default_value_t = 0)]
    concurrency: u16,
    /// A Widget is reconciled after this long without a change (at most 2 s after its first change).
    #[arg(long, default_value = "0s", value_parser = flotilla_shared::duration::parse_flag)]
    debounce: Duration,
}

#[derive(Debug, thiserror::Error)]
enum Error {
    #[error("writing status: {0}")]
    Status(#[source] kube::Error),
    #[error("spec.fail is true")]
    Asked,
}

/// `spec.fail` stays true until the Widget is edited: no retry can pass.
impl flotilla_shared::ReconcileError for Error {
    fn is_terminal(&self) -> bool {
        matches!(self, Error::Asked)
    }
}

async fn reconcile(widget: Arc<Widget>, ctx: Arc<Context>) -> Result<Action, Error> {
    let (ns, name) = (widget.namespace().unwrap_or_default(), widget.name_any());
    if let Some(secs) = widget.spec.sleep_seconds {
        tracing::info!(secs, "working slowly");
        tokio::time::sleep(Duration::from_secs(u64::try_from(secs).unwrap_or(0))).await;
    }
    if widget.spec.panic {
        #[allow(clippy::panic)]
        {
            panic!("spec.panic is true");
        }
    }
    if widget.spec.fail {
        ctx.events.warning(&widget.object_ref(&()), "Failed", "Reconcile", "spec.fail is true");
        return Err(Error::Asked);
    }
    let existing = widget.status.as_ref().map(|s| s.conditions.as_slice());
    let mut conditions = Conditions::new(existing, widget.metadata.generation);
    conditions.set("Ready", true, "Reconciled", format!("message: {}", widget.spec.message));
    let status = WidgetStatus { observed_generation: widget.metadata.generation, conditions: conditions.into_vec() };
    let api: Api<Widget> = Api::namespaced(ctx.client.clone(), &ns);
    apply_status(&api, &name, &ctx.field_manager, &status).await.map_err(Error::Status)?;
    ctx.events.normal(&widget.object_ref(&()), "Reconciled", "Reconcile", format!("widget {name} is ready"));
    Ok(Action::await_change())
}

fn error_policy(_: Arc<Widget>, _: &Error, _: Arc<Context>) -> Action {
    Action::requeue(Duration::from_secs(5))
}

fn main() -> std::process::ExitCode {
    let args = Args::parse();
    if args.print_crd {
        match serde_saphyr::to_string(&Widget::crd()) {
            Ok(yaml) => print!("{yaml}"),
            Err(e) => eprintln!("error: {e}"),
        }
        return std::process::ExitCode::SUCCESS;
    }
    if let Err(e) = args.watch.validate() {
        e.exit();
    }
    let namespace = args.watch.namespace().map(str::to_string);
    let (concurrency, debounce) = (args.concurrency, args.debounce);
    Operator::new("toy", &args.common).run(move |ctx| async move {
        let api: Api<Widget> = match &namespace {
            Some(ns) => Api::namespaced(ctx.client.clone(), ns),
            None => Api::all(ctx.client.clone()),
        };
        let controller = Controller::new(api, watcher::Config::default()).concurrency(concurrency).debounce(debounce);
        ctx.run_controller("widget", controller, reconcile, error_policy, Arc::new(ctx.clone())).await
    })
}
