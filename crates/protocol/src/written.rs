//! Results written straight as JSON text ([`Written`], made with an
//! [`ObjectWriter`]), for the replies presa answers most: a task's
//! `CreateTaskResult` and its `tasks/get` result. Building them as a
//! `serde_json::Map` of owned strings, then serialising (and dropping) it,
//! cost more than the rest of their dispatch; written here, they are the
//! same bytes a `Map` of the same members serialises to.
//!
//! Byte for byte means: compact, members in the order a `Map` keeps them
//! (sorted by name; the writer takes them in that order), strings escaped
//! as `serde_json` escapes them. A JSON value copied in as text
//! ([`ObjectWriter::raw`]) must itself be `serde_json`'s compact output,
//! as every document presa stores is.

use std::{fmt, io::Write as _};

use serde_json::Value;

/// A JSON object written as compact text, the same bytes
/// `serde_json::to_vec` gives for the `Map` of its members.
#[derive(Clone, PartialEq, Eq)]
pub struct Written(Vec<u8>);

impl Written {
    /// The object's JSON text.
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    /// The object as a value (for the rare paths that edit a result:
    /// streams, the legacy era, virtual endpoints).
    pub fn to_value(&self) -> serde_json::Result<Value> {
        serde_json::from_slice(&self.0)
    }

    /// The object of `value`'s serialisation (`serde_json`'s compact text).
    pub fn of(value: &serde_json::Map<String, Value>) -> Written {
        // A map with string keys always serialises.
        Written(serde_json::to_vec(value).unwrap_or_else(|_| b"{}".to_vec()))
    }

    /// This object with member `name` first, its value the JSON text
    /// `value`. Only for a `name` that sorts before every member the object
    /// has (`_meta` before lower-case names), so the order stays a `Map`'s.
    pub fn with_first(mut self, name: &str, value: &[u8]) -> Written {
        debug_assert!(self.0.first() == Some(&b'{'), "an object");
        let empty = self.0.len() <= 2;
        let mut member = Vec::with_capacity(name.len() + value.len() + 4);
        write_str(&mut member, name);
        member.push(b':');
        member.extend_from_slice(value);
        if !empty {
            member.push(b',');
        }
        self.0.splice(1..1, member);
        self
    }
}

impl fmt::Debug for Written {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Written").field(&String::from_utf8_lossy(&self.0)).finish()
    }
}

/// Writes one JSON object member by member, in the order given: give them
/// sorted by name, as a `Map` keeps them.
#[derive(Debug)]
pub struct ObjectWriter {
    out: Vec<u8>,
    members: usize,
}

impl ObjectWriter {
    /// An empty object with room for about `capacity` bytes.
    pub fn with_capacity(capacity: usize) -> Self {
        let mut out = Vec::with_capacity(capacity);
        out.push(b'{');
        ObjectWriter { out, members: 0 }
    }

    fn name(&mut self, name: &str) {
        if self.members > 0 {
            self.out.push(b',');
        }
        self.members += 1;
        write_str(&mut self.out, name);
        self.out.push(b':');
    }

    /// A string member.
    pub fn str(&mut self, name: &str, value: &str) -> &mut Self {
        self.name(name);
        write_str(&mut self.out, value);
        self
    }

    /// A string member that needs no escaping (ASCII letters, digits and
    /// punctuation other than `"` and `\`), copied as it is.
    pub fn plain_str(&mut self, name: &str, value: &[u8]) -> &mut Self {
        debug_assert!(value.iter().all(|b| (0x20..0x7f).contains(b) && *b != b'"' && *b != b'\\'));
        self.name(name);
        self.out.push(b'"');
        self.out.extend_from_slice(value);
        self.out.push(b'"');
        self
    }

    /// A number member.
    pub fn u64(&mut self, name: &str, value: u64) -> &mut Self {
        self.name(name);
        // Writing to a `Vec` cannot fail.
        let _ = write!(self.out, "{value}");
        self
    }

    /// A `null` member.
    pub fn null(&mut self, name: &str) -> &mut Self {
        self.name(name);
        self.out.extend_from_slice(b"null");
        self
    }

    /// A member whose value is the JSON text `json`, copied as it is (it
    /// must be `serde_json`'s compact output for the result to be too).
    pub fn raw(&mut self, name: &str, json: &[u8]) -> &mut Self {
        self.name(name);
        self.out.extend_from_slice(json);
        self
    }

    /// A member whose value is `value`, serialised.
    pub fn value(&mut self, name: &str, value: &Value) -> &mut Self {
        self.name(name);
        // A value with string keys always serialises.
        if serde_json::to_writer(&mut self.out, value).is_err() {
            self.out.extend_from_slice(b"null");
        }
        self
    }

    /// The object.
    pub fn finish(mut self) -> Written {
        self.out.push(b'}');
        Written(self.out)
    }
}

/// `s` as a JSON string, escaped as `serde_json` escapes it.
fn write_str(out: &mut Vec<u8>, s: &str) {
    // Serialising a `str` into a `Vec` cannot fail.
    let _ = serde_json::to_writer(out, s);
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_written_object_is_what_its_map_serialises_to() {
        let mut w = ObjectWriter::with_capacity(16);
        w.str("a", "quote \" back \\ nl \n é \u{1}")
            .null("b")
            .plain_str("c", b"2026-12-07T00:00:00.000Z")
            .raw("d", br#"{"x":[1,2.5,"y"]}"#)
            .u64("e", u64::MAX)
            .value("f", &json!({"z": 1, "a": [true, null]}));
        let written = w.finish();
        let value = json!({
            "a": "quote \" back \\ nl \n é \u{1}", "b": null, "c": "2026-12-07T00:00:00.000Z",
            "d": {"x": [1, 2.5, "y"]}, "e": u64::MAX, "f": {"z": 1, "a": [true, null]},
        });
        assert_eq!(written.as_bytes(), serde_json::to_vec(&value).unwrap());
        assert_eq!(written.to_value().unwrap(), value);
        assert_eq!(ObjectWriter::with_capacity(0).finish().as_bytes(), b"{}");
    }

    #[test]
    fn a_first_member_goes_first() {
        let meta = br#"{"k":"v"}"#;
        let mut w = ObjectWriter::with_capacity(16);
        w.str("status", "working");
        let with = w.finish().with_first("_meta", meta);
        let expected = json!({"_meta": {"k": "v"}, "status": "working"});
        assert_eq!(with.as_bytes(), serde_json::to_vec(&expected).unwrap());
        let empty = ObjectWriter::with_capacity(0).finish().with_first("_meta", meta);
        assert_eq!(empty.as_bytes(), serde_json::to_vec(&json!({"_meta": {"k": "v"}})).unwrap());
        let map = json!({"b": 1, "a": "x"});
        assert_eq!(Written::of(map.as_object().unwrap()).as_bytes(), serde_json::to_vec(&map).unwrap());
    }
}
