//! `cargo xtask bench pod-alert-evaluation` (which runs this example, built
//! with the release profile, as the operator's image is): what a pod change
//! costs a cluster-wide PodAlert at Kubernetes' limits (issue 28), in
//! process, no cluster: 150,000 realistic pods (`flotilla_testenv::fixtures`)
//! in 10,000 namespaces, 1 % of them crash-looping, held in the operator's
//! own pod cache. "Every pod" is what each reconcile cost before the
//! evaluation was kept per namespace (`pod_alert::evaluation`): the whole
//! scope read and evaluated again; "kept" is what it costs now: the
//! namespaces changed since (and any whose findings time changed). Both
//! include the incident book's step over the findings (1,500 problems), the
//! same work either way. Printed per reconcile (medians), after one pod
//! change and after the changes of one debounce bound (2 s) of the scale
//! bench's churn (1 % of the pods replaced a minute: the triggers never
//! pause, so a cluster-wide PodAlert is reconciled once per bound), and as
//! CPU a second under that churn, computed from those medians.
//!
//! Knobs: `POD_ALERT_EVALUATION_PODS` (150000), `POD_ALERT_EVALUATION_NAMESPACES` (10000).

use std::time::{Duration, Instant};

use flotilla_shared::debounce::MAX_TRIGGER_DELAY;
use flotilla_shared::pods::LabelKeys;
use flotilla_shared::projection::{self, Own, Writer};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::runtime::watcher;
use pod_alert::evaluation::{Dirty, Evaluation};
use pod_alert::incident::Book;
use pod_alert::observe::{RestartHistory, evaluate};
use pod_alert::pod::{PodView, view};
use pod_alert::rules::Rules;
use serde_json::json;

/// A knob from the environment.
fn env_usize(name: &str, default: usize) -> anyhow::Result<usize> {
    match std::env::var(name) {
        Ok(v) => Ok(v.parse().map_err(|_| anyhow::anyhow!("{name}={v:?} is not a number"))?),
        Err(_) => Ok(default),
    }
}

fn say(msg: &str) {
    eprintln!("==> {msg}");
}

fn main() -> anyhow::Result<()> {
    let pods = env_usize("POD_ALERT_EVALUATION_PODS", 150_000)?.max(1);
    let namespaces = env_usize("POD_ALERT_EVALUATION_NAMESPACES", 10_000)?.clamp(1, pods);
    say(&format!("building {pods} pod views in {namespaces} namespaces (1 % crash-looping)"));
    let keys = LabelKeys::new();
    let (store, mut writer) = projection::keyed_store::<PodView>();
    for i in 0..pods {
        put(&mut writer, &keys, pod(i, namespaces, i % 100 == 0)?);
    }
    let spec = serde_json::from_value(
        json!({"alerts": {"checkRunningPods": true, "restartThreshold": 3}, "allNamespaces": true}),
    )?;
    let rules = Rules::new(&spec, "flotilla-system", &["flotilla-system".to_string()])?;
    let now = Timestamp::now();

    // Before: each pod change evaluated every pod of the scope.
    let (mut history, mut book) = (RestartHistory::default(), Book::default());
    let every: Vec<Duration> = (0..15)
        .map(|_| {
            let started = Instant::now();
            let all = store.matching(|_| true);
            let f = evaluate(all.iter().map(AsRef::as_ref), &rules, &mut history, now);
            std::hint::black_box(book.step(&f, &rules, now));
            started.elapsed()
        })
        .collect();

    // After: the namespaces changed since the last reconcile are read again.
    let (mut kept, mut kept_book) = (Evaluation::default(), Book::default());
    let problems = kept.update((Some(1), true), Dirty::All, &rules, &store, now).findings.problems.len();
    // Under steady churn a cluster-wide PodAlert is reconciled once per
    // debounce bound (its triggers never pause 500 ms): that reconcile
    // covers the pods replaced meanwhile.
    let every_reconcile = MAX_TRIGGER_DELAY.as_secs_f64();
    let replaced = ((pods as f64 / 100.0 / 60.0) * every_reconcile).ceil().max(1.0) as usize;
    let (mut one, mut churn) = (Vec::new(), Vec::new());
    let (mut read_one, mut read_churn) = (0, 0);
    let mut next = 0;
    for r in 0..100 {
        let batch = if r % 2 == 0 { 1 } else { replaced };
        let mut dirty = std::collections::BTreeSet::new();
        for _ in 0..batch {
            next += 1;
            let i = (next * 7919) % pods;
            let p = pod(i, namespaces, next % 2 == 0)?;
            dirty.insert(Box::from(p.namespace().unwrap_or_default()));
            put(&mut writer, &keys, p);
        }
        let started = Instant::now();
        let out = kept.update((Some(1), true), Dirty::Namespaces(dirty), &rules, &store, now);
        let read = out.evaluated;
        std::hint::black_box(kept_book.step(out.findings, &rules, now));
        if batch == 1 {
            (read_one, _) = (read, one.push(started.elapsed()));
        } else {
            (read_churn, _) = (read, churn.push(started.elapsed()));
        }
    }

    let (before, one, churn) = (median(every), median(one), median(churn));
    let cpu = |d: Duration| d.as_secs_f64() / every_reconcile;
    println!();
    println!(
        "cluster-wide PodAlert over {pods} pods in {namespaces} namespaces ({problems} problems found, {} namespaces kept)",
        kept.namespaces()
    );
    println!("| one reconcile's evaluation and incident step | every pod (before) | kept per namespace (after) |");
    println!("| --- | --- | --- |");
    println!(
        "| after one pod change | {:.1} ms ({namespaces} namespaces read) | {:.3} ms ({read_one} read) |",
        ms(before),
        ms(one)
    );
    println!(
        "| after {every_reconcile:.0} s of 1 %/min churn ({replaced} pods replaced) | {:.1} ms | {:.3} ms ({read_churn} read) |",
        ms(before),
        ms(churn)
    );
    println!(
        "| CPU s per s under that churn (a reconcile every {every_reconcile:.0} s) | {:.4} | {:.5} |",
        cpu(before),
        cpu(churn)
    );
    Ok(())
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v.get(v.len() / 2).copied().unwrap_or_default()
}

/// The fixture's pod `i`, in namespace `i % namespaces`, crash-looping (5
/// restarts, the last a minute ago) when `crashing`.
fn pod(i: usize, namespaces: usize, crashing: bool) -> anyhow::Result<Pod> {
    let mut v = serde_json::to_value(flotilla_testenv::fixtures::deployment_pod(i))?;
    v["metadata"]["namespace"] = json!(format!("ns-{:05}", i % namespaces));
    if crashing {
        let finished = Timestamp::now() - jiff_secs(60);
        let started = Timestamp::now() - jiff_secs(90);
        v["status"]["containerStatuses"][0]["restartCount"] = json!(5);
        v["status"]["containerStatuses"][0]["ready"] = json!(false);
        v["status"]["containerStatuses"][0]["state"] =
            json!({"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 5m0s"}});
        v["status"]["containerStatuses"][0]["lastState"] = json!({"terminated": {"exitCode": 1, "reason": "Error",
            "startedAt": started.to_string(), "finishedAt": finished.to_string(),
            "containerID": format!("containerd://{:064x}", i * 2)}});
    }
    Ok(serde_json::from_value(v)?)
}

fn jiff_secs(s: i64) -> k8s_openapi::jiff::SignedDuration {
    k8s_openapi::jiff::SignedDuration::from_secs(s)
}

fn put(writer: &mut Writer<PodView, Own<PodView>>, keys: &LabelKeys, pod: Pod) {
    writer.apply(watcher::Event::Apply(pod), |p: Pod| {
        (format!("{}/{}", p.namespace().unwrap_or_default(), p.name_any()), view(&p, keys))
    });
}
