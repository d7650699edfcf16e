//! The 2025-11-25 era over real HTTP against the embedded server: sessions
//! (forged, expired, another principal's, ended), server requests on a
//! call's stream answered by a separate POST, logging, task-required tools,
//! `--legacy off`, and what a session may store (subscriptions checked
//! against the catalog, counted and capped) and fan out (answers reach
//! their own session only).

use std::{sync::Arc, time::Duration};

use futures::StreamExt;
use presa_http::{HttpConfig, LegacyConfig};
use presa_server::{ServerConfig, context::RESOURCE_UPDATED_EVENT};
use presa_testkit::{HeaderScopes, LegacyClient, embedded, embedded_with, legacy::events};
use serde_json::{Value, json};

fn caps() -> Value {
    json!({ "elicitation": {}, "sampling": {} })
}

fn http(legacy: LegacyConfig) -> HttpConfig {
    HttpConfig::default().with(|c| {
        c.access.authenticator = Arc::new(HeaderScopes);
        c.legacy = legacy;
    })
}

/// The error of a one-message answer.
fn error_of(a: &presa_testkit::legacy::Answer) -> &Value {
    &a.messages[0]["error"]
}

#[tokio::test]
async fn a_session_token_forged_expired_or_of_another_principal_is_refused() {
    let srv = embedded(ServerConfig::default()).await;
    let alice = LegacyClient::connect(&srv.url, caps(), Some("alice")).await;
    let ok = alice.request("tools/list", json!({})).await;
    assert_eq!(ok.status, 200);
    assert!(ok.messages[0]["result"]["tools"].as_array().is_some_and(|t| !t.is_empty()));

    // Forged: one character of the signed token changed → 404, the client initializes again.
    let mut forged = alice.session.clone().into_bytes();
    let last = forged.len() - 1;
    forged[last] = if forged[last] == b'A' { b'B' } else { b'A' };
    let forged = alice.with_session(&String::from_utf8(forged).unwrap());
    let a = forged.request("tools/list", json!({})).await;
    assert_eq!(a.status, 404, "{:?}", a.messages);
    assert!(error_of(&a)["message"].as_str().unwrap().contains("initialize"), "{:?}", a.messages);
    let a = alice.with_session("not-a-token").request("ping", json!({})).await;
    assert_eq!(a.status, 404);

    // A requestState (same key, another purpose) is no session id → 404, whoever sends it.
    let modern = presa_testkit::Client::new(&srv.url, json!({ "elicitation": {} })).with_scope("alice");
    let irr = modern.call_tool("test_input_required_result_request_state", json!({})).await;
    let state = irr["requestState"].as_str().expect("a requestState").to_string();
    assert_eq!(alice.with_session(&state).request("ping", json!({})).await.status, 404);
    assert_eq!(alice.with_session(&state).as_scope("mallory").request("ping", json!({})).await.status, 404);

    // Another principal presenting alice's session → 404, exactly as an
    // unknown id answers (no oracle for other principals' sessions); alice keeps it.
    let foreign = alice.as_scope("mallory").request("tools/list", json!({})).await;
    let unknown = alice.with_session("not-a-token").as_scope("mallory").request("tools/list", json!({})).await;
    assert_eq!(foreign.status, 404, "{:?}", foreign.messages);
    assert_eq!((foreign.status, &foreign.messages), (unknown.status, &unknown.messages), "answered alike");
    assert_eq!(alice.as_scope("mallory").delete().await, 404);
    let mallory = alice.as_scope("mallory");
    assert_eq!(mallory.open_stream().await.status().as_u16(), 404);
    assert_eq!(mallory.with_session("not-a-token").open_stream().await.status().as_u16(), 404);
    assert_eq!(alice.request("ping", json!({})).await.status, 200);

    // Ended by DELETE → 404 for everything after, notifications included.
    assert_eq!(alice.delete().await, 200);
    assert_eq!(alice.request("ping", json!({})).await.status, 404);
    let n = alice.raw(&json!({ "jsonrpc": "2.0", "method": "notifications/initialized" })).await;
    assert_eq!(n.status, 404);

    // Expired: a server whose sessions last 1 s, asked more than 1 s after it issued one.
    let short = LegacyConfig { session_ttl: Duration::from_secs(1), ..LegacyConfig::default() };
    let srv = embedded_with(ServerConfig::default(), http(short), 0).await;
    let c = LegacyClient::initialize(&srv.url, caps(), None).await;
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let a = c.request("tools/list", json!({})).await;
    assert_eq!(a.status, 404, "{:?}", a.messages);
}

#[tokio::test]
async fn elicitation_is_a_request_on_the_stream_answered_by_another_post() {
    let srv = embedded(ServerConfig::default()).await;
    let c = LegacyClient::connect(&srv.url, caps(), None).await;
    let call = json!({ "jsonrpc": "2.0", "id": 9, "method": "tools/call",
        "params": { "name": "test_elicitation", "arguments": { "message": "Who are you?" } } });
    let resp = c.start(&call).await;
    assert_eq!(resp.status().as_u16(), 200);
    let mut stream = events(resp);
    let ask = tokio::time::timeout(Duration::from_secs(10), stream.next()).await.unwrap().unwrap();
    assert_eq!(ask["method"], "elicitation/create", "{ask}");
    assert_eq!(ask["params"]["message"], "Who are you?");
    let answer = json!({ "jsonrpc": "2.0", "id": ask["id"],
        "result": { "action": "accept", "content": { "username": "testuser", "email": "t@example.com" } } });
    assert_eq!(c.raw(&answer).await.status, 202);
    let done = tokio::time::timeout(Duration::from_secs(10), stream.next()).await.unwrap().unwrap();
    assert_eq!(done["id"], 9, "{done}");
    let text = done["result"]["content"][0]["text"].as_str().unwrap();
    assert!(text.contains("action=accept") && text.contains("testuser"), "{text}");
    assert!(done["result"].get("resultType").is_none(), "no 2026-07-28 fields: {done}");

    // A client that declined to answer with an error: the call ends with a clear error.
    let resp = c.start(&call).await;
    let mut stream = events(resp);
    let ask = tokio::time::timeout(Duration::from_secs(10), stream.next()).await.unwrap().unwrap();
    let refusal = json!({ "jsonrpc": "2.0", "id": ask["id"], "error": { "code": -1, "message": "user closed" } });
    assert_eq!(c.raw(&refusal).await.status, 202);
    let done = tokio::time::timeout(Duration::from_secs(10), stream.next()).await.unwrap().unwrap();
    assert!(done["error"]["message"].as_str().unwrap().contains("user closed"), "{done}");
}

#[tokio::test]
async fn logging_follows_the_session_level_and_tasks_name_the_modern_revision() {
    let srv = embedded(ServerConfig::default()).await;
    let c = LegacyClient::connect(&srv.url, caps(), None).await;
    let quiet = c.request("tools/call", json!({ "name": "test_tool_with_logging", "arguments": {} })).await;
    assert_eq!(quiet.messages.len(), 1, "no level set, no logs: {:?}", quiet.messages);
    assert_eq!(c.request("logging/setLevel", json!({ "level": "debug" })).await.status, 200);
    let loud = c.request("tools/call", json!({ "name": "test_tool_with_logging", "arguments": {} })).await;
    let logs: Vec<&Value> = loud.messages.iter().filter(|m| m["method"] == "notifications/message").collect();
    assert_eq!(logs.len(), 3, "{:?}", loud.messages);
    assert_eq!(logs[0]["params"]["data"], "Tool execution started");

    let required = c.request("tools/call", json!({ "name": "failing_job", "arguments": {} })).await;
    assert_eq!(required.status, 200);
    let message = error_of(&required)["message"].as_str().unwrap();
    assert!(message.contains("2026-07-28") && message.contains("failing_job"), "{message}");
    let optional =
        c.request("tools/call", json!({ "name": "slow_compute", "arguments": { "seconds": 0, "label": "x" } })).await;
    assert_eq!(optional.messages[0]["result"]["content"][0]["text"], "Completed x", "{:?}", optional.messages);
    // Declaring the Tasks extension at initialize changes nothing: tasks are 2026-07-28 only.
    let declared = json!({ "elicitation": {}, "extensions": { "io.modelcontextprotocol/tasks": {} } });
    let t = LegacyClient::connect(&srv.url, declared, None).await;
    let required = t.request("tools/call", json!({ "name": "failing_job", "arguments": {} })).await;
    assert!(error_of(&required)["message"].as_str().unwrap().contains("2026-07-28"), "{:?}", required.messages);
    let optional =
        t.request("tools/call", json!({ "name": "slow_compute", "arguments": { "seconds": 0, "label": "y" } })).await;
    assert_eq!(optional.messages[0]["result"]["content"][0]["text"], "Completed y", "{:?}", optional.messages);
    let tasks = c.request("tasks/get", json!({ "taskId": "x" })).await;
    assert_eq!(error_of(&tasks)["code"], -32601);
}

#[tokio::test]
async fn capabilities_too_large_for_a_session_id_are_refused_and_icons_are_not_carried() {
    let srv = embedded(ServerConfig::default()).await;
    let initialize = |capabilities: Value, info: Value| {
        let body = json!({ "jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": capabilities, "clientInfo": info } });
        reqwest::Client::new()
            .post(&srv.url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body(body.to_string())
            .send()
    };
    let icon = format!("data:image/png;base64,{}", "A".repeat(100_000));
    let info = json!({ "name": "big", "version": "1", "icons": [{ "src": icon }] });
    let resp = initialize(json!({}), info).await.unwrap();
    let session = resp.headers().get("mcp-session-id").expect("a session id").to_str().unwrap().to_string();
    assert!(session.len() < 1024, "clientInfo icons stay out of the id: {} bytes", session.len());
    let huge = json!({ "experimental": { "blob": "x".repeat(10_000) } });
    let resp = initialize(huge, json!({ "name": "t", "version": "1" })).await.unwrap();
    assert!(resp.headers().get("mcp-session-id").is_none());
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["error"]["code"], -32602, "{body}");
}

#[tokio::test]
async fn with_legacy_off_initialize_names_the_supported_versions() {
    let off = LegacyConfig { enabled: false, ..LegacyConfig::default() };
    let srv = embedded_with(ServerConfig::default(), http(off), 0).await;
    let resp = reqwest::Client::new()
        .post(&srv.url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(
            json!({ "jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": { "name": "t", "version": "1" } } })
            .to_string(),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 400);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["error"]["code"], -32022, "{body}");
    assert_eq!(body["error"]["data"]["supported"], json!(["2026-07-28"]));
    assert_eq!(body["error"]["data"]["requested"], "2025-11-25");
}

#[tokio::test]
async fn the_standalone_get_stream_carries_list_changes() {
    let srv = embedded(ServerConfig::default()).await;
    let c = LegacyClient::connect(&srv.url, caps(), None).await;
    let no_session = reqwest::Client::new().get(&srv.url).send().await.unwrap();
    assert_eq!(no_session.status().as_u16(), 405, "without a session GET stays 405");
    let resp = c.open_stream().await;
    assert_eq!(resp.status().as_u16(), 200);
    let mut stream = events(resp);
    // The stream is subscribed once its headers are out: a change from now on reaches it.
    let trigger = c.request("tools/call", json!({ "name": "test_trigger_tool_change", "arguments": {} })).await;
    assert_eq!(trigger.messages[0]["result"]["content"][0]["text"], "Mutation triggered", "{:?}", trigger.messages);
    let n = tokio::time::timeout(Duration::from_secs(10), stream.next()).await.unwrap().unwrap();
    assert_eq!(n["method"], "notifications/tools/list_changed", "{n}");

    // Resource updates reach the sessions subscribed to that URI only (as a tool's
    // `ctx.notify_resource_updated` publishes them).
    let bus = srv.server.core().bus().clone();
    let updated = |uri: &str| format!("{RESOURCE_UPDATED_EVENT}{uri}");
    assert_eq!(c.request("resources/subscribe", json!({ "uri": "test://static-text" })).await.status, 200);
    bus.publish(&updated("test://static-binary")).await.unwrap();
    bus.publish(&updated("test://static-text")).await.unwrap();
    let n = tokio::time::timeout(Duration::from_secs(10), stream.next()).await.unwrap().unwrap();
    assert_eq!(n["method"], "notifications/resources/updated", "{n}");
    assert_eq!(n["params"]["uri"], "test://static-text", "only the subscribed URI: {n}");
    assert_eq!(c.request("resources/unsubscribe", json!({ "uri": "test://static-text" })).await.status, 200);
    bus.publish(&updated("test://static-text")).await.unwrap();
    bus.publish("notifications/prompts/list_changed").await.unwrap();
    let n = tokio::time::timeout(Duration::from_secs(10), stream.next()).await.unwrap().unwrap();
    assert_eq!(n["method"], "notifications/prompts/list_changed", "unsubscribed: no update first: {n}");

    // DELETE ends the session, and with it the open stream.
    assert_eq!(c.delete().await, 200);
    let end = tokio::time::timeout(Duration::from_secs(10), stream.next()).await.expect("the stream stays open");
    assert!(end.is_none(), "a message after the session ended: {end:?}");
}

#[tokio::test]
async fn notifications_cancelled_stops_a_running_call() {
    let srv = embedded(ServerConfig::default()).await;
    let c = LegacyClient::connect(&srv.url, caps(), None).await;
    // Optional task policy, so it runs in the request for a legacy client; 60 s unless cancelled.
    let call = json!({ "jsonrpc": "2.0", "id": "long-1", "method": "tools/call",
        "params": { "name": "slow_compute", "arguments": { "seconds": 60, "label": "never" } } });
    let pending = tokio::spawn({
        let c = c.clone();
        async move { c.raw(&call).await }
    });
    let watched = async {
        // Repeated until the call's watch is up (a cancellation before it is not remembered).
        loop {
            let cancel = json!({ "jsonrpc": "2.0", "method": "notifications/cancelled",
                "params": { "requestId": "long-1", "reason": "test" } });
            assert_eq!(c.raw(&cancel).await.status, 202);
            if pending.is_finished() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(30), watched).await.expect("the call stopped");
    let answer = pending.await.unwrap();
    let last = answer.messages.last().expect("a reply");
    assert!(last.get("error").is_some(), "cancelled, not completed: {:?}", answer.messages);
}

#[tokio::test]
async fn standalone_get_streams_share_the_listen_stream_budget() {
    let config = ServerConfig::default().with(|c| {
        c.max_listen_streams_per_scope = 1;
    });
    let srv = embedded(config).await;
    let c = LegacyClient::connect(&srv.url, caps(), Some("alice")).await;
    let first = c.open_stream().await;
    assert_eq!(first.status().as_u16(), 200);
    let second = c.open_stream().await;
    assert_eq!(second.status().as_u16(), 429, "alice's one stream is open");
    assert_eq!(second.headers()["retry-after"], "1");
    let body: Value = second.json().await.unwrap();
    assert_eq!(body["error"]["data"]["limit"], "max_listen_streams_per_scope", "{body}");
    assert_eq!(srv.server.active_listeners(), 1);
    drop(first);
}

/// A legacy `GET` stream closes when the credential that opened it expires
/// (its place freed); the client's reconnect then meets the authenticator.
#[tokio::test]
async fn legacy_get_streams_close_when_their_credential_expires() {
    let srv = embedded(ServerConfig::default()).await;
    let c = LegacyClient::connect(&srv.url, caps(), Some("alice")).await;
    let stream = reqwest::Client::new()
        .get(&srv.url)
        .header("accept", "text/event-stream")
        .header("mcp-session-id", &c.session)
        .header("x-test-scope", "alice")
        .header("x-test-expires-in-ms", "800")
        .send()
        .await
        .unwrap();
    assert_eq!(stream.status().as_u16(), 200);
    assert_eq!(srv.server.active_listeners(), 1);
    let started = std::time::Instant::now();
    let body = tokio::time::timeout(Duration::from_secs(5), stream.bytes()).await;
    assert!(body.is_ok_and(|b| b.is_ok()), "the stream did not end when its credential expired");
    assert!(started.elapsed() >= Duration::from_millis(500), "ended early: {:?}", started.elapsed());
    assert_eq!(srv.server.active_listeners(), 0);
}

/// `resources/subscribe` stores only what the catalog lists (else -32002
/// "Resource not found", as 2025-11-25 says), a URI within its bound, and
/// at most `max_subscriptions_per_session` subscriptions per session.
#[tokio::test]
async fn subscriptions_name_listed_resources_and_are_capped() {
    let legacy =
        LegacyConfig { max_subscriptions_per_session: 2, max_subscription_uri_bytes: 64, ..LegacyConfig::default() };
    let srv = embedded_with(ServerConfig::default(), http(legacy), 0).await;
    let c = LegacyClient::connect(&srv.url, caps(), Some("alice")).await;
    let subscribe = |uri: String| {
        let c = c.clone();
        async move { c.request("resources/subscribe", json!({ "uri": uri })).await }
    };
    let unknown = subscribe("test://nowhere".into()).await;
    assert_eq!(unknown.status, 200);
    assert_eq!(error_of(&unknown)["code"], -32002, "{:?}", unknown.messages);
    assert_eq!(error_of(&unknown)["message"], "Resource not found");
    assert_eq!(error_of(&unknown)["data"]["uri"], "test://nowhere");
    // A URI of 4 MiB (under the body limit) is refused before anything is stored.
    let huge = subscribe(format!("test://template/{}/data", "x".repeat(4 * 1024 * 1024 - 100))).await;
    assert_eq!(error_of(&huge)["code"], -32602, "{:?}", huge.messages);
    assert_eq!(error_of(&huge)["data"]["limit"], "max_subscription_uri_bytes");
    // A listed resource and a template match are fine; a third subscription is not.
    assert!(subscribe("test://static-text".into()).await.messages[0].get("result").is_some());
    assert!(subscribe("test://template/7/data".into()).await.messages[0].get("result").is_some());
    let third = subscribe("test://static-binary".into()).await;
    assert_eq!(error_of(&third)["code"], -32602, "{:?}", third.messages);
    assert_eq!(error_of(&third)["data"]["limit"], "max_legacy_session_fields");
    assert!(error_of(&third)["message"].as_str().unwrap().contains("subscriptions"), "{:?}", third.messages);
    // Subscribing again to what it holds adds nothing; unsubscribing frees a place.
    assert!(subscribe("test://static-text".into()).await.messages[0].get("result").is_some());
    let unsub = c.request("resources/unsubscribe", json!({ "uri": "test://static-text" })).await;
    assert!(unsub.messages[0].get("result").is_some(), "{:?}", unsub.messages);
    assert!(subscribe("test://static-binary".into()).await.messages[0].get("result").is_some());
    // Bad input is a clear error, never a panic.
    for params in [json!({}), json!({ "uri": 7 }), json!({ "uri": null })] {
        let a = c.request("resources/subscribe", params).await;
        assert_eq!(error_of(&a)["code"], -32602, "{:?}", a.messages);
    }
}

/// Sessions holding state (a log level, a subscription) are capped per
/// principal and in all; a session holding none still serves, and another
/// principal is not stopped by one at its cap.
#[tokio::test]
async fn sessions_holding_state_are_capped_per_principal_and_in_all() {
    let legacy = LegacyConfig { max_sessions_per_scope: 2, max_sessions: 3, ..LegacyConfig::default() };
    let srv = embedded_with(ServerConfig::default(), http(legacy), 0).await;
    let set_level = |c: LegacyClient| async move { c.request("logging/setLevel", json!({ "level": "debug" })).await };
    for _ in 0..2 {
        let c = LegacyClient::connect(&srv.url, caps(), Some("alice")).await;
        assert!(set_level(c).await.messages[0].get("result").is_some());
    }
    let third = LegacyClient::connect(&srv.url, caps(), Some("alice")).await;
    let refused = set_level(third.clone()).await;
    assert_eq!(error_of(&refused)["data"]["limit"], "max_legacy_sessions_per_scope", "{:?}", refused.messages);
    assert_eq!(error_of(&refused)["data"]["retryable"], true);
    let listed = third.request("tools/list", json!({})).await;
    assert!(listed.messages[0]["result"]["tools"].is_array(), "a session without state serves: {listed:?}");
    let bob = LegacyClient::connect(&srv.url, caps(), Some("bob")).await;
    assert!(set_level(bob).await.messages[0].get("result").is_some(), "bob is not stopped by alice's cap");
    let carol = LegacyClient::connect(&srv.url, caps(), Some("carol")).await;
    let full = set_level(carol.clone()).await;
    assert_eq!(error_of(&full)["data"]["limit"], "max_legacy_sessions", "{:?}", full.messages);
    // Ending a session that holds state keeps its place (its end mark) until it expires.
    assert_eq!(carol.delete().await, 429, "carol's session holds no state, and the store is full");
}

/// Resident memory of this process, in bytes.
fn rss_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/statm").expect("statm");
    let pages: u64 = status.split_whitespace().nth(1).and_then(|p| p.parse().ok()).expect("resident pages");
    pages * 4096
}

/// A principal that stalls its own listen stream (its socket full of
/// notifications it asked for and does not read) and then posts large
/// answers in its session: the answers go to that session's topic only, so
/// the stalled stream's queue holds nothing of them, what it holds stays
/// within its bound, and the process's memory moves by a bounded amount
/// (before: each answer was published whole to every subscriber, and the
/// stalled one held them all: +152 MiB for these 150 MiB of answers).
#[tokio::test]
async fn large_answers_reach_only_their_session_and_a_stalled_listener_holds_a_bounded_amount() {
    let srv = embedded(ServerConfig::default()).await;
    let modern = presa_testkit::Client::new(&srv.url, json!({})).with_scope("mallory");
    let (status, mut stalled) = modern.listen(json!({ "toolsListChanged": true })).await;
    assert_eq!(status, 200);
    assert_eq!(presa_testkit::next_within(&mut stalled, 5).await["method"], "notifications/subscriptions/acknowledged");
    // Notifications it asked for, never read, until its socket is full and its queue holds some.
    let bus = srv.server.core().bus().clone();
    let mut filled = 0;
    while srv.memory.queued_event_bytes() == 0 {
        assert!(filled < 1_000_000, "the stream never stalled");
        for _ in 0..100 {
            bus.publish("notifications/tools/list_changed").await.unwrap();
        }
        filled += 100;
        tokio::task::yield_now().await;
    }
    let c = LegacyClient::connect(&srv.url, caps(), Some("mallory")).await;
    let blob = "a".repeat(1024 * 1024);
    let answer = |i: usize| json!({ "jsonrpc": "2.0", "id": format!("presa-x-{i}"), "result": { "blob": blob } });
    // Warm up the allocator with a few answers, then measure over 150 more.
    for i in 0..5 {
        assert_eq!(c.raw(&answer(i)).await.status, 202);
    }
    let (before, queued_before) = (rss_bytes(), srv.memory.queued_event_bytes());
    let mut most_queued = 0;
    for i in 0..150 {
        assert_eq!(c.raw(&answer(i)).await.status, 202);
        most_queued = most_queued.max(srv.memory.queued_event_bytes());
    }
    let grown = rss_bytes().saturating_sub(before);
    println!(
        "stalled after {filled} notifications ({queued_before} bytes queued); 150 answers of 1 MiB: \
         RSS {} -> {} MiB (+{} MiB), most bytes queued for subscribers {most_queued}",
        before >> 20,
        (before + grown) >> 20,
        grown >> 20,
    );
    assert!(most_queued <= queued_before, "nothing of the answers reached the stalled stream's queue");
    assert!(most_queued <= presa_store::BUS_QUEUE.max_bytes);
    assert!(grown < 48 << 20, "the process grew by {} MiB for 150 MiB of answers", grown >> 20);
    drop(stalled);
}

/// A `GET` stream whose client stops reading is ended once it falls behind
/// its queue, with a last message saying it lagged; meanwhile it holds at
/// most its queue's bound.
#[tokio::test]
async fn a_stalled_get_stream_holds_a_bounded_queue_and_ends_saying_it_lagged() {
    let srv = embedded(ServerConfig::default()).await;
    let c = LegacyClient::connect(&srv.url, caps(), None).await;
    let resp = c.open_stream().await;
    assert_eq!(resp.status().as_u16(), 200);
    let mut stream = events(resp);
    let bus = srv.server.core().bus().clone();
    let (mut published, mut most_queued) = (0usize, 0usize);
    // Far more than the socket buffers and the queue hold, while nobody reads.
    while published < 200_000 {
        bus.publish("notifications/tools/list_changed").await.unwrap();
        published += 1;
        if published % 200 == 0 {
            most_queued = most_queued.max(srv.memory.queued_event_bytes());
            tokio::task::yield_now().await;
        }
    }
    assert!(most_queued <= presa_store::BUS_QUEUE.max_bytes, "{most_queued} bytes queued");
    let mut delivered = 0;
    let last = loop {
        let next = tokio::time::timeout(Duration::from_secs(10), stream.next()).await.expect("no hang");
        match next {
            Some(m) if m["method"] == "notifications/tools/list_changed" => delivered += 1,
            Some(m) => break m,
            None => panic!("ended without saying why after {delivered}"),
        }
    };
    println!("GET stream: {delivered} of {published} delivered, then {last}");
    assert!(delivered < published);
    assert_eq!(last["method"], "notifications/message", "{last}");
    assert_eq!(last["params"]["data"]["error"], "stream lagged", "{last}");
    assert!(tokio::time::timeout(Duration::from_secs(10), stream.next()).await.expect("the end").is_none());
}
