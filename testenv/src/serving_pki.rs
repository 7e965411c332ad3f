//! A throwaway CA and a serving certificate it signed, for tests of TLS
//! clients (loadgen's https and HTTP/2, the load-tester's https targets on
//! the node): made fresh per test, never written anywhere but where the
//! test puts it.

use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};

/// A CA's certificate and a leaf it signed, in the forms servers and
/// Kubernetes objects take.
#[derive(Debug, Clone)]
pub struct ServingPki {
    /// The CA certificate (what a client trusts), PEM.
    pub ca_pem: String,
    /// The leaf certificate for the names asked, PEM and DER.
    pub cert_pem: String,
    pub cert_der: Vec<u8>,
    /// The leaf's private key, PEM and PKCS#8 DER.
    pub key_pem: String,
    pub key_der: Vec<u8>,
}

/// A CA and a certificate for `names` (DNS names or IP addresses) it signed.
///
/// # Errors
/// When rcgen cannot make a key or sign (a name it refuses).
pub fn serving_pki(names: &[&str]) -> Result<ServingPki, rcgen::Error> {
    let ca_key = KeyPair::generate()?;
    let mut ca = CertificateParams::new(Vec::<String>::new())?;
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca_pem = ca.self_signed(&ca_key)?.pem();
    let issuer = Issuer::new(ca, &ca_key);
    let key = KeyPair::generate()?;
    let leaf =
        CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())?.signed_by(&key, &issuer)?;
    Ok(ServingPki {
        ca_pem,
        cert_pem: leaf.pem(),
        cert_der: leaf.der().to_vec(),
        key_pem: key.serialize_pem(),
        key_der: key.serialize_der(),
    })
}
