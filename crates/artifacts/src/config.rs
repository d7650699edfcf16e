//! What a store is made from: a URL and a few limits.

use std::{fmt, time::Duration};

use crate::error::ArtifactError;

/// An artifact store's configuration: its URL, the size limit, the upload
/// shape and, for S3, the connection options. Built with
/// [`ArtifactConfig::new`] and the `with_*` methods, opened with [`open`](Self::open).
///
/// ```no_run
/// # fn main() -> Result<(), presa_artifacts::ArtifactError> {
/// use presa_artifacts::{ArtifactConfig, S3Options};
/// let store = ArtifactConfig::new("s3://results/presa")
///     .with_max_bytes(512 << 20)
///     .with_s3(S3Options::default().with_endpoint("http://127.0.0.1:9000").with_allow_http(true))
///     .open()?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct ArtifactConfig {
    /// `file:///abs/dir` or `s3://bucket[/prefix]`.
    pub url: String,
    /// The most bytes one artifact may have (default 1 GiB).
    pub max_bytes: u64,
    /// The size of one uploaded part (default 8 MiB; S3 wants at least 5 MiB for all
    /// parts but the last). An artifact smaller than this is one plain upload.
    pub part_size: usize,
    /// How many parts of one artifact upload at once (default 4). A writer holds at
    /// most about `part_size × (max_concurrency + 1)` bytes.
    pub max_concurrency: usize,
    /// S3 connection options (ignored for `file://`).
    pub s3: S3Options,
}

impl ArtifactConfig {
    /// A configuration for the store at `url`, with the default limits.
    pub fn new(url: impl Into<String>) -> Self {
        ArtifactConfig {
            url: url.into(),
            max_bytes: 1 << 30,
            part_size: 8 << 20,
            max_concurrency: 4,
            s3: S3Options::default(),
        }
    }

    /// Sets [`max_bytes`](Self::max_bytes).
    pub fn with_max_bytes(mut self, max_bytes: u64) -> Self {
        self.max_bytes = max_bytes;
        self
    }

    /// Sets [`part_size`](Self::part_size).
    pub fn with_part_size(mut self, part_size: usize) -> Self {
        self.part_size = part_size;
        self
    }

    /// Sets [`max_concurrency`](Self::max_concurrency).
    pub fn with_max_concurrency(mut self, max_concurrency: usize) -> Self {
        self.max_concurrency = max_concurrency;
        self
    }

    /// Sets the S3 options.
    pub fn with_s3(mut self, s3: S3Options) -> Self {
        self.s3 = s3;
        self
    }
}

/// How to reach an S3 (or S3-compatible) server. Anything left `None` comes
/// from the environment, as the AWS tools read it: `AWS_ACCESS_KEY_ID`,
/// `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`, `AWS_REGION` (or
/// `AWS_DEFAULT_REGION`), `AWS_ENDPOINT_URL` (or `AWS_ENDPOINT`), `AWS_ALLOW_HTTP`;
/// without keys, the web identity token (`AWS_WEB_IDENTITY_TOKEN_FILE`,
/// `AWS_ROLE_ARN`), the container credentials endpoint, then the instance metadata.
#[derive(Clone, Default)]
pub struct S3Options {
    /// The server's base URL, e.g. `http://127.0.0.1:9000` for a local server
    /// (path-style requests); `None`: AWS's endpoint for the region.
    pub endpoint: Option<String>,
    /// Allow plain `http://` endpoints (default: https only).
    pub allow_http: bool,
    /// The region (`us-east-1` when neither this nor the environment sets one).
    pub region: Option<String>,
    /// The access key id.
    pub access_key_id: Option<String>,
    /// The secret access key (never printed).
    pub secret_access_key: Option<String>,
    /// A session token for temporary credentials (never printed).
    pub session_token: Option<String>,
    /// How many times a failed request is retried (default 3).
    pub max_retries: Option<usize>,
    /// How long a request keeps being retried (default 30 s).
    pub retry_timeout: Option<Duration>,
    /// How long connecting may take (default 5 s).
    pub connect_timeout: Option<Duration>,
    /// How long a request may wait for its answer's headers (default 30 s).
    pub request_timeout: Option<Duration>,
}

impl S3Options {
    /// Sets the endpoint.
    pub fn with_endpoint(mut self, endpoint: impl Into<String>) -> Self {
        self.endpoint = Some(endpoint.into());
        self
    }

    /// Allows (or not) plain `http://` endpoints.
    pub fn with_allow_http(mut self, allow_http: bool) -> Self {
        self.allow_http = allow_http;
        self
    }

    /// Sets the region.
    pub fn with_region(mut self, region: impl Into<String>) -> Self {
        self.region = Some(region.into());
        self
    }

    /// Sets static credentials.
    pub fn with_credentials(mut self, access_key_id: impl Into<String>, secret_access_key: impl Into<String>) -> Self {
        self.access_key_id = Some(access_key_id.into());
        self.secret_access_key = Some(secret_access_key.into());
        self
    }

    /// Sets the retry budget of one request: at most `max_retries` retries within `timeout`.
    pub fn with_retries(mut self, max_retries: usize, timeout: Duration) -> Self {
        self.max_retries = Some(max_retries);
        self.retry_timeout = Some(timeout);
        self
    }

    /// Sets the connect and request (answer headers) timeouts.
    pub fn with_timeouts(mut self, connect: Duration, request: Duration) -> Self {
        self.connect_timeout = Some(connect);
        self.request_timeout = Some(request);
        self
    }
}

impl fmt::Debug for S3Options {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let secret = |s: &Option<String>| s.as_ref().map(|_| "<redacted>");
        f.debug_struct("S3Options")
            .field("endpoint", &self.endpoint)
            .field("allow_http", &self.allow_http)
            .field("region", &self.region)
            .field("access_key_id", &self.access_key_id)
            .field("secret_access_key", &secret(&self.secret_access_key))
            .field("session_token", &secret(&self.session_token))
            .field("max_retries", &self.max_retries)
            .field("retry_timeout", &self.retry_timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field("request_timeout", &self.request_timeout)
            .finish()
    }
}

/// A URL as error messages show it: without user, password, query or fragment.
pub(crate) fn display_url(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(mut u) => {
            let _ = u.set_username("");
            let _ = u.set_password(None);
            u.set_query(None);
            u.set_fragment(None);
            u.to_string()
        }
        Err(_) => "<an unparsable URL>".to_owned(),
    }
}

pub(crate) fn config_error(store: &str, message: impl Into<String>) -> ArtifactError {
    ArtifactError::Config { store: store.to_owned(), message: message.into() }
}
