//! TLS is rustls with the ring provider: nothing to build against OpenSSL.
//! Certificates are checked against the platform's roots (rustls-platform-
//! verifier), plus any a provider is given (`ProviderSettings::extra_roots_pem`).

/// Makes ring the process's rustls provider, once; a provider installed
/// earlier (by the embedding application) is kept.
pub fn install_crypto_provider() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

/// A reqwest client builder whose TLS is ready: every HTTP client of the
/// project starts here (reqwest panics on a TLS client built before a
/// provider is installed).
#[allow(clippy::disallowed_methods)]
pub fn http_client() -> reqwest::ClientBuilder {
    install_crypto_provider();
    reqwest::Client::builder()
}
