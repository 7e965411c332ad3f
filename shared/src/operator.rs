//! The process around an operator's controllers: checked flags, logging,
//! the HTTP endpoints, the cluster client, signals, leader election and a
//! graceful shutdown. An operator's `main` hands its controllers to
//! [`Operator::run`] and is done.

use std::future::Future;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;
use kube::Client;
use tokio_util::sync::CancellationToken;

use crate::config::{CommonArgs, CommonConfig};
use crate::context::Context;
use crate::events::Events;
use crate::health::Readiness;
use crate::leader::{LeaderElector, Term, default_identity};
use crate::metrics::Metrics;
use crate::server;

/// Exit code when the process fails at run time (lost leadership, no
/// cluster, a port already taken).
pub const EXIT_FAILURE: u8 = 1;

/// One operator process.
pub struct Operator {
    name: &'static str,
    config: CommonConfig,
}

/// How the controllers ended.
enum End {
    Finished(anyhow::Result<()>),
    LostLeadership,
    ShutdownTimedOut,
}

impl Operator {
    /// Checks the common flags; a bad one prints one line naming the flag and
    /// exits 2, before anything touches the cluster. `name` is the operator's
    /// name (`config-copier`).
    pub fn new(name: &'static str, args: &CommonArgs) -> Self {
        match args.validate(name) {
            Ok(config) => Self { name, config },
            Err(e) => e.exit(),
        }
    }

    pub fn config(&self) -> &CommonConfig {
        &self.config
    }

    /// Runs until SIGTERM/SIGINT (exit 0) or a failure (exit 1), on a new
    /// multi-threaded tokio runtime, with the allocator tuned for a
    /// long-running process ([`crate::memory`]).
    pub fn run<F, Fut>(self, controllers: F) -> ExitCode
    where
        F: FnOnce(Context) -> Fut + Send + 'static,
        Fut: Future<Output = anyhow::Result<()>> + Send + 'static,
    {
        crate::memory::tune_allocator();
        match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
            Ok(rt) => rt.block_on(self.run_async(controllers)),
            Err(e) => {
                eprintln!("error: starting the tokio runtime: {e}");
                ExitCode::from(EXIT_FAILURE)
            }
        }
    }

    /// [`Operator::run`] on the caller's runtime.
    pub async fn run_async<F, Fut>(self, controllers: F) -> ExitCode
    where
        F: FnOnce(Context) -> Fut + Send + 'static,
        Fut: Future<Output = anyhow::Result<()>> + Send + 'static,
    {
        crate::telemetry::init(self.config.log_format, self.config.log_level);
        match self.run_inner(controllers).await {
            Ok(code) => code,
            Err(e) => {
                tracing::error!(error = format!("{e:#}"), "operator failed");
                ExitCode::from(EXIT_FAILURE)
            }
        }
    }

    async fn run_inner<F, Fut>(self, controllers: F) -> anyhow::Result<ExitCode>
    where
        F: FnOnce(Context) -> Fut + Send + 'static,
        Fut: Future<Output = anyhow::Result<()>> + Send + 'static,
    {
        let cfg = &self.config;
        let metrics = Metrics::new()?;
        let readiness = Readiness::default();
        let shutdown = CancellationToken::new();
        let servers_stop = CancellationToken::new();
        let _stop_servers = servers_stop.clone().drop_guard();

        if let Some(addr) = cfg.metrics_address {
            let bound = server::serve(
                "metrics-bind-address",
                addr,
                server::metrics_router(metrics.clone()),
                servers_stop.clone(),
            )
            .await?;
            tracing::info!(address = %bound, "serving /metrics");
        }
        if let Some(addr) = cfg.health_address {
            let bound = server::serve(
                "health-probe-bind-address",
                addr,
                server::health_router(readiness.clone()),
                servers_stop.clone(),
            )
            .await?;
            tracing::info!(address = %bound, "serving /healthz and /readyz");
        }
        spawn_signal_handler(shutdown.clone(), readiness.clone());

        let client = client(cfg, &metrics).await?;
        tokio::spawn(crate::health::probe_while_failing(readiness.clone(), client.clone(), servers_stop.clone()));
        let identity = default_identity();
        let instance = identity.rsplit_once('_').map(|(host, _)| host.to_string()).unwrap_or_else(|| identity.clone());
        let (leading, leading_rx) = tokio::sync::watch::channel(!cfg.leader_elect);
        let ctx = Context {
            events: Events::new(client.clone(), self.name, &instance),
            client: client.clone(),
            metrics: metrics.clone(),
            operator: self.name,
            field_manager: format!("flotilla-{}", self.name),
            readiness: readiness.clone(),
            shutdown: shutdown.clone(),
            leading: leading_rx,
        };
        metrics.register(ctx.events.dropped())?;
        // Started now, also while standing by: the watches fill the caches
        // (a warm standby), the reconciles wait for the lease (controller.rs).
        let mut run = std::pin::pin!(controllers(ctx));

        let mut leadership = None;
        // Only an operator that elects a leader has a leader status (as in
        // controller-runtime): without election the series does not exist.
        let leader_gauge = cfg.leader_elect.then(|| metrics.leader_status(&cfg.lease_name));
        if let Some(leader_gauge) = &leader_gauge {
            leader_gauge.set(0);
            let elector =
                LeaderElector::new(client, &cfg.lease_namespace, &cfg.lease_name, &identity, cfg.lease_timings);
            tracing::info!(lease = %cfg.lease_name, namespace = %cfg.lease_namespace, %identity, "waiting to become the leader");
            let standby_health = {
                let (elector, readiness) = (elector.clone(), readiness.clone());
                tokio::spawn(async move {
                    loop {
                        readiness.set_standby(elector.healthy());
                        tokio::time::sleep(Duration::from_millis(250)).await;
                    }
                })
            };
            // Ready while standing by (once the caches synced): the first
            // attempt decides health.
            readiness.set_standby(true);
            let acquired = tokio::select! {
                l = elector.acquire() => Ok(l),
                r = &mut run => Err(r),
                _ = shutdown.cancelled() => {
                    tracing::info!("shut down while standing by");
                    return Ok(ExitCode::SUCCESS);
                }
            };
            standby_health.abort();
            // Awaited: a last `set_standby` must not land after `set_active`.
            let _ = standby_health.await;
            match acquired {
                Ok(l) => leadership = Some(l),
                Err(Err(e)) => return Err(e.context("controllers failed while standing by")),
                Err(Ok(())) if shutdown.is_cancelled() => return Ok(ExitCode::SUCCESS),
                Err(Ok(())) => anyhow::bail!("the controllers stopped while standing by, without being asked to"),
            }
            leader_gauge.set(1);
        }
        readiness.set_active();
        // Only now do the reconciles start (each with the cache's latest).
        let _ = leading.send(true);

        let end = {
            let mut deadline: Option<tokio::time::Instant> = None;
            loop {
                tokio::select! {
                    r = &mut run => break End::Finished(r),
                    term = async { match leadership.as_mut() { Some(l) => l.changed().await, None => std::future::pending().await } } => {
                        match term {
                            Term::Lost => break End::LostLeadership,
                            // Nothing may act until the lease is renewed:
                            // every reconcile in flight is cancelled, the
                            // next ones wait (controller.rs).
                            Term::Suspended => {
                                let _ = leading.send(false);
                                if let Some(g) = &leader_gauge {
                                    g.set(0);
                                }
                                readiness.set_suspended();
                                tracing::warn!("leadership suspended: every reconcile stops until the lease is renewed");
                            }
                            Term::Leading => {
                                if let Some(g) = &leader_gauge {
                                    g.set(1);
                                }
                                readiness.set_active();
                                let _ = leading.send(true);
                                tracing::info!("leading again: reconciles resume");
                            }
                        }
                    }
                    _ = shutdown.cancelled(), if deadline.is_none() => {
                        deadline = Some(tokio::time::Instant::now() + cfg.graceful_shutdown_timeout);
                    }
                    _ = async { match deadline { Some(d) => tokio::time::sleep_until(d).await, None => std::future::pending().await } } => {
                        break End::ShutdownTimedOut;
                    }
                }
            }
        };

        match end {
            End::LostLeadership => {
                if let Some(g) = &leader_gauge {
                    g.set(0);
                }
                shutdown.cancel();
                tracing::error!("leader election lost: stopping so that a clean process can start");
                Ok(ExitCode::from(EXIT_FAILURE))
            }
            End::Finished(result) => {
                let requested = shutdown.is_cancelled();
                release(leadership, &leader_gauge).await;
                match result {
                    Ok(()) if requested => {
                        tracing::info!("shut down cleanly");
                        Ok(ExitCode::SUCCESS)
                    }
                    Ok(()) => anyhow::bail!("the controllers stopped without being asked to"),
                    Err(e) => Err(e.context("controllers failed")),
                }
            }
            // Work was cut off: exit non-zero (as controller-runtime's
            // manager does), so that it shows in the pod's last state.
            End::ShutdownTimedOut => {
                tracing::error!(timeout = ?cfg.graceful_shutdown_timeout, "in-flight reconciles did not finish in time; exiting anyway");
                release(leadership, &leader_gauge).await;
                Ok(ExitCode::from(EXIT_FAILURE))
            }
        }
    }
}

/// The cluster client: `--kubeconfig`/`--context` when given, else kube's
/// default search (KUBECONFIG, ~/.kube/config, the in-cluster config).
/// Every request it sends counts in `rest_client_requests_total`.
async fn client(cfg: &CommonConfig, metrics: &Metrics) -> anyhow::Result<Client> {
    use kube::config::{Config, KubeConfigOptions, Kubeconfig};
    let options = KubeConfigOptions { context: cfg.context.clone(), ..Default::default() };
    let which = || match &cfg.context {
        Some(c) => format!("kubeconfig context {c:?}"),
        None => "the kubeconfig's current context".to_string(),
    };
    let config = match (cfg.kubeconfig.split_first(), &cfg.context) {
        (None, None) => {
            Config::infer().await.context("no cluster configuration (in-cluster, KUBECONFIG or ~/.kube/config)")?
        }
        (None, Some(_)) => Config::from_kubeconfig(&options).await.with_context(which)?,
        (Some((first, rest)), _) => {
            let mut merged =
                Kubeconfig::read_from(first).with_context(|| format!("--kubeconfig {}", first.display()))?;
            for path in rest {
                let next = Kubeconfig::read_from(path).with_context(|| format!("--kubeconfig {}", path.display()))?;
                merged = merged.merge(next).with_context(|| format!("--kubeconfig {}", path.display()))?;
            }
            Config::from_custom_kubeconfig(merged, &options).await.with_context(which)?
        }
    };
    let host = crate::rest_client::host_label(&config.cluster_url);
    let counting = crate::rest_client::CountRequestsLayer::new(metrics.rest_client_requests(), host);
    let builder = kube::client::ClientBuilder::try_from(config).context("building the cluster client")?;
    Ok(builder.with_layer(&counting).build())
}

async fn release(leadership: Option<crate::leader::HeldLease>, gauge: &Option<prometheus::IntGauge>) {
    if let Some(l) = leadership {
        if let Err(e) = l.release().await {
            tracing::warn!(error = %e, "could not release the leader lease; a standby takes over when it expires");
        }
        if let Some(g) = gauge {
            g.set(0);
        }
    }
}

/// First SIGTERM/SIGINT: graceful shutdown. Second: exit 1 at once.
fn spawn_signal_handler(shutdown: CancellationToken, readiness: Readiness) {
    tokio::spawn(async move {
        let mut count = 0;
        loop {
            wait_for_signal().await;
            count += 1;
            if count == 1 {
                tracing::info!("shutdown requested: finishing in-flight work");
                readiness.set_shutting_down();
                shutdown.cancel();
            } else {
                tracing::warn!("second signal: exiting now");
                std::process::exit(i32::from(EXIT_FAILURE));
            }
        }
    });
}

async fn wait_for_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = tokio::signal::ctrl_c() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}
