//! A `[[tool]]` rule's `concurrency = { limit, per_tenant, per_argument }`
//! ([`ConcurrencyRule`]): at most `limit` calls of the tool at once across
//! the cluster (`presa_server::ToolConcurrency`), so the upstream behind it
//! never sees more, one count for the tool, per tenant, or per value of an
//! argument; checked when the configuration is resolved.

use presa_server::ToolConcurrency;
use serde::Deserialize;

use super::{ConfigError, ToolRule};

/// The most permits a rule may give (a limit past it is a typo, not a bound).
const MOST_PERMITS: u32 = 100_000;

/// A `[[tool]]` rule's `concurrency = { limit, per_tenant, per_argument }`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConcurrencyRule {
    /// Calls at once (1 to 100,000).
    pub limit: u32,
    /// One count per tenant instead of one for the tool.
    #[serde(default)]
    pub per_tenant: bool,
    /// One count per value of this argument of the tool's.
    #[serde(default)]
    pub per_argument: Option<String>,
}

impl ToolRule {
    /// Its concurrency limit, if it gives one; checked when the configuration is resolved.
    pub fn tool_concurrency(&self) -> Result<Option<ToolConcurrency>, ConfigError> {
        let Some(rule) = &self.concurrency else { return Ok(None) };
        let refuse =
            |why: &str| ConfigError::Invalid(format!("[[tool]] match = {:?}: concurrency: {why}", self.pattern));
        if rule.limit == 0 || rule.limit > MOST_PERMITS {
            return Err(refuse(&format!("limit must be from 1 to {MOST_PERMITS}, not {}", rule.limit)));
        }
        let mut limit = ToolConcurrency::limit(rule.limit);
        if rule.per_tenant {
            limit = limit.per_tenant();
        }
        if let Some(arg) = &rule.per_argument {
            if arg.trim().is_empty() || arg.contains('\0') {
                return Err(refuse("per_argument must name an argument"));
            }
            limit = limit.per_argument(arg.clone());
        }
        Ok(Some(limit))
    }
}

#[cfg(test)]
mod tests {
    use super::super::{GatewayArgs, file::parse_file};

    #[test]
    fn a_rule_gives_a_concurrency_limit_checked_at_start() {
        let text = |c: &str| format!("[[upstream]]\nname='a'\ncommand='x'\n[[tool]]\nmatch='t*'\nconcurrency = {c}");
        let args = GatewayArgs { upstream_pool: 4, upstream_refresh_ms: 1000, ..GatewayArgs::default() };
        let resolve = |c: &str| args.clone().resolve_with(Some(parse_file(&text(c)).unwrap()));
        let c = resolve("{ limit = 2, per_argument = 'environment' }").unwrap();
        let limit = c.rule("tool").unwrap().tool_concurrency().unwrap().unwrap();
        assert_eq!((limit.limit, limit.per_tenant, limit.per_argument.as_deref()), (2, false, Some("environment")));
        let own = resolve("{ limit = 1, per_tenant = true }").unwrap().rule("t").unwrap().tool_concurrency().unwrap();
        assert_eq!(own.map(|l| (l.limit, l.per_tenant)), Some((1, true)));
        let e = resolve("{ limit = 0 }").unwrap_err().to_string();
        assert!(e.contains("match = \"t*\"") && e.contains("limit must be from 1 to 100000, not 0"), "{e}");
        assert!(
            resolve("{ limit = 1, per_argument = ' ' }").unwrap_err().to_string().contains("must name an argument")
        );
        assert!(parse_file(&text("{ limit = 1, per_tenants = true }")).unwrap_err().contains("unknown field"));
        assert!(parse_file(&text("{ limit = -1 }")).is_err(), "a negative limit does not parse");
    }
}
