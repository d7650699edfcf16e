//! An `[[upstream]]` table's `tls = { client_cert_file, client_key_file,
//! ca_file }`: the client certificate a Streamable HTTP upstream asks for
//! (mutual TLS) and the CA its certificate is checked against, read and
//! checked when the configuration is resolved. Needs a gateway built with
//! `--features tls` (rustls); `upstream/mod.rs` puts it on the upstream's
//! HTTP client. The private key is held in a [`Secret`]: no `Debug` shows it.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::{ConfigError, Secret};

/// `tls = { … }`, as written in the file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsRule {
    /// The client certificate (PEM, its chain after it), with `client_key_file`.
    #[serde(default)]
    pub client_cert_file: Option<PathBuf>,
    /// Its private key (PEM: PKCS#8, PKCS#1 or SEC1).
    #[serde(default)]
    pub client_key_file: Option<PathBuf>,
    /// The CA certificates (PEM) the upstream's certificate must chain to,
    /// instead of the system's.
    #[serde(default)]
    pub ca_file: Option<PathBuf>,
}

/// A resolved `tls` table, read at start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientTls {
    /// The client certificate chain and its key, as one PEM (the key is secret).
    pub identity: Option<Secret>,
    /// The CA certificates to trust instead of the system's (PEM).
    pub ca: Option<String>,
}

impl TlsRule {
    /// The TLS settings of the upstream `name`, if the files are there and hold what they should.
    pub fn resolve(self, name: &str) -> Result<ClientTls, ConfigError> {
        let refuse = |why: String| ConfigError::Invalid(format!("upstream {name:?}: tls: {why}"));
        if !cfg!(feature = "tls") {
            return Err(refuse("this presa-gateway was built without TLS: build it with --features tls".into()));
        }
        let identity = match (self.client_cert_file, self.client_key_file) {
            (Some(cert), Some(key)) => {
                let cert_pem = read(&cert, "client_cert_file").map_err(refuse)?;
                if !cert_pem.contains("-----BEGIN CERTIFICATE-----") {
                    return Err(refuse(format!("client_cert_file {} holds no PEM certificate", cert.display())));
                }
                let key_pem = read(&key, "client_key_file").map_err(refuse)?;
                if !key_pem.contains("PRIVATE KEY-----") {
                    return Err(refuse(format!("client_key_file {} holds no PEM private key", key.display())));
                }
                let identity = Secret::new(format!("{cert_pem}\n{key_pem}"));
                check_identity(&identity).map_err(refuse)?;
                Some(identity)
            }
            (None, None) => None,
            _ => return Err(refuse("give client_cert_file and client_key_file together".into())),
        };
        let ca = match self.ca_file {
            Some(path) => {
                let pem = read(&path, "ca_file").map_err(refuse)?;
                check_ca(&pem).map_err(|why| refuse(format!("ca_file {}: {why}", path.display())))?;
                Some(pem)
            }
            None => None,
        };
        if identity.is_none() && ca.is_none() {
            return Err(refuse("give client_cert_file and client_key_file, ca_file, or both".into()));
        }
        Ok(ClientTls { identity, ca })
    }
}

fn read(path: &Path, key: &str) -> Result<String, String> {
    std::fs::read_to_string(path).map_err(|e| format!("reading {key} {}: {e}", path.display()))
}

/// Whether rustls takes the certificate and key (never saying what the key holds).
#[cfg(feature = "tls")]
fn check_identity(identity: &Secret) -> Result<(), String> {
    reqwest::Identity::from_pem(identity.expose().as_bytes())
        .map(drop)
        .map_err(|_| "the client certificate and key could not be read as PEM".to_string())
}

#[cfg(not(feature = "tls"))]
fn check_identity(_: &Secret) -> Result<(), String> {
    Ok(())
}

#[cfg(feature = "tls")]
fn check_ca(pem: &str) -> Result<(), String> {
    match reqwest::Certificate::from_pem_bundle(pem.as_bytes()) {
        Ok(certs) if !certs.is_empty() => Ok(()),
        Ok(_) => Err("holds no PEM certificate".into()),
        Err(e) => Err(format!("not PEM certificates: {e}")),
    }
}

#[cfg(not(feature = "tls"))]
fn check_ca(_: &str) -> Result<(), String> {
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::{GatewayArgs, file::parse_file};

    fn error(tls: &str) -> String {
        let toml = format!("[[upstream]]\nname = \"m\"\nurl = \"https://127.0.0.1:9/mcp\"\ntls = {{ {tls} }}\n");
        let file = parse_file(&toml);
        let resolved = file.and_then(|f| GatewayArgs::default().resolve_with(Some(f)).map_err(|e| e.to_string()));
        resolved.expect_err("refused")
    }

    #[test]
    fn mistakes_are_refused_at_start() {
        assert!(error("ca = \"/x\"").contains("unknown field `ca`"));
        let half = error("client_cert_file = \"/nonexistent/c.pem\"");
        if cfg!(feature = "tls") {
            assert!(half.contains("upstream \"m\": tls: give client_cert_file and client_key_file together"), "{half}");
            let missing = error("ca_file = \"/nonexistent/ca.pem\"");
            assert!(missing.contains("reading ca_file /nonexistent/ca.pem"), "{missing}");
        } else {
            assert!(half.contains("upstream \"m\": tls: this presa-gateway was built without TLS"), "{half}");
        }
    }
}
