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
        // Read by bytes, from the one place the dot can be: a worker asks
        // this several times a task (every key it names), and splitting at
        // the dot and parsing the digits as text cost about 350
        // instructions a call. `p`, 2 to 5 digits, `.`, 22 characters: the
        // digits are the length less 24.
        let id = self.0.as_bytes();
        let digits = id.len().checked_sub(24).filter(|n| (2..=5).contains(n))?;
        let (head, body) = id.split_at(digits + 2);
        let (p, n, dot) = (head[0], &head[1..=digits], head[digits + 1]);
        // Canonical: two digits, or more without a leading zero (what `{:02}` writes).
        if p != b'p' || dot != b'.' || (digits > 2 && n[0] == b'0') {
            return None;
        }
        let mut partition = 0u32;
        for &d in n {
            if !d.is_ascii_digit() {
                return None;
            }
            partition = partition * 10 + u32::from(d - b'0');
        }
        let partition = u16::try_from(partition).ok()?;
        canonical_random(body).then_some(partition)
    }
}

/// Whether `body` is what [`URL_SAFE_NO_PAD`] writes for 16 bytes: 22
/// characters of the URL-safe alphabet, the last carrying the 16th byte's
/// two low bits and four zero bits (so `A`, `Q`, `g` or `w`). The same
/// answer as decoding it (a test checks it against the decoder), without
/// decoding: this runs several times a task, and decoding was about a
/// thousand instructions a time. The alphabet is looked up in a table,
/// every byte without a branch of its own (the ranges compared byte by
/// byte cost more than the rest of `partition`).
fn canonical_random(body: &[u8]) -> bool {
    body.len() == 22
        && body.iter().fold(true, |all, &b| all & URL_SAFE[usize::from(b)])
        && matches!(body[21], b'A' | b'Q' | b'g' | b'w')
}

/// Whether a byte is of the URL-safe base64 alphabet, by byte.
const URL_SAFE: [bool; 256] = {
    let mut table = [false; 256];
    let mut b = 0;
    while b < table.len() {
        let c = b as u8;
        table[b] = c.is_ascii_alphanumeric() || c == b'-' || c == b'_';
        b += 1;
    }
    table
};

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

    /// The former `partition`, by text: the byte reading must answer the same.
    fn partition_by_text(id: &str) -> Option<u16> {
        let (p, rest) = id.split_once('.')?;
        let n = p.strip_prefix('p')?;
        if rest.len() != 22 || n.len() < 2 || n.len() > 5 || !n.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        if n.len() > 2 && n.starts_with('0') {
            return None;
        }
        let partition: u16 = n.parse().ok()?;
        canonical_random(rest.as_bytes()).then_some(partition)
    }

    #[test]
    fn reading_by_bytes_answers_as_the_text_parse_did() {
        let body = &TaskId::from_random(3, [0x5A; 16]).as_str()[4..].to_owned();
        let heads = [
            "p", "p0", "p00", "p03", "p3", "p003", "p123", "p0123", "p1234", "p65535", "p65536", "p99999", "p100000",
            "P03", "p+3", "p-1", "p0x", "p.3", "q03", "", "p03.", "p\u{e9}3", "p1.2",
        ];
        for head in heads {
            for sep in [".", ":", "..", ""] {
                for tail in [body.as_str(), &body[1..], &format!("{body}A"), &format!("{}.", &body[1..])] {
                    let id = format!("{head}{sep}{tail}");
                    assert_eq!(TaskId::from_wire(id.clone()).partition(), partition_by_text(&id), "{id}");
                }
            }
        }
    }

    /// What the decoder accepts as 16 bytes, unpadded and canonical.
    fn decodes_to_16_bytes(body: &str) -> bool {
        let mut random = [0u8; 18];
        URL_SAFE_NO_PAD.decode_slice(body, &mut random).is_ok_and(|len| len == 16)
    }

    #[test]
    fn every_last_character_is_judged_as_the_decoder_judges_it() {
        let body = &TaskId::from_random(3, [0x5A; 16]).as_str()[4..].to_owned();
        for c in 0..=255u8 {
            let mut b = body.as_bytes()[..21].to_vec();
            b.push(c);
            let Ok(text) = String::from_utf8(b) else { continue };
            assert_eq!(canonical_random(text.as_bytes()), decodes_to_16_bytes(&text), "{text:?}");
        }
    }

    proptest::proptest! {
        /// Random bodies over the alphabet and its neighbours: the check
        /// and the decoder agree on every one.
        #[test]
        fn the_check_agrees_with_the_decoder(body in "[A-Za-z0-9_+/=*.-]{20,24}") {
            proptest::prop_assert_eq!(canonical_random(body.as_bytes()), decodes_to_16_bytes(&body));
        }

        /// Any string: the byte reading and the text parse agree.
        #[test]
        fn any_id_reads_as_the_text_parse_read_it(id in "p?[0-9]{0,6}[.]?[A-Za-z0-9_.-]{19,24}") {
            proptest::prop_assert_eq!(TaskId::from_wire(id.clone()).partition(), partition_by_text(&id));
        }

        /// Every id made from random bytes is accepted.
        #[test]
        fn every_random_id_names_its_partition(random in proptest::prelude::any::<[u8; 16]>(), p in 0u16..1000) {
            proptest::prop_assert_eq!(TaskId::from_random(p, random).partition(), Some(p));
        }
    }
}
