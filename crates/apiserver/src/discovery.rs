//! Discovery documents: `/version`, `/api`, `/apis`, `/apis/<g>`, per group-version
//! resource lists, and aggregated discovery (`apidiscovery.k8s.io/v2`).

use ferrokube_api::resources::{self, ResourceInfo};
use ferrokube_registry::custom::Served;
use serde_json::{Value, json};

use crate::ApiEnablement;
use crate::output::parse_accept;

pub const AGGREGATED_V2: &str =
    "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";
pub const AGGREGATED_V2BETA1: &str =
    "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList";

/// `/version` (upstream's `version.Info`), its fields in upstream's order: k8s-openapi's
/// `version::Info` serializes them alphabetically.
#[derive(Debug, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct VersionInfo {
    major: &'static str,
    minor: &'static str,
    emulation_major: &'static str,
    emulation_minor: &'static str,
    min_compatibility_major: &'static str,
    min_compatibility_minor: &'static str,
    git_version: &'static str,
    git_commit: &'static str,
    git_tree_state: &'static str,
    build_date: &'static str,
    go_version: &'static str,
    compiler: &'static str,
    platform: &'static str,
}

pub fn version() -> VersionInfo {
    VersionInfo {
        major: "1",
        minor: "33",
        emulation_major: "1",
        emulation_minor: "33",
        min_compatibility_major: "1",
        min_compatibility_minor: "32",
        git_version: ferrokube_component_base::version::GIT_VERSION,
        git_commit: ferrokube_component_base::version::GIT_COMMIT,
        git_tree_state: "clean",
        build_date: "2025-04-23T00:00:00Z",
        go_version: "go1.24.2",
        compiler: "gc",
        platform: "linux/amd64",
    }
}

/// The `/version` body as upstream writes it: indented JSON.
pub fn version_document() -> Vec<u8> {
    serde_json::to_vec_pretty(&version()).unwrap_or_default()
}

/// Which aggregated discovery version the client asked for before a plain document,
/// if any. `v2beta1` only when `beta_served`: 1.33 removes it by default
/// (`AggregatedDiscoveryRemoveBetaType`), and a range naming it is then passed over.
pub fn wants_aggregated(accept: Option<&str>, beta_served: bool) -> Option<&'static str> {
    for m in parse_accept(accept.unwrap_or("")) {
        if m.param("g") == Some("apidiscovery.k8s.io")
            && m.param("as") == Some("APIGroupDiscoveryList")
        {
            match m.param("v") {
                Some("v2") => return Some("v2"),
                Some("v2beta1") if beta_served => return Some("v2beta1"),
                _ => continue,
            }
        }
        if m.essence == "application/json" || m.essence == "*/*" {
            return None;
        }
    }
    None
}

pub fn api_versions(server_address: &str) -> Value {
    json!({
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}]
    })
}

/// One API group as discovery shows it: its versions, preferred first, each with its
/// resources.
#[derive(Clone)]
pub(crate) struct Group {
    pub name: String,
    pub versions: Vec<(String, Vec<&'static ResourceInfo>)>,
}

/// The groups of remote APIServices, each with its groupPriorityMinimum.
pub(crate) type RemoteGroups = [(i64, Group)];

/// Upstream's groupPriorityMinimum of custom resource groups.
const CUSTOM_GROUP_PRIORITY: i64 = 1000;

/// Every served group in upstream's order: by the group's priority (upstream's for the
/// built-in groups, 1000 for custom resources', the APIService's for remote ones),
/// highest first, then by name. A custom or remote version of a served group joins
/// that group, after its own versions.
fn catalog(enabled: &ApiEnablement, custom: &Served, remote: &RemoteGroups) -> Vec<Group> {
    let mut groups: Vec<(i64, Group)> = Vec::new();
    let mut builtin = resources::groups();
    builtin.retain(|(g, v)| enabled.serves_group_version(g, v));
    // A group's versions by upstream's version priority, preferred (highest) first.
    builtin.sort_by_key(|(g, v)| std::cmp::Reverse(crate::aggregator::builtin_priority(g, v).1));
    for (g, v) in builtin {
        let version = (v.to_string(), builtin_resources(enabled, g, v).collect());
        match groups.iter_mut().find(|(_, e)| e.name == g) {
            Some((_, existing)) => existing.versions.push(version),
            None => groups.push((
                i64::from(crate::aggregator::builtin_priority(g, v).0),
                Group {
                    name: g.to_string(),
                    versions: vec![version],
                },
            )),
        }
    }
    for (g, versions) in custom.group_versions() {
        let versions: Vec<(String, Vec<&'static ResourceInfo>)> = versions
            .iter()
            .map(|v| {
                let infos = custom.resources_of(g, v).into_iter().map(|r| r.info);
                (v.clone(), infos.collect())
            })
            .collect();
        match groups.iter_mut().find(|(_, e)| e.name == *g) {
            Some((_, existing)) => existing.versions.extend(versions),
            None => groups.push((
                CUSTOM_GROUP_PRIORITY,
                Group {
                    name: g.clone(),
                    versions,
                },
            )),
        }
    }
    for (priority, group) in remote {
        match groups.iter_mut().find(|(_, e)| e.name == group.name) {
            Some((_, existing)) => {
                for v in &group.versions {
                    if !existing.versions.iter().any(|(e, _)| *e == v.0) {
                        existing.versions.push(v.clone());
                    }
                }
            }
            None => groups.push((*priority, group.clone())),
        }
    }
    groups.sort_by(|(pa, a), (pb, b)| pb.cmp(pa).then_with(|| a.name.cmp(&b.name)));
    groups.into_iter().map(|(_, g)| g).collect()
}

fn group_json(group: &Group) -> Value {
    let gv = |v: &str| format!("{}/{v}", group.name);
    let versions: Vec<Value> = group
        .versions
        .iter()
        .map(|(v, _)| json!({"groupVersion": gv(v), "version": v}))
        .collect();
    let preferred = group
        .versions
        .first()
        .map(|(v, _)| v.as_str())
        .unwrap_or("");
    json!({
        "name": group.name,
        "versions": versions,
        "preferredVersion": {"groupVersion": gv(preferred), "version": preferred},
    })
}

/// The served built-in resources of a group-version.
fn builtin_resources<'a>(
    enabled: &'a ApiEnablement,
    group: &'a str,
    version: &'a str,
) -> impl Iterator<Item = &'static ResourceInfo> + 'a {
    resources::resources_of(group, version)
        .filter(|r| enabled.serves_resource(r.group, r.version, r.plural))
}

/// The discovery paths of every served group and version (`/api/v1`, `/apis/apps`,
/// `/apis/apps/v1`), with `/apis` and `/apis/`, for the root's path list.
pub(crate) fn api_paths(
    enabled: &ApiEnablement,
    custom: &Served,
    remote: &RemoteGroups,
) -> Vec<String> {
    let mut paths = vec!["/apis".to_string(), "/apis/".to_string()];
    for group in catalog(enabled, custom, remote) {
        let prefix = if group.name.is_empty() {
            "/api".to_string()
        } else {
            format!("/apis/{}", group.name)
        };
        paths.extend(group.versions.iter().map(|(v, _)| format!("{prefix}/{v}")));
        paths.push(prefix);
    }
    paths
}

pub(crate) fn api_group_list(
    enabled: &ApiEnablement,
    custom: &Served,
    remote: &RemoteGroups,
) -> Value {
    let groups: Vec<Value> = catalog(enabled, custom, remote)
        .iter()
        .filter(|g| !g.name.is_empty())
        .map(group_json)
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

pub(crate) fn api_group(
    enabled: &ApiEnablement,
    group: &str,
    custom: &Served,
    remote: &RemoteGroups,
) -> Option<Value> {
    let groups = catalog(enabled, custom, remote);
    let g = groups
        .iter()
        .find(|g| g.name == group && !g.name.is_empty())?;
    let mut out = group_json(g);
    out["kind"] = json!("APIGroup");
    out["apiVersion"] = json!("v1");
    Some(out)
}

/// A group-version's resources; `with_hashes`: each stored one's
/// `storageVersionHash` (the StorageVersionHash gate).
pub(crate) fn resource_list(
    enabled: &ApiEnablement,
    group: &str,
    version: &str,
    custom: &Served,
    with_hashes: bool,
) -> Option<Value> {
    let mut res = Vec::new();
    let infos: Vec<(&'static ResourceInfo, Option<String>)> =
        builtin_resources(enabled, group, version)
            .map(|r| (r, builtin_storage_version_hash(r)))
            .chain(custom.resources_of(group, version).into_iter().map(|r| {
                let stored = r.definition.spec.versions.iter().find(|v| v.storage);
                let hash = stored.map(|v| storage_version_hash(group, &v.name, r.info.kind));
                (r.info, hash)
            }))
            .collect();
    for (r, hash) in infos {
        let mut main = json!({
            "name": r.plural,
            "singularName": r.singular,
            "namespaced": r.namespaced,
            "kind": r.kind,
            "verbs": r.verbs,
        });
        if !r.short_names.is_empty() {
            main["shortNames"] = json!(r.short_names);
        }
        if !r.categories.is_empty() {
            main["categories"] = json!(r.categories);
        }
        if let Some(hash) = hash.filter(|_| with_hashes) {
            main["storageVersionHash"] = json!(hash);
        }
        res.push(main);
        for s in enabled.subresources_of(r) {
            let mut sub = json!({
                "name": format!("{}/{}", r.plural, s.name),
                "singularName": "",
                "namespaced": r.namespaced,
                "kind": s.kind,
                "verbs": s.verbs,
            });
            if let Some(g) = s.group {
                sub["group"] = json!(g);
            }
            if let Some(v) = s.version {
                sub["version"] = json!(v);
            }
            res.push(sub);
        }
    }
    if res.is_empty() {
        return None;
    }
    let gv = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    Some(
        json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": res}),
    )
}

/// Upstream's `discovery.StorageVersionHash`: the first 8 bytes of the SHA-256 of the
/// storage `group/version/kind`, in base64 (the StorageVersionHash gate, on in 1.33).
/// Clients such as the storage version migrator compare it to see a storage change.
fn storage_version_hash(group: &str, version: &str, kind: &str) -> String {
    use base64::Engine as _;
    let digest = ring::digest::digest(
        &ring::digest::SHA256,
        format!("{group}/{version}/{kind}").as_bytes(),
    );
    base64::engine::general_purpose::STANDARD.encode(&digest.as_ref()[..8])
}

/// The storage version hash of a built-in resource: that of the version its objects
/// are stored in, the first resource of its storage prefix (core Events for
/// events.k8s.io, autoscaling/v2 for v1); none for a resource with no storage.
fn builtin_storage_version_hash(r: &ResourceInfo) -> Option<String> {
    if r.storage_prefix.is_empty() {
        return None;
    }
    let stored = resources::RESOURCES
        .iter()
        .find(|s| s.storage_prefix == r.storage_prefix)?;
    Some(storage_version_hash(
        stored.group,
        stored.version,
        stored.kind,
    ))
}

fn discovery_resource(enabled: &ApiEnablement, r: &ResourceInfo) -> Value {
    let mut v = json!({
        "resource": r.plural,
        "responseKind": {"group": r.group, "version": r.version, "kind": r.kind},
        "scope": if r.namespaced { "Namespaced" } else { "Cluster" },
        "singularResource": r.singular,
        "verbs": r.verbs,
    });
    if !r.short_names.is_empty() {
        v["shortNames"] = json!(r.short_names);
    }
    if !r.categories.is_empty() {
        v["categories"] = json!(r.categories);
    }
    let subresources: Vec<Value> = enabled
        .subresources_of(r)
        .map(|s| {
            json!({
                    "subresource": s.name,
                    "responseKind": {
                        "group": s.group.unwrap_or(r.group),
                        "version": s.version.unwrap_or(r.version),
                        "kind": s.kind,
                    },
                "verbs": s.verbs,
            })
        })
        .collect();
    if !subresources.is_empty() {
        v["subresources"] = json!(subresources);
    }
    v
}

/// Aggregated discovery: the core group for `/api` (`legacy`), the named groups
/// for `/apis`.
pub(crate) fn aggregated(
    enabled: &ApiEnablement,
    legacy: bool,
    version: &str,
    custom: &Served,
    remote: &RemoteGroups,
) -> Value {
    let items: Vec<Value> = catalog(enabled, custom, remote)
        .into_iter()
        .filter(|g| g.name.is_empty() == legacy)
        .map(|g| {
            let versions: Vec<Value> = g
                .versions
                .iter()
                .map(|(v, infos)| {
                    let res: Vec<Value> = infos
                        .iter()
                        .map(|r| discovery_resource(enabled, r))
                        .collect();
                    json!({"version": v, "resources": res, "freshness": "Current"})
                })
                .collect();
            let mut meta = json!({"creationTimestamp": null});
            if !g.name.is_empty() {
                meta["name"] = json!(g.name);
            }
            json!({"metadata": meta, "versions": versions})
        })
        .collect();
    json!({
        "kind": "APIGroupDiscoveryList",
        "apiVersion": format!("apidiscovery.k8s.io/{version}"),
        "metadata": {},
        "items": items,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all() -> ApiEnablement {
        ApiEnablement::default()
    }

    fn none() -> Served {
        Served::default()
    }

    #[test]
    fn groups_are_in_upstream_priority_order() {
        let list = api_group_list(&all(), &none(), &[]);
        let names: Vec<&str> = list["groups"]
            .as_array()
            .unwrap()
            .iter()
            .map(|g| g["name"].as_str().unwrap())
            .collect();
        // What a v1.33 kube-apiserver lists, less the groups this server does not have.
        let upstream = [
            "apiregistration.k8s.io",
            "apps",
            "events.k8s.io",
            "authentication.k8s.io",
            "authorization.k8s.io",
            "autoscaling",
            "batch",
            "certificates.k8s.io",
            "networking.k8s.io",
            "policy",
            "rbac.authorization.k8s.io",
            "storage.k8s.io",
            "admissionregistration.k8s.io",
            "apiextensions.k8s.io",
            "scheduling.k8s.io",
            "coordination.k8s.io",
            "node.k8s.io",
            "discovery.k8s.io",
            "flowcontrol.apiserver.k8s.io",
            "resource.k8s.io",
        ];
        let expected: Vec<&str> = upstream
            .iter()
            .copied()
            .filter(|g| names.contains(g))
            .collect();
        assert_eq!(names, expected);
        // A remote group with a high priority sorts among the built-in ones.
        let remote = [(
            17650,
            Group {
                name: "metrics.k8s.io".into(),
                versions: vec![("v1beta1".into(), vec![])],
            },
        )];
        let list = api_group_list(&all(), &none(), &remote);
        let names: Vec<&str> = list["groups"]
            .as_array()
            .unwrap()
            .iter()
            .map(|g| g["name"].as_str().unwrap())
            .collect();
        let at = names.iter().position(|g| *g == "metrics.k8s.io").unwrap();
        assert_eq!(names[at - 1], "authentication.k8s.io");
    }

    /// The hashes a v1.33 kube-apiserver lists (read from a cluster's discovery): a
    /// resource stored in another version's form has that version's.
    #[test]
    fn storage_version_hashes_are_upstreams() {
        let hash = |group: &str, version: &str, plural: &str| {
            let list = resource_list(&all(), group, version, &none(), true).unwrap();
            let entry = list["resources"]
                .as_array()
                .unwrap()
                .iter()
                .find(|r| r["name"] == plural)
                .unwrap()
                .clone();
            entry.get("storageVersionHash").cloned()
        };
        assert_eq!(hash("", "v1", "pods"), Some(json!("xPOwRZ+Yhw8=")));
        assert_eq!(
            hash("apps", "v1", "deployments"),
            Some(json!("8aSe+NMegvE="))
        );
        assert_eq!(hash("", "v1", "events"), Some(json!("r2yiGXH7wu8=")));
        assert_eq!(
            hash("events.k8s.io", "v1", "events"),
            Some(json!("r2yiGXH7wu8="))
        );
        assert_eq!(
            hash("autoscaling", "v1", "horizontalpodautoscalers"),
            hash("autoscaling", "v2", "horizontalpodautoscalers")
        );
        // Nothing stored, no hash; nor for a subresource.
        assert_eq!(hash("", "v1", "componentstatuses"), None);
        assert_eq!(hash("", "v1", "pods/status"), None);
        // With the StorageVersionHash gate off, none at all.
        let core = resource_list(&all(), "", "v1", &none(), false).unwrap();
        assert!(
            core["resources"]
                .as_array()
                .unwrap()
                .iter()
                .all(|r| r.get("storageVersionHash").is_none())
        );
    }

    #[test]
    fn aggregated_accept() {
        let kubectl = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json";
        assert_eq!(wants_aggregated(Some(kubectl), false), Some("v2"));
        assert_eq!(wants_aggregated(Some("application/json"), true), None);
        assert_eq!(wants_aggregated(None, true), None);
        // v2beta1 is no longer served (1.33's default): the plain document; with
        // AggregatedDiscoveryRemoveBetaType off, it is.
        let old = "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json";
        assert_eq!(wants_aggregated(Some(old), false), None);
        assert_eq!(wants_aggregated(Some(old), true), Some("v2beta1"));
    }

    /// The entry of `list`'s `resources` named `name`.
    fn listed<'a>(list: &'a Value, name: &str) -> &'a Value {
        list["resources"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["name"] == name)
            .unwrap_or_else(|| panic!("{name} not listed"))
    }

    #[test]
    fn lists() {
        let core = resource_list(&all(), "", "v1", &none(), true).unwrap();
        assert_eq!(core["groupVersion"], "v1");
        assert!(
            core["resources"]
                .as_array()
                .unwrap()
                .iter()
                .any(|r| r["name"] == "pods/status")
        );
        let apps = resource_list(&all(), "apps", "v1", &none(), true).unwrap();
        assert_eq!(listed(&apps, "deployments/scale")["group"], "autoscaling");
        assert!(resource_list(&all(), "nope", "v1", &none(), true).is_none());
        let agg = aggregated(&all(), false, "v2", &none(), &[]);
        assert!(
            agg["items"]
                .as_array()
                .unwrap()
                .iter()
                .any(|g| g["metadata"]["name"] == "apps")
        );
        assert_eq!(
            aggregated(&all(), true, "v2", &none(), &[])["items"]
                .as_array()
                .unwrap()
                .len(),
            1
        );
    }

    /// The reviews are listed like any other resource, so kubectl maps
    /// `kind: SubjectAccessReview` in a file.
    #[test]
    fn unstored_resources_are_discovered() {
        let authz = resource_list(&all(), "authorization.k8s.io", "v1", &none(), true).unwrap();
        let sar = listed(&authz, "subjectaccessreviews");
        assert_eq!(sar["kind"], "SubjectAccessReview");
        assert_eq!(sar["verbs"], json!(["create"]));
        assert_eq!(
            listed(&authz, "localsubjectaccessreviews")["namespaced"],
            true
        );
        let agg = aggregated(&all(), false, "v2", &none(), &[]);
        let crds = agg["items"]
            .as_array()
            .unwrap()
            .iter()
            .find(|g| g["metadata"]["name"] == "apiextensions.k8s.io")
            .unwrap();
        let crd = &crds["versions"][0]["resources"][0];
        assert_eq!(crd["resource"], "customresourcedefinitions");
        assert_eq!(
            crd["verbs"],
            json!([
                "create",
                "delete",
                "deletecollection",
                "get",
                "list",
                "patch",
                "update",
                "watch"
            ])
        );
        assert_eq!(crd["shortNames"], json!(["crd", "crds"]));
        assert!(
            api_group_list(&all(), &none(), &[])["groups"]
                .as_array()
                .unwrap()
                .iter()
                .any(|g| g["name"] == "authentication.k8s.io")
        );
    }
}
