//! Reading JSON-RPC messages from a `text/event-stream` body: each event's
//! `data` is one JSON-RPC message (a notification, or the final response).

use eventsource_stream::Eventsource;
use futures::{Stream, StreamExt, stream::BoxStream};
use serde_json::Value;

use crate::error::Error;

/// A stream of JSON-RPC messages read from an SSE response. Ends when the
/// server closes the stream; yields an [`Error::Unreachable`] item when the
/// connection breaks mid-stream.
pub type Messages = BoxStream<'static, Result<Value, Error>>;

/// Whether a response's `Content-Type` is an event stream.
pub fn is_event_stream(resp: &reqwest::Response) -> bool {
    resp.headers()
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|c| c.to_str().ok())
        .is_some_and(|c| c.to_ascii_lowercase().starts_with("text/event-stream"))
}

/// The JSON-RPC messages of an SSE response. Events with empty data (keep-alives,
/// priming events) are skipped.
pub fn messages(resp: reqwest::Response, url: &str) -> Messages {
    let url = url.to_string();
    parse(resp.bytes_stream(), url).boxed()
}

fn parse<S, B, E>(bytes: S, url: String) -> impl Stream<Item = Result<Value, Error>>
where
    S: Stream<Item = Result<B, E>> + Send + 'static,
    B: AsRef<[u8]> + Send,
    E: std::fmt::Display + Send,
{
    bytes.eventsource().filter_map(move |ev| {
        let url = url.clone();
        async move {
            match ev {
                Ok(ev) if ev.data.trim().is_empty() => None,
                Ok(ev) => Some(
                    serde_json::from_str::<Value>(&ev.data)
                        .map_err(|e| Error::Protocol(format!("an SSE event is not JSON ({e}): {}", ev.data))),
                ),
                Err(e) => Some(Err(Error::Unreachable { url, reason: format!("the event stream broke: {e}") })),
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn reads_messages_and_skips_empty_events() {
        let body = "id: 1\ndata: \n\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"n\"}\n\n: ping\n\ndata: {\"jsonrpc\":\"2.0\",\"id\":1,\n\
                    data: \"result\":{}}\n\n";
        let chunks: Vec<Result<Vec<u8>, std::io::Error>> = body.as_bytes().chunks(7).map(|c| Ok(c.to_vec())).collect();
        let got: Vec<Value> = parse(futures::stream::iter(chunks), "u".into()).map(|m| m.unwrap()).collect().await;
        assert_eq!(got.len(), 2, "{got:?}");
        assert_eq!(got[0]["method"], "n");
        assert_eq!(got[1]["id"], 1);
    }
}
