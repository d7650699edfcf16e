//! The HTTP client of a Streamable HTTP upstream connection: rmcp's reqwest
//! client, with the upstream's access token (`upstream/oauth.rs`) on every
//! request when it needs sign-in. A request the upstream answers 401 drops
//! that token, and is sent once more with a new one: a 401 comes before the
//! upstream acted on the request, so sending it again is safe for any tool.
//!
//! Every `tools/call` rmcp POSTs passes by [`Shared::rmcp_posts_call`]
//! first (`upstream/direct.rs`): it is learnt as the template of the
//! gateway's own POSTs, or answered with the stream of a call the gateway
//! already sent (then it is not sent again).
//!
//! A failure to get a token travels through rmcp as the transport's I/O
//! error holding an [`UpstreamError::Token`]; [`auth_failure`] finds it (or
//! a 401 the new token did not cure) again, for the retry rules and the
//! caller's error message.

use std::{collections::HashMap, sync::Arc};

use futures::stream::BoxStream;
use http::{HeaderName, HeaderValue};
use rmcp::{
    model::{ClientJsonRpcMessage, ClientRequest, GetMeta},
    transport::{
        DynamicTransportError,
        streamable_http_client::{
            SseError, StreamableHttpClient, StreamableHttpError, StreamableHttpPostResponse,
            StreamableHttpResponseLimits,
        },
    },
};

use super::{UpstreamError, direct::Shared, oauth::TokenSource};

/// What rmcp's reqwest client fails with.
pub(super) type HttpError = StreamableHttpError<reqwest::Error>;

/// rmcp's reqwest client, signing in with `tokens` when the upstream needs it.
#[derive(Debug, Clone)]
pub struct UpstreamHttp {
    client: reqwest::Client,
    tokens: Option<Arc<TokenSource>>,
    shared: Arc<Shared>,
}

impl UpstreamHttp {
    /// `client`, sending the tokens of `tokens` (none: requests go as they
    /// are), its `tools/call` POSTs passing by `shared`.
    pub fn new(client: reqwest::Client, tokens: Option<Arc<TokenSource>>, shared: Arc<Shared>) -> Self {
        UpstreamHttp { client, tokens, shared }
    }

    /// The HTTP client.
    pub(super) fn client(&self) -> &reqwest::Client {
        &self.client
    }

    /// A call rmcp is about to POST: answered with a stream handed off, or learnt.
    fn intercept(
        &self,
        message: &ClientJsonRpcMessage,
        session_id: Option<&Arc<str>>,
        headers: &HashMap<HeaderName, HeaderValue>,
    ) -> Option<StreamableHttpPostResponse> {
        let ClientJsonRpcMessage::Request(request) = message else { return None };
        if !matches!(request.request, ClientRequest::CallToolRequest(_)) {
            return None;
        }
        // rmcp keeps the `_meta` it adds (the client context) beside the params, in the request's extensions.
        self.shared.rmcp_posts_call(&request.id, session_id, headers, Some(request.request.get_meta()))
    }

    /// Run `call` on `request` with a token (or the `given` header when the
    /// upstream needs no sign-in); on a 401, once more with a new token.
    /// `request` is copied only for an upstream that needs sign-in (a 401 may
    /// send it twice): otherwise it is sent as it is, its message not cloned.
    pub(super) async fn signed<R, T, F, Fut>(&self, given: Option<String>, request: R, call: F) -> Result<T, HttpError>
    where
        R: Clone,
        F: Fn(Option<String>, R) -> Fut,
        Fut: Future<Output = Result<T, HttpError>>,
    {
        let Some(tokens) = &self.tokens else { return call(given, request).await };
        let token = tokens.token().await.map_err(token_failed)?;
        match call(Some(token.expose().to_string()), request.clone()).await {
            Err(e) if is_unauthorized(&e) => {
                tracing::info!(upstream = %tokens.upstream(),
                    "the upstream refused the access token (HTTP 401); fetching a new one and sending the request again");
                tokens.invalidate(&token);
                let fresh = tokens.token().await.map_err(token_failed)?;
                call(Some(fresh.expose().to_string()), request).await
            }
            other => other,
        }
    }
}

fn token_failed(e: UpstreamError) -> HttpError {
    StreamableHttpError::Io(std::io::Error::other(e))
}

/// Whether the upstream answered 401 (rmcp keeps the status in one of three shapes).
fn is_unauthorized(e: &HttpError) -> bool {
    match e {
        StreamableHttpError::AuthRequired(_) => true,
        StreamableHttpError::UnexpectedServerResponse(m) => m.starts_with("HTTP 401"),
        StreamableHttpError::Client(e) => e.status() == Some(reqwest::StatusCode::UNAUTHORIZED),
        _ => false,
    }
}

/// The [`UpstreamError::Token`] a failed request carries, if it failed for want of a token.
pub fn token_error(e: &DynamicTransportError) -> Option<UpstreamError> {
    let StreamableHttpError::Io(io) = e.error.downcast_ref::<HttpError>()? else { return None };
    match io.get_ref()?.downcast_ref::<UpstreamError>()? {
        UpstreamError::Token { upstream, token_url, why } => {
            Some(UpstreamError::Token { upstream: upstream.clone(), token_url: token_url.clone(), why: why.clone() })
        }
        _ => None,
    }
}

/// What a failed upstream request says about signing in, in words for the
/// caller (naming the upstream and the token endpoint, never a secret):
/// the token could not be fetched, or the upstream refused it; `None` for
/// any other failure.
pub fn auth_failure(upstream: &str, e: &DynamicTransportError) -> Option<String> {
    if let Some(token) = token_error(e) {
        return Some(token.to_string());
    }
    is_unauthorized(e.error.downcast_ref::<HttpError>()?)
        .then(|| format!("upstream {upstream:?} refused the gateway's access token (HTTP 401)"))
}

impl StreamableHttpClient for UpstreamHttp {
    type Error = reqwest::Error;

    async fn post_message(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<StreamableHttpPostResponse, HttpError> {
        if let Some(handed_off) = self.intercept(&message, session_id.as_ref(), &custom_headers) {
            return Ok(handed_off);
        }
        let request = (uri, message, session_id, custom_headers);
        self.signed(auth_header, request, |token, (uri, message, session_id, headers)| async move {
            self.client.post_message(uri, message, session_id, token, headers).await
        })
        .await
    }

    async fn post_message_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> Result<StreamableHttpPostResponse, HttpError> {
        if let Some(handed_off) = self.intercept(&message, session_id.as_ref(), &custom_headers) {
            return Ok(handed_off);
        }
        let request = (uri, message, session_id, custom_headers);
        self.signed(auth_header, request, |token, (uri, message, session_id, headers)| async move {
            let client = &self.client;
            client
                .post_message_with_max_sse_event_size(uri, message, session_id, token, headers, max_sse_event_size)
                .await
        })
        .await
    }

    async fn post_message_with_response_limits(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        limits: StreamableHttpResponseLimits,
    ) -> Result<StreamableHttpPostResponse, HttpError> {
        if let Some(handed_off) = self.intercept(&message, session_id.as_ref(), &custom_headers) {
            return Ok(handed_off);
        }
        let request = (uri, message, session_id, custom_headers);
        self.signed(auth_header, request, |token, (uri, message, session_id, headers)| async move {
            self.client.post_message_with_response_limits(uri, message, session_id, token, headers, limits).await
        })
        .await
    }

    async fn delete_session(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<(), HttpError> {
        let request = (uri, session_id, custom_headers);
        self.signed(auth_header, request, |token, (uri, session_id, headers)| async move {
            self.client.delete_session(uri, session_id, token, headers).await
        })
        .await
    }

    async fn get_stream(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<BoxStream<'static, Result<sse_stream::Sse, SseError>>, HttpError> {
        let request = (uri, session_id, last_event_id, custom_headers);
        self.signed(auth_header, request, |token, (uri, session_id, last, headers)| async move {
            self.client.get_stream(uri, session_id, last, token, headers).await
        })
        .await
    }

    async fn get_stream_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> Result<BoxStream<'static, Result<sse_stream::Sse, SseError>>, HttpError> {
        let request = (uri, session_id, last_event_id, custom_headers);
        self.signed(auth_header, request, |token, (uri, session_id, last, headers)| async move {
            let client = &self.client;
            client.get_stream_with_max_sse_event_size(uri, session_id, last, token, headers, max_sse_event_size).await
        })
        .await
    }
}
