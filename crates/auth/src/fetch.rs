//! The JWKS fetcher: one small HTTP(S) GET client for `--jwks-url`.
//!
//! It is hyper's client over hyper-rustls with the *ring* provider passed
//! explicitly, not reqwest: turning on reqwest's rustls for this one call
//! would switch every other reqwest client linked into the same binary (the
//! test kit's, the CLI's) to a provider-less rustls that panics. Trust
//! anchors are the Mozilla roots compiled in (`webpki-roots`, so a
//! distroless image needs no CA bundle) plus, for an in-cluster issuer with
//! a private CA, the PEM certificates of `--jwks-ca-file`.
//!
//! A fetch is bounded: [`FETCH_TIMEOUT`] for the whole exchange, at most
//! [`MAX_JWKS_BYTES`] of body, no redirects followed (a redirect is an error
//! naming the status, so a misconfigured URL is visible rather than chased).

use std::{path::Path, sync::Arc, time::Duration};

use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Limited};
use hyper_rustls::HttpsConnector;
use hyper_util::{
    client::legacy::{Client, connect::HttpConnector},
    rt::TokioExecutor,
};
use rustls::{ClientConfig, RootCertStore, pki_types::CertificateDer, pki_types::pem::PemObject};

use crate::AuthError;

/// The longest a JWKS fetch may take, connection and body included.
pub const FETCH_TIMEOUT: Duration = Duration::from_secs(10);

/// The largest JWKS body accepted (real key sets are a few KiB).
pub const MAX_JWKS_BYTES: usize = 1 << 20;

/// An HTTP(S) GET client for JWKS documents.
#[derive(Clone, Debug)]
pub struct JwksClient {
    client: Client<HttpsConnector<HttpConnector>, Empty<Bytes>>,
}

impl JwksClient {
    /// A client trusting the compiled-in Mozilla roots and, when given, the
    /// PEM certificates in `extra_ca` (a file that cannot be read or holds no
    /// certificate is an error).
    pub fn new(extra_ca: Option<&Path>) -> Result<JwksClient, AuthError> {
        let mut roots = RootCertStore { roots: webpki_roots::TLS_SERVER_ROOTS.to_vec() };
        if let Some(path) = extra_ca {
            let certs: Vec<CertificateDer<'static>> =
                CertificateDer::pem_file_iter(path).and_then(Iterator::collect).map_err(|e| {
                    AuthError::Fetch(format!("cannot read CA certificates from {}: {e}", path.display()))
                })?;
            if certs.is_empty() {
                return Err(AuthError::Fetch(format!("{} holds no PEM certificate", path.display())));
            }
            for cert in certs {
                roots.add(cert).map_err(|e| AuthError::Fetch(format!("{}: {e}", path.display())))?;
            }
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let tls = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| AuthError::Fetch(format!("TLS set-up: {e}")))?
            .with_root_certificates(roots)
            .with_no_client_auth();
        let connector =
            hyper_rustls::HttpsConnectorBuilder::new().with_tls_config(tls).https_or_http().enable_http1().build();
        Ok(JwksClient { client: Client::builder(TokioExecutor::new()).build(connector) })
    }

    /// GET `url` and return its body, bounded in time and size.
    pub async fn get(&self, url: &str) -> Result<Bytes, AuthError> {
        let uri: http::Uri = url.parse().map_err(|e| AuthError::Fetch(format!("bad URL: {e}")))?;
        let request = http::Request::get(uri)
            .header(http::header::ACCEPT, "application/json, application/jwk-set+json")
            .header(http::header::USER_AGENT, concat!("presa/", env!("CARGO_PKG_VERSION")))
            .body(Empty::new())
            .map_err(|e| AuthError::Fetch(e.to_string()))?;
        let exchange = async {
            let response = self.client.request(request).await.map_err(|e| AuthError::Fetch(describe(&e)))?;
            let status = response.status();
            if !status.is_success() {
                return Err(AuthError::Fetch(format!("HTTP {status}")));
            }
            let body = Limited::new(response.into_body(), MAX_JWKS_BYTES)
                .collect()
                .await
                .map_err(|e| AuthError::Fetch(format!("reading the body: {e}")))?;
            Ok(body.to_bytes())
        };
        tokio::time::timeout(FETCH_TIMEOUT, exchange)
            .await
            .map_err(|_| AuthError::Fetch(format!("no answer within {} s", FETCH_TIMEOUT.as_secs())))?
    }
}

/// hyper's client errors say "client error (Connect)"; the cause (refused,
/// certificate unknown, …) is further down the source chain.
fn describe(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A set-up failure is the crate's one error type, its message unchanged.
    #[test]
    fn an_unreadable_ca_file_is_an_auth_error_naming_it() {
        let err = JwksClient::new(Some(Path::new("/nonexistent/ca.pem"))).unwrap_err();
        assert!(matches!(&err, AuthError::Fetch(_)), "{err:?}");
        assert!(err.to_string().starts_with("cannot read CA certificates from /nonexistent/ca.pem: "), "{err}");
    }
}
