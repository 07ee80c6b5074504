//! [`Ruleset`]s -> `nft -f` transactions. No IO.
//!
//! * [`dump`]: the whole ruleset as `add` commands; applied to a table that does not
//!   exist it creates exactly the ruleset (and it is what the table tests compare).
//! * [`full_sync`]: brings whatever table exists (its objects listed by the caller) to
//!   the ruleset in one transaction: every existing chain flushed, base maps recreated,
//!   stale chains and affinity sets deleted, then the dump. Affinity sets that stay
//!   keep their entries.
//! * [`incremental`]: from the applied ruleset to the desired one, touching only the
//!   Services that differ: their chains flushed and refilled, chains and sets that
//!   went away deleted, map elements deleted and added one by one.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write;

use crate::rules::{Element, NODEPORT_IPS_SET, Ruleset, ServiceRules, TABLE};

/// What a table holds now (from `nft -j list table`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ExistingObjects {
    pub table: bool,
    pub chains: BTreeSet<String>,
    /// Sets (not maps), with their timeout in seconds when they have one.
    pub sets: BTreeMap<String, Option<u64>>,
    pub maps: BTreeSet<String>,
}

fn prefix(rs: &Ruleset) -> String {
    format!("{} {TABLE}", rs.family.nft())
}

fn element_line(p: &str, verb: &str, e: &Element, with_value: bool) -> String {
    let mut s = format!("{verb} element {p} {} {{ {}", e.map, e.key);
    if with_value {
        if let Some(c) = &e.comment {
            let _ = write!(s, " comment \"{c}\"");
        }
        if !e.value.is_empty() {
            let _ = write!(s, " : {}", e.value);
        }
    }
    s.push_str(" }\n");
    s
}

fn affinity_set_line(p: &str, name: &str, timeout: u32) -> String {
    format!(
        "add set {p} {name} {{ type {} ; flags dynamic,timeout ; timeout {timeout}s ; }}\n",
        if p.starts_with("ip6 ") {
            "ipv6_addr"
        } else {
            "ipv4_addr"
        }
    )
}

fn write_base(out: &mut String, rs: &Ruleset) {
    let p = prefix(rs);
    for c in &rs.base.commands {
        // `table {...}` is "add table ip kube-proxy {...}"; others name the table first.
        if let Some(rest) = c.strip_prefix("table ") {
            let _ = writeln!(out, "add table {p} {rest}");
        } else {
            let (kind, rest) = c.split_once(' ').unwrap_or((c.as_str(), ""));
            let _ = writeln!(out, "add {kind} {p} {rest}");
        }
    }
    for ip in &rs.base.nodeport_ips {
        let _ = writeln!(out, "add element {p} {NODEPORT_IPS_SET} {{ {ip} }}");
    }
}

/// Declarations first (sets, chains), then rules, then the elements pointing at them.
fn write_service_adds(out: &mut String, p: &str, svc: &ServiceRules) {
    for (name, timeout) in &svc.affinity_sets {
        out.push_str(&affinity_set_line(p, name, *timeout));
    }
    for name in svc.chains.keys() {
        let _ = writeln!(out, "add chain {p} {name}");
    }
    write_service_rules(out, p, svc);
}

fn write_service_rules(out: &mut String, p: &str, svc: &ServiceRules) {
    for (name, rules) in &svc.chains {
        for r in rules {
            let _ = writeln!(out, "add rule {p} {name} {r}");
        }
    }
}

fn write_service_elements(out: &mut String, p: &str, svc: &ServiceRules) {
    for e in &svc.elements {
        out.push_str(&element_line(p, "add", e, true));
    }
}

/// The whole ruleset as `add` commands.
pub fn dump(rs: &Ruleset) -> String {
    let mut out = String::new();
    write_base(&mut out, rs);
    let p = prefix(rs);
    for svc in rs.services.values() {
        write_service_adds(&mut out, &p, svc);
        write_service_elements(&mut out, &p, svc);
    }
    out
}

/// One transaction that turns the existing table into `rs`.
pub fn full_sync(rs: &Ruleset, existing: &ExistingObjects) -> String {
    let p = prefix(rs);
    let mut out = String::new();
    if existing.table {
        let desired_chains: BTreeSet<&str> = rs
            .base
            .chains
            .iter()
            .map(String::as_str)
            .chain(
                rs.services
                    .values()
                    .flat_map(|s| s.chains.keys().map(String::as_str)),
            )
            .collect();
        let desired_sets: BTreeMap<&str, u32> = rs
            .services
            .values()
            .flat_map(|s| s.affinity_sets.iter().map(|(n, t)| (n.as_str(), *t)))
            .collect();
        // Nothing may reference a chain or set we delete: flush every chain first.
        for c in &existing.chains {
            let _ = writeln!(out, "flush chain {p} {c}");
        }
        // Base maps and sets are recreated (their definitions may have changed).
        for m in &existing.maps {
            let _ = writeln!(out, "delete map {p} {m}");
        }
        for (s, timeout) in &existing.sets {
            let keep = desired_sets
                .get(s.as_str())
                .is_some_and(|t| Some(u64::from(*t)) == *timeout);
            if !keep {
                let _ = writeln!(out, "delete set {p} {s}");
            }
        }
        for c in &existing.chains {
            if !desired_chains.contains(c.as_str()) {
                let _ = writeln!(out, "delete chain {p} {c}");
            }
        }
    }
    out.push_str(&dump(rs));
    out
}

/// Whether the two rulesets differ in more than Services and `nodeport-ips` (then only
/// a full sync applies the change).
pub fn base_changed(applied: &Ruleset, desired: &Ruleset) -> bool {
    applied.family != desired.family || applied.base.commands != desired.base.commands
}

/// The transaction that takes the table from `applied` to `desired`, looking only at
/// the Services named in `keys` (the ones that may have changed) and at the
/// `nodeport-ips` elements. Empty when nothing changed. The base must be unchanged
/// (see [`base_changed`]).
pub fn incremental<'a>(
    applied: &Ruleset,
    desired: &Ruleset,
    keys: impl IntoIterator<Item = &'a String>,
) -> String {
    let p = prefix(desired);
    let empty = ServiceRules::default();
    // Phases, each across all changed Services, so that e.g. a map key moving from one
    // Service to another is deleted before it is added.
    let mut flush = String::new();
    let mut del_elements = String::new();
    let mut del_objects = String::new();
    let mut add_decls = String::new();
    let mut add_rules = String::new();
    let mut add_elements = String::new();

    for ip in applied
        .base
        .nodeport_ips
        .difference(&desired.base.nodeport_ips)
    {
        let _ = writeln!(
            del_elements,
            "delete element {p} {NODEPORT_IPS_SET} {{ {ip} }}"
        );
    }
    for ip in desired
        .base
        .nodeport_ips
        .difference(&applied.base.nodeport_ips)
    {
        let _ = writeln!(
            add_elements,
            "add element {p} {NODEPORT_IPS_SET} {{ {ip} }}"
        );
    }

    for key in keys {
        let old = applied.services.get(key).unwrap_or(&empty);
        let new = desired.services.get(key).unwrap_or(&empty);
        if old == new {
            continue;
        }
        for c in old.chains.keys() {
            let _ = writeln!(flush, "flush chain {p} {c}");
        }
        // Elements are identified by (map, key); a changed value is delete + add.
        let old_keys: BTreeMap<(&str, &str), &Element> = old
            .elements
            .iter()
            .map(|e| ((e.map, e.key.as_str()), e))
            .collect();
        let new_keys: BTreeMap<(&str, &str), &Element> = new
            .elements
            .iter()
            .map(|e| ((e.map, e.key.as_str()), e))
            .collect();
        for (k, e) in &old_keys {
            if new_keys.get(k) != Some(e) {
                del_elements.push_str(&element_line(&p, "delete", e, false));
            }
        }
        for (k, e) in &new_keys {
            if old_keys.get(k) != Some(e) {
                add_elements.push_str(&element_line(&p, "add", e, true));
            }
        }
        for c in old.chains.keys() {
            if !new.chains.contains_key(c) {
                let _ = writeln!(del_objects, "delete chain {p} {c}");
            }
        }
        for (s, t) in &old.affinity_sets {
            if new.affinity_sets.get(s) != Some(t) {
                let _ = writeln!(del_objects, "delete set {p} {s}");
            }
        }
        for (s, t) in &new.affinity_sets {
            if old.affinity_sets.get(s) != Some(t) {
                add_decls.push_str(&affinity_set_line(&p, s, *t));
            }
        }
        for c in new.chains.keys() {
            if !old.chains.contains_key(c) {
                let _ = writeln!(add_decls, "add chain {p} {c}");
            }
        }
        write_service_rules(&mut add_rules, &p, new);
    }
    let mut out = String::new();
    for part in [
        flush,
        del_elements,
        del_objects,
        add_decls,
        add_rules,
        add_elements,
    ] {
        out.push_str(&part);
    }
    out
}
