//! A test CA and a server certificate it signed, as a rustls server
//! configuration (ring provider, as the product's client uses).

use std::sync::Arc;

use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
pub use rustls::ServerConfig;

/// Any error of the PKI setup.
pub type Error = Box<dyn std::error::Error + Send + Sync>;

/// The CA (PEM, for a client's extra roots) and a server configuration
/// presenting a certificate for the names given.
pub struct Pki {
    /// The CA certificate, PEM, for clients to trust.
    pub ca_pem: String,
    /// The leaf certificate, PEM, for servers outside this process.
    pub cert_pem: String,
    /// The leaf's private key, PEM (PKCS#8), for servers outside this
    /// process.
    pub key_pem: String,
    /// A server config with a certificate for every test host.
    pub server: Arc<ServerConfig>,
}

impl Pki {
    /// A fresh CA and one leaf certificate for `names` (DNS names,
    /// wildcards, IP addresses).
    pub fn try_new<S: AsRef<str>>(names: &[S]) -> Result<Pki, Error> {
        let ca_key = KeyPair::generate()?;
        let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let ca = ca_params.self_signed(&ca_key)?;
        let issuer = Issuer::from_params(&ca_params, &ca_key);
        let leaf_key = KeyPair::generate()?;
        let names: Vec<String> = names.iter().map(|n| n.as_ref().to_string()).collect();
        let leaf = CertificateParams::new(names)?.signed_by(&leaf_key, &issuer)?;
        let cert_pem = leaf.pem();
        let key_pem = leaf_key.serialize_pem();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_single_cert(
                vec![CertificateDer::from(leaf.der().to_vec())],
                PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(leaf_key.serialize_der())),
            )?;
        Ok(Pki {
            ca_pem: ca.pem(),
            cert_pem,
            key_pem,
            server: Arc::new(config),
        })
    }

    /// [`Pki::try_new`], for tests.
    pub fn new<S: AsRef<str>>(names: &[S]) -> Pki {
        Pki::try_new(names).unwrap_or_else(|err| panic!("test PKI: {err}"))
    }
}
