//! The S3 client's HTTP: hyper-util's pooled client over hyper-rustls with the
//! ring provider and Mozilla's roots (webpki-roots), handed to object_store as
//! its [`HttpConnector`]. object_store's own reqwest client is not used (see the
//! crate docs); object_store keeps doing the signing, retries and backoff.

use std::{sync::Arc, time::Duration};

use http_body_util::BodyExt;
use hyper_util::{
    client::legacy::{Client, connect::HttpConnector as TcpConnector},
    rt::TokioExecutor,
};
use object_store::client::{
    ClientOptions, HttpClient, HttpConnector, HttpError, HttpErrorKind, HttpRequest, HttpRequestBody, HttpResponse,
    HttpResponseBody, HttpService,
};

/// Makes [`HyperService`]s for object_store.
#[derive(Debug, Clone)]
pub(crate) struct HyperConnector {
    pub(crate) allow_http: bool,
    pub(crate) connect_timeout: Duration,
    pub(crate) request_timeout: Duration,
}

impl HttpConnector for HyperConnector {
    fn connect(&self, _options: &ClientOptions) -> object_store::Result<HttpClient> {
        let mut tcp = TcpConnector::new();
        tcp.enforce_http(false);
        tcp.set_nodelay(true);
        tcp.set_connect_timeout(Some(self.connect_timeout));
        let tls = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .map_err(|e| object_store::Error::Generic { store: "S3", source: Box::new(e) })?
            .with_root_certificates(rustls::RootCertStore { roots: webpki_roots::TLS_SERVER_ROOTS.to_vec() })
            .with_no_client_auth();
        let builder = hyper_rustls::HttpsConnectorBuilder::new().with_tls_config(tls);
        let connector = if self.allow_http { builder.https_or_http() } else { builder.https_only() }
            .enable_http1()
            .wrap_connector(tcp);
        let client = Client::builder(TokioExecutor::new()).pool_idle_timeout(Duration::from_secs(30)).build(connector);
        Ok(HttpClient::new(HyperService { client, request_timeout: self.request_timeout }))
    }
}

type HyperClient = Client<hyper_rustls::HttpsConnector<TcpConnector>, HttpRequestBody>;

/// One pooled client; object_store calls it for every request.
#[derive(Debug)]
struct HyperService {
    client: HyperClient,
    request_timeout: Duration,
}

#[async_trait::async_trait]
impl HttpService for HyperService {
    async fn call(&self, req: HttpRequest) -> Result<HttpResponse, HttpError> {
        let response = match tokio::time::timeout(self.request_timeout, self.client.request(req)).await {
            Err(_) => {
                return Err(HttpError::new(
                    HttpErrorKind::Timeout,
                    std::io::Error::new(std::io::ErrorKind::TimedOut, "no answer within the request timeout"),
                ));
            }
            Ok(result) => result.map_err(|e| HttpError::new(request_error_kind(&e), e))?,
        };
        let (parts, body) = response.into_parts();
        let body = body.map_err(|e| HttpError::new(body_error_kind(&e), e));
        Ok(HttpResponse::from_parts(parts, HttpResponseBody::new(body)))
    }
}

/// What object_store should make of a failed request (it retries `Connect` and
/// `Request` always, `Timeout` and `Interrupted` when the request is idempotent).
fn request_error_kind(e: &hyper_util::client::legacy::Error) -> HttpErrorKind {
    if e.is_connect() {
        return HttpErrorKind::Connect;
    }
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        if let Some(h) = s.downcast_ref::<hyper::Error>() {
            return body_error_kind(h);
        }
        if let Some(io) = s.downcast_ref::<std::io::Error>() {
            return io_error_kind(io);
        }
        source = s.source();
    }
    HttpErrorKind::Request
}

fn body_error_kind(e: &hyper::Error) -> HttpErrorKind {
    if e.is_timeout() {
        HttpErrorKind::Timeout
    } else if e.is_incomplete_message() || e.is_closed() || e.is_canceled() || e.is_body_write_aborted() {
        HttpErrorKind::Interrupted
    } else if e.is_parse() || e.is_user() {
        HttpErrorKind::Decode
    } else {
        match std::error::Error::source(e).and_then(|s| s.downcast_ref::<std::io::Error>()) {
            Some(io) => io_error_kind(io),
            None => HttpErrorKind::Unknown,
        }
    }
}

fn io_error_kind(e: &std::io::Error) -> HttpErrorKind {
    use std::io::ErrorKind;
    match e.kind() {
        ErrorKind::TimedOut => HttpErrorKind::Timeout,
        ErrorKind::ConnectionRefused | ErrorKind::NotConnected | ErrorKind::AddrNotAvailable => HttpErrorKind::Connect,
        _ => HttpErrorKind::Interrupted,
    }
}
