//! client-go's `rest_client_requests_total{code,method,host}`: every
//! request the operator's kube client sends, by response code, HTTP method
//! and API server host — counted by a tower layer on that client
//! ([`crate::operator`] builds it), so watches, lists, writes, Events,
//! leases and probes all count, whoever sends them.
//!
//! As client-go: `code` is the response's status code, or `<error>` when
//! no response came (connection refused, TLS, timeout); `host` is the API
//! server's `host:port`. A request kube's own retry layer (inside this one)
//! sends again counts once, with its last answer.

use std::task::{Context, Poll};

use futures::FutureExt;
use futures::future::BoxFuture;
use prometheus::{IntCounterVec, Opts};

/// The metric family (register it once, on the operator's registry).
pub fn requests_total() -> Result<IntCounterVec, prometheus::Error> {
    IntCounterVec::new(
        Opts::new(
            "rest_client_requests_total",
            "Number of HTTP requests, partitioned by status code, method, and host.",
        ),
        &["code", "method", "host"],
    )
}

/// Counts each request in `rest_client_requests_total` with `host`.
#[derive(Clone)]
pub struct CountRequestsLayer {
    counter: IntCounterVec,
    host: String,
}

impl CountRequestsLayer {
    /// `host`: the API server's `host:port`, as client-go labels it.
    pub fn new(counter: IntCounterVec, host: impl Into<String>) -> Self {
        Self { counter, host: host.into() }
    }
}

impl<S> tower_layer::Layer<S> for CountRequestsLayer {
    type Service = CountRequests<S>;

    fn layer(&self, inner: S) -> Self::Service {
        CountRequests { inner, counter: self.counter.clone(), host: self.host.clone() }
    }
}

/// See [`CountRequestsLayer`].
#[derive(Clone)]
pub struct CountRequests<S> {
    inner: S,
    counter: IntCounterVec,
    host: String,
}

impl<S, ReqBody, ResBody> tower_service::Service<http::Request<ReqBody>> for CountRequests<S>
where
    S: tower_service::Service<http::Request<ReqBody>, Response = http::Response<ResBody>>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = BoxFuture<'static, Result<S::Response, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<ReqBody>) -> Self::Future {
        let method = request.method().as_str().to_owned();
        let (counter, host) = (self.counter.clone(), self.host.clone());
        self.inner
            .call(request)
            .map(move |result| {
                let code = match &result {
                    Ok(response) => response.status().as_u16().to_string(),
                    Err(_) => "<error>".to_owned(),
                };
                counter.with_label_values(&[code.as_str(), method.as_str(), host.as_str()]).inc();
                result
            })
            .boxed()
    }
}

/// The `host` label of a cluster URL: its `host[:port]` as written (as
/// client-go's `url.Host`), any userinfo left out.
pub fn host_label(url: &http::Uri) -> String {
    url.authority().map(|a| a.as_str().rsplit('@').next().unwrap_or_default().to_owned()).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::Api;

    /// A kube client with the layer, against `url`.
    fn client(url: &str, counter: &IntCounterVec) -> kube::Client {
        let mut config = kube::Config::new(url.parse().unwrap());
        config.default_retry = false;
        config.connect_timeout = Some(std::time::Duration::from_secs(2));
        let host = host_label(&config.cluster_url);
        kube::client::ClientBuilder::try_from(config)
            .unwrap()
            .with_layer(&CountRequestsLayer::new(counter.clone(), host))
            .build()
    }

    fn count(counter: &IntCounterVec, code: &str, method: &str, host: &str) -> u64 {
        counter.with_label_values(&[code, method, host]).get()
    }

    #[tokio::test]
    async fn every_request_is_counted_by_code_method_and_host_and_a_refused_one_as_error() {
        // A tiny API server: one ConfigMap, everything else 404.
        let json = |code: u16, body: serde_json::Value| {
            let code = axum::http::StatusCode::from_u16(code).unwrap();
            (code, [(axum::http::header::CONTENT_TYPE, "application/json")], body.to_string())
        };
        let app = axum::Router::new()
            .route(
                "/api/v1/namespaces/ns/configmaps/there",
                axum::routing::get(move || async move {
                    json(
                        200,
                        serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "there"}}),
                    )
                }),
            )
            .fallback(move || async move {
                let status = serde_json::json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                    "reason": "NotFound", "code": 404, "message": "not found"});
                json(404, status)
            });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });

        let counter = requests_total().unwrap();
        let host = addr.to_string();
        let api: Api<ConfigMap> = Api::namespaced(client(&format!("http://{addr}"), &counter), "ns");
        api.get("there").await.unwrap();
        api.get("there").await.unwrap();
        assert!(api.get_opt("gone").await.unwrap().is_none());
        assert!(api.delete("gone", &Default::default()).await.is_err());
        assert_eq!(count(&counter, "200", "GET", &host), 2);
        assert_eq!(count(&counter, "404", "GET", &host), 1);
        assert_eq!(count(&counter, "404", "DELETE", &host), 1);

        // Nothing listens there: no response, `<error>`.
        let closed = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap().local_addr().unwrap();
        let api: Api<ConfigMap> = Api::namespaced(client(&format!("http://{closed}"), &counter), "ns");
        assert!(api.get("there").await.is_err());
        assert_eq!(count(&counter, "<error>", "GET", &closed.to_string()), 1);
    }

    #[test]
    fn the_host_label_is_the_urls_host_and_port() {
        assert_eq!(host_label(&"https://10.96.0.1:443".parse().unwrap()), "10.96.0.1:443");
        assert_eq!(host_label(&"https://api.example:6443/prefix".parse().unwrap()), "api.example:6443");
        assert_eq!(host_label(&"https://user:pw@api.example".parse().unwrap()), "api.example");
    }
}
