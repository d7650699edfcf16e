//! Level-1 URI templates (RFC 6570: `{var}` placeholders) for resource templates.

use std::collections::HashMap;

/// Match a level-1 URI template (`test://template/{id}/data`) against `uri`.
/// Variables match one or more characters other than `/`.
pub fn match_template(template: &str, uri: &str) -> Option<HashMap<String, String>> {
    let mut vars = HashMap::new();
    let mut rest = uri;
    let mut tpl = template;
    while !tpl.is_empty() {
        if let Some(after) = tpl.strip_prefix('{') {
            let end = after.find('}')?;
            let name = &after[..end];
            tpl = &after[end + 1..];
            let literal_end = tpl.find('{').unwrap_or(tpl.len());
            let next_literal = &tpl[..literal_end];
            let value_len = if next_literal.is_empty() { rest.len() } else { rest.find(next_literal)? };
            let value = &rest[..value_len];
            if value.is_empty() || value.contains('/') {
                return None;
            }
            vars.insert(name.to_string(), value.to_string());
            rest = &rest[value_len..];
        } else {
            let literal_end = tpl.find('{').unwrap_or(tpl.len());
            rest = rest.strip_prefix(&tpl[..literal_end])?;
            tpl = &tpl[literal_end..];
        }
    }
    rest.is_empty().then_some(vars)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates_match_level_one() {
        let v = match_template("test://template/{id}/data", "test://template/123/data").unwrap();
        assert_eq!(v["id"], "123");
        assert!(match_template("test://template/{id}/data", "test://template//data").is_none());
        assert!(match_template("test://template/{id}/data", "test://template/1/2/data").is_none());
        assert!(match_template("test://template/{id}/data", "test://other/1/data").is_none());
        assert_eq!(match_template("a://{x}", "a://yz").unwrap()["x"], "yz");
    }
}
