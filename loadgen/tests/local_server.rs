//! loadgen against a local HTTP server on loopback: every request counted,
//! errors by kind (5xx, 4xx, timeouts, refused connections), latencies in
//! the histogram, the deadline honoured, the open model's schedule kept;
//! and the binary's own summary in its termination file.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use loadgen::run::{Config, run};
use loadgen::scenario::Variant;
use loadgen::summary::{ErrorKind, Merged, Summary};

/// A server: `/ok` answers 200 after `delay_ms` (query), `/fail` 500,
/// `/missing` 404, `/slow` never within a test's timeout, `/big` 200 with
/// [`BIG`]. Counts requests.
async fn server() -> (String, Arc<AtomicU64>) {
    let count = Arc::new(AtomicU64::new(0));
    let c = count.clone();
    let app = axum::Router::new().fallback(move |uri: axum::http::Uri| {
        let c = c.clone();
        async move {
            c.fetch_add(1, Ordering::Relaxed);
            let delay: u64 =
                uri.query().and_then(|q| q.strip_prefix("delay_ms=")).and_then(|v| v.parse().ok()).unwrap_or(0);
            tokio::time::sleep(Duration::from_millis(delay)).await;
            match uri.path() {
                "/fail" => (axum::http::StatusCode::INTERNAL_SERVER_ERROR, "boom"),
                "/missing" => (axum::http::StatusCode::NOT_FOUND, "no"),
                "/big" => (axum::http::StatusCode::OK, BIG.as_str()),
                "/slow" => {
                    tokio::time::sleep(Duration::from_secs(30)).await;
                    (axum::http::StatusCode::OK, "late")
                }
                _ => (axum::http::StatusCode::OK, "ok"),
            }
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (format!("http://{addr}"), count)
}

/// A body longer than a few reads of loadgen's 16 KiB buffer, with
/// `MARKER` once, near its end.
static BIG: std::sync::LazyLock<String> =
    std::sync::LazyLock::new(|| format!("{}MARKER{}", "x".repeat(100_000), "y".repeat(7)));

fn config(url: String, repeat: u64, concurrency: u64) -> Config {
    Config {
        url,
        method: reqwest::Method::GET,
        headers: vec![],
        secret_headers: vec![],
        connect_to: None,
        body: Vec::new(),
        repeat,
        concurrency,
        timeout: Duration::from_secs(5),
        rate: 0.0,
        deadline: Duration::from_secs(30),
        duration: None,
        stages: vec![],
        max_connections: 100,
        tls: Default::default(),
        http2: false,
        checks: Default::default(),
        scenario: Vec::new(),
        progress_every: None,
        stop_file: None,
    }
}

fn stage(secs: u64, rate: f64) -> loadgen::schedule::Stage {
    loadgen::schedule::Stage { duration: Duration::from_secs(secs), rate }
}

#[tokio::test]
async fn a_profile_sends_its_schedule_per_stage_and_times_from_it() {
    let (base, served) = server().await;
    // 0 -> 40/s over 2 s (40 requests), then 40/s for 1 s (40).
    let cfg = Config { stages: vec![stage(2, 40.0), stage(1, 40.0)], ..config(format!("{base}/ok?delay_ms=5"), 1, 1) };
    let started = Instant::now();
    let out = run(cfg).await.unwrap();
    assert!(started.elapsed() >= Duration::from_secs(3) - Duration::from_millis(50), "{:?}", started.elapsed());
    assert_eq!(out.requests, 80);
    assert_eq!(served.load(Ordering::Relaxed), 80);
    let s = &out.staged;
    assert_eq!((s.dropped, s.stages.len()), (0, 2));
    assert_eq!((s.stages[0].requests, s.stages[1].requests), (40, 40));
    assert_eq!(s.stages[0].histogram.len() + s.stages[1].histogram.len(), out.histogram.len());
    assert_eq!(out.elapsed, Duration::from_secs(3));
    assert!(out.histogram.min() >= 5_000, "latency at least the server's delay");
}

#[tokio::test]
async fn a_profile_drops_what_no_free_connection_can_send_on_time() {
    let (base, served) = server().await;
    // 20/s flat for 2 s (after a 1 s ramp from 0: 10 + 40 due) on one
    // connection while each answer takes 300 ms: most come due while it is
    // busy, and are dropped, never sent late.
    let cfg = Config {
        stages: vec![stage(1, 20.0), stage(2, 20.0)],
        max_connections: 1,
        ..config(format!("{base}/ok?delay_ms=300"), 1, 1)
    };
    let out = run(cfg).await.unwrap();
    let s = &out.staged;
    assert_eq!(out.requests + s.dropped + out.not_sent, 50, "{out:?}");
    assert!(s.dropped >= 30, "{out:?}");
    // At most one in flight: about one request per 300 ms was sent.
    assert!(out.requests <= 12, "{out:?}");
    assert_eq!(served.load(Ordering::Relaxed), out.requests);
    assert_eq!(s.stages.iter().map(|st| st.dropped).sum::<u64>(), s.dropped);
    // Each latency counts from its scheduled time: at least the delay.
    assert!(out.histogram.min() >= 300_000, "{out:?}");
}

#[tokio::test]
async fn a_profile_cut_by_the_deadline_counts_the_rest_as_not_sent() {
    let (base, _) = server().await;
    let cfg = Config {
        stages: vec![stage(1, 10.0), stage(10, 10.0)],
        deadline: Duration::from_secs(2),
        ..config(format!("{base}/ok"), 1, 1)
    };
    let started = Instant::now();
    let out = run(cfg).await.unwrap();
    assert!(started.elapsed() < Duration::from_secs(4), "{:?}", started.elapsed());
    // 5 + 100 planned, about 15 due within the 2 s: never more, and more
    // than the first stage's 5 (a loaded machine's stalls drop some: bounds
    // here are what the schedule allows, not what this machine keeps up with).
    assert_eq!(out.requests + out.not_sent + out.staged.dropped, 105, "{out:?}");
    assert!((6..=16).contains(&out.requests), "{out:?}");
    assert_eq!(out.elapsed, Duration::from_secs(2));
}

#[tokio::test]
async fn every_request_is_sent_counted_and_timed() {
    let (base, served) = server().await;
    let out = run(config(format!("{base}/ok?delay_ms=20"), 10, 3)).await.unwrap();
    assert_eq!(out.requests, 30);
    assert_eq!(served.load(Ordering::Relaxed), 30);
    assert!(out.errors.is_empty(), "{:?}", out.errors);
    assert_eq!(out.histogram.len(), 30);
    // Each answer took at least the server's 20 ms.
    assert!(out.histogram.min() >= 20_000, "min {} µs", out.histogram.min());
    assert!(out.histogram.max() < 2_000_000, "max {} µs", out.histogram.max());
    // Three connections in parallel: ~10 rounds of ~20 ms, not 30.
    assert!(out.elapsed < Duration::from_millis(550), "{:?}", out.elapsed);
}

#[tokio::test]
async fn errors_are_counted_by_kind_and_not_timed() {
    let (base, _) = server().await;
    let out = run(config(format!("{base}/fail"), 4, 2)).await.unwrap();
    assert_eq!((out.requests, out.errors.get(&ErrorKind::Http5xx).copied()), (8, Some(8)));
    assert_eq!(out.histogram.len(), 0);
    let out = run(config(format!("{base}/missing"), 3, 1)).await.unwrap();
    assert_eq!(out.errors.get(&ErrorKind::Http4xx).copied(), Some(3));
    let mut slow = config(format!("{base}/slow"), 2, 1);
    slow.timeout = Duration::from_millis(200);
    let out = run(slow).await.unwrap();
    assert_eq!(out.errors.get(&ErrorKind::Timeout).copied(), Some(2));
    // Nothing listens on port 1.
    let out = run(config("http://127.0.0.1:1/".into(), 2, 1)).await.unwrap();
    assert_eq!(out.errors.get(&ErrorKind::Connect).copied(), Some(2));
}

fn checking(url: String, statuses: &[u16], body_contains: Option<&str>) -> Config {
    let checks = loadgen::check::Checks {
        statuses: statuses.to_vec(),
        body_contains: body_contains.map(|s| loadgen::check::Needle::new(s.as_bytes()).unwrap()),
    };
    Config { checks, ..config(url, 4, 2) }
}

#[tokio::test]
async fn a_body_without_the_substring_is_a_check_error_and_one_with_it_none() {
    let (base, _) = server().await;
    // 200 "ok": the body lacks the substring, so only check errors.
    let out = run(checking(format!("{base}/ok"), &[], Some("welcome"))).await.unwrap();
    assert_eq!(out.requests, 8);
    assert_eq!(out.errors, [(ErrorKind::Check, 8)].into(), "{:?}", out.errors);
    assert_eq!(out.histogram.len(), 0, "a failed check is not timed");
    let out = run(checking(format!("{base}/ok"), &[], Some("ok"))).await.unwrap();
    assert!(out.errors.is_empty(), "{:?}", out.errors);
    assert_eq!(out.histogram.len(), 8);
    // Found past several reads; missed, though every read held an "M".
    let out = run(checking(format!("{base}/big"), &[200], Some("MARKERyyy"))).await.unwrap();
    assert!(out.errors.is_empty(), "{:?}", out.errors);
    let out = run(checking(format!("{base}/big"), &[200], Some("MARKERz"))).await.unwrap();
    assert_eq!(out.errors, [(ErrorKind::Check, 8)].into(), "{:?}", out.errors);
}

#[tokio::test]
async fn expected_statuses_replace_the_classes_only_when_given() {
    let (base, _) = server().await;
    // A 404 expected passes; a 200 not expected fails as a check.
    let out = run(checking(format!("{base}/missing"), &[404], None)).await.unwrap();
    assert!(out.errors.is_empty(), "{:?}", out.errors);
    let out = run(checking(format!("{base}/ok"), &[201, 204], None)).await.unwrap();
    assert_eq!(out.errors, [(ErrorKind::Check, 8)].into(), "{:?}", out.errors);
    let out = run(checking(format!("{base}/fail"), &[200], None)).await.unwrap();
    assert_eq!(out.errors, [(ErrorKind::Check, 8)].into(), "{:?}", out.errors);
    // Without statuses a 5xx stays http5xx, even with a body check.
    let out = run(checking(format!("{base}/fail"), &[], Some("boom"))).await.unwrap();
    assert_eq!(out.errors, [(ErrorKind::Http5xx, 8)].into(), "{:?}", out.errors);
}

#[tokio::test]
async fn the_deadline_stops_the_run_and_counts_what_was_not_sent() {
    let (base, _) = server().await;
    let mut cfg = config(format!("{base}/ok?delay_ms=100"), 100, 1);
    cfg.deadline = Duration::from_millis(550);
    let started = Instant::now();
    let out = run(cfg).await.unwrap();
    // Without the deadline: 100 answers of 100 ms, 10 s.
    assert!(started.elapsed() < Duration::from_secs(5), "{:?}", started.elapsed());
    assert!((1..=6).contains(&out.requests), "{} sent", out.requests);
    assert_eq!(out.requests + out.not_sent, 100);
    // The request in flight at the deadline was cut short: not sent, not
    // a timeout.
    assert!(out.errors.is_empty(), "{:?}", out.errors);
    assert_eq!(out.histogram.len(), out.requests);
}

#[tokio::test]
async fn a_duration_run_sends_until_its_end_and_covers_exactly_that_period() {
    let (base, served) = server().await;
    // repeat 1 is ignored: three connections loop for 600 ms.
    let mut cfg = config(format!("{base}/ok?delay_ms=20"), 1, 3);
    cfg.duration = Some(Duration::from_millis(600));
    let started = Instant::now();
    let out = run(cfg).await.unwrap();
    let wall = started.elapsed();
    assert!(wall >= Duration::from_millis(600) && wall < Duration::from_secs(5), "{wall:?}");
    assert_eq!(out.elapsed, Duration::from_millis(600), "the period, exactly");
    // Each answer takes 20 ms: at most 30 per connection fit in 600 ms,
    // and far more than repeat's 1 (how many more is this machine's speed).
    assert!((10..=90).contains(&out.requests), "{} sent", out.requests);
    assert_eq!(out.not_sent, 0, "nothing was planned past the period");
    assert!(out.errors.is_empty(), "{:?}", out.errors);
    assert_eq!(out.histogram.len(), out.requests);
    // What was in flight at the end (at most one per connection) was
    // served, but is not counted: the results cover the period only.
    tokio::time::sleep(Duration::from_millis(50)).await;
    let served = served.load(Ordering::Relaxed);
    assert!(served >= out.requests && served <= out.requests + 3, "served {served}, counted {}", out.requests);
}

#[tokio::test]
async fn a_duration_run_ends_on_time_whatever_the_server_does() {
    let (base, _) = server().await;
    // A server that never answers within the period: the requests in
    // flight at its end are cut, neither answered nor failed.
    let mut cfg = config(format!("{base}/slow"), 1, 2);
    cfg.duration = Some(Duration::from_millis(500));
    let started = Instant::now();
    let out = run(cfg).await.unwrap();
    // Well before the requests' own 5 s timeout (the server answers in 30 s).
    assert!(started.elapsed() < Duration::from_secs(4), "{:?}", started.elapsed());
    assert_eq!((out.requests, out.not_sent, out.elapsed), (0, 0, Duration::from_millis(500)));
    assert!(out.errors.is_empty(), "{:?}", out.errors);
    // The run's deadline still bounds a longer duration.
    let mut cfg = config(format!("{base}/ok"), 1, 1);
    cfg.duration = Some(Duration::from_secs(10));
    cfg.deadline = Duration::from_millis(300);
    let started = Instant::now();
    let out = run(cfg).await.unwrap();
    assert!(started.elapsed() < Duration::from_secs(5), "{:?}", started.elapsed());
    assert_eq!(out.elapsed, Duration::from_millis(300));
    // The open model keeps its schedule for the period: 50/s for 500 ms.
    let mut cfg = config(format!("{base}/ok"), 1, 2);
    cfg.rate = 50.0;
    cfg.duration = Some(Duration::from_millis(500));
    let out = run(cfg).await.unwrap();
    // 25 due (one each 20 ms): never more; a request a stall of a loaded
    // machine makes late past the end is not sent; and far more than
    // repeat × concurrency's 2.
    assert!((10..=25).contains(&out.requests), "{} sent", out.requests);
    assert_eq!(out.not_sent, 0);
}

#[tokio::test]
async fn the_open_model_keeps_its_schedule_and_times_from_it() {
    let (base, _) = server().await;
    let mut cfg = config(format!("{base}/ok"), 20, 2);
    cfg.rate = 100.0; // 40 requests over ~0.4 s
    let out = run(cfg).await.unwrap();
    assert_eq!(out.requests, 40);
    assert!(out.elapsed >= Duration::from_millis(380), "{:?}", out.elapsed);
    assert!(out.elapsed < Duration::from_secs(5), "{:?}", out.elapsed);
    // A server slower than the schedule: latencies include the wait for a
    // free connection (coordinated omission corrected), so they grow past
    // the server's own 50 ms.
    let mut cfg = config(format!("{base}/ok?delay_ms=50"), 10, 1);
    cfg.rate = 100.0;
    let out = run(cfg).await.unwrap();
    assert!(out.histogram.max() > 300_000, "max {} µs", out.histogram.max());
}

#[tokio::test]
async fn the_binary_writes_a_summary_the_operator_can_merge() {
    let (base, _) = server().await;
    let dir = std::env::temp_dir().join(format!("loadgen-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (log, start) = (dir.join("termination-log"), dir.join("start"));
    let child = tokio::process::Command::new(env!("CARGO_BIN_EXE_loadgen"))
        .args(["--url", &format!("{base}/ok"), "--repeat", "5", "--concurrency", "2"])
        .arg("--start-file")
        .arg(&start)
        .arg("--termination-log")
        .arg(&log)
        .spawn()
        .unwrap();
    // It waits for the start signal.
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert!(!log.exists(), "it ran before the start signal");
    std::fs::write(&start, "go\n").unwrap();
    let status = child.wait_with_output().await.unwrap().status;
    assert!(status.success(), "{status:?}");
    let s = Summary::parse(&std::fs::read_to_string(&log).unwrap()).unwrap();
    assert_eq!((s.requests, s.error_count(), s.digits), (10, 0, 3));
    let m = Merged::of(&[s.clone(), s]).unwrap();
    assert_eq!((m.requests, m.histogram.len()), (20, 20));
    let bad = std::process::Command::new(env!("CARGO_BIN_EXE_loadgen")).args(["--url", "not a url"]).output().unwrap();
    assert_eq!(bad.status.code(), Some(2));
    // A header no request could carry is refused before the start signal
    // (which never comes here), not after it.
    let bad = std::process::Command::new(env!("CARGO_BIN_EXE_loadgen"))
        .args(["--url", &format!("{base}/ok"), "--header", "x-bad:a\u{1}b", "--start-file"])
        .arg(dir.join("never"))
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(2), "{}", String::from_utf8_lossy(&bad.stderr));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("--header"));
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn the_binary_takes_its_duration_from_the_environment() {
    let (base, _) = server().await;
    let dir = std::env::temp_dir().join(format!("loadgen-duration-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let log = dir.join("termination-log");
    // As the operator sets it: milliseconds, in DURATION, REPEAT still set.
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_loadgen"))
        .env("URL", format!("{base}/ok?delay_ms=10"))
        .env("REPEAT", "1")
        .env("DURATION", "700ms")
        .env("TERMINATION_LOG", &log)
        .output()
        .await
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let s = Summary::parse(&std::fs::read_to_string(&log).unwrap()).unwrap();
    assert_eq!(s.elapsed_ms, 700);
    assert!(s.requests > 10, "{} requests: it sent for the duration, not once", s.requests);
    assert_eq!((s.not_sent, s.error_count()), (0, 0));
    let zero = std::process::Command::new(env!("CARGO_BIN_EXE_loadgen"))
        .args(["--url", &format!("{base}/ok"), "--duration", "0s"])
        .output()
        .unwrap();
    assert_eq!(zero.status.code(), Some(2));
    let _ = std::fs::remove_dir_all(&dir);
}

/// A server that records each request's Host and X-Token headers.
async fn recording_server() -> (u16, Arc<std::sync::Mutex<Vec<(String, String)>>>) {
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let s = seen.clone();
    let app = axum::Router::new().fallback(move |headers: axum::http::HeaderMap| {
        let s = s.clone();
        async move {
            let get = |k: &str| headers.get(k).and_then(|v| v.to_str().ok()).unwrap_or_default().to_string();
            s.lock().unwrap().push((get("host"), get("x-token")));
            "ok"
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (port, seen)
}

/// The operator pins a Service's cluster IP: the runner connects there and
/// never resolves the URL's host (a name under `.invalid` here, which no
/// resolver answers), which still goes in the Host header; a header value
/// comes from a file (a mounted Secret), one trailing newline dropped, and
/// an unusable one is refused naming the file, never showing the value.
#[tokio::test]
async fn the_binary_connects_to_the_pinned_address_and_reads_header_values_from_files() {
    let (port, seen) = recording_server().await;
    let dir = std::env::temp_dir().join(format!("loadgen-pin-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (token, log) = (dir.join("token"), dir.join("termination-log"));
    std::fs::write(&token, "s3cret-value\n").unwrap();
    let host = format!("web.shop.svc.cluster.invalid:{port}");
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_loadgen"))
        .args(["--url", &format!("http://{host}/"), "--connect-to", "127.0.0.1", "--repeat", "3"])
        .arg("--header-file")
        .arg(format!("X-Token:{}", token.display()))
        .arg("--termination-log")
        .arg(&log)
        .output()
        .await
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let s = Summary::parse(&std::fs::read_to_string(&log).unwrap()).unwrap();
    assert_eq!((s.requests, s.error_count()), (3, 0));
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen, vec![(host.clone(), "s3cret-value".to_string()); 3]);

    std::fs::write(&token, "s3cret\u{1}value").unwrap();
    let bad = std::process::Command::new(env!("CARGO_BIN_EXE_loadgen"))
        .args(["--url", &format!("http://{host}/"), "--connect-to", "127.0.0.1"])
        .env("HEADER_FILES", format!("X-Token:{}", token.display()))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&bad.stderr);
    assert_eq!(bad.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("--header-file") && stderr.contains("token"), "{stderr}");
    assert!(!stderr.contains("s3cret"), "the value is never shown: {stderr}");
    let missing = std::process::Command::new(env!("CARGO_BIN_EXE_loadgen"))
        .args(["--url", &format!("http://{host}/"), "--header-file", "X-Token:/nonexistent/token"])
        .output()
        .unwrap();
    assert_eq!(missing.status.code(), Some(2));
    let not_ip = std::process::Command::new(env!("CARGO_BIN_EXE_loadgen"))
        .args(["--url", &format!("http://{host}/"), "--connect-to", "web.shop"])
        .output()
        .unwrap();
    assert_eq!(not_ip.status.code(), Some(2));
    let _ = std::fs::remove_dir_all(&dir);
}

/// While it runs the binary prints progress lines the operator can merge,
/// and "stop" in its start file ends the run early with a summary marked
/// stopped (`thresholds.abortOnFail`); in an arrival-rate profile too,
/// even in a stage at rate 0.
#[tokio::test]
async fn the_binary_reports_progress_and_stops_on_the_stop_signal() {
    let (base, _) = server().await;
    for (mode, args) in [
        ("closed", vec!["--repeat", "1000000", "--concurrency", "2"]),
        ("profile", vec!["--stages", "1s:50,10m:0", "--max-connections", "4"]),
    ] {
        let dir = std::env::temp_dir().join(format!("loadgen-stop-{}-{mode}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (log, start) = (dir.join("termination-log"), dir.join("start"));
        std::fs::write(&start, "go\n").unwrap();
        let child = tokio::process::Command::new(env!("CARGO_BIN_EXE_loadgen"))
            .args(["--url", &format!("{base}/ok?delay_ms=2"), "--progress-every", "500ms"])
            .args(&args)
            .arg("--start-file")
            .arg(&start)
            .arg("--termination-log")
            .arg(&log)
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let began = Instant::now();
        tokio::time::sleep(Duration::from_millis(2_500)).await;
        std::fs::write(&start, "stop\n").unwrap();
        let out = tokio::time::timeout(Duration::from_secs(10), child.wait_with_output()).await.unwrap().unwrap();
        assert!(out.status.success(), "{mode}: {:?}", out.status);
        assert!(began.elapsed() < Duration::from_secs(8), "{mode}: the stop signal did not end the run");
        let s = Summary::parse(&std::fs::read_to_string(&log).unwrap()).unwrap();
        assert!(s.stopped, "{mode}: the summary is not marked stopped");
        assert!(s.requests > 0 && s.not_sent > 0, "{mode}: {} sent, {} not sent", s.requests, s.not_sent);
        let stdout = String::from_utf8_lossy(&out.stdout);
        let lines = stdout.lines().filter(|l| l.starts_with(loadgen::progress::PROGRESS_PREFIX)).count();
        assert!(lines >= 3, "{mode}: {lines} progress lines in:\n{stdout}");
        let p = loadgen::progress::Progress::last_in(&stdout).unwrap().unwrap();
        let m = loadgen::progress::MergedProgress::of(&[p.clone(), p]).unwrap();
        assert!(m.requests > 0 && m.histogram.len() == m.requests, "{mode}: {m:?}");
        let _ = std::fs::remove_dir_all(&dir);
    }
    // Stopped before its start signal: nothing sent, a summary that says so.
    let dir = std::env::temp_dir().join(format!("loadgen-stop-{}-early", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (log, start) = (dir.join("termination-log"), dir.join("start"));
    std::fs::write(&start, "stop\n").unwrap();
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_loadgen"))
        .args(["--url", &format!("{base}/ok")])
        .arg("--start-file")
        .arg(&start)
        .arg("--termination-log")
        .arg(&log)
        .output()
        .await
        .unwrap();
    assert!(out.status.success(), "{:?}", out.status);
    let s = Summary::parse(&std::fs::read_to_string(&log).unwrap()).unwrap();
    assert_eq!((s.stopped, s.requests), (true, 0));
    let _ = std::fs::remove_dir_all(&dir);
}

/// A server that remembers each request's method, path, query, `X-Who`
/// header and body; `/missing` answers 404 "no", anything else 200 "ok".
async fn scenario_server() -> (String, Arc<std::sync::Mutex<Vec<String>>>) {
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let s = seen.clone();
    let app = axum::Router::new().fallback(
        move |method: axum::http::Method, uri: axum::http::Uri, headers: axum::http::HeaderMap, body: String| {
            let s = s.clone();
            async move {
                let who = headers.get("x-who").and_then(|v| v.to_str().ok()).unwrap_or("").to_string();
                s.lock().unwrap().push(format!("{method} {uri} {who} {body}"));
                match uri.path() {
                    "/missing" => (axum::http::StatusCode::NOT_FOUND, "no"),
                    _ => (axum::http::StatusCode::OK, "ok"),
                }
            }
        },
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (format!("http://{addr}/ignored?x=1"), seen)
}

fn variant(weight: u32, method: &str, path: &str, body: &str, statuses: &[u16], contains: Option<&str>) -> Variant {
    Variant {
        weight,
        method: method.parse().unwrap(),
        path: path.into(),
        headers: vec![("X-Who".into(), format!("{weight}"))],
        secret_headers: Vec::new(),
        body: body.as_bytes().to_vec(),
        checks: loadgen::check::Checks {
            statuses: statuses.to_vec(),
            body_contains: contains.map(|s| loadgen::check::Needle::new(s.as_bytes()).unwrap()),
        },
    }
}

/// A scenario of 3:1 sends each request its share, as written (method,
/// path and query replacing the URL's, its own header and body), judges
/// each by its own checks and counts each apart; the summary carries the
/// figures per request and they merge across runners.
#[tokio::test]
async fn a_scenario_sends_each_request_its_share_and_counts_each_apart() {
    let (url, seen) = scenario_server().await;
    let scenario = vec![
        variant(3, "GET", "/home?page=2", "", &[200], Some("ok")),
        // Its check wants "yes" in the 404's body: each one a check error.
        variant(1, "POST", "/missing", "{\"item\":1}", &[404], Some("yes")),
    ];
    let out = run(Config { scenario, ..config(url, 10, 2) }).await.unwrap();
    assert_eq!(out.requests, 20);
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.iter().filter(|s| *s == "GET /home?page=2 3 ").count(), 15, "{seen:?}");
    assert_eq!(seen.iter().filter(|s| *s == "POST /missing 1 {\"item\":1}").count(), 5, "{seen:?}");
    let by = &out.staged.requests;
    assert_eq!(by.len(), 2);
    assert_eq!((by[0].requests, by[0].errors.len(), by[0].histogram.len()), (15, 0, 15));
    assert_eq!((by[1].requests, by[1].errors.clone(), by[1].histogram.len()), (5, [(ErrorKind::Check, 5)].into(), 0));
    assert_eq!(out.errors, [(ErrorKind::Check, 5)].into());
    let msg =
        Summary::to_message_staged(out.requests, out.errors, 0, out.elapsed, &out.histogram, &out.staged).unwrap();
    let s = Summary::parse(&msg).unwrap();
    let m = Merged::of(&[s.clone(), s]).unwrap();
    assert_eq!(m.by_request.iter().map(|r| r.requests).collect::<Vec<_>>(), [30, 10]);
    assert_eq!(m.by_request[1].error_count(), 10);
    assert_eq!(m.by_request[0].histogram.as_ref().map(|h| h.len()), Some(30));
    assert!(m.by_request[1].quantile(0.99).is_none(), "no answer of the second passed");
}

/// In an arrival-rate profile too, each request is counted apart, and
/// together they are the run's.
#[tokio::test]
async fn a_scenario_under_an_arrival_rate_counts_each_request() {
    let (url, seen) = scenario_server().await;
    let scenario = vec![variant(1, "GET", "/a", "", &[], None), variant(1, "GET", "/b", "", &[], None)];
    let cfg = Config { scenario, stages: vec![stage(1, 40.0)], ..config(url, 1, 1) };
    let out = run(cfg).await.unwrap();
    let by = &out.staged.requests;
    assert_eq!(by.iter().map(|r| r.requests).sum::<u64>(), out.requests);
    assert!(out.requests >= 15, "{} sent", out.requests);
    assert!(by[0].requests.abs_diff(by[1].requests) <= 1, "{by:?}");
    assert_eq!(seen.lock().unwrap().len() as u64, out.requests);
}

/// A request dropped in an arrival-rate profile (every connection busy)
/// does not move the mix on: with one connection, 150 ms answers and a
/// request due every 100 ms, every other one is dropped, and both requests
/// of a 1:1 scenario are still sent in turn (before, the one due on odd
/// ticks was always the one dropped).
#[tokio::test]
async fn a_dropped_request_does_not_skip_its_turn_in_the_mix() {
    let (base, _) = server().await;
    let slow = |w: u32| Variant { weight: 1, ..variant(w, "GET", "/ok?delay_ms=150", "", &[], None) };
    let cfg = Config {
        scenario: vec![slow(1), slow(2)],
        stages: vec![stage(1, 10.0), stage(2, 10.0)],
        max_connections: 1,
        ..config(format!("{base}/"), 1, 1)
    };
    let out = run(cfg).await.unwrap();
    assert!(out.staged.dropped > 0, "nothing dropped: the test proves nothing");
    let by = &out.staged.requests;
    assert!(by[0].requests > 3 && by[1].requests > 3, "{by:?}");
    assert!(by[0].requests.abs_diff(by[1].requests) <= 1, "{by:?}");
}

/// A request's path never names another host: `//localhost:1/x` (and
/// `/\localhost:1/x`) is a path on the run's target, through reqwest
/// (HTTP/2, h2c) as on the fast way. Before, reqwest joined it as a URL
/// and sent the load to that host: here, connect errors on port 1; on a
/// cluster, wherever DNS said, past the pinned Service.
#[tokio::test]
async fn a_path_naming_another_host_still_goes_to_the_target() {
    let (base, count) = server().await;
    for http2 in [true, false] {
        let before = count.load(Ordering::Relaxed);
        let scenario = vec![
            variant(1, "GET", "//localhost:1/x", "", &[200], None),
            variant(1, "GET", "/\\localhost:1/y", "", &[200], None),
        ];
        let out = run(Config { scenario, http2, ..config(format!("{base}/"), 4, 1) }).await.unwrap();
        assert!(out.errors.is_empty(), "http2 {http2}: {:?}", out.errors);
        assert_eq!(count.load(Ordering::Relaxed) - before, 4, "http2 {http2}: every request reached the target");
    }
}
