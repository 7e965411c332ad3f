//! The HTTP server of `cargo xtask bench load-tester` (built `--release`,
//! run as its own process on one worker thread, so the clients compared
//! are measured against the same, fast target):
//! * `/` answers at once;
//! * `/slow` answers after a known delay: 60 % 1 ms, 38 % 5 ms, 2 % 20 ms,
//!   and records its own time for each (the truth the clients' latencies
//!   are compared with);
//! * `/stats` gives the count of `/slow` answers and their p50/p90/p99 in
//!   µs as JSON; `/reset` empties them.
//!
//! Prints `http://127.0.0.1:<port>` on its first line of stdout.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use loadgen::summary::{histogram, record};

/// The delay of the n-th `/slow` request.
fn delay(n: u64) -> Duration {
    Duration::from_millis(match n % 100 {
        0..60 => 1,
        60..98 => 5,
        _ => 20,
    })
}

#[derive(Default)]
struct Slow {
    count: u64,
    times: Option<hdrhistogram::Histogram<u64>>,
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    rt.block_on(async {
        let slow: Arc<Mutex<Slow>> = Arc::new(Mutex::new(Slow { count: 0, times: Some(histogram()) }));
        let app = axum::Router::new().fallback(move |uri: axum::http::Uri| {
            let slow = slow.clone();
            async move {
                match uri.path() {
                    "/slow" => {
                        let started = Instant::now();
                        let n = {
                            let mut s = slow.lock().unwrap();
                            s.count += 1;
                            s.count
                        };
                        tokio::time::sleep(delay(n)).await;
                        if let Some(h) = slow.lock().unwrap().times.as_mut() {
                            record(h, started.elapsed());
                        }
                        "ok".to_string()
                    }
                    "/stats" => {
                        let s = slow.lock().unwrap();
                        let q = |q: f64| s.times.as_ref().map_or(0, |h| h.value_at_quantile(q));
                        serde_json::json!({"count": s.count, "p50": q(0.5), "p90": q(0.9), "p99": q(0.99)}).to_string()
                    }
                    "/reset" => {
                        *slow.lock().unwrap() = Slow { count: 0, times: Some(histogram()) };
                        "reset".to_string()
                    }
                    _ => "ok".to_string(),
                }
            }
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        println!("http://{addr}");
        std::io::stdout().flush().unwrap();
        axum::serve(listener, app).await.unwrap();
    });
}
