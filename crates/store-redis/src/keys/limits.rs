//! The keys of the limits that span the cluster: a tool's rate, its
//! circuit breaker and its concurrency permits, each limit in a slot of its own.

use super::{Keys, hex};

impl Keys {
    /// `{prefix}:{r.<hex name>}:rate` — string: a rate's theoretical arrival
    /// time (Unix µs, `lua/rate.lua`), in a slot of its own; expires when the
    /// rate's bucket is empty.
    pub fn rate(&self, name: &str) -> String {
        format!("{}:{{r.{}}}:rate", self.prefix, hex(name.as_bytes()))
    }

    /// `{prefix}:{b.<hex name>}:breaker` — hash: a circuit breaker's state
    /// (`lua/breaker.lua`: `s` closed 0 / open 1 / half-open 2, `u` until,
    /// `p` the probe's token, `f` the failures in the window), in a slot of
    /// its own; expires once closed with no failure left in its window.
    pub fn breaker(&self, name: &str) -> String {
        format!("{}:{{b.{}}}:breaker", self.prefix, hex(name.as_bytes()))
    }

    /// `{prefix}:{c.<hex limit>}:k.<hex key>:{holders,fences,line,seen}` and
    /// `{prefix}:{c.<hex limit>}:keys` — a concurrency limit's semaphore
    /// (`lua/permit.lua` says what each holds) and the limit's index of
    /// semaphores, all in the limit's slot; they expire a second after the
    /// last lease or waiter in them would lapse. Answers the five keys (in
    /// the scripts' order) and the semaphore's name in the index.
    pub fn permit(&self, limit: &str, key: &str) -> ([String; 5], String) {
        let base = self.permit_base(limit);
        let name = hex(key.as_bytes());
        let at = |what: &str| format!("{base}{name}:{what}");
        ([at("holders"), at("fences"), at("line"), at("seen"), self.permit_index(limit)], name)
    }

    /// What every semaphore key of `limit` starts with: `{prefix}:{c.<hex limit>}:k.`
    pub fn permit_base(&self, limit: &str) -> String {
        format!("{}:{{c.{}}}:k.", self.prefix, hex(limit.as_bytes()))
    }

    /// `{prefix}:{c.<hex limit>}:keys` — zset: the limit's semaphores (hex
    /// key → when their keys expire, Unix ms), for the admin view.
    pub fn permit_index(&self, limit: &str) -> String {
        format!("{}:{{c.{}}}:keys", self.prefix, hex(limit.as_bytes()))
    }
}
