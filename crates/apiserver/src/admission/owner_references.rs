//! OwnerReferencesPermissionEnforcement (upstream `plugin/pkg/admission/gc`),
//! validating, on CREATE and UPDATE of every resource but `pods/status` (whose
//! strategy keeps ownerReferences as they are):
//! - an update that changes `metadata.ownerReferences` needs `delete` on the object
//!   (a create does not: whoever may create an object could as well not have);
//! - every ownerReference that newly has `blockOwnerDeletion: true` needs `update` on
//!   the owner's `finalizers` subresource, for each resource the owner's
//!   apiVersion and kind map to (built-in or served custom resources); a kind that
//!   maps to none is refused.

use std::sync::Arc;

use async_trait::async_trait;
use ferrokube_api::resources::{RESOURCES, ResourceInfo};
use ferrokube_apimachinery::errors::ApiError;
use ferrokube_auth::{Attributes as AuthzAttributes, Decision};
use ferrokube_registry::Registry;
use serde_json::Value;

use super::{Attributes, Operation, Plugin, PluginInit};
use crate::authz_webhook::Authorization;

pub(crate) const NAME: &str = "OwnerReferencesPermissionEnforcement";

pub(crate) struct OwnerReferences {
    authorizer: Arc<Authorization>,
    registry: Arc<Registry>,
}

pub(crate) fn new(init: &PluginInit<'_>) -> Result<Arc<dyn Plugin>, String> {
    Ok(Arc::new(OwnerReferences {
        authorizer: init.authorizer.clone(),
        registry: init.registry.clone(),
    }))
}

/// The object's ownerReferences (none when absent or not a list).
fn owner_refs(obj: &Value) -> &[Value] {
    obj["metadata"]["ownerReferences"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or(&[])
}

fn blocks(r: &Value) -> bool {
    r["blockOwnerDeletion"].as_bool() == Some(true)
}

/// Upstream `isChangingOwnerReference`: on create, whether there are any; on update,
/// whether the list differs (by position).
pub(crate) fn changes_owner_references(new: &Value, old: Option<&Value>) -> bool {
    match old {
        None => !owner_refs(new).is_empty(),
        Some(old) => owner_refs(new) != owner_refs(old),
    }
}

/// Upstream `newBlockingOwnerDeletionRefs`: the blocking references of `new` that
/// are new (by uid) or were not blocking in `old`.
pub(crate) fn new_blocking_refs<'a>(new: &'a Value, old: Option<&Value>) -> Vec<&'a Value> {
    let old_refs = old.map(owner_refs).unwrap_or(&[]);
    owner_refs(new)
        .iter()
        .filter(|r| blocks(r))
        .filter(|r| {
            // The last reference with the uid counts, as upstream's map by uid.
            !old_refs
                .iter()
                .rev()
                .find(|o| o["uid"] == r["uid"])
                .is_some_and(blocks)
        })
        .collect()
}

/// Upstream `schema.ParseGroupVersion`: (group, version).
fn parse_group_version(api_version: &str) -> Result<(&str, &str), String> {
    if api_version.is_empty() || api_version == "/" {
        return Ok(("", ""));
    }
    match api_version.matches('/').count() {
        0 => Ok(("", api_version)),
        1 => Ok(api_version.split_once('/').unwrap_or_default()),
        _ => Err(format!("unexpected GroupVersion string: {api_version}")),
    }
}

/// Upstream `meta.NoKindMatchError` for one searched version.
fn no_kind_match(group: &str, version: &str, kind: &str) -> String {
    let gv = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    format!("no matches for kind {kind:?} in version {gv:?}")
}

/// The authorizer's reason, as upstream's `%v, %v` of reason and (nil) error.
fn reason(d: &Decision) -> String {
    format!("{}, <nil>", d.reason())
}

impl OwnerReferences {
    /// Upstream's REST mappings of an owner's apiVersion and kind: every served
    /// resource of that group and kind in that version (any version when none).
    fn mappings(
        &self,
        api_version: &str,
        kind: &str,
    ) -> Result<Vec<&'static ResourceInfo>, String> {
        let (group, version) = parse_group_version(api_version)?;
        let fits = |r: &ResourceInfo| {
            r.group == group && r.kind == kind && (version.is_empty() || r.version == version)
        };
        let mut found: Vec<&'static ResourceInfo> = RESOURCES.iter().filter(|r| fits(r)).collect();
        if found.is_empty() {
            let served = self.registry.custom().served();
            found = served.all().map(|c| c.info).filter(|r| fits(r)).collect();
        }
        if found.is_empty() {
            return Err(no_kind_match(group, version, kind));
        }
        Ok(found)
    }

    async fn authorize(&self, a: &Attributes, attrs: AuthzAttributes) -> Decision {
        self.authorizer
            .decide(&AuthzAttributes {
                user: a.user.as_ref().clone(),
                resource_request: true,
                ..attrs
            })
            .await
    }
}

#[async_trait]
impl Plugin for OwnerReferences {
    fn name(&self) -> &'static str {
        NAME
    }

    fn handles(&self, a: &Attributes) -> bool {
        matches!(a.operation, Operation::Create | Operation::Update)
            && !(a.is_core("pods") && a.subresource == "status")
    }

    async fn validate(
        &self,
        a: &Attributes,
        object: Option<&Value>,
        old: Option<&Value>,
    ) -> Result<(), ApiError> {
        let Some(new) = object else { return Ok(()) };
        if !changes_owner_references(new, old) {
            return Ok(());
        }
        if a.operation != Operation::Create {
            let d = self
                .authorize(
                    a,
                    AuthzAttributes {
                        verb: "delete".into(),
                        namespace: a.namespace.clone(),
                        api_group: a.resource.group.into(),
                        api_version: a.resource.version.into(),
                        resource: a.resource.plural.into(),
                        subresource: a.subresource.clone(),
                        name: a.name.clone(),
                        ..AuthzAttributes::default()
                    },
                )
                .await;
            if !d.is_allowed() {
                return Err(a.forbidden(format!(
                    "cannot set an ownerRef on a resource you can't delete: {}",
                    reason(&d)
                )));
            }
        }
        for r in new_blocking_refs(new, old) {
            let api_version = r["apiVersion"].as_str().unwrap_or("");
            let kind = r["kind"].as_str().unwrap_or("");
            let mappings = self.mappings(api_version, kind).map_err(|e| {
                a.forbidden(format!(
                    "cannot set blockOwnerDeletion in this case because cannot find RESTMapping for APIVersion {api_version} Kind {kind}: {e}"
                ))
            })?;
            for m in mappings {
                let d = self
                    .authorize(
                        a,
                        AuthzAttributes {
                            verb: "update".into(),
                            namespace: if m.namespaced {
                                a.namespace.clone()
                            } else {
                                String::new()
                            },
                            api_group: m.group.into(),
                            api_version: m.version.into(),
                            resource: m.plural.into(),
                            subresource: "finalizers".into(),
                            name: r["name"].as_str().unwrap_or("").into(),
                            ..AuthzAttributes::default()
                        },
                    )
                    .await;
                if !d.is_allowed() {
                    return Err(a.forbidden(format!(
                        "cannot set blockOwnerDeletion if an ownerReference refers to a resource you can't set finalizers on: {}",
                        reason(&d)
                    )));
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn with_refs(refs: Value) -> Value {
        json!({"metadata": {"name": "x", "ownerReferences": refs}})
    }

    fn owner(uid: &str, block: Option<bool>) -> Value {
        let mut r = json!({"apiVersion": "v1", "kind": "ConfigMap", "name": uid, "uid": uid});
        if let Some(b) = block {
            r["blockOwnerDeletion"] = json!(b);
        }
        r
    }

    #[test]
    fn changing_owner_references() {
        let none = json!({"metadata": {"name": "x"}});
        let one = with_refs(json!([owner("a", None)]));
        assert!(!changes_owner_references(&none, None));
        assert!(!changes_owner_references(&with_refs(json!([])), None));
        assert!(changes_owner_references(&one, None));
        assert!(!changes_owner_references(&one, Some(&one)));
        assert!(changes_owner_references(&one, Some(&none)));
        assert!(changes_owner_references(&none, Some(&one)));
        // An empty list and no list are the same.
        assert!(!changes_owner_references(
            &with_refs(json!([])),
            Some(&none)
        ));
        // Any field of any reference, and the order, count.
        let blocking = with_refs(json!([owner("a", Some(true))]));
        assert!(changes_owner_references(&blocking, Some(&one)));
        let two = with_refs(json!([owner("a", None), owner("b", None)]));
        let swapped = with_refs(json!([owner("b", None), owner("a", None)]));
        assert!(changes_owner_references(&two, Some(&swapped)));
        assert!(changes_owner_references(&two, Some(&one)));
    }

    #[test]
    fn newly_blocking_references() {
        let uids = |v: Vec<&Value>| -> Vec<String> {
            v.iter()
                .map(|r| r["uid"].as_str().unwrap().into())
                .collect()
        };
        let new = with_refs(json!([
            owner("a", Some(true)),
            owner("b", Some(true)),
            owner("c", Some(false)),
            owner("d", None),
            owner("e", Some(true)),
        ]));
        assert_eq!(uids(new_blocking_refs(&new, None)), ["a", "b", "e"]);
        let old = with_refs(json!([
            owner("a", Some(true)),
            owner("b", Some(false)),
            owner("e", None),
        ]));
        assert_eq!(uids(new_blocking_refs(&new, Some(&old))), ["b", "e"]);
        assert!(new_blocking_refs(&old, Some(&new)).is_empty());
        assert!(new_blocking_refs(&json!({"metadata": {}}), None).is_empty());
    }

    #[test]
    fn group_versions_and_errors() {
        assert_eq!(parse_group_version("v1"), Ok(("", "v1")));
        assert_eq!(parse_group_version("apps/v1"), Ok(("apps", "v1")));
        assert_eq!(parse_group_version(""), Ok(("", "")));
        assert_eq!(
            parse_group_version("a/b/c"),
            Err("unexpected GroupVersion string: a/b/c".into())
        );
        assert_eq!(
            no_kind_match("example.com", "v1", "Widget"),
            "no matches for kind \"Widget\" in version \"example.com/v1\""
        );
        assert_eq!(
            no_kind_match("", "v1", "Widget"),
            "no matches for kind \"Widget\" in version \"v1\""
        );
        assert_eq!(reason(&Decision::no_opinion()), ", <nil>");
        assert_eq!(reason(&Decision::Deny("no".into())), "no, <nil>");
    }
}
