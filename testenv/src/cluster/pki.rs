//! Certificates for the test control plane, made by the tool itself: a CA,
//! the apiserver's serving certificate (a CA-signed leaf, since rustls rejects
//! a self-signed leaf), an admin client certificate in `system:masters`, and
//! the service-account signing key.

use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair, KeyUsagePurpose,
    SanType,
};

#[derive(Debug, thiserror::Error)]
pub enum PkiError {
    #[error("generating certificates: {0}")]
    Rcgen(#[from] rcgen::Error),
    #[error("writing {path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
}

/// PEM files on disk plus the PEM text the kubeconfig embeds.
#[derive(Debug, Clone)]
pub struct Pki {
    pub ca_cert: PathBuf,
    pub ca_key: PathBuf,
    pub server_cert: PathBuf,
    pub server_key: PathBuf,
    pub sa_key: PathBuf,
    pub sa_pub: PathBuf,
    pub ca_cert_pem: String,
    pub admin_cert_pem: String,
    pub admin_key_pem: String,
    /// The API server's client certificate towards kubelets (logs, exec).
    pub kubelet_client_cert: PathBuf,
    pub kubelet_client_key: PathBuf,
    /// The node's kubelet (`system:node:<name>` in `system:nodes`, so the
    /// Node authorizer and NodeRestriction treat it as a kubelet).
    pub node_cert_pem: String,
    pub node_key_pem: String,
    /// kube-proxy (`system:kube-proxy`, bound to `system:node-proxier`).
    pub kube_proxy_cert_pem: String,
    pub kube_proxy_key_pem: String,
}

/// A client certificate signed by the CA: (certificate PEM, key PEM).
fn client_cert(issuer: &Issuer<'_, &KeyPair>, cn: &str, org: Option<&str>) -> Result<(String, String), PkiError> {
    let key = KeyPair::generate()?;
    let mut params = CertificateParams::new(Vec::<String>::new())?;
    params.distinguished_name.push(DnType::CommonName, cn);
    if let Some(o) = org {
        params.distinguished_name.push(DnType::OrganizationName, o);
    }
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature, KeyUsagePurpose::KeyEncipherment];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    let cert = params.signed_by(&key, issuer)?;
    Ok((cert.pem(), key.serialize_pem()))
}

fn write(path: PathBuf, text: &str) -> Result<PathBuf, PkiError> {
    std::fs::write(&path, text).map_err(|source| PkiError::Io { path: path.clone(), source })?;
    Ok(path)
}

impl Pki {
    /// Generates a fresh PKI into `dir`.
    pub fn generate(dir: &Path) -> Result<Self, PkiError> {
        std::fs::create_dir_all(dir).map_err(|source| PkiError::Io { path: dir.to_path_buf(), source })?;

        let ca_key = KeyPair::generate()?;
        let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
        ca_params.distinguished_name.push(DnType::CommonName, "flotilla-testenv-ca");
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params.key_usages =
            vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
        let ca_cert = ca_params.self_signed(&ca_key)?;
        let ca_cert_pem = ca_cert.pem();
        let issuer = Issuer::new(ca_params, &ca_key);

        let server_key = KeyPair::generate()?;
        let mut server_params = CertificateParams::new(vec![
            "localhost".to_string(),
            "kubernetes".to_string(),
            "kubernetes.default.svc".to_string(),
        ])?;
        server_params.subject_alt_names.push(SanType::IpAddress(IpAddr::V4(Ipv4Addr::LOCALHOST)));
        // In the one-node cluster pods reach the API server through the
        // `kubernetes` Service and the node's bridge address.
        for ip in [crate::cluster::node::paths::KUBERNETES_SERVICE_IP, crate::cluster::node::paths::NODE_IP] {
            server_params.subject_alt_names.push(SanType::IpAddress(IpAddr::V4(ip)));
        }
        for dns in ["kubernetes.default", "kubernetes.default.svc.cluster.local"] {
            server_params.subject_alt_names.push(SanType::DnsName(dns.try_into()?));
        }
        server_params.distinguished_name.push(DnType::CommonName, "kube-apiserver");
        server_params.key_usages = vec![KeyUsagePurpose::DigitalSignature, KeyUsagePurpose::KeyEncipherment];
        server_params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let server_cert = server_params.signed_by(&server_key, &issuer)?;

        let admin_key = KeyPair::generate()?;
        let mut admin_params = CertificateParams::new(Vec::<String>::new())?;
        admin_params.distinguished_name.push(DnType::CommonName, "flotilla-admin");
        admin_params.distinguished_name.push(DnType::OrganizationName, "system:masters");
        admin_params.key_usages = vec![KeyUsagePurpose::DigitalSignature, KeyUsagePurpose::KeyEncipherment];
        admin_params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        let admin_cert = admin_params.signed_by(&admin_key, &issuer)?;

        let sa_key = KeyPair::generate()?;
        let (kubelet_client_pem, kubelet_client_key_pem) =
            client_cert(&issuer, "kube-apiserver-kubelet-client", Some("system:masters"))?;
        let (node_cert_pem, node_key_pem) = client_cert(
            &issuer,
            &format!("system:node:{}", crate::cluster::node::paths::NODE_NAME),
            Some("system:nodes"),
        )?;
        let (kube_proxy_cert_pem, kube_proxy_key_pem) = client_cert(&issuer, "system:kube-proxy", None)?;

        Ok(Self {
            ca_cert: write(dir.join("ca.crt"), &ca_cert_pem)?,
            ca_key: write(dir.join("ca.key"), &ca_key.serialize_pem())?,
            server_cert: write(dir.join("apiserver.crt"), &server_cert.pem())?,
            server_key: write(dir.join("apiserver.key"), &server_key.serialize_pem())?,
            sa_key: write(dir.join("sa.key"), &sa_key.serialize_pem())?,
            sa_pub: write(dir.join("sa.pub"), &sa_key.public_key_pem())?,
            ca_cert_pem,
            admin_cert_pem: admin_cert.pem(),
            admin_key_pem: admin_key.serialize_pem(),
            kubelet_client_cert: write(dir.join("kubelet-client.crt"), &kubelet_client_pem)?,
            kubelet_client_key: write(dir.join("kubelet-client.key"), &kubelet_client_key_pem)?,
            node_cert_pem,
            node_key_pem,
            kube_proxy_cert_pem,
            kube_proxy_key_pem,
        })
    }
}
