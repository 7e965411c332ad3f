//! The HTTP endpoints: `GET /metrics` on `--metrics-bind-address`, `GET
//! /healthz` and `GET /readyz` on `--health-probe-bind-address`.

use std::net::SocketAddr;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use tokio_util::sync::CancellationToken;

use crate::health::Readiness;
use crate::metrics::Metrics;

#[derive(Debug, thiserror::Error)]
// The io error is the source (shown by `{:#}` after this), not repeated here.
#[error("cannot listen on {address} (--{flag})")]
pub struct BindError {
    pub flag: &'static str,
    pub address: SocketAddr,
    pub source: std::io::Error,
}

async fn metrics(State(m): State<Metrics>) -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")], m.encode())
}

async fn healthz() -> &'static str {
    "ok"
}

async fn readyz(State(r): State<Readiness>) -> (StatusCode, String) {
    match r.check() {
        Ok(()) => (StatusCode::OK, "ok".into()),
        Err(why) => (StatusCode::SERVICE_UNAVAILABLE, why),
    }
}

pub fn metrics_router(m: Metrics) -> Router {
    Router::new().route("/metrics", get(metrics)).with_state(m)
}

pub fn health_router(r: Readiness) -> Router {
    Router::new().route("/healthz", get(healthz)).route("/readyz", get(readyz)).with_state(r)
}

/// Binds now (so a taken port fails start-up), serves until `stop`.
/// Returns the bound address (useful with port 0).
pub async fn serve(
    flag: &'static str,
    address: SocketAddr,
    router: Router,
    stop: CancellationToken,
) -> Result<SocketAddr, BindError> {
    let listener = match tokio::net::TcpListener::bind(address).await {
        Ok(l) => l,
        // `:PORT` where the node has no IPv6: every IPv4 address instead.
        Err(e)
            if address.ip() == std::net::IpAddr::V6(std::net::Ipv6Addr::UNSPECIFIED)
                && e.kind() != std::io::ErrorKind::AddrInUse =>
        {
            let v4 = SocketAddr::from((std::net::Ipv4Addr::UNSPECIFIED, address.port()));
            tracing::debug!(error = %e, %address, fallback = %v4, "no IPv6 socket; listening on IPv4 only");
            tokio::net::TcpListener::bind(v4).await.map_err(|source| BindError { flag, address: v4, source })?
        }
        Err(source) => return Err(BindError { flag, address, source }),
    };
    let bound = listener.local_addr().map_err(|source| BindError { flag, address, source })?;
    tokio::spawn(async move {
        let result = axum::serve(listener, router).with_graceful_shutdown(stop.cancelled_owned()).await;
        if let Err(e) = result {
            tracing::error!(error = %e, %bound, "HTTP server failed");
        }
    });
    Ok(bound)
}
