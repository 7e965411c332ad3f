//! The tables: one column per operator, Markdown so they go into the README
//! as printed; then each operator's requests by verb and resource.

use std::collections::BTreeMap;
use std::time::Duration;

use super::audit::Counts;
use super::operators::goal;
use super::populate::Layout;
use super::{Figures, Preset};

/// Kubernetes' published limits (and SIG Scalability's thresholds).
pub const LIMIT_PODS: f64 = 150_000.0;
pub const LIMIT_SERVICES: f64 = 10_000.0;
pub const LIMIT_NAMESPACES: f64 = 10_000.0;

pub fn secs(d: Option<Duration>) -> String {
    d.map_or_else(|| "not reached".into(), |d| format!("{:.1} s", d.as_secs_f64()))
}

/// Bytes of RSS per object above idle.
fn slope(f: &Figures) -> Option<f64> {
    (f.objects > 0).then(|| (f.steady_rss - f.idle_rss) * 1024.0 * 1024.0 / f.objects as f64)
}

/// How many of the operator's objects there would be at Kubernetes' limits,
/// given that it holds `objects` in a cluster of `preset`'s size.
fn objects_at_limits(op: &str, objects: usize, preset: &Preset) -> Option<f64> {
    match op {
        // Every pod: its platform PodAlert reads every namespace.
        "pod-alert" => Some(LIMIT_PODS),
        // Only the pods of namespaces with a PodDebugger: the same share
        // of the pods as here.
        "pod-debugger" => Some(objects as f64 * LIMIT_PODS / preset.pods.max(1) as f64),
        "service-dns" => Some(LIMIT_SERVICES),
        // Copies grow with namespaces: the same rules over 10,000 namespaces.
        "config-copier" => Some(objects as f64 * LIMIT_NAMESPACES / preset.namespaces as f64),
        // Its own LoadTests and their runners only: no cluster-wide count.
        _ => None,
    }
}

fn lists(c: &Counts) -> String {
    if c.lists == 0 {
        "0".into()
    } else {
        format!("{} ({} with resourceVersion=0, {} paginated)", c.lists, c.lists_from_cache, c.lists_paged)
    }
}

pub fn print(
    preset: &Preset,
    layout: &Layout,
    churn: Duration,
    relist: Duration,
    figures: &BTreeMap<String, Figures>,
    took: Duration,
    nodes_ready: usize,
) {
    let ops: Vec<&String> =
        super::operators::OPERATORS.iter().filter_map(|o| figures.get_key_value(*o).map(|(k, _)| k)).collect();
    println!();
    println!(
        "scale benchmark, preset {}: {} nodes (kwok; {nodes_ready} Ready at the end), {} pods ({} crash-looping Deployments, {} pods Pending), {} namespaces, {} Services, {} CopyRules, {} PodAlerts, {} PodDebuggers, {} LoadTests; {:.0} min in all",
        preset.name,
        preset.nodes,
        preset.pods,
        layout.crashing_deployments(),
        layout.pending_pods(),
        preset.namespaces,
        preset.services,
        preset.copy_rules,
        preset.pod_alerts,
        preset.pod_debuggers,
        preset.load_tests,
        took.as_secs_f64() / 60.0
    );
    println!();
    let header: Vec<String> = ops.iter().map(|o| o.to_string()).collect();
    println!("| figure | {} |", header.join(" | "));
    println!("| --- |{}", " --- |".repeat(ops.len()));
    let row = |label: &str, cell: &dyn Fn(&str, &Figures) -> String| {
        let cells: Vec<String> = ops.iter().map(|o| cell(o, &figures[*o])).collect();
        println!("| {label} | {} |", cells.join(" | "));
    };
    row("objects held", &|o, f| format!("{} {}", f.objects, goal(o).objects));
    row("idle RSS (empty cluster)", &|_, f| format!("{:.1} MiB", f.idle_rss));
    row("peak RSS, start-up (list and first work)", &|_, f| format!("{:.1} MiB", f.startup_peak));
    row("RSS settled", &|_, f| format!("{:.1} MiB", f.steady_rss));
    row("bytes per object held (RSS slope above idle)", &|_, f| {
        slope(f).map_or_else(|| "—".into(), |b| format!("{b:.0} B"))
    });
    row("bytes per object **added** (RSS growth over the objects added)", &|o, f| match f.per_object_added {
        Some(b) => format!("{b:.0} B ({} → {} {})", f.grown_from.1, f.grown_to.1, goal(o).objects),
        None => "—".into(),
    });
    row("bytes per object added, anonymous memory only (the heap, not the binary's pages)", &|_, f| {
        f.per_object_added_anon.map_or_else(|| "—".into(), |b| format!("{b:.0} B"))
    });
    row("start → Ready", &|_, f| secs(f.ready));
    row("start → converged", &|_, f| {
        if f.converged.is_some() { secs(f.converged) } else { format!("not reached ({})", f.left) }
    });
    row("API requests, start-up", &|_, f| f.startup_requests.total().to_string());
    row("LISTs, start-up", &|_, f| lists(&f.startup_requests));
    row("idle minute at scale: CPU s, requests", &|_, f| {
        format!("{:.2} s, {}", f.quiet_cpu_per_min, f.quiet_requests.total())
    });
    row(&format!("churn ({:.0} min): CPU s per minute", churn.as_secs_f64() / 60.0), &|_, f| {
        if churn.is_zero() {
            // Nothing was churned: a rate over no time means nothing.
            return "— (no churn)".into();
        }
        format!("{:.2} ({:.4} per second)", f.churn_cpu_per_min, f.churn_cpu_per_min / 60.0)
    });
    row("churn: API requests / LISTs / reconciles", &|_, f| {
        format!("{} / {} / {:.0}", f.churn_requests.total(), f.churn_requests.lists, f.churn_reconciles)
    });
    row("API server restart: peak RSS (re-list)", &|_, f| format!("{:.1} MiB", f.relist_peak));
    row("API server restart: back → Ready and converged", &|_, f| secs(f.relist_converged));
    row("API server restart: back → last LIST (re-list done)", &|_, f| {
        f.relist_listed.map_or_else(|| "no LIST (watches resumed)".into(), |d| secs(Some(d)))
    });
    row(&format!("API server restart: requests, LISTs, CPU s ({:.0} s)", relist.as_secs_f64()), &|_, f| {
        format!("{}, {}, {:.2} s", f.relist_requests.total(), lists(&f.relist_requests), f.relist_cpu)
    });
    row("growth: converged again, RSS before → after", &|_, f| match f.grown {
        false => "— (growth left out)".into(),
        true => format!("{}, {:.1} → {:.1} MiB", secs(f.grown_converged), f.grown_from.0, f.grown_to.0),
    });
    row("chart memory limit", &|_, f| f.memory_limit.clone());
    row("**projection** at 150,000 pods / 10,000 Services / 10,000 namespaces", &|o, f| match (
        slope(f),
        objects_at_limits(o, f.objects, preset),
    ) {
        (Some(b), Some(n)) => format!("{:.0} MiB ({n:.0} {})", f.idle_rss + b * n / 1024.0 / 1024.0, goal(o).objects),
        _ => "— (holds its own objects only)".into(),
    });
    row("**projection** by the memory per object added", &|o, f| match (
        f.per_object_added,
        // From what it held after the growth (config-copier's copies per
        // namespace grew with the second config).
        objects_at_limits(o, f.grown_to.1, &layout.grown().preset),
    ) {
        (Some(b), Some(n)) => {
            format!("{:.0} MiB", f.grown_to.0 + b * (n - f.grown_to.1 as f64).max(0.0) / 1024.0 / 1024.0)
        }
        _ => "—".into(),
    });
    println!();
    println!(
        "Converged means: {}.",
        ops.iter().map(|o| format!("{o}: {}", goal(o).meaning)).collect::<Vec<_>>().join("; ")
    );
    println!(
        "Projections are estimates, not measurements: idle RSS + the slope above idle × the objects at the limits (every fixed cost counted per object: an upper bound), and the RSS after the growth + the memory per object added × the objects still to come."
    );
    println!();
    for o in &ops {
        let f = &figures[*o];
        println!("{o} API requests:");
        println!("  start-up:  {}", f.startup_requests.summary());
        println!("  idle:      {}", f.quiet_requests.summary());
        println!("  churn:     {}", f.churn_requests.summary());
        println!("  re-list:   {}", f.relist_requests.summary());
    }
}
