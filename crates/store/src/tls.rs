//! TLS to Postgres with rustls (ring): libpq's `sslmode` values, which
//! tokio-postgres only partly knows (`disable|prefer|require`), and
//! `sslrootcert`.
//!
//! As in libpq: `require` encrypts without checking the certificate unless
//! `sslrootcert` is given (then it checks the chain, like `verify-ca`);
//! `verify-ca` checks the chain; `verify-full` checks the chain and that the
//! certificate names the host. Without `sslrootcert` the chain is checked
//! against the platform's roots.

use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct, SignatureScheme};

use crate::{Error, Result};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SslMode {
    Disable,
    Prefer,
    Require,
    VerifyCa,
    VerifyFull,
}

/// A database URL with the TLS settings taken out: what tokio-postgres is
/// given, and what the connector needs.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct SplitUrl {
    pub url: String,
    pub mode: SslMode,
    pub root_cert: Option<String>,
}

/// Reads `sslmode` and `sslrootcert` out of a `postgres://` URL or a
/// `key=value` string, and gives tokio-postgres a mode it knows.
pub(crate) fn split_url(url: &str) -> Result<SplitUrl> {
    let (separator, head, params) =
        if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            match url.split_once('?') {
                Some((head, query)) => ('&', head.to_owned(), query.split('&').collect::<Vec<_>>()),
                None => ('&', url.to_owned(), vec![]),
            }
        } else {
            (' ', String::new(), url.split_whitespace().collect())
        };
    let mut mode = SslMode::Prefer;
    let mut root_cert = None;
    let mut kept: Vec<String> = Vec::new();
    for param in params.into_iter().filter(|p| !p.is_empty()) {
        let (key, value) = param.split_once('=').unwrap_or((param, ""));
        let value = percent_decode(value);
        match key {
            "sslmode" => {
                mode = match value.as_str() {
                    "disable" => SslMode::Disable,
                    "allow" | "prefer" => SslMode::Prefer,
                    "require" => SslMode::Require,
                    "verify-ca" => SslMode::VerifyCa,
                    "verify-full" => SslMode::VerifyFull,
                    other => {
                        return Err(Error::Config(format!(
                            "invalid database url: unknown sslmode {other:?} (disable, prefer, require, verify-ca, verify-full)"
                        )))
                    }
                };
                let known = match mode {
                    SslMode::Disable => "disable",
                    SslMode::Prefer => "prefer",
                    _ => "require",
                };
                kept.push(format!("sslmode={known}"));
            }
            "sslrootcert" => root_cert = Some(value),
            _ => kept.push(param.to_owned()),
        }
    }
    let url = match separator {
        '&' if kept.is_empty() => head,
        '&' => format!("{head}?{}", kept.join("&")),
        _ => kept.join(" "),
    };
    Ok(SplitUrl {
        url,
        mode,
        root_cert,
    })
}

fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).ok();
            if let Some(byte) = hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                out.push(byte);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The rustls client configuration for `split`, or `None` for
/// `sslmode=disable`.
pub(crate) fn client_config(split: &SplitUrl) -> Result<Option<rustls::ClientConfig>> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let roots = match &split.root_cert {
        Some(path) => Some(load_roots(path)?),
        None => None,
    };
    let verifier: Arc<dyn ServerCertVerifier> = match (split.mode, roots) {
        (SslMode::Disable, _) => return Ok(None),
        (SslMode::Prefer | SslMode::Require, None) => Arc::new(NoCheck(provider.clone())),
        (SslMode::Prefer | SslMode::Require | SslMode::VerifyCa, Some(roots)) => {
            Arc::new(ChainOnly(webpki(roots, &provider)?))
        }
        (SslMode::VerifyCa, None) => Arc::new(ChainOnly(platform(&provider)?)),
        (SslMode::VerifyFull, Some(roots)) => webpki(roots, &provider)?,
        (SslMode::VerifyFull, None) => platform(&provider)?,
    };
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| Error::Config(format!("database TLS: {e}")))?
        .dangerous()
        .with_custom_certificate_verifier(verifier)
        .with_no_client_auth();
    Ok(Some(config))
}

fn load_roots(path: &str) -> Result<rustls::RootCertStore> {
    let mut roots = rustls::RootCertStore::empty();
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| Error::Config(format!("sslrootcert {path:?}: {e}")))?;
    for cert in certs {
        let cert = cert.map_err(|e| Error::Config(format!("sslrootcert {path:?}: {e}")))?;
        roots
            .add(cert)
            .map_err(|e| Error::Config(format!("sslrootcert {path:?}: {e}")))?;
    }
    if roots.is_empty() {
        return Err(Error::Config(format!(
            "sslrootcert {path:?} holds no certificate"
        )));
    }
    Ok(roots)
}

fn webpki(
    roots: rustls::RootCertStore,
    provider: &Arc<CryptoProvider>,
) -> Result<Arc<dyn ServerCertVerifier>> {
    rustls::client::WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone())
        .build()
        .map(|v| v as Arc<dyn ServerCertVerifier>)
        .map_err(|e| Error::Config(format!("database TLS: {e}")))
}

fn platform(provider: &Arc<CryptoProvider>) -> Result<Arc<dyn ServerCertVerifier>> {
    rustls_platform_verifier::Verifier::new(provider.clone())
        .map(|v| Arc::new(v) as Arc<dyn ServerCertVerifier>)
        .map_err(|e| Error::Config(format!("database TLS: the platform's roots: {e}")))
}

/// `require` without a root certificate: encrypted, the certificate not
/// checked (libpq's behaviour). The handshake's signatures still are.
#[derive(Debug)]
struct NoCheck(Arc<CryptoProvider>);

impl ServerCertVerifier for NoCheck {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> std::result::Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// `verify-ca`: the chain is checked, the host name is not.
#[derive(Debug)]
struct ChainOnly(Arc<dyn ServerCertVerifier>);

impl ServerCertVerifier for ChainOnly {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> std::result::Result<ServerCertVerified, rustls::Error> {
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
        {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn libpq_modes_are_read_out_of_urls_and_key_value_strings() {
        let split = split_url(
            "postgres://u@db:5432/app?sslmode=verify-full&sslrootcert=%2Fetc%2Fca.pem&application_name=x",
        )
        .unwrap();
        assert_eq!(split.mode, SslMode::VerifyFull);
        assert_eq!(split.root_cert.as_deref(), Some("/etc/ca.pem"));
        assert_eq!(
            split.url,
            "postgres://u@db:5432/app?sslmode=require&application_name=x"
        );
        let plain = split_url("postgres://u@db/app").unwrap();
        assert_eq!(
            (plain.mode, plain.url.as_str()),
            (SslMode::Prefer, "postgres://u@db/app")
        );
        let kv = split_url("host=db user=u sslmode=verify-ca sslrootcert=/ca.pem").unwrap();
        assert_eq!(kv.mode, SslMode::VerifyCa);
        assert_eq!(kv.url, "host=db user=u sslmode=require");
        assert_eq!(
            split_url("postgres://db/app?sslmode=disable").unwrap().mode,
            SslMode::Disable
        );
        assert!(split_url("postgres://db/app?sslmode=sometimes").is_err());
    }

    #[test]
    fn a_missing_root_certificate_is_a_configuration_error() {
        let split = split_url("postgres://db/app?sslmode=verify-full&sslrootcert=/nonexistent.pem")
            .unwrap();
        assert!(matches!(client_config(&split), Err(Error::Config(_))));
        assert!(
            client_config(&split_url("postgres://db/a?sslmode=disable").unwrap())
                .unwrap()
                .is_none()
        );
        assert!(
            client_config(&split_url("postgres://db/a?sslmode=require").unwrap())
                .unwrap()
                .is_some()
        );
    }
}
