//! A stand-in kubelet for benchmarks that need container logs on a control
//! plane without a node: an HTTPS server (self-signed; the API server does
//! not check a kubelet's certificate unless told to) answering the API
//! server's `GET /containerLogs/...` with a fixed log, stamped when the
//! request asks for timestamps. The benchmark node's `daemonEndpoints`
//! points here. One request per connection, answered and closed.

use std::sync::Arc;

use anyhow::Context;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_rustls::rustls;

/// Serves `log` on `addr` (`127.0.0.2:0`: any port) until the runtime
/// stops; returns the port.
pub async fn serve(addr: &str, log: String) -> anyhow::Result<u16> {
    let cert = rcgen::generate_simple_self_signed(vec!["127.0.0.2".to_string()]).context("a kubelet certificate")?;
    let key = rustls::pki_types::PrivateKeyDer::Pkcs8(cert.signing_key.serialize_der().into());
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(vec![cert.cert.der().clone()], key)?;
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind(addr).await.with_context(|| format!("binding {addr}"))?;
    let port = listener.local_addr()?.port();
    let log = Arc::new(log);
    tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else { continue };
            let (acceptor, log) = (acceptor.clone(), Arc::clone(&log));
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(tcp).await else { return };
                let mut head = Vec::new();
                let mut buf = [0u8; 4096];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 65536 {
                    match tls.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                let head = String::from_utf8_lossy(&head);
                let target = head.split_whitespace().nth(1).unwrap_or("/");
                let body = if target.starts_with("/containerLogs/") {
                    if target.contains("timestamps=true") {
                        // Long before any run the benchmark reports ended.
                        log.lines().map(|l| format!("2000-01-01T00:00:00.000000000Z {l}\n")).collect()
                    } else {
                        log.to_string()
                    }
                } else {
                    String::new()
                };
                let status = if target.starts_with("/containerLogs/") { "200 OK" } else { "404 Not Found" };
                let response = format!(
                    "HTTP/1.1 {status}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                    body.len()
                );
                let _ = tls.write_all(response.as_bytes()).await;
                let _ = tls.write_all(body.as_bytes()).await;
                let _ = tls.shutdown().await;
            });
        }
    });
    Ok(port)
}
