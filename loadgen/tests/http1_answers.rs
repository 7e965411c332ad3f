//! The binary's own HTTP/1.1 connections (`src/http1.rs`, the fast way for
//! `http://`) against a hand-written server that answers in every framing
//! a server may use — Content-Length, chunked in pieces, `Connection:
//! close`, HTTP/1.0 to the end of the connection, an interim 100 before
//! the answer — and that closes connections left idle: every answer read
//! whole and counted once, no request lost or sent twice.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use loadgen::summary::{ErrorKind, Merged, Summary};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// How the server answers.
#[derive(Clone, Copy)]
enum Mode {
    /// The n-th request answered in framing n % 5 (see [`answer`]).
    EveryFraming,
    /// Content-Length answers, kept alive; a connection idle for 50 ms is
    /// closed (a server's keep-alive timeout).
    ClosesIdle,
}

/// Reads one request head; false when the connection ended (or, with
/// `idle`, stayed silent that long).
async fn read_request(s: &mut TcpStream, idle: Option<Duration>) -> bool {
    let mut head = Vec::new();
    let mut byte = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        let read = s.read(&mut byte);
        let n = match idle {
            Some(t) if head.is_empty() => match tokio::time::timeout(t, read).await {
                Ok(r) => r,
                Err(_) => return false,
            },
            _ => read.await,
        };
        match n {
            Ok(0) | Err(_) => return false,
            Ok(n) => head.extend_from_slice(&byte[..n]),
        }
    }
    true
}

/// Answers request `n` in framing `n % 5`; whether the connection stays.
async fn answer(s: &mut TcpStream, n: u64) -> std::io::Result<bool> {
    match n % 5 {
        0 => s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello").await.map(|_| true),
        1 => {
            // Chunked, in pieces that split a size line and a chunk.
            s.write_all(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1").await?;
            tokio::time::sleep(Duration::from_millis(2)).await;
            s.write_all(b"0;x=y\r\n0123456").await?;
            tokio::time::sleep(Duration::from_millis(2)).await;
            s.write_all(b"789abcdef\r\n0\r\nTrailer: t\r\n\r\n").await.map(|_| true)
        }
        2 => s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok").await.map(|_| false),
        3 => s.write_all(b"HTTP/1.0 200 OK\r\n\r\nuntil the connection ends").await.map(|_| false),
        _ => s
            .write_all(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
            .await
            .map(|_| true),
    }
}

/// The server; counts the requests it read.
async fn server(mode: Mode) -> (String, Arc<AtomicU64>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/", listener.local_addr().unwrap());
    let count = Arc::new(AtomicU64::new(0));
    let c = count.clone();
    tokio::spawn(async move {
        loop {
            let Ok((mut s, _)) = listener.accept().await else { return };
            let c = c.clone();
            tokio::spawn(async move {
                let idle = matches!(mode, Mode::ClosesIdle).then_some(Duration::from_millis(50));
                while read_request(&mut s, idle).await {
                    let n = c.fetch_add(1, Ordering::SeqCst);
                    let stays = match mode {
                        Mode::EveryFraming => answer(&mut s, n).await,
                        Mode::ClosesIdle => answer(&mut s, 0).await,
                    };
                    if !matches!(stays, Ok(true)) {
                        break;
                    }
                }
            });
        }
    });
    (url, count)
}

/// Runs the binary with `args` and reads its summary.
fn loadgen(url: &str, args: &[&str]) -> Merged {
    let log = std::env::temp_dir().join(format!("loadgen-http1-{}-{}", std::process::id(), args.join("_")));
    let out = Command::new(env!("CARGO_BIN_EXE_loadgen"))
        .args(["--url", url, "--timeout", "5s", "--termination-log"])
        .arg(&log)
        .args(args)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let message = std::fs::read_to_string(&log).unwrap();
    let _ = std::fs::remove_file(&log);
    Merged::of(&[Summary::parse(&message).unwrap()]).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_in_every_framing_are_read_whole_and_counted_once() {
    let (url, count) = server(Mode::EveryFraming).await;
    let m =
        tokio::task::spawn_blocking(move || loadgen(&url, &["--concurrency", "2", "--repeat", "25"])).await.unwrap();
    assert_eq!(m.requests, 50);
    assert_eq!(count.load(Ordering::SeqCst), 50, "each request reached the server once");
    // Every fifth is a 404 after a 100 Continue; the rest answered whole.
    assert_eq!(m.errors.get(&ErrorKind::Http4xx), Some(&10), "{:?}", m.errors);
    assert_eq!(m.error_count(), 10, "{:?}", m.errors);
    assert_eq!(m.histogram.len(), 40);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_the_server_closed_while_idle_loses_no_request() {
    // 5/s: idle 200 ms, found closed when the request goes (sent again on
    // a new connection); 1.5/s: idle over 0.5 s, looked at before use.
    for rate in ["5", "1.5"] {
        let (url, count) = server(Mode::ClosesIdle).await;
        let args = ["--concurrency", "1", "--rate", rate, "--duration", "3s"];
        let m = tokio::task::spawn_blocking(move || loadgen(&url, &args)).await.unwrap();
        assert!(m.requests >= 4, "rate {rate}: {} requests", m.requests);
        assert_eq!(m.error_count(), 0, "rate {rate}: {:?}", m.errors);
        assert_eq!(count.load(Ordering::SeqCst), m.requests, "rate {rate}: each request reached the server once");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_substring_is_found_in_every_framing_even_split_between_writes() {
    // "6789" is only in the chunked answer, cut between two writes.
    let (url, _) = server(Mode::EveryFraming).await;
    let args = ["--concurrency", "2", "--repeat", "25", "--expect-body-contains", "6789"];
    let m = tokio::task::spawn_blocking(move || loadgen(&url, &args)).await.unwrap();
    assert_eq!(m.requests, 50);
    // The 404s keep their kind: no statuses expected, so no check on them.
    assert_eq!(m.errors, [(ErrorKind::Http4xx, 10), (ErrorKind::Check, 30)].into(), "{:?}", m.errors);
    // "o": in the Content-Length, Connection: close and HTTP/1.0 answers,
    // not in the chunked one nor in the expected 404's empty body.
    let (url, _) = server(Mode::EveryFraming).await;
    let args = ["--concurrency", "2", "--repeat", "25", "--expect-status", "200,404", "--expect-body-contains", "o"];
    let m = tokio::task::spawn_blocking(move || loadgen(&url, &args)).await.unwrap();
    assert_eq!(m.errors, [(ErrorKind::Check, 20)].into(), "{:?}", m.errors);
    assert_eq!(m.histogram.len(), 30);
}
