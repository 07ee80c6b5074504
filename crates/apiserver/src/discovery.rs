//! Discovery documents: `/version`, `/api`, `/apis`, `/apis/<g>`, per group-version
//! resource lists, and aggregated discovery (`apidiscovery.k8s.io/v2`).

use ferrokube_api::resources::{self, ResourceInfo};
use serde_json::{Value, json};

use crate::output::parse_accept;

pub const AGGREGATED_V2: &str =
    "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";
pub const AGGREGATED_V2BETA1: &str =
    "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList";

pub fn version() -> Value {
    json!({
        "major": "1",
        "minor": "33",
        "emulationMajor": "1",
        "emulationMinor": "33",
        "minCompatibilityMajor": "1",
        "minCompatibilityMinor": "32",
        "gitVersion": "v1.33.0",
        "gitCommit": "ferrokube",
        "gitTreeState": "clean",
        "buildDate": "2025-04-23T00:00:00Z",
        "goVersion": "go1.24.2",
        "compiler": "gc",
        "platform": "linux/amd64"
    })
}

/// Which aggregated discovery version the client asked for, if any, in its order.
pub fn wants_aggregated(accept: Option<&str>) -> Option<&'static str> {
    for m in parse_accept(accept.unwrap_or("")) {
        if m.param("g") == Some("apidiscovery.k8s.io")
            && m.param("as") == Some("APIGroupDiscoveryList")
        {
            match m.param("v") {
                Some("v2") => return Some("v2"),
                Some("v2beta1") => return Some("v2beta1"),
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

fn group_json(group: &str, version: &str) -> Value {
    let gv = format!("{group}/{version}");
    json!({
        "name": group,
        "versions": [{"groupVersion": gv, "version": version}],
        "preferredVersion": {"groupVersion": gv, "version": version},
    })
}

pub fn api_group_list() -> Value {
    let groups: Vec<Value> = resources::groups()
        .into_iter()
        .filter(|(g, _)| !g.is_empty())
        .map(|(g, v)| group_json(g, v))
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

pub fn api_group(group: &str) -> Option<Value> {
    let (g, v) = resources::groups()
        .into_iter()
        .find(|(g, _)| *g == group && !g.is_empty())?;
    let mut out = group_json(g, v);
    out["kind"] = json!("APIGroup");
    out["apiVersion"] = json!("v1");
    Some(out)
}

pub fn resource_list(group: &str, version: &str) -> Option<Value> {
    let mut res = Vec::new();
    for r in resources::resources_of(group, version) {
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
        res.push(main);
        for s in r.subresources {
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

fn discovery_resource(r: &ResourceInfo) -> Value {
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
    if !r.subresources.is_empty() {
        v["subresources"] = json!(
            r.subresources
                .iter()
                .map(|s| json!({
                    "subresource": s.name,
                    "responseKind": {
                        "group": s.group.unwrap_or(r.group),
                        "version": s.version.unwrap_or(r.version),
                        "kind": s.kind,
                    },
                    "verbs": s.verbs,
                }))
                .collect::<Vec<_>>()
        );
    }
    v
}

/// Aggregated discovery: the core group for `/api` (`legacy`), the named groups
/// for `/apis`.
pub fn aggregated(legacy: bool, version: &str) -> Value {
    let items: Vec<Value> = resources::groups()
        .into_iter()
        .filter(|(g, _)| g.is_empty() == legacy)
        .map(|(g, v)| {
            let res: Vec<Value> = resources::resources_of(g, v)
                .map(discovery_resource)
                .collect();
            let mut meta = json!({"creationTimestamp": null});
            if !g.is_empty() {
                meta["name"] = json!(g);
            }
            json!({
                "metadata": meta,
                "versions": [{"version": v, "resources": res, "freshness": "Current"}],
            })
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

    #[test]
    fn aggregated_accept() {
        let kubectl = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json";
        assert_eq!(wants_aggregated(Some(kubectl)), Some("v2"));
        assert_eq!(wants_aggregated(Some("application/json")), None);
        assert_eq!(wants_aggregated(None), None);
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
        let core = resource_list("", "v1").unwrap();
        assert_eq!(core["groupVersion"], "v1");
        assert!(
            core["resources"]
                .as_array()
                .unwrap()
                .iter()
                .any(|r| r["name"] == "pods/status")
        );
        let apps = resource_list("apps", "v1").unwrap();
        assert_eq!(listed(&apps, "deployments/scale")["group"], "autoscaling");
        assert!(resource_list("nope", "v1").is_none());
        let agg = aggregated(false, "v2");
        assert!(
            agg["items"]
                .as_array()
                .unwrap()
                .iter()
                .any(|g| g["metadata"]["name"] == "apps")
        );
        assert_eq!(aggregated(true, "v2")["items"].as_array().unwrap().len(), 1);
    }

    /// The reviews and the (empty) CustomResourceDefinitions are listed like any other
    /// resource, so kubectl maps `kind: SubjectAccessReview` in a file.
    #[test]
    fn unstored_resources_are_discovered() {
        let authz = resource_list("authorization.k8s.io", "v1").unwrap();
        let sar = listed(&authz, "subjectaccessreviews");
        assert_eq!(sar["kind"], "SubjectAccessReview");
        assert_eq!(sar["verbs"], json!(["create"]));
        assert_eq!(
            listed(&authz, "localsubjectaccessreviews")["namespaced"],
            true
        );
        let agg = aggregated(false, "v2");
        let crds = agg["items"]
            .as_array()
            .unwrap()
            .iter()
            .find(|g| g["metadata"]["name"] == "apiextensions.k8s.io")
            .unwrap();
        let crd = &crds["versions"][0]["resources"][0];
        assert_eq!(crd["resource"], "customresourcedefinitions");
        assert_eq!(crd["verbs"], json!(["get", "list", "watch"]));
        assert_eq!(crd["shortNames"], json!(["crd", "crds"]));
        assert!(
            api_group_list()["groups"]
                .as_array()
                .unwrap()
                .iter()
                .any(|g| g["name"] == "authentication.k8s.io")
        );
    }
}
