//! TLS for the HTTP client: rustls with aws-lc-rs, the system's roots (for `https`
//! endpoints) and the certificates of a CA file.
//!
//! A certificate in the CA file is trusted two ways: as a certificate authority (normal
//! chain verification), and — when it is *exactly* the certificate the server presents —
//! as that server's own certificate (pinning, as curl does with `--cacert`). The second
//! is what makes the usual one-line self-signed certificate work
//! (`openssl req -x509 …`): it marks itself `CA:TRUE`, which webpki refuses as a server
//! certificate (`CaUsedAsEndEntity`). A pinned certificate must still name the host the
//! client connects to, and the handshake's signature must verify with its key.

use std::path::Path;
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};

use crate::Error;

/// The client's TLS configuration: system roots when `system_roots`, plus `ca_file`.
pub(crate) fn client_config(
    system_roots: bool,
    ca_file: Option<&Path>,
) -> Result<rustls::ClientConfig, Error> {
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    if system_roots {
        let native = rustls_native_certs::load_native_certs();
        roots.add_parsable_certificates(native.certs);
    }
    let mut pinned = Vec::new();
    if let Some(path) = ca_file {
        let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(path)
            .and_then(|it| it.collect::<Result<_, _>>())
            .map_err(|e| Error::Config(format!("CA file {}: {e}", path.display())))?;
        if certs.is_empty() {
            return Err(Error::Config(format!(
                "CA file {}: no certificate in it",
                path.display()
            )));
        }
        for cert in certs {
            roots
                .add(cert.clone())
                .map_err(|e| Error::Config(format!("CA file {}: {e}", path.display())))?;
            pinned.push(cert);
        }
    }
    let builder = rustls::ClientConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()
        .map_err(|e| Error::Config(format!("TLS: {e}")))?;
    let mut config = if pinned.is_empty() {
        builder.with_root_certificates(roots).with_no_client_auth()
    } else {
        let webpki = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider)
            .build()
            .map_err(|e| Error::Config(format!("TLS: {e}")))?;
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(PinnedOrChain { pinned, webpki }))
            .with_no_client_auth()
    };
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

/// Accepts a server certificate that is exactly one of `pinned` (and names the host);
/// verifies every other one as a chain to the roots.
#[derive(Debug)]
struct PinnedOrChain {
    pinned: Vec<CertificateDer<'static>>,
    webpki: Arc<WebPkiServerVerifier>,
}

impl ServerCertVerifier for PinnedOrChain {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        if self
            .pinned
            .iter()
            .any(|p| p.as_ref() == end_entity.as_ref())
        {
            let cert = rustls::server::ParsedCertificate::try_from(end_entity)?;
            rustls::client::verify_server_name(&cert, server_name)?;
            return Ok(ServerCertVerified::assertion());
        }
        self.webpki
            .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.webpki.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.webpki.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.webpki.supported_verify_schemes()
    }
}
