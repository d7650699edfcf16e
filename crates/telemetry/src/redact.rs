//! Secrets kept out of logs and printed configuration.

/// `url` with the password of its userinfo replaced by `***`
/// (`scheme://user:secret@host` → `scheme://user:***@host`; a lone user
/// part, often a token, becomes `***`). Only the authority is looked at: an
/// `@` in the path or query is left alone. Comma-separated lists (Redis
/// Cluster seeds) are redacted item by item; text without `://` is unchanged.
pub fn redact_url(url: &str) -> String {
    if url.contains(',') {
        return url.split(',').map(redact_one).collect::<Vec<_>>().join(",");
    }
    redact_one(url)
}

fn redact_one(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else { return url.to_string() };
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    let Some((userinfo, host)) = authority.rsplit_once('@') else { return url.to_string() };
    match userinfo.split_once(':') {
        Some((user, _)) => format!("{scheme}://{user}:***@{host}{tail}"),
        None => format!("{scheme}://***@{host}{tail}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_lose_only_their_secrets() {
        assert_eq!(redact_url("redis://127.0.0.1:6379"), "redis://127.0.0.1:6379");
        assert_eq!(redact_url("rediss://default:s3cr3t@cache:6380/1"), "rediss://default:***@cache:6380/1");
        assert_eq!(redact_url("redis://:onlypass@cache"), "redis://:***@cache");
        assert_eq!(redact_url("redis://token@cache"), "redis://***@cache");
        assert_eq!(redact_url("https://u:p%40ss@idp.example/jwks?a=b@c"), "https://u:***@idp.example/jwks?a=b@c");
        assert_eq!(redact_url("https://idp.example/users/@me/jwks"), "https://idp.example/users/@me/jwks");
        assert_eq!(redact_url("redis://:a@n1:6379,redis://:b@n2:6379"), "redis://:***@n1:6379,redis://:***@n2:6379");
        assert_eq!(redact_url("localhost"), "localhost");
    }
}
