//! `cargo xtask bench config-copier`: figures for the benchmark, on a
//! control plane of its own with the operator binary as a process:
//!
//! 1. one source → N namespaces (default 1,000): time until every copy exists;
//! 2. a source update → time until every copy carries it;
//! 3. N namespaces × S sources (default 10): peak RSS (VmHWM) of the operator;
//! 4. API requests the operator's reconciles issued for each converge (its
//!    `flotilla_config_copier_api_requests_total`).
//!
//! 5. `CONFIG_COPIER_BENCH_RULES` more rules (default 100) over the first
//!    source, copying nowhere: the memory they add (each rule has a source
//!    watch of its own; the source is held once);
//! 6. with `CONFIG_COPIER_BENCH_RESTART=1` (default), the operator is
//!    restarted against the converged copies and those rules: its peak RSS
//!    while it re-lists, and the time until the rule is Ready again.
//!
//! `CONFIG_COPIER_BENCH_NAMESPACES` and `CONFIG_COPIER_BENCH_SOURCES` pick a
//! smaller scale for a quick run; `CONFIG_COPIER_BENCH_PAYLOAD` is the size
//! of each source's payload in bytes (default 256; real CA bundles and TLS
//! Secrets are 100 KiB-1 MiB). Nothing here asserts a time: it prints.
//!
//! Then the attack of issue 27 (`CONFIG_COPIER_BENCH_ATTACK_SECRETS`, default
//! 60; 0 skips it; `CONFIG_COPIER_BENCH_ONLY_ATTACK=1` runs it alone), an
//! operator of its own with default flags:
//!
//! 7. `_ATTACK_SECRETS` Secrets of `_ATTACK_BYTES` (default 700,000) in one
//!    namespace and a `selector: {}` rule over them copying nowhere: the
//!    operator's peak RSS (the chart's limit is 128Mi), and whether it exited;
//! 8. a restart against that rule: the peak while it starts again;
//! 9. with `_ATTACK_TARGETS` (default 4; 0 skips) consenting namespaces and
//!    `--max-rule-source-bytes` raised so that the rule is allowed, the time
//!    until every copy exists and the peak RSS: copying is bounded by
//!    `--max-bytes-in-flight`, not by what the rule selects.
//!
//! `CONFIG_COPIER_BENCH_BINARY` measures a prebuilt binary instead of
//! building one (e.g. main's, for a before/after).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use config_copier::crd::{
    CopyRule, CopyRuleSpec, LabelKey, LabelSelector, LabelValue, NamespaceGlob, NamespaceTargets, ObjectName,
    OnConflict, SourceKind,
};
use flotilla_testenv::{ControlPlane, Lifetime, Options};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{ListParams, ObjectMeta, Patch, PatchParams, PostParams};
use kube::{Api, Client};

use super::{Measured, env_usize, wait};
use crate::util::{cargo, root, run_cmd, runtime, say, setup};

const SRC_NS: &str = "bench-src";
const RULE: &str = "bench";
const HASH: &str = "flotilla.dev/content-hash";
const TIMEOUT: Duration = Duration::from_secs(600);

fn requests(op: &Measured) -> f64 {
    op.metric_sum("flotilla_config_copier_api_requests_total").unwrap_or(f64::NAN)
}

pub fn run() -> anyhow::Result<()> {
    let namespaces = env_usize("CONFIG_COPIER_BENCH_NAMESPACES", 1000)?;
    let sources = env_usize("CONFIG_COPIER_BENCH_SOURCES", 10)?.max(1);
    let payload = env_usize("CONFIG_COPIER_BENCH_PAYLOAD", 256)?;
    let restart = env_usize("CONFIG_COPIER_BENCH_RESTART", 1)? != 0;
    let extra_rules = env_usize("CONFIG_COPIER_BENCH_RULES", 100)?;
    let attack = Attack {
        secrets: env_usize("CONFIG_COPIER_BENCH_ATTACK_SECRETS", 60)?,
        bytes: env_usize("CONFIG_COPIER_BENCH_ATTACK_BYTES", 700_000)?,
        targets: env_usize("CONFIG_COPIER_BENCH_ATTACK_TARGETS", 4)?,
    };
    let only_attack = env_usize("CONFIG_COPIER_BENCH_ONLY_ATTACK", 0)? != 0;
    let assets = setup()?;
    let binary = match std::env::var_os("CONFIG_COPIER_BENCH_BINARY") {
        Some(b) => std::path::PathBuf::from(b),
        None => {
            let profile = std::env::var("CONFIG_COPIER_BENCH_PROFILE").unwrap_or_else(|_| "release".into());
            if profile == "release" {
                say("building the release binaries (as the images are)");
                crate::dist::build_release()?.join("config-copier")
            } else {
                say(&format!("building config-copier ({profile})"));
                run_cmd(cargo().args(["build", "--locked", "-p", "config-copier", "--bin", "config-copier"]))?;
                crate::dist::target_dir().join("debug").join("config-copier")
            }
        }
    };

    let rt = runtime()?;
    rt.block_on(async {
        let dir = root().join("target").join("flotilla-bench-config-copier");
        let _ = std::fs::remove_dir_all(&dir);
        say("starting a control plane for the benchmark");
        let mut cp = ControlPlane::start(&assets, &Options { dir, lifetime: Lifetime::DieWithParent }).await?;
        let mut result = Ok(());
        if !only_attack {
            result = bench(&cp, &binary, Scale { n: namespaces, sources, payload, restart, extra_rules }).await;
        }
        if result.is_ok() && attack.secrets > 0 {
            result = bench_attack(&cp, &binary, attack).await;
        }
        cp.stop();
        result
    })
}

struct Scale {
    n: usize,
    sources: usize,
    payload: usize,
    restart: bool,
    extra_rules: usize,
}

async fn bench(cp: &ControlPlane, binary: &std::path::Path, scale: Scale) -> anyhow::Result<()> {
    let Scale { n, sources, payload, restart, extra_rules } = scale;
    let client = cp.client().await?;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for crd in config_copier::crds() {
        let name = crd.metadata.name.clone().unwrap_or_default();
        crds.patch(&name, &PatchParams::apply("bench").force(), &Patch::Apply(&crd)).await?;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;

    say(&format!("creating {n} namespaces"));
    let started = Instant::now();
    create_namespaces(&client, n).await?;
    create_namespace(&client, SRC_NS, false).await?;
    eprintln!("    {n} namespaces created in {:.1?}", started.elapsed());

    let log = cp.dir.join("config-copier.log");
    let kubeconfig = cp.kubeconfig.display().to_string();
    let env = [("KUBECONFIG", kubeconfig.as_str()), ("RUST_LOG", "warn")];
    let mut op = Measured::start(binary, &[], &env, &log)?;
    wait("the operator to serve metrics", || async { Ok(op.metric_sum("process_resident_memory_bytes").is_ok()) })
        .await?;
    let idle_rss = op.status_kib("VmRSS:").unwrap_or(0);

    // 1. One source to every namespace.
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), SRC_NS);
    cms.create(&PostParams::default(), &source("src-0", "v1", payload)).await?;
    let before = requests(&op);
    let started = Instant::now();
    let rules: Api<CopyRule> = Api::namespaced(client.clone(), SRC_NS);
    rules.create(&PostParams::default(), &rule()).await?;
    let copies: Api<ConfigMap> = Api::all(client.clone());
    let label = format!("flotilla.dev/copy-rule={SRC_NS}.{RULE}");
    wait_copies(&copies, &label, n, |_| true).await?;
    let create_time = started.elapsed();
    let create_hwm = op.status_kib("VmHWM:").unwrap_or(0);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let create_requests = requests(&op) - before;

    // 2. Update the source: every copy follows.
    let before = requests(&op);
    let started = Instant::now();
    let old_hash = copies
        .list_metadata(&ListParams::default().labels(&label).limit(1))
        .await?
        .items
        .first()
        .and_then(|c| c.metadata.annotations.as_ref()?.get(HASH).cloned())
        .context("a copy with a content hash")?;
    cms.patch("src-0", &PatchParams::default(), &Patch::Merge(&source("src-0", "v2", payload))).await?;
    let arrivals = copy_arrivals(&copies, &label, n, started, |m| {
        m.annotations.as_ref().and_then(|a| a.get(HASH)).is_some_and(|h| *h != old_hash)
    })
    .await?;
    let update_time = started.elapsed();
    let p99 = arrivals.get((arrivals.len() * 99).div_ceil(100).saturating_sub(1)).copied().unwrap_or_default();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let update_requests = requests(&op) - before;

    // 3. Steady state: nothing to do.
    let before = requests(&op);
    tokio::time::sleep(Duration::from_secs(3)).await;
    let idle_requests = requests(&op) - before;

    // 4. More sources: N x S copies, then the peak RSS.
    let started = Instant::now();
    for i in 1..sources {
        cms.create(&PostParams::default(), &source(&format!("src-{i}"), "v1", payload)).await?;
    }
    wait_copies(&copies, &label, n * sources, |_| true).await?;
    let many_time = started.elapsed();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let hwm = op.status_kib("VmHWM:").unwrap_or(0);
    let rss = op.status_kib("VmRSS:").unwrap_or(0);

    // 5. Many rules over one source, copying nowhere.
    let rss_before_rules = op.status_kib("VmRSS:").unwrap_or(0);
    let started = Instant::now();
    for i in 0..extra_rules {
        rules.create(&PostParams::default(), &idle_rule(&format!("idle-{i}"))).await?;
    }
    wait("every extra rule to be reconciled", || async {
        let list = rules.list(&ListParams::default()).await?;
        let done = list
            .items
            .iter()
            .filter(|r| r.metadata.name.as_deref().is_some_and(|n| n.starts_with("idle-")))
            .filter(|r| r.status.as_ref().and_then(|s| s.observed_generation) == r.metadata.generation)
            .count();
        Ok(done == extra_rules)
    })
    .await?;
    let rules_time = started.elapsed();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let rss_after_rules = op.status_kib("VmRSS:").unwrap_or(0);
    let hwm_after_rules = op.status_kib("VmHWM:").unwrap_or(0);

    // 6. Restart against every copy: the re-list must not blow memory up.
    let mut restarted = None;
    if restart {
        drop(op);
        let started = Instant::now();
        op = Measured::start(binary, &[], &env, &log)?;
        // Ready again: the operator answers /metrics and its reconcile ran (requests counted).
        wait("the restarted operator to reconcile", || async {
            Ok(op.metric_sum("controller_runtime_reconcile_total").unwrap_or(0.0) >= 1.0)
        })
        .await?;
        tokio::time::sleep(Duration::from_secs(5)).await;
        restarted = Some((
            started.elapsed(),
            op.status_kib("VmHWM:").unwrap_or(0),
            op.metric_sum("flotilla_config_copier_api_requests_total").unwrap_or(f64::NAN),
        ));
    }

    say("config-copier benchmark");
    println!("namespaces                         {n}");
    println!("payload per source                 {payload} bytes");
    println!(
        "one source -> all copies           {:.2} s  ({} API requests by reconciles)",
        create_time.as_secs_f64(),
        create_requests
    );
    println!("RSS peak after the first source    {:.1} MiB", create_hwm as f64 / 1024.0);
    println!(
        "source update -> all copies        {:.2} s, p99 {:.2} s  ({} API requests by reconciles)",
        update_time.as_secs_f64(),
        p99.as_secs_f64(),
        update_requests
    );
    println!("idle for 3 s                       {idle_requests} API requests");
    println!("{sources} sources -> {} copies        {:.2} s", n * sources, many_time.as_secs_f64());
    println!("RSS idle (before the rule)         {:.1} MiB", idle_rss as f64 / 1024.0);
    println!("RSS now / peak (VmHWM)             {:.1} MiB / {:.1} MiB", rss as f64 / 1024.0, hwm as f64 / 1024.0);
    println!(
        "{extra_rules} more rules over src-0       {:.2} s; RSS {:.1} -> {:.1} MiB, peak {:.1} MiB",
        rules_time.as_secs_f64(),
        rss_before_rules as f64 / 1024.0,
        rss_after_rules as f64 / 1024.0,
        hwm_after_rules as f64 / 1024.0
    );
    if let Some((t, hwm, reqs)) = restarted {
        println!(
            "restart: first reconcile + 5 s      {:.2} s, peak RSS {:.1} MiB, {reqs} API requests",
            t.as_secs_f64(),
            hwm as f64 / 1024.0
        );
    }
    println!(
        "targets (issue 14)                 1 MiB x 1,000 <= 30 s; update p99 <= 10 s; RSS <= 64 MiB, also across a restart"
    );
    Ok(())
}

/// The scale of issue 27's attack.
struct Attack {
    secrets: usize,
    bytes: usize,
    targets: usize,
}

const ATTACK_NS: &str = "bench-attack";

/// Issue 27: `selector: {}` over a namespace of large Secrets, no consenting
/// target needed. Prints the operator's peak RSS under the attack, across a
/// restart, and while copying the same sources with the rule allowed.
async fn bench_attack(cp: &ControlPlane, binary: &std::path::Path, a: Attack) -> anyhow::Result<()> {
    let client = cp.client().await?;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for crd in config_copier::crds() {
        let name = crd.metadata.name.clone().unwrap_or_default();
        crds.patch(&name, &PatchParams::apply("bench").force(), &Patch::Apply(&crd)).await?;
    }
    create_namespace(&client, ATTACK_NS, false).await?;
    say(&format!("attack: {} Secrets of {} bytes in {ATTACK_NS}", a.secrets, a.bytes));
    let secrets: Api<Secret> = Api::namespaced(client.clone(), ATTACK_NS);
    for i in 0..a.secrets {
        let payload: Vec<u8> = (0..a.bytes).map(|j| (j.wrapping_mul(2_654_435_761) >> 13) as u8 ^ i as u8).collect();
        let s = Secret {
            metadata: ObjectMeta { name: Some(format!("big-{i:03}")), ..Default::default() },
            data: Some(BTreeMap::from([("blob".to_string(), ByteString(payload))])),
            ..Default::default()
        };
        match secrets.create(&PostParams::default(), &s).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 409 => {}
            Err(e) => return Err(e.into()),
        }
    }

    let log = cp.dir.join("config-copier-attack.log");
    let kubeconfig = cp.kubeconfig.display().to_string();
    let env = [("KUBECONFIG", kubeconfig.as_str()), ("RUST_LOG", "warn")];
    let mut op = Measured::start(binary, &[], &env, &log)?;
    wait("the operator to serve metrics", || async { Ok(op.metric_sum("process_resident_memory_bytes").is_ok()) })
        .await?;
    let rules: Api<CopyRule> = Api::namespaced(client.clone(), ATTACK_NS);
    let started = Instant::now();
    rules.create(&PostParams::default(), &attack_rule("attack", &["bench-attack-nowhere"])).await?;
    // Decided: refused (SourcesTooLarge), or every source counted (an
    // operator that holds them), or the process gone.
    let decided = wait("the attack rule to be decided", || async {
        let r = rules.get("attack").await?;
        let st = r.status.unwrap_or_default();
        let refused = st.conditions.iter().any(|c| c.type_ == "Ready" && c.reason == "SourcesTooLarge");
        Ok(refused || st.sources as usize >= a.secrets || op.status_kib("VmRSS:").is_none())
    })
    .await;
    let decide_time = started.elapsed();
    tokio::time::sleep(Duration::from_secs(5)).await;
    let reason = rules
        .get("attack")
        .await?
        .status
        .and_then(|s| s.conditions.into_iter().find(|c| c.type_ == "Ready").map(|c| c.reason))
        .unwrap_or_default();
    let (hwm, exited) = (op.status_kib("VmHWM:"), op.exited());

    // A restart against the rule: every start read every payload before.
    drop(op);
    let op = Measured::start(binary, &[], &env, &log)?;
    wait("the restarted operator to reconcile", || async {
        Ok(op.metric_sum("controller_runtime_reconcile_total").unwrap_or(0.0) >= 1.0)
    })
    .await?;
    tokio::time::sleep(Duration::from_secs(10)).await;
    let restart_hwm = op.status_kib("VmHWM:");
    let restart_requests = op.metric_sum("flotilla_config_copier_api_requests_total{verb=\"get\"").unwrap_or(f64::NAN);
    drop(op);

    say("config-copier benchmark: issue 27's attack");
    let mib = |k: Option<u64>| k.map_or("gone".to_string(), |k| format!("{:.1} MiB", k as f64 / 1024.0));
    println!("attack: {} Secrets x {} bytes, selector: {{}}, no target", a.secrets, a.bytes);
    println!(
        "  decided in {:.1} s{}: Ready reason {reason:?}",
        decide_time.as_secs_f64(),
        if decided.is_err() { " (timed out)" } else { "" }
    );
    println!("  peak RSS (VmHWM)                 {}; exited: {exited:?}", mib(hwm));
    println!("  restart: peak RSS                {}; {restart_requests} GETs", mib(restart_hwm));

    if a.targets > 0 {
        // The same sources, allowed and copied.
        let total = a.secrets * a.bytes * 4 / 3 + (1 << 20);
        let args = [format!("--max-rule-source-bytes={}Ki", total / 1024 + 1)];
        let mut op = Measured::start(binary, &args, &env, &log)?;
        wait("the operator to serve metrics", || async { Ok(op.metric_sum("process_resident_memory_bytes").is_ok()) })
            .await?;
        let mut targets = Vec::new();
        for i in 0..a.targets {
            let name = format!("bench-attack-t{i}");
            let ns = Namespace {
                metadata: ObjectMeta {
                    name: Some(name.clone()),
                    labels: Some(BTreeMap::from([("flotilla.dev/accept-copies".to_string(), "true".to_string())])),
                    ..Default::default()
                },
                ..Default::default()
            };
            match Api::<Namespace>::all(client.clone()).create(&PostParams::default(), &ns).await {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.code == 409 => {}
                Err(e) => return Err(e.into()),
            }
            targets.push(name);
        }
        let refs: Vec<&str> = targets.iter().map(String::as_str).collect();
        let started = Instant::now();
        rules.create(&PostParams::default(), &attack_rule("allowed", &refs)).await?;
        let copies: Api<Secret> = Api::all(client.clone());
        let label = format!("flotilla.dev/copy-rule={ATTACK_NS}.allowed");
        let want = a.secrets * a.targets;
        let copied = wait(&format!("{want} copies"), || async {
            Ok(copies.list_metadata(&ListParams::default().labels(&label)).await?.items.len() >= want
                || op.status_kib("VmRSS:").is_none())
        })
        .await;
        let copy_time = started.elapsed();
        println!(
            "allowed (--max-rule-source-bytes raised): {want} copies into {} namespaces in {:.1} s{}",
            a.targets,
            copy_time.as_secs_f64(),
            if copied.is_err() { " (timed out)" } else { "" }
        );
        println!("  peak RSS (VmHWM)                 {}; exited: {:?}", mib(op.status_kib("VmHWM:")), op.exited());
    }
    println!("target (issue 27)                  RSS <= 100 MiB under the attack and across restarts; never exits");
    Ok(())
}

/// A Secret rule selecting everything in the attack namespace, into `targets`.
fn attack_rule(name: &str, targets: &[&str]) -> CopyRule {
    CopyRule::new(
        name,
        CopyRuleSpec {
            kind: SourceKind::Secret,
            selector: Some(LabelSelector::default()),
            names: vec![],
            namespaces: Some(NamespaceTargets {
                include: targets.iter().map(|t| NamespaceGlob((*t).to_string())).collect(),
                ..Default::default()
            }),
            target: None,
            on_conflict: OnConflict::Skip,
            prune: true,
            rollout_on_change: false,
        },
    )
}

fn source(name: &str, value: &str, payload: usize) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            labels: Some(BTreeMap::from([("bench".to_string(), "source".to_string())])),
            ..Default::default()
        },
        data: Some(BTreeMap::from([
            ("value".to_string(), value.to_string()),
            ("payload".to_string(), "x".repeat(payload)),
        ])),
        ..Default::default()
    }
}

fn rule() -> CopyRule {
    let sel = |k: &str, v: &str| LabelSelector {
        match_labels: BTreeMap::from([(LabelKey(k.into()), LabelValue(v.into()))]),
        match_expressions: vec![],
    };
    CopyRule::new(
        RULE,
        CopyRuleSpec {
            kind: SourceKind::ConfigMap,
            selector: Some(sel("bench", "source")),
            names: vec![],
            namespaces: Some(NamespaceTargets { selector: Some(sel("bench", "target")), ..Default::default() }),
            target: None,
            on_conflict: OnConflict::Skip,
            prune: true,
            rollout_on_change: false,
        },
    )
}

/// A rule over `src-0` whose targets match no namespace: it only watches.
fn idle_rule(name: &str) -> CopyRule {
    let mut r = rule();
    r.metadata.name = Some(name.into());
    r.spec.selector = None;
    r.spec.names = vec![ObjectName("src-0".into())];
    r.spec.namespaces = Some(NamespaceTargets {
        selector: Some(LabelSelector {
            match_labels: BTreeMap::from([(LabelKey("bench".into()), LabelValue("none".into()))]),
            match_expressions: vec![],
        }),
        ..Default::default()
    });
    r
}

async fn create_namespace(client: &Client, name: &str, target: bool) -> anyhow::Result<()> {
    let labels = target.then(|| {
        BTreeMap::from([
            ("bench".to_string(), "target".to_string()),
            ("flotilla.dev/accept-copies".to_string(), "true".to_string()),
        ])
    });
    let ns = Namespace {
        metadata: ObjectMeta { name: Some(name.into()), labels, ..Default::default() },
        ..Default::default()
    };
    match Api::<Namespace>::all(client.clone()).create(&PostParams::default(), &ns).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

async fn create_namespaces(client: &Client, n: usize) -> anyhow::Result<()> {
    let limit = Arc::new(tokio::sync::Semaphore::new(32));
    let mut set = tokio::task::JoinSet::new();
    for i in 0..n {
        let (client, limit) = (client.clone(), Arc::clone(&limit));
        set.spawn(async move {
            let _permit = limit.acquire_owned().await?;
            create_namespace(&client, &format!("bench-{i:05}"), true).await
        });
    }
    while let Some(r) = set.join_next().await {
        r??;
    }
    Ok(())
}

/// Waits until `want` copies carry the label and satisfy `check`.
async fn wait_copies(
    api: &Api<ConfigMap>,
    label: &str,
    want: usize,
    check: impl Fn(&ObjectMeta) -> bool,
) -> anyhow::Result<()> {
    let check = &check;
    wait(&format!("{want} copies"), || async move {
        let list = api.list_metadata(&ListParams::default().labels(label)).await?;
        Ok(list.items.iter().filter(|c| check(&c.metadata)).count() >= want)
    })
    .await
}

/// Waits until `want` copies carry the label and satisfy `check`; returns
/// when each was first seen doing so (since `since`), sorted.
async fn copy_arrivals(
    api: &Api<ConfigMap>,
    label: &str,
    want: usize,
    since: Instant,
    check: impl Fn(&ObjectMeta) -> bool,
) -> anyhow::Result<Vec<Duration>> {
    let mut seen: BTreeMap<String, Duration> = BTreeMap::new();
    while seen.len() < want {
        if since.elapsed() > TIMEOUT {
            bail!("timed out waiting for {want} copies ({} seen)", seen.len());
        }
        let list = api.list_metadata(&ListParams::default().labels(label)).await?;
        let at = since.elapsed();
        for c in list.items.iter().filter(|c| check(&c.metadata)) {
            let key = format!(
                "{}/{}",
                c.metadata.namespace.as_deref().unwrap_or(""),
                c.metadata.name.as_deref().unwrap_or("")
            );
            seen.entry(key).or_insert(at);
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let mut v: Vec<Duration> = seen.into_values().collect();
    v.sort();
    Ok(v)
}
