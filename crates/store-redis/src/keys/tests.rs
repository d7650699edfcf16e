//! Key spellings, hash tags and the scope and tenant encodings.

use super::*;

#[test]
fn partition_and_scope_tags_are_spelled_as_documented() {
    let keys = Keys::new("presa", 16);
    let scope = Scope { tenant: "a}".into(), subject: "é".into(), endpoint: None };
    assert_eq!(keys.task_prefix(7), "presa:{p07}:task:");
    assert_eq!(keys.claimed(12), "presa:{p12}:claimed");
    assert_eq!(keys.scope_active(&scope), "presa:{s.617d.c3a9}:active");
    assert_eq!(keys.scope_bytes_buckets(&scope), "presa:{s.617d.c3a9}:bytes_q");
}

#[test]
fn tenant_words_read_back() {
    for tenant in ["acme", "a b\n", "", "ünï"] {
        assert_eq!(Keys::tenant_of_word(&Keys::tenant_word(tenant)).as_deref(), Some(tenant));
    }
    for bad in ["a", "zz", "ff"] {
        assert_eq!(Keys::tenant_of_word(bad), None, "{bad}");
    }
}

#[test]
fn held_consumers_are_stable_and_tell_scopes_apart() {
    let scope = |t: &str, s: &str| Scope { tenant: t.into(), subject: s.into(), endpoint: None };
    let a = held_consumer(&scope("t", "alice"));
    assert_eq!(a, held_consumer(&scope("t", "alice")));
    assert_eq!(a.len(), "held:".len() + 16);
    assert_ne!(a, held_consumer(&scope("t", "bob")));
    // The separator keeps ("ab", "c") and ("a", "bc") apart.
    assert_ne!(held_consumer(&scope("ab", "c")), held_consumer(&scope("a", "bc")));
}

#[test]
fn keys_of_a_task_share_its_partition_tag() {
    let keys = Keys::new("presa", 16);
    let id = TaskId::from_random(7, [1; 16]);
    let task = keys.task(&id).unwrap();
    assert_eq!(task, format!("presa:{{p07}}:task:{id}"));
    assert_eq!(keys.events(&id).unwrap(), format!("presa:{{p07}}:events:{id}"));
    assert_eq!(keys.work(7), "presa:{p07}:work");
    assert_eq!(keys.bus(), "presa:bus");
}

/// Every per-partition key, spelt from the prefix computed once per
/// partition, reads as documented; so does one past the partitions (built
/// the slow way: a script given it finds nothing there).
#[test]
fn partition_keys_are_spelled_as_documented_in_and_past_the_partitions() {
    let keys = Keys::new("pre", 12);
    let scope = Scope { tenant: "t".into(), subject: "s".into(), endpoint: None };
    for (p, tag) in [(0, "{p00}"), (11, "{p11}"), (12, "{p12}"), (345, "{p345}")] {
        let key = |what: &str| format!("pre:{tag}:{what}");
        assert_eq!(keys.work(p), key("work"));
        assert_eq!(keys.claimed(p), key("claimed"));
        assert_eq!(keys.recovery(p), key("recovery"));
        assert_eq!(keys.delayed(p), key("delayed"));
        assert_eq!(keys.sync(p), key("sync"));
        assert_eq!(keys.wake(p), key("wake"));
        assert_eq!(keys.task_prefix(p), key("task:"));
        assert_eq!(keys.dead_letter_prefix(p), key("dead:"));
        assert_eq!(keys.task_index_prefix(p), key("ix:"));
        assert_eq!(keys.task_index(p, "t"), key("ix:74"));
        assert_eq!(keys.task_tenants(p), key("ixt"));
        assert_eq!(keys.dead_by_tenant(p, "t"), key("dead_t:74"));
        assert_eq!(keys.dead_by_scope(p, &scope), key("dead_s:74.73"));
    }
    let id = TaskId::from_random(11, [2; 16]);
    assert_eq!(keys.task(&id).unwrap(), format!("pre:{{p11}}:task:{id}"));
    assert_eq!(keys.events(&id).unwrap(), format!("pre:{{p11}}:events:{id}"));
    assert_eq!(keys.dead_letter(&id).unwrap(), format!("pre:{{p11}}:dead:{id}"));
    assert_eq!(keys.all_work().len(), 12);
    assert_eq!(keys.all_work()[3], "pre:{p03}:work");
    assert_eq!(keys.clone(), keys, "clones share the spelt prefixes and compare equal");
    assert_ne!(Keys::new("pre", 11), keys);
    assert_eq!(keys.scope_bytes_buckets(&scope), "pre:{s.74.73}:bytes_q");
}

#[test]
fn ids_outside_the_partitions_name_nothing() {
    let keys = Keys::new("presa", 16);
    assert_eq!(keys.task(&TaskId::from_random(16, [1; 16])), None);
    assert_eq!(keys.task(&TaskId::from_wire("nonexistent")), None);
    assert_eq!(keys.events(&TaskId::from_wire("p01.short")), None);
}

#[test]
fn scope_keys_are_hex_and_distinct() {
    let keys = Keys::new("t", 4);
    let scope = |tenant: &str, subject: &str| Scope { tenant: tenant.into(), subject: subject.into(), endpoint: None };
    // Owners a `tenant/subject` string would confuse ("a/b/c").
    let (a, b) = (scope("a/b", "c"), scope("a", "b/c"));
    assert_ne!(a.key(), b.key());
    assert_ne!(keys.scope_active(&a), keys.scope_active(&b));
    let braces = scope("{x}", "}");
    assert_eq!(keys.scope_active(&braces), "t:{s.7b787d.7d}:active");
    assert_eq!(keys.session(&braces, "ab"), "t:{s.7b787d.7d}:session:6162");
    assert_eq!(keys.scope_sessions(&braces), "t:{s.7b787d.7d}:sessions");
    assert_eq!(Keys::sessions_member(&braces, "ab"), "{s.7b787d.7d}:6162");
}

#[test]
fn dead_letter_keys_share_their_tasks_partition_tag() {
    let keys = Keys::new("presa", 16);
    let id = TaskId::from_random(7, [1; 16]);
    let scope = Scope { tenant: "a.b".into(), subject: "c".into(), endpoint: None };
    assert_eq!(keys.dead_letter(&id).unwrap(), format!("presa:{{p07}}:dead:{id}"));
    assert_eq!(keys.dead_by_tenant(7, "a.b"), "presa:{p07}:dead_t:612e62");
    assert_eq!(keys.dead_by_scope(7, &scope), "presa:{p07}:dead_s:612e62.63");
    assert_eq!(keys.dead_letter(&TaskId::from_random(16, [1; 16])), None);
}
