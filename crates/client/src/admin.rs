//! [`AdminClient`]: presa's own admin API (`/admin/v1`, presa's
//! `docs/admin.md`), which is not MCP: JSON over plain HTTP, with the same
//! bearer token and connection pool as the [`Client`](crate::Client) it
//! comes from. Refusals become [`Error`]s: 401 and a 403 with a challenge as
//! for MCP, any other `{"error": {"code", "message"}}` as [`Error::Admin`].

use serde_json::Value;

use crate::{client::response::parse_bearer_challenge, error::Error};

/// A client of one presa admin API. Cheap to clone.
#[derive(Debug, Clone)]
pub struct AdminClient {
    pub(crate) http: reqwest::Client,
    pub(crate) base: String,
    pub(crate) token: Option<String>,
}

impl AdminClient {
    /// The admin API's base URL (`…/admin/v1`).
    pub fn base(&self) -> &str {
        &self.base
    }

    /// `GET <base><path>` with `query` (pairs with an empty value are left out).
    pub async fn get(&self, path: &str, query: &[(&str, String)]) -> Result<Value, Error> {
        self.send(self.http.get(self.url(path, query)?)).await
    }

    /// `POST <base><path>` with `query`.
    pub async fn post(&self, path: &str, query: &[(&str, String)]) -> Result<Value, Error> {
        self.send(self.http.post(self.url(path, query)?)).await
    }

    /// `DELETE <base><path>` with `query`.
    pub async fn delete(&self, path: &str, query: &[(&str, String)]) -> Result<Value, Error> {
        self.send(self.http.delete(self.url(path, query)?)).await
    }

    /// `<base><path>?<query>`, each part percent-encoded.
    fn url(&self, path: &str, query: &[(&str, String)]) -> Result<reqwest::Url, Error> {
        let mut url = reqwest::Url::parse(&format!("{}{path}", self.base))
            .map_err(|e| Error::Unreachable { url: self.base.clone(), reason: format!("not a URL: {e}") })?;
        let given: Vec<&(&str, String)> = query.iter().filter(|(_, v)| !v.is_empty()).collect();
        if !given.is_empty() {
            url.query_pairs_mut().extend_pairs(given.iter().map(|(k, v)| (*k, v.as_str())));
        }
        Ok(url)
    }

    /// A path segment: `id` percent-encoded, so any id stays one segment.
    pub fn segment(id: &str) -> String {
        id.bytes()
            .map(|b| match b {
                b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => (b as char).to_string(),
                _ => format!("%{b:02X}"),
            })
            .collect()
    }

    async fn send(&self, mut req: reqwest::RequestBuilder) -> Result<Value, Error> {
        // What presa's admin API asks of a state-changing request, to tell a
        // program from a web page's cross-origin form (presa_http::guard).
        req = req.header("X-Presa-Admin", "presa-client");
        if let Some(token) = &self.token {
            req = req.bearer_auth(token);
        }
        let resp = req.send().await.map_err(|e| Error::Unreachable {
            url: self.base.clone(),
            reason: format!("{e} (is presa running, and is --admin-url / --url right?)"),
        })?;
        let status = resp.status().as_u16();
        let challenge =
            resp.headers().get(reqwest::header::WWW_AUTHENTICATE).and_then(|v| v.to_str().ok()).map(str::to_string);
        let body =
            resp.text().await.map_err(|e| Error::Unreachable { url: self.base.clone(), reason: e.to_string() })?;
        let json: Option<Value> = serde_json::from_str(&body).ok();
        let params = challenge.as_deref().map(parse_bearer_challenge).unwrap_or_default();
        let param = |key: &str| params.iter().find(|(k, _)| k.eq_ignore_ascii_case(key)).map(|(_, v)| v.clone());
        match status {
            200..=299 => Ok(json.unwrap_or(Value::Null)),
            401 => Err(Error::Unauthorized {
                resource_metadata: param("resource_metadata"),
                detail: param("error_description").or_else(|| param("error")),
            }),
            403 if challenge.is_some() => {
                Err(Error::Forbidden { scope: param("scope"), detail: param("error_description") })
            }
            _ => match json.as_ref().and_then(|j| j.get("error")) {
                Some(e) => Err(Error::Admin {
                    status,
                    code: e["code"].as_str().unwrap_or("error").to_string(),
                    message: e["message"].as_str().unwrap_or("").to_string(),
                }),
                None => Err(Error::Http { status, body: body.chars().take(200).collect() }),
            },
        }
    }
}
