//! An upstream behind mutual TLS (`--features tls`): a presa server in this
//! test process, reached through a TLS front served here that asks for a
//! client certificate and accepts only those of a CA made here (rcgen). The
//! gateway (embedded, its own process) presents the certificate its `tls`
//! table names and trusts only its `ca_file`; without a certificate, the
//! front refuses it and the gateway does not start.

#![cfg(feature = "tls")]

mod common;

use std::{
    path::Path,
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use common::gateway_bin;
use presa_server::ServerConfig;
use presa_testkit::{Client, Pod, embedded, free_port};
use rcgen::{BasicConstraints, CertificateParams, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair};
use serde_json::json;

/// The PEM files a gateway is given, and the server's TLS settings.
struct Pki {
    server: Arc<rustls::ServerConfig>,
    dir: tempfile::TempDir,
}

/// A CA, a server certificate for 127.0.0.1 and a client certificate, all
/// signed by it; the server asks for a client certificate of that CA.
fn pki() -> Pki {
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca_cert = ca_params.self_signed(&ca_key).unwrap();
    let ca = Issuer::new(ca_params, ca_key);
    let server_key = KeyPair::generate().unwrap();
    let server = CertificateParams::new(vec!["127.0.0.1".to_string()]).unwrap().signed_by(&server_key, &ca).unwrap();
    let client_key = KeyPair::generate().unwrap();
    let mut client_params = CertificateParams::new(vec!["presa-gateway".to_string()]).unwrap();
    client_params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    let client = client_params.signed_by(&client_key, &ca).unwrap();

    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("ca.pem"), ca_cert.pem()).unwrap();
    std::fs::write(dir.path().join("client.pem"), client.pem()).unwrap();
    std::fs::write(dir.path().join("client.key"), client_key.serialize_pem()).unwrap();

    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    roots.add(ca_cert.der().clone()).unwrap();
    let verifier =
        rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone()).build().unwrap();
    let key = rustls::pki_types::PrivateKeyDer::try_from(server_key.serialize_der()).unwrap();
    let server = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_client_cert_verifier(verifier)
        .with_single_cert(vec![server.der().clone()], key)
        .unwrap();
    Pki { server: Arc::new(server), dir }
}

/// A TLS front on a free port passing each connection on to `backend`
/// (host:port); counts the handshakes that presented a client certificate.
async fn tls_front(tls: Arc<rustls::ServerConfig>, backend: String, with_cert: Arc<AtomicUsize>) -> u16 {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let acceptor = tokio_rustls::TlsAcceptor::from(tls);
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let (acceptor, backend, with_cert) = (acceptor.clone(), backend.clone(), with_cert.clone());
            tokio::spawn(async move {
                // A client without a certificate of the CA fails the handshake here.
                let Ok(mut tls) = acceptor.accept(tcp).await else { return };
                if tls.get_ref().1.peer_certificates().is_some_and(|c| !c.is_empty()) {
                    with_cert.fetch_add(1, Ordering::SeqCst);
                }
                let Ok(mut plain) = tokio::net::TcpStream::connect(&backend).await else { return };
                let _ = tokio::io::copy_bidirectional(&mut tls, &mut plain).await;
            });
        }
    });
    port
}

fn write_config(dir: &Path, port: u16, tls: &str) -> String {
    let path = dir.join(format!("gateway-{port}-{}.toml", tls.len()));
    let body = format!("[[upstream]]\nname = \"mtls\"\nurl = \"https://127.0.0.1:{port}/mcp\"\ntls = {{ {tls} }}\n");
    std::fs::write(&path, body).unwrap();
    path.display().to_string()
}

#[tokio::test(flavor = "multi_thread")]
async fn an_upstream_behind_mutual_tls_is_reached_with_the_client_certificate() {
    // This process's reqwest (the test kit's) has TLS on too: it needs a provider.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let upstream = embedded(ServerConfig::default()).await;
    let backend = upstream.url.trim_start_matches("http://").trim_end_matches("/mcp").to_string();
    let pki = pki();
    let with_cert = Arc::new(AtomicUsize::new(0));
    let port = tls_front(pki.server.clone(), backend, with_cert.clone()).await;
    let d = pki.dir.path().display();

    let tls = format!(
        "client_cert_file = \"{d}/client.pem\", client_key_file = \"{d}/client.key\", ca_file = \"{d}/ca.pem\""
    );
    let config = write_config(pki.dir.path(), port, &tls);
    let gateway = Pod::start("gateway", &gateway_bin(), free_port(), &["--gateway-config", &config], &[]).await;
    let client = Client::new(format!("{}/mcp", gateway.base()), json!({}));
    let result = client.call_tool("test_simple_text", json!({})).await;
    assert!(result["content"][0]["text"].as_str().is_some_and(|t| !t.is_empty()), "{result}");
    assert!(with_cert.load(Ordering::SeqCst) >= 1, "the gateway presented its client certificate");
    assert!(!gateway.log().contains("PRIVATE KEY"), "the key was logged");

    // Trusting the CA but presenting no certificate: the front refuses the
    // handshake, and the gateway cannot start.
    let config = write_config(pki.dir.path(), port, &format!("ca_file = \"{d}/ca.pem\""));
    let out = tokio::time::timeout(
        Duration::from_secs(60),
        tokio::process::Command::new(gateway_bin())
            .args(["--gateway-config", &config, "--listen", &format!("127.0.0.1:{}", free_port())])
            .env("RUST_LOG", "warn")
            .output(),
    )
    .await
    .expect("the gateway gave up within a minute")
    .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("upstream \"mtls\": initialising the upstream"), "{stderr}");
}
