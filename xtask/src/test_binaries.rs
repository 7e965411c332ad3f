//! Runs the workspace's test binaries side by side, as `cargo test
//! --workspace --no-fail-fast` would one after another (each in its
//! package's directory, every failure reported, nothing stopped early).
//!
//! Why: `cargo test` runs one binary at a time, and most of its 17 minutes
//! were waits (a control plane starting, an operator converging, a pod
//! scheduled) with the two cores idle. Binaries are independent: each
//! starts its own control plane (`testenv::shared`), except those that use
//! the machine's one-node cluster (`testenv::node`), which take turns in a
//! lane of their own (the node holds 110 pods, and their timings assume a
//! quiet node). The charts' dependencies are built once before (the
//! "chart dependencies" step), so no two binaries rebuild them at once.
//!
//! Every binary's `TMPDIR` is one directory of this run, removed at its
//! end: a binary killed or crashed (or a test that keeps its files for a
//! failure's report) leaves nothing behind on the machine — before, each
//! run left hundreds of megabytes of control-plane data in `/tmp`.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde_json::Value;

use crate::util::{cargo, say};

/// Binaries of the shared lane run this many at once (beside the node lane).
const SIDE_BY_SIDE: usize = 2;

/// One test binary.
#[derive(Debug, Clone)]
struct TestBinary {
    /// `package/target` as cargo prints it (`unittests` for a lib or bin).
    name: String,
    exe: PathBuf,
    /// The package's directory: cargo runs a test binary there.
    dir: PathBuf,
    /// It uses the one-node cluster.
    on_node: bool,
}

/// Whether a test target's source asks for the one-node cluster.
fn uses_node(src: &Path) -> bool {
    std::fs::read_to_string(src).is_ok_and(|s| s.contains("node()"))
}

/// The test binaries `cargo test --workspace --no-run` builds.
fn list() -> anyhow::Result<Vec<TestBinary>> {
    let out = cargo()
        .args(["test", "--workspace", "--locked", "--no-run", "--message-format=json-render-diagnostics"])
        .stderr(Stdio::inherit())
        .output()
        .context("running cargo test --no-run")?;
    if !out.status.success() {
        bail!("cargo test --no-run failed");
    }
    let mut binaries = Vec::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let Ok(msg) = serde_json::from_str::<Value>(line) else { continue };
        if msg["reason"] != "compiler-artifact" || msg["profile"]["test"] != true {
            continue;
        }
        let (Some(exe), Some(manifest)) = (msg["executable"].as_str(), msg["manifest_path"].as_str()) else {
            continue;
        };
        let target = msg["target"]["name"].as_str().unwrap_or("?");
        let kind = msg["target"]["kind"][0].as_str().unwrap_or("?");
        let package = Path::new(manifest).parent().and_then(Path::file_name).and_then(|n| n.to_str()).unwrap_or("?");
        let src = PathBuf::from(msg["target"]["src_path"].as_str().unwrap_or_default());
        binaries.push(TestBinary {
            name: if kind == "test" { format!("{package}/{target}") } else { format!("{package}/{kind} {target}") },
            exe: PathBuf::from(exe),
            dir: Path::new(manifest).parent().map(Path::to_path_buf).unwrap_or_default(),
            on_node: kind == "test" && uses_node(&src),
        });
    }
    Ok(binaries)
}

/// What one binary did.
struct Ran {
    name: String,
    took: Duration,
    passed: bool,
    output: String,
}

fn run_one(b: &TestBinary, scratch: &Path) -> Ran {
    let started = Instant::now();
    let out = Command::new(&b.exe)
        .current_dir(&b.dir)
        .env("FLOTILLA_CHART_DEPENDENCIES_BUILT", "1")
        .env("TMPDIR", scratch)
        .output();
    let (passed, output) = match out {
        Ok(o) => (
            o.status.success(),
            format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr)),
        ),
        Err(e) => (false, format!("could not run {}: {e}", b.exe.display())),
    };
    Ran { name: b.name.clone(), took: started.elapsed(), passed, output }
}

/// Takes binaries from `queue` until it is empty, reporting each.
fn worker(queue: &Mutex<VecDeque<TestBinary>>, done: &Mutex<Vec<Ran>>, total: usize, scratch: &Path) {
    loop {
        let Some(b) = queue.lock().ok().and_then(|mut q| q.pop_front()) else { return };
        let ran = run_one(&b, scratch);
        let mut done = match done.lock() {
            Ok(d) => d,
            Err(p) => p.into_inner(),
        };
        let mark = if ran.passed { "ok  " } else { "FAIL" };
        say(&format!("tests [{}/{total}] {mark} {} ({:.1?})", done.len() + 1, ran.name, ran.took));
        if !ran.passed {
            eprintln!("{}", ran.output);
        }
        done.push(ran);
    }
}

/// How long each binary took last time (the longest start first, so that
/// no long one is left to run alone at the end).
fn times_file() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| crate::util::root().join("target"), PathBuf::from);
    target.join("flotilla-test-times.json")
}

fn last_times() -> std::collections::HashMap<String, f64> {
    std::fs::read_to_string(times_file()).ok().and_then(|t| serde_json::from_str(&t).ok()).unwrap_or_default()
}

/// Every test binary and the doc tests; fails when any failed.
pub fn run() -> anyhow::Result<()> {
    let scratch = std::env::temp_dir().join(format!("flotilla-test-run-{}", std::process::id()));
    std::fs::create_dir_all(&scratch).with_context(|| format!("creating {}", scratch.display()))?;
    let result = run_in(&scratch);
    let left = dir_size(&scratch);
    match std::fs::remove_dir_all(&scratch) {
        Ok(()) => say(&format!("tests: removed their temporary files ({:.1} MiB)", left as f64 / 1048576.0)),
        Err(e) => eprintln!("    warning: could not remove {}: {e}", scratch.display()),
    }
    result
}

/// Bytes of the regular files under `dir` (what removing it frees).
fn dir_size(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else { return 0 };
    entries
        .flatten()
        .map(|e| match e.file_type() {
            Ok(t) if t.is_dir() => dir_size(&e.path()),
            Ok(t) if t.is_file() => e.metadata().map_or(0, |m| m.len()),
            _ => 0,
        })
        .sum()
}

fn run_in(scratch: &Path) -> anyhow::Result<()> {
    let mut binaries = list()?;
    let last = last_times();
    binaries.sort_by(|a, b| {
        let t = |x: &TestBinary| last.get(&x.name).copied().unwrap_or(f64::MAX);
        t(b).total_cmp(&t(a))
    });
    let total = binaries.len() + 1;
    let (node, shared): (Vec<_>, Vec<_>) = binaries.into_iter().partition(|b| b.on_node);
    let node = Mutex::new(VecDeque::from(node));
    let shared = Mutex::new(VecDeque::from(shared));
    let done = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        s.spawn(|| worker(&node, &done, total, scratch));
        for _ in 0..SIDE_BY_SIDE {
            s.spawn(|| worker(&shared, &done, total, scratch));
        }
    });
    // Doc tests last: rustdoc compiles each example (no binary to list).
    let started = Instant::now();
    let doc = cargo()
        .args(["test", "--workspace", "--locked", "--doc"])
        .env("TMPDIR", scratch)
        .output()
        .context("cargo test --doc")?;
    let mut done = done.into_inner().unwrap_or_else(std::sync::PoisonError::into_inner);
    let ran = Ran {
        name: "doc tests".into(),
        took: started.elapsed(),
        passed: doc.status.success(),
        output: format!("{}{}", String::from_utf8_lossy(&doc.stdout), String::from_utf8_lossy(&doc.stderr)),
    };
    say(&format!("tests [{total}/{total}] {} doc tests ({:.1?})", if ran.passed { "ok  " } else { "FAIL" }, ran.took));
    if !ran.passed {
        eprintln!("{}", ran.output);
    }
    done.push(ran);
    let times: std::collections::HashMap<&str, f64> =
        done.iter().map(|r| (r.name.as_str(), r.took.as_secs_f64())).collect();
    if let Ok(text) = serde_json::to_string(&times) {
        let _ = std::fs::write(times_file(), text);
    }
    done.sort_by_key(|r| std::cmp::Reverse(r.took));
    say("tests: the longest binaries");
    for r in done.iter().take(8) {
        eprintln!("    {:>7.1?} {}", r.took, r.name);
    }
    let failed: Vec<&str> = done.iter().filter(|r| !r.passed).map(|r| r.name.as_str()).collect();
    if !failed.is_empty() {
        bail!("{} of {total} test binaries failed: {}", failed.len(), failed.join(", "));
    }
    Ok(())
}
