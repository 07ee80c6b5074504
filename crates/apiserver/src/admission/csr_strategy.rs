//! The parts of upstream's CertificateSigningRequest strategy
//! (`pkg/registry/certificates/certificates/strategy.go`) that need the request's
//! user or the stored object, which the registry's hooks do not see: on create the
//! requester (`spec.username`, `uid`, `groups`, `extra`) is the authenticated user,
//! whatever the client sent (the approving controller trusts it); on a `/status` or
//! `/approval` update every condition gets `lastUpdateTime` and
//! `lastTransitionTime` when missing (`populateConditionTimestamps`; the cleaner
//! ages conditions by them).
//!
//! Not a plugin: upstream's strategy cannot be switched off, so the chain runs this
//! after every mutating plugin, as upstream's strategy runs after mutating admission.

use ferrokube_auth::UserInfo;
use serde_json::{Value, json};

use super::{Attributes, Operation};

const GROUP: &str = "certificates.k8s.io";
const PLURAL: &str = "certificatesigningrequests";

/// Applies the strategy's create and update preparation to a CSR write; `now`
/// gives the RFC 3339 time, only asked for when needed.
pub(crate) fn prepare(
    a: &Attributes,
    object: &mut Value,
    old: Option<&Value>,
    now: impl FnOnce() -> String,
) {
    if !a.is(GROUP, PLURAL) {
        return;
    }
    match (a.operation, a.subresource.as_str()) {
        (Operation::Create, "") => set_requester(object, &a.user),
        (Operation::Update, "status" | "approval") => {
            populate_condition_timestamps(object, old, &now())
        }
        _ => {}
    }
}

/// Upstream `PrepareForCreate`: the requester fields replaced by the user's.
fn set_requester(object: &mut Value, user: &UserInfo) {
    let Some(spec) = object.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    for field in ["username", "uid", "groups", "extra"] {
        spec.remove(field);
    }
    spec.insert("username".into(), json!(user.name));
    if !user.uid.is_empty() {
        spec.insert("uid".into(), json!(user.uid));
    }
    if !user.groups.is_empty() {
        spec.insert("groups".into(), json!(user.groups));
    }
    if !user.extra.is_empty() {
        spec.insert("extra".into(), json!(user.extra));
    }
}

/// Upstream `populateConditionTimestamps`: a missing `lastUpdateTime` is now; a
/// missing `lastTransitionTime` is the old condition's of the same type and status,
/// else now.
fn populate_condition_timestamps(object: &mut Value, old: Option<&Value>, now: &str) {
    let old_conditions = old
        .and_then(|o| o["status"]["conditions"].as_array())
        .cloned()
        .unwrap_or_default();
    let Some(conditions) = object
        .get_mut("status")
        .and_then(|s| s.get_mut("conditions"))
        .and_then(Value::as_array_mut)
    else {
        return;
    };
    let unset = |v: Option<&Value>| v.is_none_or(|t| t.is_null() || t == "");
    for c in conditions.iter_mut().filter_map(Value::as_object_mut) {
        if unset(c.get("lastUpdateTime")) {
            c.insert("lastUpdateTime".into(), json!(now));
        }
        if unset(c.get("lastTransitionTime")) {
            let kept = old_conditions.iter().find(|o| {
                o["type"] == c.get("type").cloned().unwrap_or_default()
                    && o["status"] == c.get("status").cloned().unwrap_or_default()
                    && !unset(o.get("lastTransitionTime"))
            });
            let at = kept.map_or_else(|| json!(now), |o| o["lastTransitionTime"].clone());
            c.insert("lastTransitionTime".into(), at);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn attributes(operation: Operation, subresource: &str, user: UserInfo) -> Attributes {
        let info = ferrokube_api::resources::lookup(GROUP, "v1", PLURAL).unwrap();
        let mut a = Attributes::new(user, operation, info);
        a.subresource = subresource.into();
        a
    }

    #[test]
    fn create_takes_the_requester_from_the_user() {
        let mut user = UserInfo::new("system:bootstrap:abc", ["system:bootstrappers"]);
        user.extra = BTreeMap::from([("scopes".to_string(), vec!["x".to_string()])]);
        let a = attributes(Operation::Create, "", user);
        let mut csr = json!({"spec": {"request": "", "username": "system:node:forged",
            "groups": ["system:masters"], "uid": "forged"}});
        prepare(&a, &mut csr, None, || "2026-01-01T00:00:00Z".into());
        assert_eq!(
            csr["spec"],
            json!({"request": "", "username": "system:bootstrap:abc",
                "groups": ["system:bootstrappers"], "extra": {"scopes": ["x"]}})
        );
    }

    #[test]
    fn status_updates_get_condition_times() {
        let a = attributes(Operation::Update, "approval", UserInfo::new("admin", ["g"]));
        let old = json!({"status": {"conditions": [{"type": "Approved", "status": "True",
            "lastTransitionTime": "2025-01-01T00:00:00Z"}]}});
        let mut new = json!({"status": {"conditions": [
            {"type": "Approved", "status": "True"},
            {"type": "Failed", "status": "True", "lastUpdateTime": "2025-06-01T00:00:00Z"}]}});
        prepare(&a, &mut new, Some(&old), || "2026-01-01T00:00:00Z".into());
        assert_eq!(
            new["status"]["conditions"],
            json!([
                {"type": "Approved", "status": "True", "lastUpdateTime": "2026-01-01T00:00:00Z",
                 "lastTransitionTime": "2025-01-01T00:00:00Z"},
                {"type": "Failed", "status": "True", "lastUpdateTime": "2025-06-01T00:00:00Z",
                 "lastTransitionTime": "2026-01-01T00:00:00Z"}
            ])
        );
        // Other resources and the main resource's updates are left alone.
        let main = attributes(Operation::Update, "", UserInfo::new("admin", ["g"]));
        let mut untouched = json!({"status": {"conditions": [{"type": "Approved"}]}});
        prepare(&main, &mut untouched, None, || "now".into());
        assert_eq!(
            untouched["status"]["conditions"][0],
            json!({"type": "Approved"})
        );
    }
}
