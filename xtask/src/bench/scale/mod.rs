//! `cargo xtask bench scale [small|large]`: every operator against a cluster
//! of simulated nodes (kwok) and the project's real control plane, at the
//! sizes Kubernetes publishes as its limits, or a fifth of them.
//!
//! 1. Each operator's **idle** memory: started alone on the empty cluster
//!    (CRDs and nodes only), Ready, 10 s later its RSS.
//! 2. The cluster is **populated** (see `populate.rs`): namespaces, pods
//!    made by real Deployments and ReplicaSets on kwok's nodes (each
//!    namespace's pods name their node: on two cores the scheduler was the
//!    bottleneck; some crash-looping, some Pending), Services, CopyRules,
//!    PodAlerts, PodDebuggers, LoadTests.
//! 3. **Start-up**, one operator after the other (the ones started before
//!    keep running, as in a cluster): time to Ready (`/readyz`), time to
//!    converged (its own measure of done, see `operators::goal`), peak RSS
//!    (VmHWM) over the start-up list and the work, RSS once settled (the
//!    lowest of 20 samples a second apart: between pieces of work), the
//!    objects it holds, and the API requests it made (the API server's audit
//!    log, by the operator's ServiceAccount, by verb and resource; lists
//!    served from the watch cache and paginated counted apart).
//! 4. **Idle at scale**: a minute of nothing: CPU and requests.
//! 5. **Churn**: 1 % of the pods deleted (and made again by their
//!    ReplicaSets) per minute, spread over the minute, for 10 minutes: CPU
//!    seconds per minute, requests (any LIST is a re-list), reconciles.
//! 6. **API server restart**: stopped and started again (same etcd): each
//!    operator's peak RSS while it re-lists (VmHWM started again), time to
//!    converged again, requests and CPU.
//! 7. **Growth** (see `grow.rs`): half as many pods and Services again
//!    and a second config per team, the rules and namespaces unchanged:
//!    each operator's RSS growth over the objects it holds more, its
//!    memory per object *added*, which the projections use.
//!
//! Then the tables, and each operator's memory **projected** at Kubernetes'
//! limits (150,000 pods, 10,000 Services, 10,000 namespaces) two ways: idle
//! plus the slope above idle per object held (every fixed cost charged to
//! the objects: an upper bound), and the RSS after the growth plus the
//! memory per object added for each object still to come. Nothing here
//! asserts a figure: it prints.
//!
//! Knobs: `SCALE_BENCH_OPERATORS` (comma list, default all),
//! `SCALE_BENCH_BINARIES` (a directory of release binaries to run instead of
//! building them), `_CHURN_MINUTES`
//! (10), `_RELIST_SECONDS` (120), `_CONVERGE_MINUTES` (15, per operator),
//! `_GROW` (1; 0 leaves the growth phase out, for a size whose growth alone
//! would take this machine longer than the rest),
//! and the preset's sizes: `_NODES`, `_PODS`, `_NAMESPACES`, `_SERVICES`,
//! `_COPY_RULES`, `_POD_ALERTS`, `_POD_DEBUGGERS`, `_LOAD_TESTS`.

mod audit;
mod cluster;
mod grow;
mod operators;
mod populate;
mod probe;
mod report;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use flotilla_testenv::ControlPlane;
use flotilla_testenv::aws::moto::{MotoServer, route53};
use flotilla_testenv::aws::route53_proxy::Route53Proxy;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::{Api, Client};

use self::audit::{AuditLog, Counts};
use self::cluster::SYSTEM_NS;
use self::operators::{ChartRun, OPERATORS, Running};
use self::populate::Layout;
use crate::bench::{env_usize, from_json};
use crate::util::{cargo, root, run_cmd, runtime, say, setup};

/// How long an operator's memory is watched for its settled figures (the
/// lowest of 20 samples a second apart, [`probe::settled_rss_mib`]): after
/// start-up, and before and after the growth.
const SETTLE: Duration = Duration::from_secs(20);

/// The sizes of a run.
#[derive(Debug, Clone)]
pub struct Preset {
    pub name: String,
    pub nodes: usize,
    pub pods: usize,
    pub namespaces: usize,
    pub services: usize,
    /// Team rules plus the platform-wide one.
    pub copy_rules: usize,
    /// Per-namespace ones plus the platform team's over every namespace.
    pub pod_alerts: usize,
    pub pod_debuggers: usize,
    pub load_tests: usize,
}

impl Preset {
    fn named(name: &str) -> anyhow::Result<Self> {
        let p = match name {
            // Runs in minutes on a 2-core machine.
            "small" => Preset {
                name: name.into(),
                nodes: 200,
                pods: 10_000,
                namespaces: 2_000,
                services: 2_000,
                copy_rules: 200,
                pod_alerts: 200,
                pod_debuggers: 40,
                load_tests: 10,
            },
            // The issue's: 1,000 nodes, 50,000 pods, SIG Scalability's
            // 10,000 namespaces and Services.
            "large" => Preset {
                name: name.into(),
                nodes: 1_000,
                pods: 50_000,
                namespaces: 10_000,
                services: 10_000,
                copy_rules: 1_000,
                pod_alerts: 1_000,
                pod_debuggers: 200,
                load_tests: 50,
            },
            other => bail!("no preset {other:?}: small or large"),
        };
        Ok(Preset {
            nodes: env_usize("SCALE_BENCH_NODES", p.nodes)?,
            pods: env_usize("SCALE_BENCH_PODS", p.pods)?,
            namespaces: env_usize("SCALE_BENCH_NAMESPACES", p.namespaces)?.max(1),
            services: env_usize("SCALE_BENCH_SERVICES", p.services)?,
            copy_rules: env_usize("SCALE_BENCH_COPY_RULES", p.copy_rules)?,
            pod_alerts: env_usize("SCALE_BENCH_POD_ALERTS", p.pod_alerts)?,
            pod_debuggers: env_usize("SCALE_BENCH_POD_DEBUGGERS", p.pod_debuggers)?,
            load_tests: env_usize("SCALE_BENCH_LOAD_TESTS", p.load_tests)?,
            ..p
        })
    }
}

/// An operator's chart applied: how it runs, its kubeconfig, extra environment.
struct Installed {
    run: ChartRun,
    kubeconfig: PathBuf,
    env: Vec<(String, String)>,
}

/// Knobs that are not sizes.
struct Timing {
    /// Whether the growth phase runs (`SCALE_BENCH_GROW`).
    grow: bool,
    churn: Duration,
    relist: Duration,
    converge: Duration,
}

/// What was measured of one operator.
#[derive(Debug, Default)]
pub struct Figures {
    pub memory_limit: String,
    pub idle_rss: f64,
    pub objects: usize,
    pub ready: Option<Duration>,
    pub converged: Option<Duration>,
    /// What was left when it did not converge.
    pub left: String,
    pub startup_peak: f64,
    pub steady_rss: f64,
    pub startup_requests: Counts,
    pub quiet_cpu_per_min: f64,
    pub quiet_requests: Counts,
    pub churn_cpu_per_min: f64,
    pub churn_requests: Counts,
    pub churn_reconciles: f64,
    pub relist_peak: f64,
    pub relist_converged: Option<Duration>,
    /// From the API server back to the operator's last LIST (its re-list done).
    pub relist_listed: Option<Duration>,
    pub relist_requests: Counts,
    pub relist_cpu: f64,
    /// RSS (MiB) and objects held before the growth, after it.
    pub grown_from: (f64, usize),
    pub grown_to: (f64, usize),
    /// Bytes of RSS per object added by the growth.
    pub per_object_added: Option<f64>,
    /// Anonymous memory (MiB) before the growth, after it: the heap's part
    /// of the RSS, without pages of the binary first touched by the growth.
    pub grown_anon: (f64, f64),
    /// Bytes of anonymous memory per object added by the growth.
    pub per_object_added_anon: Option<f64>,
    /// Converged again after the growth (from the new objects in place).
    pub grown_converged: Option<Duration>,
    /// Whether the growth phase ran (`SCALE_BENCH_GROW`).
    pub grown: bool,
}

pub fn run(preset: &str) -> anyhow::Result<()> {
    let preset = Preset::named(preset)?;
    let timing = Timing {
        grow: env_usize("SCALE_BENCH_GROW", 1)? > 0,
        churn: Duration::from_secs(60 * env_usize("SCALE_BENCH_CHURN_MINUTES", 10)? as u64),
        relist: Duration::from_secs(env_usize("SCALE_BENCH_RELIST_SECONDS", 120)? as u64),
        converge: Duration::from_secs(60 * env_usize("SCALE_BENCH_CONVERGE_MINUTES", 15)? as u64),
    };
    let chosen: Vec<String> = match std::env::var("SCALE_BENCH_OPERATORS") {
        Ok(list) => list.split(',').map(|s| s.trim().to_string()).filter(|s| !s.is_empty()).collect(),
        Err(_) => OPERATORS.iter().map(|s| s.to_string()).collect(),
    };
    if let Some(bad) = chosen.iter().find(|o| !OPERATORS.contains(&o.as_str())) {
        bail!("SCALE_BENCH_OPERATORS names {bad:?}; known: {}", OPERATORS.join(", "));
    }
    let assets = setup()?;
    crate::util::setup_bench_tools()?;
    // Another build of the operators (an older commit, for before/after figures).
    let release = match std::env::var_os("SCALE_BENCH_BINARIES") {
        Some(dir) => PathBuf::from(dir),
        None => {
            say(&format!("building {} (release)", chosen.join(", ")));
            let mut build = cargo();
            build.args(["build", "--release", "--locked", "--bins"]);
            for op in &chosen {
                build.args(["-p", op]);
            }
            run_cmd(&mut build)?;
            crate::dist::target_dir().join("release")
        }
    };
    for op in &chosen {
        if !release.join(op).is_file() {
            bail!("{} is missing", release.join(op).display());
        }
    }
    let rt = runtime()?;
    rt.block_on(async {
        let dir = root().join("target").join(format!("flotilla-bench-scale-{}", preset.name));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir)?;
        say("starting the control plane (client rates raised, audit log of the operators), moto and the Route53 proxy");
        let mut cp = cluster::control_plane(&assets, &dir).await?;
        let mut moto = MotoServer::start(&dir, flotilla_testenv::Lifetime::DieWithParent).context("starting moto")?;
        let result = bench(&mut cp, &moto.endpoint, &dir, &release, &chosen, &preset, &timing).await;
        moto.stop();
        cp.stop();
        result
    })
}

async fn bench(
    cp: &mut ControlPlane,
    moto: &str,
    dir: &Path,
    release: &Path,
    chosen: &[String],
    preset: &Preset,
    timing: &Timing,
) -> anyhow::Result<()> {
    let started = Instant::now();
    let client = cp.client().await?;
    let _kwok = cluster::nodes(cp, dir, preset.nodes as u32).await?;
    flotilla_e2e::apply_crds(&client).await.context("installing the CRDs")?;
    let ns: Namespace = from_json(serde_json::json!({"metadata": {"name": SYSTEM_NS}}))?;
    Api::<Namespace>::all(client.clone()).create(&PostParams::default(), &ns).await?;

    // service-dns writes through the Route53-faithful proxy at the chart's rate.
    let proxy = Route53Proxy::start(moto).context("starting the Route53 proxy")?;
    let zone = route53::create_hosted_zone(moto, "scale.example").context("a hosted zone")?;
    let mut charts: BTreeMap<String, Installed> = BTreeMap::new();
    for op in chosen {
        let (values, env) = if op == "service-dns" {
            (
                // Every namespace has a Service `app`: the namespace goes into
                // the name (the chart's default template leaves it out, and
                // all but one would be DnsRecordConflict).
                serde_json::json!({
                    "route53": {"hostedZoneId": zone, "hostnameTemplate": "{prefix}-{name}.{namespace}.{domain}"},
                    "aws": {"endpointUrl": proxy.endpoint},
                }),
                vec![
                    ("AWS_ACCESS_KEY_ID".to_string(), "bench".to_string()),
                    ("AWS_SECRET_ACCESS_KEY".to_string(), "bench".to_string()),
                    // moto applies a change in time linear in the zone and its
                    // journal: a 1,000-change batch into a zone of 10,000
                    // records takes it ~25 s on two cores (Route53: about a
                    // second), past the default 30 s from ~12,000 records.
                    // The bench measures the operator, not moto.
                    ("ROUTE53_TIMEOUT".to_string(), "5m".to_string()),
                ],
            )
        } else {
            (serde_json::json!({}), Vec::new())
        };
        let run = operators::install_chart(&client, op, &values, dir).await?;
        let kubeconfig = operators::kubeconfig_for(&client, cp, &run.service_account, dir).await?;
        charts.insert(op.clone(), Installed { run, kubeconfig, env });
    }
    let start = |op: &str, phase: &str| -> anyhow::Result<Running> {
        let i = charts.get(op).context("an operator's chart")?;
        Running::start(op, &release.join(op), &i.run, &i.kubeconfig, &i.env, &dir.join(format!("{op}-{phase}.log")))
    };
    let mut figures: BTreeMap<String, Figures> = BTreeMap::new();

    // 1. Idle, alone, on the empty cluster.
    for op in chosen {
        let mut f = Figures { memory_limit: charts[op].run.memory_limit.clone(), ..Figures::default() };
        let mut running = start(op, "idle")?;
        let ready = wait_ready(&mut running, Duration::from_secs(120)).await?;
        tokio::time::sleep(Duration::from_secs(10)).await;
        f.idle_rss = probe::rss_mib(running.pid());
        let split = probe::rss_split_mib(running.pid())
            .map(|(anon, file)| format!(" ({anon:.1} MiB anonymous, {file:.1} MiB of mapped files)"))
            .unwrap_or_default();
        eprintln!("    {op}: Ready in {:.1?} on the empty cluster, idle RSS {:.1} MiB{split}", ready, f.idle_rss);
        running.stop();
        figures.insert(op.clone(), f);
    }

    // 2. The cluster's contents.
    let layout = Layout { preset: preset.clone(), team_configs: 1 };
    populate::populate(&client, &layout).await?;
    let mut audit = AuditLog::new(cluster::audit_log(dir));
    audit.take()?;

    // 3. Start-up, one after the other.
    let mut running: Vec<Running> = Vec::new();
    for op in chosen {
        say(&format!("{op}: start-up"));
        let mut r = start(op, "scale")?;
        let f = figures.get_mut(op).context("figures")?;
        let (ready, converged, left) = until_converged(&mut r, &client, &layout, timing.converge).await?;
        f.ready = ready;
        f.converged = converged;
        f.left = left;
        f.startup_peak = probe::peak_mib(r.pid());
        f.steady_rss = probe::settled_rss_mib(&[r.pid()], SETTLE).await[0].rss;
        f.startup_requests = Counts::of(&audit.take()?, &r.user);
        f.objects = operators::objects_held(&r, &client, &layout).await?;
        eprintln!(
            "    {op}: Ready {}, converged {}, peak {:.1} MiB, settled {:.1} MiB, {} {}",
            report::secs(f.ready),
            report::secs(f.converged),
            f.startup_peak,
            f.steady_rss,
            f.objects,
            operators::goal(op).objects
        );
        running.push(r);
    }

    // 4. A quiet minute.
    say("idle at scale: one minute");
    let before = cpu_of(&running);
    audit.take()?;
    tokio::time::sleep(Duration::from_secs(60)).await;
    let quiet = audit.take()?;
    for (r, cpu) in running.iter().zip(before) {
        let f = figures.get_mut(&r.name).context("figures")?;
        f.quiet_cpu_per_min = probe::cpu_seconds(r.pid()) - cpu;
        f.quiet_requests = Counts::of(&quiet, &r.user);
    }

    // 5. Churn.
    say(&format!("churn: 1 % of the pods replaced per minute for {:.0?}", timing.churn));
    let before = cpu_of(&running);
    let reconciles: Vec<f64> = running.iter().map(|r| r.metric("controller_runtime_reconcile_total")).collect();
    let replaced = churn(&client, preset.pods, timing.churn, &mut running).await?;
    let churned = audit.take()?;
    let minutes = timing.churn.as_secs_f64() / 60.0;
    for ((r, cpu), rec) in running.iter().zip(before).zip(reconciles) {
        let f = figures.get_mut(&r.name).context("figures")?;
        // No churn, no rate (the report says so).
        f.churn_cpu_per_min = if minutes > 0.0 { (probe::cpu_seconds(r.pid()) - cpu) / minutes } else { 0.0 };
        f.churn_requests = Counts::of(&churned, &r.user);
        f.churn_reconciles = r.metric("controller_runtime_reconcile_total") - rec;
    }
    eprintln!("    {replaced} pods deleted (and made again by their ReplicaSets)");

    // 6. The API server restarts: every watch breaks, every operator re-lists.
    say("API server restart: stop, start, re-lists");
    for r in &running {
        probe::reset_peak(r.pid())?;
    }
    let before = cpu_of(&running);
    cp.stop_api_server();
    tokio::time::sleep(Duration::from_secs(5)).await;
    cp.start_api_server().await.context("starting the API server again")?;
    let back = Instant::now();
    let back_at = k8s_openapi::jiff::Timestamp::now();
    let client = cp.client().await?;
    let converged = all_converged(&mut running, &client, &layout, back, timing.relist).await?;
    for (r, converged) in running.iter().zip(converged) {
        figures.get_mut(&r.name).context("figures")?.relist_converged = converged;
    }
    tokio::time::sleep(timing.relist.saturating_sub(back.elapsed())).await;
    let relisted = audit.take()?;
    for (r, cpu) in running.iter().zip(before) {
        let f = figures.get_mut(&r.name).context("figures")?;
        f.relist_peak = probe::peak_mib(r.pid());
        f.relist_cpu = probe::cpu_seconds(r.pid()) - cpu;
        f.relist_requests = Counts::of(&relisted, &r.user);
        f.relist_listed = f
            .relist_requests
            .last_list
            .map(|t| Duration::from_millis(u64::try_from(t.as_millisecond() - back_at.as_millisecond()).unwrap_or(0)));
    }
    // 7. Growth: the memory per object added, from a settled start (the
    // re-list's freed memory given back first).
    if timing.grow {
        let pids: Vec<u32> = running.iter().map(Running::pid).collect();
        let settled = probe::settled_rss_mib(&pids, SETTLE).await;
        for (r, s) in running.iter().zip(settled) {
            let f = figures.get_mut(&r.name).context("figures")?;
            f.grown_from = (s.rss, operators::objects_held(r, &client, &layout).await?);
            f.grown_anon.0 = s.anon;
            f.grown = true;
        }
        grow::grow(&client, &layout).await?;
        let grew = Instant::now();
        let grown = layout.grown();
        let converged = all_converged(&mut running, &client, &grown, grew, timing.converge).await?;
        for (r, converged) in running.iter().zip(converged) {
            figures.get_mut(&r.name).context("figures")?.grown_converged = converged;
        }
        let settled = probe::settled_rss_mib(&pids, SETTLE).await;
        for (r, s) in running.iter().zip(settled) {
            let f = figures.get_mut(&r.name).context("figures")?;
            f.grown_to = (s.rss, operators::objects_held(r, &client, &grown).await?);
            f.grown_anon.1 = s.anon;
            f.per_object_added = grow::per_object_added(f.grown_from.0, f.grown_to.0, f.grown_from.1, f.grown_to.1);
            f.per_object_added_anon =
                grow::per_object_added(f.grown_anon.0, f.grown_anon.1, f.grown_from.1, f.grown_to.1);
            eprintln!(
                "    {}: {} → {} {}, RSS {:.1} → {:.1} MiB{}; anonymous {:.1} → {:.1} MiB{}",
                r.name,
                f.grown_from.1,
                f.grown_to.1,
                operators::goal(&r.name).objects,
                f.grown_from.0,
                f.grown_to.0,
                f.per_object_added.map(|b| format!(", {b:.0} B per object added")).unwrap_or_default(),
                f.grown_anon.0,
                f.grown_anon.1,
                f.per_object_added_anon.map(|b| format!(", {b:.0} B per object added")).unwrap_or_default(),
            );
        }
    } else {
        say("growth: left out (SCALE_BENCH_GROW=0)");
    }

    let nodes_ready = cluster::nodes_ready(&client).await.unwrap_or(0);
    for r in running {
        r.stop();
    }

    report::print(preset, &layout, timing.churn, timing.relist, &figures, started.elapsed(), nodes_ready);
    Ok(())
}

fn cpu_of(running: &[Running]) -> Vec<f64> {
    running.iter().map(|r| probe::cpu_seconds(r.pid())).collect()
}

async fn wait_ready(r: &mut Running, limit: Duration) -> anyhow::Result<Duration> {
    let started = Instant::now();
    loop {
        r.check_alive()?;
        if r.ready() {
            return Ok(r.started.elapsed());
        }
        if started.elapsed() > limit {
            bail!("{} not Ready within {limit:?}; see {}", r.name, r.log.display());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Each operator's time from `since` until it is Ready and converged on
/// `layout` (checked side by side, every second), `None` for those not
/// converged within `limit` of `since`.
async fn all_converged(
    running: &mut [Running],
    client: &Client,
    layout: &Layout,
    since: Instant,
    limit: Duration,
) -> anyhow::Result<Vec<Option<Duration>>> {
    let mut converged = vec![None; running.len()];
    let mut pending: Vec<usize> = (0..running.len()).collect();
    // At least one check, however long the wait before.
    let mut first = true;
    while !pending.is_empty() && (first || since.elapsed() < limit) {
        first = false;
        let mut still = Vec::new();
        for i in pending {
            let r = &mut running[i];
            r.check_alive()?;
            if r.ready() && operators::converged(r, client, layout).await.unwrap_or(false) {
                converged[i] = Some(since.elapsed());
            } else {
                still.push(i);
            }
        }
        pending = still;
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    Ok(converged)
}

/// Time to Ready and to converged (from the process's start); what was
/// left when it gave up.
async fn until_converged(
    r: &mut Running,
    client: &Client,
    layout: &Layout,
    limit: Duration,
) -> anyhow::Result<(Option<Duration>, Option<Duration>, String)> {
    let (mut ready, mut left) = (None, String::new());
    let mut last_check = Instant::now() - Duration::from_secs(10);
    let mut last_report = Instant::now();
    loop {
        r.check_alive()?;
        if ready.is_none() && r.ready() {
            ready = Some(r.started.elapsed());
        }
        // Not Ready (no leader yet, caches not synced) is not converged.
        if ready.is_some() && last_check.elapsed() >= Duration::from_secs(1) {
            last_check = Instant::now();
            match operators::converged(r, client, layout).await {
                Ok(true) => return Ok((ready, Some(r.started.elapsed()), String::new())),
                Ok(false) => {}
                Err(e) => left = format!("{e:#}"),
            }
        }
        if last_report.elapsed() > Duration::from_secs(30) {
            last_report = Instant::now();
            eprintln!("    {} after {:.0?}: {left}", r.name, r.started.elapsed());
        }
        if r.started.elapsed() > limit {
            return Ok((ready, None, left));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Deletes 1 % of the pods per minute, spread over each minute (a batch
/// every 6 s), for `length`; their ReplicaSets make them again and kwok
/// starts the new ones. The operators are checked alive on the way.
async fn churn(client: &Client, pods_total: usize, length: Duration, running: &mut [Running]) -> anyhow::Result<usize> {
    const TICK: Duration = Duration::from_secs(6);
    let per_tick = (pods_total as f64 * 0.01 * TICK.as_secs_f64() / 60.0).ceil() as usize;
    let pods: Api<Pod> = Api::all(client.clone());
    let started = Instant::now();
    let (mut deleted, mut tick, mut names) = (0, 0usize, Vec::new());
    while started.elapsed() < length {
        let tick_start = Instant::now();
        if tick % 10 == 0 || names.len() < per_tick {
            names = populate::names(&pods, &ListParams::default().labels("app=app")).await?;
        }
        for k in 0..per_tick {
            if names.is_empty() {
                break;
            }
            // A stride through the list: spread over namespaces, no repeats within a minute.
            let i = (tick * per_tick + k).wrapping_mul(7919) % names.len();
            let (ns, name) = names.swap_remove(i);
            match Api::<Pod>::namespaced(client.clone(), &ns).delete(&name, &DeleteParams::default()).await {
                Ok(_) => deleted += 1,
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(e) => return Err(e).context("deleting a pod"),
            }
        }
        for r in running.iter_mut() {
            r.check_alive()?;
        }
        tick += 1;
        tokio::time::sleep(TICK.saturating_sub(tick_start.elapsed())).await;
    }
    Ok(deleted)
}
