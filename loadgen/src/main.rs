//! `loadgen`: one runner of a LoadTest.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Parser;
use loadgen::run::{Config, run};
use loadgen::schedule::Stage;
use loadgen::summary::Summary;

#[derive(Parser)]
#[command(
    version,
    about = "Flotilla loadgen: sends HTTP requests to one URL and writes a mergeable summary (counts, errors, HDR latency histogram) to the termination message"
)]
struct Args {
    /// The target, e.g. http://nginx.shop.svc.cluster.local:80/.
    #[arg(long, env = "URL")]
    url: String,
    /// Connect to this IP address (with the URL's port) instead of
    /// resolving the URL's host, which still goes in the Host header (the
    /// operator pins a Service's cluster IP: no DNS search path can send the
    /// load elsewhere). Empty: resolve the host.
    #[arg(long, env = "CONNECT_TO", value_name = "IP")]
    connect_to: Option<String>,
    /// HTTP method.
    #[arg(long, env = "METHOD", default_value = "GET")]
    method: String,
    /// A request header, NAME:VALUE (repeatable).
    #[arg(long = "header", env = "HEADERS", value_delimiter = '\n', value_name = "NAME:VALUE")]
    headers: Vec<String>,
    /// A request header whose value is the content of a file (one trailing
    /// newline dropped), NAME:PATH (repeatable): a mounted Secret, so the
    /// value is in no environment variable. Errors name the file, never the
    /// value.
    #[arg(long = "header-file", env = "HEADER_FILES", value_delimiter = '\n', value_name = "NAME:PATH")]
    header_files: Vec<String>,
    /// Request body.
    #[arg(long, env = "BODY", default_value = "")]
    body: String,
    /// The request body from a file, sent as its bytes exactly (at most
    /// 1 MiB, a Secret's limit): a mounted Secret, so the body is in no
    /// environment variable. Not with a non-empty --body.
    #[arg(long, env = "BODY_FILE", value_name = "PATH")]
    body_file: Option<std::path::PathBuf>,
    /// PEM certificates to trust for an https:// URL, instead of the
    /// built-in roots (a mounted ConfigMap: the cluster's CA). The
    /// certificate must name the URL's host.
    #[arg(long, env = "CA_FILE", value_name = "PATH")]
    ca_file: Option<std::path::PathBuf>,
    /// Accept any certificate and name from an https:// URL (encrypted,
    /// not authenticated). Not with --ca-file.
    #[arg(long, env = "INSECURE_SKIP_VERIFY", default_value_t = false)]
    insecure_skip_verify: bool,
    /// HTTP/2: offered to an https:// URL (the server picks, by ALPN), spoken
    /// from the start to an http:// URL (h2c). Without it, HTTP/1.1 only.
    #[arg(long, env = "HTTP2", default_value_t = false)]
    http2: bool,
    /// The statuses an answer must have, comma-separated (e.g. 200,204; at
    /// most 32, each 101-599): any other is an error of kind check.
    /// Without it a 4xx answer is an error of kind http4xx, a 5xx one of
    /// kind http5xx, and any other status passes.
    #[arg(long, env = "EXPECT_STATUS", value_delimiter = ',', value_name = "CODES",
          value_parser = clap::value_parser!(u16).range(101..=599))]
    expect_status: Vec<u16>,
    /// A substring (at most 1024 bytes) every answer's body must contain,
    /// compared byte for byte with the body as it came (not decompressed;
    /// chunked framing removed): an answer whose status passed but whose
    /// body lacks it is an error of kind check. Empty: the body is not
    /// looked at.
    #[arg(long, env = "EXPECT_BODY_CONTAINS", value_name = "TEXT")]
    expect_body_contains: Option<String>,
    /// Several weighted requests instead of one: a JSON list of
    /// {weight, method, path, headers, headerFiles, body, bodyFile,
    /// expectStatus, expectBodyContains} (at most 8; paths and queries
    /// replace the URL's; the --header and --header-file headers go first
    /// in each; --method, --body, --body-file and --expect-* are then
    /// unused). The summary then carries each request's figures, in order.
    #[arg(long, env = "SCENARIO", value_name = "JSON")]
    scenario: Option<String>,
    /// Requests per connection.
    #[arg(long, env = "REPEAT", default_value_t = 10)]
    repeat: u64,
    /// Connections, each sending `repeat` requests one after another.
    #[arg(long, env = "CONCURRENCY", default_value_t = 1)]
    concurrency: u64,
    /// Timeout of one request.
    #[arg(long, env = "TIMEOUT", default_value = "5s", value_parser = flotilla_shared::duration::parse_flag)]
    timeout: Duration,
    /// Send for this long from the start signal instead of `repeat`
    /// requests per connection: each connection (or the rate's schedule)
    /// goes on until then, and the summary covers exactly that period
    /// (requests unanswered at its end are dropped, not counted as sent nor
    /// as not sent). Bounded by --deadline and --end-at.
    #[arg(long, env = "DURATION", value_parser = flotilla_shared::duration::parse_flag)]
    duration: Option<Duration>,
    /// Requests per second for this runner (open model, latencies from the
    /// scheduled time, or from the send when the timer woke early); 0: each
    /// connection sends as soon as it is answered.
    #[arg(long, env = "RATE", default_value_t = 0.0)]
    rate: f64,
    /// An arrival-rate profile instead of --repeat, --duration and --rate:
    /// DURATION:RATE stages, comma-separated (e.g. 30s:100,2m:100,30s:0),
    /// each ramping linearly from the previous stage's rate (the first
    /// from 0) to its own (requests/s for this runner). Latencies count
    /// from each request's scheduled time (or its send, if earlier); a
    /// request due while all
    /// --max-connections are busy is dropped (counted, never sent late).
    #[arg(long, env = "STAGES", value_delimiter = ',', value_parser = parse_stage, value_name = "DURATION:RATE")]
    stages: Vec<Stage>,
    /// Connections a --stages profile may use at once (1-10000).
    #[arg(long, env = "MAX_CONNECTIONS", default_value_t = 100)]
    max_connections: u64,
    /// The whole run; requests not sent by then, or still in flight then,
    /// are counted as not sent (neither answered nor failed).
    #[arg(long, env = "DEADLINE", default_value = "10m", value_parser = flotilla_shared::duration::parse_flag)]
    deadline: Duration,
    /// Stop sending at this time (Unix seconds), if that comes before
    /// --deadline: the operator sets it so that every runner has written its
    /// summary before the LoadTest's own deadline.
    #[arg(long, env = "END_AT", value_name = "UNIX_SECONDS")]
    end_at: Option<u64>,
    /// Wait until this file says "go" before sending (the operator's start
    /// signal, a downward-API file of a pod annotation), at most --deadline;
    /// during the run, end it early (as if its time were up, the summary
    /// written and marked stopped) once it says "stop".
    #[arg(long, env = "START_FILE")]
    start_file: Option<PathBuf>,
    /// Print a progress line on stdout this often while the run goes on
    /// (`flotilla-progress {json}`: counts so far, the histogram of every
    /// answer so far and of the last 10 s), which the operator reads into
    /// `status.progress`. 0: none.
    #[arg(long, env = "PROGRESS_EVERY", default_value = "0s", value_parser = flotilla_shared::duration::parse_flag)]
    progress_every: Duration,
    /// Where the summary goes (also printed on stdout).
    #[arg(long, env = "TERMINATION_LOG", default_value = "/dev/termination-log")]
    termination_log: PathBuf,
}

/// One stage, DURATION:RATE (a Go duration of at least 1 ms; a rate of
/// 0 to 1000000 requests/s).
fn parse_stage(s: &str) -> Result<Stage, String> {
    let (d, r) = s.trim().split_once(':').ok_or_else(|| format!("{s:?} is not DURATION:RATE"))?;
    let duration = flotilla_shared::duration::parse_flag(d)?;
    if duration < Duration::from_millis(1) {
        return Err(format!("{s:?}: a stage lasts at least 1ms"));
    }
    let rate: f64 = r.parse().map_err(|_| format!("{s:?}: {r:?} is not a rate"))?;
    if !(0.0..=1_000_000.0).contains(&rate) {
        return Err(format!("{s:?}: the rate is 0 to 1000000 requests/s"));
    }
    Ok(Stage { duration, rate })
}

fn bad(flag: &str, why: impl std::fmt::Display) -> ExitCode {
    eprintln!("error: invalid value for --{flag}: {why}");
    ExitCode::from(2)
}

/// The answers' checks from the flags, or the flag at fault and why.
fn checks(args: &Args) -> Result<loadgen::check::Checks, (&'static str, String)> {
    use loadgen::check::{MAX_STATUSES, Needle};
    if args.expect_status.len() > MAX_STATUSES {
        return Err(("expect-status", format!("at most {MAX_STATUSES} statuses")));
    }
    // An empty substring is in every body: the same as no check.
    let body_contains = match args.expect_body_contains.as_deref().filter(|s| !s.is_empty()) {
        None => None,
        Some(text) => Some(Needle::new(text.as_bytes()).map_err(|e| ("expect-body-contains", e.to_string()))?),
    };
    Ok(loadgen::check::Checks { statuses: args.expect_status.clone(), body_contains })
}

fn main() -> ExitCode {
    let args = Args::parse();
    let method = match reqwest::Method::from_bytes(args.method.as_bytes()) {
        Ok(m) => m,
        Err(e) => return bad("method", e),
    };
    if reqwest::Url::parse(&args.url).is_err() {
        return bad("url", format!("{:?} is not a URL", args.url));
    }
    let connect_to = match args.connect_to.as_deref().map(str::trim).filter(|s| !s.is_empty()) {
        None => None,
        Some(ip) => match ip.parse::<std::net::IpAddr>() {
            Ok(ip) => Some(ip),
            Err(_) => return bad("connect-to", format!("{ip:?} is not an IP address")),
        },
    };
    let mut headers = Vec::new();
    for h in args.headers.iter().filter(|h| !h.is_empty()) {
        match h.split_once(':') {
            Some((k, v)) if !k.trim().is_empty() => headers.push((k.trim().to_string(), v.trim().to_string())),
            _ => return bad("header", format!("{h:?} is not NAME:VALUE")),
        }
    }
    // Refused here, before the start signal, not after it by the client.
    for (k, v) in &headers {
        if let Err(e) = reqwest::header::HeaderName::from_bytes(k.as_bytes()) {
            return bad("header", format!("{k:?}: {e}"));
        }
        if let Err(e) = reqwest::header::HeaderValue::from_str(v) {
            return bad("header", format!("{k}: {e}"));
        }
    }
    let mut secret_headers = Vec::new();
    for h in args.header_files.iter().filter(|h| !h.is_empty()) {
        let Some((name, path)) = h.split_once(':').filter(|(k, p)| !k.trim().is_empty() && !p.trim().is_empty()) else {
            return bad("header-file", format!("{h:?} is not NAME:PATH"));
        };
        let name = name.trim();
        if let Err(e) = reqwest::header::HeaderName::from_bytes(name.as_bytes()) {
            return bad("header-file", format!("{name:?}: {e}"));
        }
        match loadgen::inputs::header_value(std::path::Path::new(path.trim())) {
            Ok(value) => secret_headers.push((name.to_string(), value)),
            Err(why) => return bad("header-file", format!("{name}: {why}")),
        }
    }
    let body = match (&args.body_file, args.body.is_empty()) {
        (None, _) => args.body.clone().into_bytes(),
        (Some(path), true) => match loadgen::inputs::body(path) {
            Ok(body) => body,
            Err(why) => return bad("body-file", why),
        },
        (Some(_), false) => return bad("body-file", "not with a --body"),
    };
    let tls = match (&args.ca_file, args.insecure_skip_verify) {
        (Some(_), true) => return bad("ca-file", "not with --insecure-skip-verify"),
        // Checked before the start signal, as the headers and the body are.
        (Some(path), false) => match loadgen::inputs::capped(path, loadgen::inputs::MAX_CA_BYTES) {
            Ok(pem) => match reqwest::Certificate::from_pem_bundle(&pem) {
                Ok(certs) if !certs.is_empty() => loadgen::send::Tls { ca_pem: Some(pem), insecure_skip_verify: false },
                _ => return bad("ca-file", format!("{} holds no PEM certificate", path.display())),
            },
            Err(why) => return bad("ca-file", why),
        },
        (None, insecure) => loadgen::send::Tls { ca_pem: None, insecure_skip_verify: insecure },
    };
    let checks = match checks(&args) {
        Ok(c) => c,
        Err((flag, why)) => return bad(flag, why),
    };
    let files = loadgen::scenario::Files { header_value: &loadgen::inputs::header_value, body: &loadgen::inputs::body };
    let scenario = match args.scenario.as_deref().map(str::trim).filter(|s| !s.is_empty()) {
        None => Vec::new(),
        Some(json) => match loadgen::scenario::parse(json, &files) {
            Ok(v) => v,
            Err(why) => return bad("scenario", why),
        },
    };
    if args.duration.is_some_and(|d| d.is_zero()) {
        return bad("duration", "must be more than 0");
    }
    if args.repeat == 0 || args.concurrency == 0 || args.concurrency > 10_000 {
        return bad("repeat/concurrency", "repeat must be at least 1 and concurrency 1-10000");
    }
    if args.stages.len() > loadgen::summary::MAX_STAGES {
        return bad("stages", format!("at most {} stages", loadgen::summary::MAX_STAGES));
    }
    if !(1..=10_000).contains(&args.max_connections) {
        return bad("max-connections", "must be 1-10000");
    }
    if !(args.rate == 0.0 || (args.rate >= 0.001 && args.rate.is_finite())) {
        return bad("rate", "must be 0 (closed model) or at least 0.001 requests/s");
    }
    let rt = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: starting the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let started = Instant::now();
    // The run ends at --deadline from now, or at --end-at if that is sooner.
    let deadline = match args.end_at {
        Some(at) => {
            let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
            args.deadline.min(Duration::from_secs(at).saturating_sub(now))
        }
        None => args.deadline,
    };
    if let Some(file) = &args.start_file {
        eprintln!("waiting for the start signal in {}", file.display());
        loop {
            match std::fs::read_to_string(file).map(|s| s.trim().to_string()).as_deref() {
                Ok("go") => break,
                // Stopped before it started (the others' figures already
                // failed the run): nothing sent, a summary that says so.
                Ok("stop") => return stopped_before_start(&args.termination_log),
                _ => {}
            }
            if started.elapsed() >= deadline {
                eprintln!("error: no start signal within the deadline ({deadline:?})");
                return ExitCode::from(3);
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        eprintln!("started after {:.1?}", started.elapsed());
    }
    // The CPU the cgroup's limit withheld during the run, not before it.
    let throttled_before = loadgen::pace::throttled();
    let cfg = Config {
        url: args.url.clone(),
        method,
        headers,
        secret_headers,
        connect_to,
        body,
        repeat: args.repeat,
        concurrency: args.concurrency,
        timeout: args.timeout,
        rate: args.rate,
        deadline: deadline.saturating_sub(started.elapsed()),
        duration: args.duration,
        stages: args.stages,
        max_connections: args.max_connections,
        tls,
        http2: args.http2,
        checks,
        scenario,
        progress_every: Some(args.progress_every).filter(|d| !d.is_zero()),
        stop_file: args.start_file.clone(),
    };
    let mut outcome = match rt.block_on(run(cfg)) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("error: building the HTTP client or the request: {e}");
            return ExitCode::FAILURE;
        }
    };
    if let (Some(before), Some(after)) = (throttled_before, loadgen::pace::throttled()) {
        outcome.staged.strain.throttled_ms =
            u64::try_from(after.saturating_sub(before).as_millis()).unwrap_or(u64::MAX);
    }
    if outcome.staged.stopped {
        eprintln!("stopped by the operator after {:.1?}", outcome.elapsed);
    }
    if let Some(why) = outcome.staged.strain.saturated(outcome.elapsed) {
        eprintln!("warning: this runner could not keep up: {why}");
    }
    let (message, full) = match Summary::to_message_and_full(
        outcome.requests,
        outcome.errors,
        outcome.not_sent,
        outcome.elapsed,
        &outcome.histogram,
        &outcome.staged,
    ) {
        Ok(m) => m,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    println!("{message}");
    // What the termination message left out, where the operator reads it.
    if let Some(full) = full {
        println!("{}{full}", loadgen::summary::FULL_PREFIX);
    }
    if let Err(e) = std::fs::write(&args.termination_log, &message) {
        eprintln!("error: writing {}: {e}", args.termination_log.display());
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}

/// The summary of a run stopped before its start signal: nothing sent.
fn stopped_before_start(termination_log: &std::path::Path) -> ExitCode {
    eprintln!("stop signal before the start signal: nothing sent");
    let staged = loadgen::summary::Staged { stopped: true, ..Default::default() };
    let empty = loadgen::summary::histogram();
    let message = match Summary::to_message_staged(0, Default::default(), 0, Duration::ZERO, &empty, &staged) {
        Ok(m) => m,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    println!("{message}");
    if let Err(e) = std::fs::write(termination_log, &message) {
        eprintln!("error: writing {}: {e}", termination_log.display());
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// Go's duration syntax, as every Flotilla flag and field takes it (the
    /// operator passes milliseconds): fractions are valid, prose is not.
    #[test]
    fn durations_are_go_durations() {
        let args = |t: &str| Args::try_parse_from(["loadgen", "--url", "http://x/", "--timeout", t]);
        assert_eq!(args("1.5s").unwrap().timeout, Duration::from_millis(1500));
        assert_eq!(args("1500ms").unwrap().timeout, Duration::from_millis(1500));
        assert_eq!(args("1h30m").unwrap().timeout, Duration::from_secs(5400));
        assert!(args("2 weeks").is_err());
        assert!(args("5").is_err());
    }

    #[test]
    fn duration_is_optional_and_a_go_duration() {
        let parse = |extra: &[&str]| Args::try_parse_from([&["loadgen", "--url", "http://x/"], extra].concat());
        assert_eq!(parse(&[]).unwrap().duration, None);
        assert_eq!(parse(&["--duration", "10000ms"]).unwrap().duration, Some(Duration::from_secs(10)));
        assert_eq!(parse(&["--duration", "2m"]).unwrap().duration, Some(Duration::from_secs(120)));
        assert!(parse(&["--duration", "soon"]).is_err());
    }

    #[test]
    fn checks_are_statuses_and_a_substring() {
        let parse = |extra: &[&str]| Args::try_parse_from([&["loadgen", "--url", "http://x/"], extra].concat());
        let none = checks(&parse(&[]).unwrap()).unwrap();
        assert!(none.statuses.is_empty() && none.body_contains.is_none());
        let c = checks(&parse(&["--expect-status", "200,204", "--expect-body-contains", "\"ok\""]).unwrap()).unwrap();
        assert_eq!(c.statuses, [200, 204]);
        assert_eq!(c.body_contains, loadgen::check::Needle::new(b"\"ok\"").ok());
        for wrong in ["99", "100", "600", "2xx", ""] {
            assert!(parse(&["--expect-status", wrong]).is_err(), "{wrong:?}");
        }
        let many = vec!["200"; 33].join(",");
        let (flag, why) = checks(&parse(&["--expect-status", &many]).unwrap()).unwrap_err();
        assert_eq!((flag, why.as_str()), ("expect-status", "at most 32 statuses"));
        let long = "a".repeat(1025);
        let (flag, _) = checks(&parse(&["--expect-body-contains", &long]).unwrap()).unwrap_err();
        assert_eq!(flag, "expect-body-contains");
        assert!(checks(&parse(&["--expect-body-contains", ""]).unwrap()).unwrap().body_contains.is_none());
    }

    #[test]
    fn stages_are_duration_rate_pairs() {
        let parse = |extra: &[&str]| Args::try_parse_from([&["loadgen", "--url", "http://x/"], extra].concat());
        assert!(parse(&[]).unwrap().stages.is_empty());
        let a = parse(&["--stages", "10000ms:40,2m:0.5"]).unwrap();
        assert_eq!(
            a.stages,
            vec![
                Stage { duration: Duration::from_secs(10), rate: 40.0 },
                Stage { duration: Duration::from_secs(120), rate: 0.5 }
            ]
        );
        assert_eq!(a.max_connections, 100);
        for wrong in ["10s", "10s:-1", "0s:5", "10s:fast", "soon:5", "10s:1e9"] {
            assert!(parse(&["--stages", wrong]).is_err(), "{wrong}");
        }
    }
}
