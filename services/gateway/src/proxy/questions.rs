//! The upstream's questions as presa input requests: each keyed by its
//! position in the call and a digest of what it asks ([`question_key`]), so a
//! re-run asks the same questions under the same keys and gets the recorded
//! answers.

use std::collections::BTreeMap;

use presa_server::ToolError;
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use super::Call;

/// The input key of the `n`th question (from 1) of a call: its position and
/// a digest of what it asks, so a re-run that asks the same thing at the same
/// point finds the recorded answer, and a different question never does.
pub fn question_key(n: usize, method: &str, params: &Value) -> String {
    let kind = match method {
        "elicitation/create" => "elicit",
        "sampling/createMessage" => "sample",
        "roots/list" => "roots",
        _ => "ask",
    };
    let mut h = Sha256::new();
    h.update(method.as_bytes());
    h.update([0]);
    h.update(serde_json::to_vec(params).unwrap_or_default());
    let digest = h.finalize();
    let hex: String = digest[..5].iter().map(|b| format!("{b:02x}")).collect();
    format!("q{n}-{kind}-{hex}")
}

impl Call<'_> {
    /// Ask a 2026-07-28 upstream's input requests (by its keys) and return
    /// the answers by the same keys.
    pub(super) async fn ask_all(&mut self, requests: Map<String, Value>) -> Result<Map<String, Value>, ToolError> {
        let mut ours = BTreeMap::new();
        let mut theirs = Vec::new();
        for (their_key, request) in requests {
            self.asked += 1;
            let method = request["method"].as_str().unwrap_or_default().to_string();
            let key = question_key(self.asked, &method, &request["params"]);
            self.told_roots |= method == "roots/list";
            theirs.push((their_key, key.clone()));
            ours.insert(key, request);
        }
        let mut answers = self.ctx.inputs(ours).await?;
        Ok(theirs.into_iter().filter_map(|(theirs, ours)| Some((theirs, answers.remove(&ours)?))).collect())
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn question_keys_follow_position_and_content() {
        let p = json!({ "message": "Name?", "requestedSchema": { "type": "object" } });
        let a = question_key(1, "elicitation/create", &p);
        assert!(a.starts_with("q1-elicit-"), "{a}");
        assert_eq!(a, question_key(1, "elicitation/create", &p.clone()));
        assert_ne!(a, question_key(2, "elicitation/create", &p));
        assert_ne!(a, question_key(1, "elicitation/create", &json!({ "message": "Age?" })));
        assert!(question_key(3, "roots/list", &json!({})).starts_with("q3-roots-"));
        assert!(question_key(1, "sampling/createMessage", &json!({})).starts_with("q1-sample-"));
    }
}
