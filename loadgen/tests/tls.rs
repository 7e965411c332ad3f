//! loadgen against a local TLS server with a CA made for the test: the CA
//! file trusted (and only it), a certificate from another CA or for
//! another name refused as connection errors, `insecure_skip_verify`
//! accepting any, and HTTP/2 negotiated by ALPN over TLS and spoken from
//! the start (h2c) to a cleartext server — each request's protocol as the
//! server saw it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo};
use loadgen::run::{Config, run};
use loadgen::send::Tls;
use loadgen::summary::ErrorKind;
use tokio_rustls::rustls;

/// The name the server's certificate carries (as a Service's would).
const HOST: &str = "web.test.svc.cluster.local";

/// A CA and a serving certificate it signed for `names`: (CA PEM, leaf
/// DER, leaf key DER).
fn pki(names: &[&str]) -> (String, Vec<u8>, Vec<u8>) {
    let p = flotilla_testenv::serving_pki::serving_pki(names).unwrap();
    (p.ca_pem, p.cert_der, p.key_der)
}

/// What the server saw: each request's HTTP version.
type Seen = Arc<Mutex<Vec<String>>>;

/// Serves `conn` as HTTP/2 or HTTP/1.1.
async fn serve<I>(io: I, h2: bool, seen: Seen)
where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let io = TokioIo::new(io);
    let answer = |seen: Seen| {
        hyper::service::service_fn(move |req: Request<Incoming>| {
            seen.lock().unwrap().push(format!("{:?}", req.version()));
            async { Ok::<_, std::convert::Infallible>(Response::new(Full::new(Bytes::from_static(b"ok")))) }
        })
    };
    if h2 {
        let _ = hyper::server::conn::http2::Builder::new(TokioExecutor::new()).serve_connection(io, answer(seen)).await;
    } else {
        let _ = hyper::server::conn::http1::Builder::new().serve_connection(io, answer(seen)).await;
    }
}

/// A TLS server with the leaf of `pki` (h2 and HTTP/1.1 offered by ALPN).
async fn tls_server(leaf: Vec<u8>, key: Vec<u8>) -> (SocketAddr, Seen) {
    let key = rustls::pki_types::PrivateKeyDer::Pkcs8(key.into());
    let mut config = rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![leaf.into()], key)
        .unwrap();
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let seen: Seen = Arc::default();
    let s = seen.clone();
    tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else { continue };
            let (acceptor, seen) = (acceptor.clone(), s.clone());
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(tcp).await else { return };
                let h2 = tls.get_ref().1.alpn_protocol() == Some(b"h2");
                serve(tls, h2, seen).await;
            });
        }
    });
    (addr, seen)
}

/// A cleartext HTTP/2 server (h2c, prior knowledge).
async fn h2c_server() -> (SocketAddr, Seen) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let seen: Seen = Arc::default();
    let s = seen.clone();
    tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else { continue };
            tokio::spawn(serve(tcp, true, s.clone()));
        }
    });
    (addr, seen)
}

/// 2 connections of 5 requests each to `scheme://HOST:port/`, connecting
/// to loopback (as the operator pins a Service's IP).
fn config(scheme: &str, port: u16, tls: Tls, http2: bool) -> Config {
    Config {
        url: format!("{scheme}://{HOST}:{port}/"),
        method: reqwest::Method::GET,
        headers: vec![],
        secret_headers: vec![],
        connect_to: Some(IpAddr::V4(Ipv4Addr::LOCALHOST)),
        body: Vec::new(),
        repeat: 5,
        concurrency: 2,
        timeout: Duration::from_secs(5),
        rate: 0.0,
        deadline: Duration::from_secs(30),
        duration: None,
        stages: vec![],
        max_connections: 100,
        tls,
        http2,
        checks: Default::default(),
        scenario: Vec::new(),
        progress_every: None,
        stop_file: None,
    }
}

fn trusting(ca_pem: &str) -> Tls {
    Tls { ca_pem: Some(ca_pem.as_bytes().to_vec()), insecure_skip_verify: false }
}

#[tokio::test]
async fn the_ca_file_is_trusted_and_every_request_answered_over_http1() {
    let (ca, leaf, key) = pki(&[HOST]);
    let (addr, seen) = tls_server(leaf, key).await;
    let out = run(config("https", addr.port(), trusting(&ca), false)).await.unwrap();
    assert_eq!((out.requests, out.errors.values().sum::<u64>()), (10, 0), "{:?}", out.errors);
    assert_eq!(out.histogram.len(), 10);
    assert!(seen.lock().unwrap().iter().all(|v| v == "HTTP/1.1"), "{:?}", seen.lock().unwrap());
}

#[tokio::test]
async fn another_ca_or_another_name_fails_every_request_before_it_is_sent() {
    // Signed by a CA the runner was not given.
    let (_, leaf, key) = pki(&[HOST]);
    let (other_ca, _, _) = pki(&[HOST]);
    let (addr, seen) = tls_server(leaf, key).await;
    let out = run(config("https", addr.port(), trusting(&other_ca), false)).await.unwrap();
    assert_eq!(out.errors.get(&ErrorKind::Connect), Some(&10), "{:?}", out.errors);
    // The built-in roots are not trusted beside the CA file either (and
    // without a CA file a private CA is not trusted at all).
    let out = run(config("https", addr.port(), Tls::default(), false)).await.unwrap();
    assert_eq!(out.errors.get(&ErrorKind::Connect), Some(&10), "{:?}", out.errors);
    // Trusted CA, but the certificate names another host.
    let (ca, leaf, key) = pki(&["other.test.svc.cluster.local"]);
    let (addr2, seen2) = tls_server(leaf, key).await;
    let out = run(config("https", addr2.port(), trusting(&ca), false)).await.unwrap();
    assert_eq!(out.errors.get(&ErrorKind::Connect), Some(&10), "{:?}", out.errors);
    assert!(seen.lock().unwrap().is_empty() && seen2.lock().unwrap().is_empty(), "no request reached a server");
}

#[tokio::test]
async fn insecure_skip_verify_accepts_any_certificate() {
    let (_, leaf, key) = pki(&["anything.example"]);
    let (addr, seen) = tls_server(leaf, key).await;
    let insecure = Tls { ca_pem: None, insecure_skip_verify: true };
    let out = run(config("https", addr.port(), insecure, false)).await.unwrap();
    assert_eq!((out.requests, out.errors.values().sum::<u64>()), (10, 0), "{:?}", out.errors);
    assert_eq!(seen.lock().unwrap().len(), 10);
}

#[tokio::test]
async fn http2_is_negotiated_over_tls_and_spoken_from_the_start_in_cleartext() {
    let (ca, leaf, key) = pki(&[HOST]);
    let (addr, seen) = tls_server(leaf, key).await;
    let out = run(config("https", addr.port(), trusting(&ca), true)).await.unwrap();
    assert_eq!((out.requests, out.errors.values().sum::<u64>()), (10, 0), "{:?}", out.errors);
    let versions = seen.lock().unwrap().clone();
    assert!(versions.len() == 10 && versions.iter().all(|v| v == "HTTP/2.0"), "{versions:?}");

    let (addr, seen) = h2c_server().await;
    let out = run(config("http", addr.port(), Tls::default(), true)).await.unwrap();
    assert_eq!((out.requests, out.errors.values().sum::<u64>()), (10, 0), "{:?}", out.errors);
    let versions = seen.lock().unwrap().clone();
    assert!(versions.len() == 10 && versions.iter().all(|v| v == "HTTP/2.0"), "{versions:?}");
}

/// The reqwest path checks as the fast one does: h2c and TLS answer 200 "ok".
#[tokio::test]
async fn checks_hold_on_the_reqwest_path_too() {
    use loadgen::check::{Checks, Needle};
    let (addr, _) = h2c_server().await;
    let (ca, leaf, key) = pki(&[HOST]);
    let (tls_addr, _) = tls_server(leaf, key).await;
    let body = |s: &str| Some(Needle::new(s.as_bytes()).unwrap());
    let cases = [
        (Checks { statuses: vec![], body_contains: body("ok") }, None),
        (Checks { statuses: vec![], body_contains: body("not there") }, Some(ErrorKind::Check)),
        (Checks { statuses: vec![204], body_contains: None }, Some(ErrorKind::Check)),
        (Checks { statuses: vec![200], body_contains: body("k") }, None),
    ];
    for (checks, kind) in cases {
        for cfg in
            [config("http", addr.port(), Tls::default(), true), config("https", tls_addr.port(), trusting(&ca), false)]
        {
            let out = run(Config { checks: checks.clone(), ..cfg }).await.unwrap();
            let want = kind.map(|k| [(k, 10)].into()).unwrap_or_default();
            assert_eq!(out.errors, want, "{checks:?}");
        }
    }
}

#[tokio::test]
async fn a_ca_file_without_a_certificate_is_refused() {
    let empty = Tls { ca_pem: Some(b"not a certificate\n".to_vec()), insecure_skip_verify: false };
    let err = run(config("https", 1, empty, false)).await.err().map(|e| e.to_string()).unwrap_or_default();
    assert!(err.contains("no PEM certificate"), "{err}");
}

#[tokio::test]
async fn the_binary_reads_its_ca_and_http2_from_the_environment_the_operator_sets() {
    let (ca, leaf, key) = pki(&[HOST]);
    let (addr, seen) = tls_server(leaf, key).await;
    let dir = std::env::temp_dir().join(format!("loadgen-tls-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (ca_file, log) = (dir.join("ca.crt"), dir.join("termination-log"));
    std::fs::write(&ca_file, &ca).unwrap();
    // As runner.rs sets them (the CA from the mounted ConfigMap).
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_loadgen"))
        .env("URL", format!("https://{HOST}:{}/", addr.port()))
        .env("CONNECT_TO", "127.0.0.1")
        .env("REPEAT", "3")
        .env("CA_FILE", &ca_file)
        .env("HTTP2", "true")
        .env("TERMINATION_LOG", &log)
        .output()
        .await
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let s = loadgen::summary::Summary::parse(&std::fs::read_to_string(&log).unwrap()).unwrap();
    assert_eq!((s.requests, s.error_count()), (3, 0));
    assert_eq!(seen.lock().unwrap().clone(), vec!["HTTP/2.0"; 3]);
    // A CA file and no verification at once: refused before anything is sent.
    let both = std::process::Command::new(env!("CARGO_BIN_EXE_loadgen"))
        .env("URL", format!("https://{HOST}:{}/", addr.port()))
        .env("CA_FILE", &ca_file)
        .env("INSECURE_SKIP_VERIFY", "true")
        .output()
        .unwrap();
    assert_eq!(both.status.code(), Some(2), "{}", String::from_utf8_lossy(&both.stderr));
    assert!(String::from_utf8_lossy(&both.stderr).contains("--ca-file"));
    assert_eq!(seen.lock().unwrap().len(), 3);
    // A CA file without a certificate: refused before the start signal
    // (which never comes here), not after every replica started.
    let junk = dir.join("junk.crt");
    std::fs::write(&junk, "not a certificate\n").unwrap();
    let bad = std::process::Command::new(env!("CARGO_BIN_EXE_loadgen"))
        .env("URL", format!("https://{HOST}:{}/", addr.port()))
        .env("CA_FILE", &junk)
        .env("START_FILE", dir.join("never"))
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(2), "{}", String::from_utf8_lossy(&bad.stderr));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("no PEM certificate"));
    let _ = std::fs::remove_dir_all(&dir);
}
