//! Task ids: `p<partition>.<base64url of 16 random bytes>`.
//!
//! The partition is fixed at creation and lets a Redis Cluster keep a task's
//! hash and its partition's work stream in one hash slot. 128 random bits
//! make ids unguessable; knowing one is still never permission (see [`crate::Scope`]).

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;

/// Longest task id accepted on the wire (bytes).
pub const MAX_TASK_ID_LEN: usize = 256;

/// A task id.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
#[serde(transparent)]
pub struct TaskId(String);

impl TaskId {
    /// Build an id for `partition` from 16 bytes of CSPRNG output.
    pub fn from_random(partition: u16, random: [u8; 16]) -> Self {
        TaskId(format!("p{partition:02}.{}", URL_SAFE_NO_PAD.encode(random)))
    }

    /// Wrap an id received from a client (not validated beyond being a string).
    pub fn from_wire(s: impl Into<String>) -> Self {
        TaskId(s.into())
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The partition this id names, if it is a well-formed presa id: exactly
    /// what [`TaskId::from_random`] writes (`p` and at least two decimal
    /// digits without extra leading zeros, a dot, then the canonical unpadded
    /// base64url of 16 bytes). Anything else names no task and never reaches
    /// a store key.
    pub fn partition(&self) -> Option<u16> {
        let (p, rest) = self.0.split_once('.')?;
        let n = p.strip_prefix('p')?;
        if rest.len() != 22 || n.len() < 2 || n.len() > 5 || !n.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        // Canonical: two digits, or more without a leading zero (what `{:02}` writes).
        if n.len() > 2 && n.starts_with('0') {
            return None;
        }
        let partition: u16 = n.parse().ok()?;
        // The decoder refuses other alphabets, padding and non-zero trailing
        // bits. (Into a buffer on the stack: this runs several times a task.)
        let mut random = [0u8; 18];
        let len = URL_SAFE_NO_PAD.decode_slice(rest, &mut random).ok()?;
        (len == 16).then_some(partition)
    }
}

impl std::fmt::Display for TaskId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_name_their_partition() {
        let id = TaskId::from_random(7, [0xAB; 16]);
        assert!(id.as_str().starts_with("p07."));
        assert_eq!(id.as_str().len(), 4 + 22);
        assert_eq!(id.partition(), Some(7));
        assert_eq!(TaskId::from_random(123, [1; 16]).partition(), Some(123));
        assert_eq!(TaskId::from_wire("tasks-conformance-nonexistent-12345").partition(), None);
        assert_eq!(TaskId::from_wire("p1.short").partition(), None);
    }

    #[test]
    fn only_the_exact_alphabet_names_a_partition() {
        let good = TaskId::from_random(3, [0x5A; 16]);
        let body = &good.as_str()[4..];
        assert_eq!(TaskId::from_wire(format!("p03.{body}")).partition(), Some(3));
        let mut bad: Vec<String> = ["p3.", "p003.", "p0123.", "p+3.", "P03.", "p03:", "p65536."]
            .iter()
            .map(|prefix| format!("{prefix}{body}"))
            .collect();
        for c in ['*', '{', '}', ':', ' ', '/', '+', '=', '\u{e9}'] {
            bad.push(format!("p03.{c}{}", &body[1..]));
        }
        // 22 base64url characters whose trailing bits are not zero.
        bad.push(format!("p03.{}B", &body[..21]));
        bad.push("tasks-conformance-nonexistent-12345".into());
        for b in bad {
            assert_eq!(TaskId::from_wire(b.clone()).partition(), None, "{b}");
        }
    }
}
