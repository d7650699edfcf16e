//! presa's catalog from the upstreams' own: every upstream tool an
//! `[[upstream]]` serves (name with its prefix, description, `inputSchema`,
//! `outputSchema`, annotations, each as its shaping makes it: [`shape`]) as a
//! presa tool run by a [`ProxyTool`], with its task policy, crash policy and
//! retry policy (and what else is transient for it), rate and concurrency from the first matching
//! `[[tool]]` rule, else the upstream's
//! `execution.taskSupport: "required"`, else `--task-after-ms`'s adaptive
//! policy, else `optional`; every upstream prompt as a
//! proxied prompt; resources, resource templates and completion proxied too.
//! Each `[[server]]` gets a catalog of its own, built the same way from its
//! upstreams only, without the tools its globs leave out ([`build_all`]).
//!
//! A prompt, a resource read, a completion and a listing each take a pooled
//! connection to themselves ([`Pool::request`], or a lease for a listing),
//! exactly as a tool call does, so whatever the upstream sends back while it
//! answers belongs to that request, never to another caller's call. Reads and
//! completions are async in presa's catalog: they wait without holding a
//! thread, within the request's bounds (the in-request call pool,
//! `call_timeout`, the client's presence).

pub mod shape;

use std::{collections::HashMap, sync::Arc, time::Duration};

use presa_server::{
    Catalog, CatalogBuilder, TaskPolicy, Tool, ToolContext, ToolError, catalog::ResourceError, prompt::PromptOutput,
};
use rmcp::model::{ClientRequest, ReadResourceRequestParams, ServerResult};
use serde_json::{Value, json};

use self::shape::{Shaped, shape_tools};
use crate::{
    config::{GatewayConfig, PolicyRule, Rerun, ToolRule, UpstreamConfig, VirtualServer},
    convert::{Offers, complete_params, completion_info, descriptors, prompt_output, prompt_params, read_contents},
    pool::Pool,
    proxy::{ProxyTool, RetryOn, upstream_error},
    upstream::UpstreamError,
};

/// Why the gateway cannot serve its upstreams.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CatalogError {
    /// An upstream could not be started or initialised.
    #[error("upstream {name:?}: {source}")]
    Upstream {
        /// The upstream.
        name: String,
        /// Why.
        source: UpstreamError,
    },
    /// Listing an upstream's catalog failed.
    #[error("upstream {name:?}: listing its {what}: {message}")]
    List {
        /// The upstream.
        name: String,
        /// tools, prompts, resources…
        what: &'static str,
        /// Why.
        message: String,
    },
    /// Two upstreams list the same name (give one a `prefix`), or a schema is invalid.
    #[error("{0}")]
    Invalid(String),
}

/// What one upstream lists.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Listing {
    /// Tool descriptors.
    pub tools: Vec<Value>,
    /// Prompt descriptors.
    pub prompts: Vec<Value>,
    /// Resource descriptors.
    pub resources: Vec<Value>,
    /// Resource template descriptors.
    pub templates: Vec<Value>,
    /// Whether it completes arguments.
    pub completions: bool,
}

/// List what `pool`'s upstream offers (starting its first connection), on
/// a connection leased for the listing alone (waiting at most
/// `--upstream-wait-ms` for one) and within `timeout` (the gateway gives it
/// `--upstream-connect-timeout-ms`: listing is part of bringing an upstream
/// up); a listing that fails midway closes its connection, whose answers may still come.
pub async fn list(pool: &Arc<Pool>, timeout: Duration) -> Result<Listing, CatalogError> {
    let name = pool.name().to_string();
    let lease = pool.get_within().await.map_err(|source| CatalogError::Upstream { name: name.clone(), source })?;
    let peer = lease.conn().peer().clone();
    let info = peer.peer_info();
    let offers = Offers::of(info.as_deref().map(|i| &i.capabilities));
    let err = |what: &'static str| {
        let name = name.clone();
        move |e: rmcp::service::ServiceError| CatalogError::List { name, what, message: e.to_string() }
    };
    let listing = async {
        let mut listing = Listing::default();
        if offers.tools {
            listing.tools = descriptors(peer.list_all_tools().await.map_err(err("tools"))?);
        }
        if offers.prompts {
            listing.prompts = descriptors(peer.list_all_prompts().await.map_err(err("prompts"))?);
        }
        if offers.resources {
            listing.resources = descriptors(peer.list_all_resources().await.map_err(err("resources"))?);
            listing.templates =
                descriptors(peer.list_all_resource_templates().await.map_err(err("resource templates"))?);
        }
        listing.completions = offers.completions;
        Ok(listing)
    };
    let listing = tokio::time::timeout(timeout, listing).await.unwrap_or_else(|_| {
        Err(CatalogError::List {
            name: name.clone(),
            what: "catalog",
            message: format!("no answer within {timeout:?}"),
        })
    });
    if listing.is_err() {
        let conn = lease.discard();
        tokio::spawn(conn.close());
    }
    listing
}

/// The task policy of a listed tool: its rule's, else the upstream's
/// `execution.taskSupport: "required"` hint, else the adaptive policy with
/// `--task-after-ms` when given, else optional.
pub fn policy_of(rule: Option<&ToolRule>, default_after: Option<Duration>, descriptor: &Value) -> TaskPolicy {
    let after = |ms: Option<u64>| {
        TaskPolicy::After(ms.map(Duration::from_millis).or(default_after).unwrap_or(Duration::from_secs(1)))
    };
    match rule.and_then(|r| r.policy) {
        Some(PolicyRule::Sync) => TaskPolicy::Sync,
        Some(PolicyRule::Optional) => TaskPolicy::Optional,
        Some(PolicyRule::Required) => TaskPolicy::Required,
        Some(PolicyRule::After) => after(rule.and_then(|r| r.after_ms)),
        // `forbidden` says the upstream cannot run the tool as a task of its
        // own, which is why the gateway runs it as presa's: only `required`
        // (the upstream wants it never run in a request) is taken over.
        None => match descriptor["execution"]["taskSupport"].as_str() {
            Some("required") => TaskPolicy::Required,
            _ if default_after.is_some() => after(None),
            _ => TaskPolicy::Optional,
        },
    }
}

fn support(policy: &TaskPolicy) -> &'static str {
    match policy {
        TaskPolicy::Sync => "forbidden",
        TaskPolicy::Required => "required",
        _ => "optional",
    }
}

/// The catalogs a gateway serves: the whole one (which workers run, and
/// `/mcp` serves) and one per `[[server]]`, in the config's order.
#[derive(Debug)]
pub struct Catalogs {
    /// The whole catalog.
    pub all: Catalog,
    /// Each virtual server's (`config.servers[i]`'s).
    pub servers: Vec<Catalog>,
}

/// Build presa's catalog and every virtual server's from each upstream's listing
/// ([`build`], [`build_server`]).
pub fn build_all(config: &GatewayConfig, pools: &[Arc<Pool>], listings: &[Listing]) -> Result<Catalogs, CatalogError> {
    let all = build(config, pools, listings)?;
    let servers = config.servers.iter().map(|s| build_server(config, s, pools, listings)).collect::<Result<_, _>>()?;
    Ok(Catalogs { all, servers })
}

/// Build presa's catalog from each upstream's listing (`listings[i]` is
/// `config.upstreams[i]`'s, served by `pools[i]`).
pub fn build(config: &GatewayConfig, pools: &[Arc<Pool>], listings: &[Listing]) -> Result<Catalog, CatalogError> {
    build_some(config, None, pools, listings)
}

/// Build the catalog of virtual server `server`: what its upstreams offer,
/// built as [`build`] builds it (same names, rules and handlers), without
/// the tools its `tools` and `hide` globs leave out.
pub fn build_server(
    config: &GatewayConfig,
    server: &VirtualServer,
    pools: &[Arc<Pool>],
    listings: &[Listing],
) -> Result<Catalog, CatalogError> {
    build_some(config, Some(server), pools, listings)
}

/// The whole catalog (`server` `None`), or what `server` selects of it.
fn build_some(
    config: &GatewayConfig,
    server: Option<&VirtualServer>,
    pools: &[Arc<Pool>],
    listings: &[Listing],
) -> Result<Catalog, CatalogError> {
    let mut builder = Catalog::builder();
    let mut seen: HashMap<String, String> = HashMap::new();
    let mut claim = |kind: &str, name: &str, upstream: &str| -> Result<(), CatalogError> {
        match seen.insert(format!("{kind} {name}"), upstream.to_string()) {
            Some(other) => Err(CatalogError::Invalid(format!(
                "upstreams {other:?} and {upstream:?} both list the {kind} {name:?}: give one of them a prefix \
                 (or rename the tool)"
            ))),
            None => Ok(()),
        }
    };
    let mut completers = Vec::new();
    for ((up, pool), listing) in config.upstreams.iter().zip(pools).zip(listings) {
        if server.is_some_and(|s| !s.serves_upstream(&up.name)) {
            continue;
        }
        for shaped in shape_tools(up, &listing.tools)? {
            claim("tool", &shaped.name, &up.name)?;
            if server.is_some_and(|s| !s.serves_tool(&shaped.name)) {
                continue;
            }
            builder = builder.tool(tool(config, up, pool, shaped));
        }
        for descriptor in &listing.prompts {
            let upstream_name = descriptor["name"].as_str().unwrap_or_default().to_string();
            let name = format!("{}{upstream_name}", up.prefix);
            claim("prompt", &name, &up.name)?;
            let mut d = descriptor.clone();
            d["name"] = json!(name);
            builder = builder.prompt(d, ProxyPrompt { pool: pool.clone(), upstream_name });
        }
        for descriptor in &listing.resources {
            claim("resource", descriptor["uri"].as_str().unwrap_or_default(), &up.name)?;
            builder = builder.resource_async(descriptor.clone(), reader(pool.clone()));
        }
        for descriptor in &listing.templates {
            builder = builder.template_async(descriptor.clone(), reader(pool.clone()));
        }
        if listing.completions {
            completers.push((up.prefix.clone(), pool.clone()));
        }
    }
    if !completers.is_empty() {
        builder = completion(builder, completers);
    }
    builder.build().map_err(|e| CatalogError::Invalid(e.to_string()))
}

/// A served tool as presa's: its `[[tool]]` rule is the one matching the
/// name it is listed by, and its policies read its shaped annotations.
fn tool(config: &GatewayConfig, up: &UpstreamConfig, pool: &Arc<Pool>, shaped: Shaped) -> Tool {
    let Shaped { upstream_name, name, descriptor, call, header_params } = shaped;
    let rule = config.rule(&name);
    let policy = policy_of(rule, config.task_after, &descriptor);
    let rerun = rule.and_then(|r| r.rerun).unwrap_or(Rerun::Auto);
    let rerun_allowed = ProxyTool::may_rerun(rerun, &descriptor["annotations"]);
    let retry_on = rule
        .map(|r| RetryOn { codes: r.retry_on_codes.clone(), tool_error: r.retry_on_tool_error })
        .unwrap_or_default();
    let handler = ProxyTool {
        pool: pool.clone(),
        upstream_name,
        rerun_allowed,
        retry_on,
        timings: config.timings.clone(),
        forward_identity: config.forward_identity,
        shape: call,
        header_params,
    };
    let mut d = descriptor;
    d["execution"] = json!({ "taskSupport": support(&policy) });
    Tool {
        descriptor: d,
        policy,
        handler: Arc::new(handler),
        scopes: rule.map(|r| r.scopes.clone()).unwrap_or_default(),
        // Checked when the configuration was resolved.
        retry: rule.and_then(|r| r.retry_policy().ok().flatten()),
        rate: rule.and_then(|r| r.tool_rate().ok().flatten()),
        // One for the upstream, shared by all its tools.
        breaker: up.breaker.clone(),
        concurrency: rule.and_then(|r| r.tool_concurrency().ok().flatten()),
    }
}

/// An upstream failure as the catalog's error: the caller sees what
/// [`upstream_error`] lets through (capped messages, retryable when it may help).
fn resource_error(pool: &Pool, e: UpstreamError) -> ResourceError {
    match upstream_error(pool, e) {
        ToolError::Rpc(e) => ResourceError::Rpc(e),
        other => ResourceError::Failed(other.to_string()),
    }
}

/// The reader of `pool`'s resources and templates: one `resources/read` on a
/// connection of its own.
fn reader(
    pool: Arc<Pool>,
) -> impl Fn(String, HashMap<String, String>) -> futures::future::BoxFuture<'static, Result<Value, ResourceError>>
+ Send
+ Sync
+ 'static {
    move |uri, _vars| {
        let pool = pool.clone();
        Box::pin(async move {
            let params = ReadResourceRequestParams::new(uri);
            let request = ClientRequest::ReadResourceRequest(rmcp::model::ReadResourceRequest::new(params));
            match pool.request(request).await {
                Ok(ServerResult::ReadResourceResult(r)) => Ok(read_contents(&r)),
                Ok(_) => {
                    Err(ResourceError::Failed(format!("upstream {:?} answered resources/read oddly", pool.name())))
                }
                Err(UpstreamError::Service(rmcp::service::ServiceError::McpError(e)))
                    if e.code.0 == -32002 || e.code.0 == -32602 =>
                {
                    Err(ResourceError::NotFound)
                }
                Err(e) => Err(resource_error(&pool, e)),
            }
        })
    }
}

fn completion(builder: CatalogBuilder, completers: Vec<(String, Arc<Pool>)>) -> CatalogBuilder {
    let completers = Arc::new(completers);
    builder.completion_async(move |reference, argument| {
        let completers = completers.clone();
        async move {
            // A prompt reference names a prefixed prompt: complete it at the upstream that has it.
            let name = reference["name"].as_str().unwrap_or_default();
            let found = completers
                .iter()
                .find(|(prefix, _)| reference["type"] != "ref/prompt" || name.starts_with(prefix.as_str()));
            let Some((prefix, pool)) = found else { return Err(ResourceError::NotFound) };
            let mut reference = reference.clone();
            if reference["type"] == "ref/prompt" {
                reference["name"] = json!(&name[prefix.len()..]);
            }
            let params =
                complete_params(reference, argument).map_err(|e| ResourceError::Failed(format!("bad params: {e}")))?;
            let request = ClientRequest::CompleteRequest(rmcp::model::CompleteRequest::new(params));
            match pool.request(request).await {
                Ok(ServerResult::CompleteResult(r)) => Ok(completion_info(&r)),
                Ok(_) => Err(ResourceError::NotFound),
                Err(e) => Err(resource_error(pool, e)),
            }
        }
    })
}

/// A proxied prompt.
#[derive(Debug)]
struct ProxyPrompt {
    pool: Arc<Pool>,
    upstream_name: String,
}

#[async_trait::async_trait]
impl presa_server::prompt::PromptHandler for ProxyPrompt {
    /// `prompts/get` on a connection of its own: a question the upstream
    /// asks meanwhile gets the fixed answer (a declined elicitation), never
    /// another caller's; given up when the request is cancelled.
    async fn get(&self, ctx: ToolContext, arguments: Value) -> Result<PromptOutput, ToolError> {
        let params = prompt_params(&self.upstream_name, arguments);
        let request = ClientRequest::GetPromptRequest(rmcp::model::GetPromptRequest::new(params));
        // Given up when the client goes: the request's lease then stops the upstream.
        let cancel = ctx.cancellation();
        let answer = tokio::select! {
            answer = self.pool.request(request) => answer,
            () = cancel.cancelled() => return Err(ToolError::Cancelled),
        };
        let result = match answer {
            Ok(ServerResult::GetPromptResult(r)) => r,
            Ok(_) => {
                return Err(ToolError::internal(format!("upstream {:?} answered prompts/get oddly", self.pool.name())));
            }
            Err(e) => return Err(upstream_error(&self.pool, e)),
        };
        Ok(prompt_output(&result))
    }
}

#[cfg(test)]
mod tests;
