//! kubeconfig files for the test control plane.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;

/// A kubeconfig with one cluster, one user and one context, all named
/// `context`. Either a client certificate or a bearer token authenticates.
pub enum Credentials<'a> {
    ClientCert { cert_pem: &'a str, key_pem: &'a str },
    Token(&'a str),
}

pub fn render(context: &str, server: &str, ca_pem: &str, creds: Credentials<'_>) -> String {
    let user = match creds {
        Credentials::ClientCert { cert_pem, key_pem } => serde_json::json!({
            "client-certificate-data": STANDARD.encode(cert_pem),
            "client-key-data": STANDARD.encode(key_pem),
        }),
        Credentials::Token(token) => serde_json::json!({ "token": token }),
    };
    let doc = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": context, "cluster": {
            "server": server,
            "certificate-authority-data": STANDARD.encode(ca_pem),
        }}],
        "users": [{"name": context, "user": user}],
        "contexts": [{"name": context, "context": {"cluster": context, "user": context}}],
        "current-context": context,
    });
    // A JSON value of strings, arrays and objects always serializes.
    serde_saphyr::to_string(&doc).unwrap_or_default()
}

/// A `kube::Client` from kubeconfig text.
pub async fn client_from_yaml(yaml: &str) -> anyhow::Result<kube::Client> {
    let kubeconfig = kube::config::Kubeconfig::from_yaml(yaml)?;
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &kube::config::KubeConfigOptions::default()).await?;
    Ok(kube::Client::try_from(config)?)
}
