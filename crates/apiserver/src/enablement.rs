//! `--runtime-config`: which built-in group-versions and resources are served, as
//! upstream's `resourceconfig` decides it. `api/all`, `api/ga`, `api/beta` and
//! `api/alpha` switch every version of their class (applied in that order), then
//! `<group>/<version>` keys switch one group-version, then `<group>/<version>/<resource>`
//! keys one resource, each more specific setting winning over the broader ones.
//!
//! A disabled resource is answered 404 and left out of discovery (legacy and
//! aggregated), of the local APIServices and of OpenAPI; its storage and the server's own use of
//! it stay (the built-in controllers of this process reach the registry directly).
//! Custom resources are not affected, as upstream's flag only covers built-in APIs.
//!
//! Ferrokube serves one version of each built-in group, all of them GA: a key naming
//! a version it does not serve is an error when it asks to turn the version on (the
//! operator asked for an API that will not be there) and a warning when it turns it
//! off (nothing to do).

use std::collections::{BTreeSet, HashMap, HashSet};

use ferrokube_api::resources;

const API_ALL: &str = "api/all";
const API_GA: &str = "api/ga";
const API_BETA: &str = "api/beta";
const API_ALPHA: &str = "api/alpha";
/// Deprecated upstream, still accepted there: the core group.
const API_LEGACY: &str = "api/legacy";

/// The served built-in APIs; the default serves all of them.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ApiEnablement {
    /// Every version's setting from the class keys (`None`: untouched, served).
    all_versions: Option<bool>,
    /// `<group>/<version>` settings.
    versions: HashMap<(String, String), bool>,
    /// `<group>/<version>/<resource>` settings.
    resources: HashMap<(String, String, String), bool>,
    /// The built-in resources the settings turn off, worked out once at parse: every
    /// request asks, and the default (an empty set) answers without a lookup.
    disabled: HashSet<(&'static str, &'static str, &'static str)>,
    /// Built-in subresources (`group`, resource, subresource) the server cannot serve
    /// as configured: upstream registers `serviceaccounts/token` only when it has a
    /// token issuer, so without one it is neither served nor listed.
    unserved_subresources: Vec<(&'static str, &'static str, &'static str)>,
}

/// What a key names.
#[derive(Clone, Copy)]
enum Key<'a> {
    /// `api/all`, `api/ga`, `api/beta`, `api/alpha`.
    Class(&'a str),
    Version(&'a str, &'a str),
    Resource(&'a str, &'a str, &'a str),
}

impl ApiEnablement {
    /// Parses `--runtime-config` (comma-separated `key=value`, a key alone meaning
    /// true for group-versions); returns the enablement and the warnings to log.
    pub fn parse(value: &str) -> Result<(ApiEnablement, Vec<String>), String> {
        let mut settings: Vec<(&str, &str)> = Vec::new();
        for item in value.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let (key, setting) = item
                .split_once('=')
                .map_or((item, ""), |(k, v)| (k.trim(), v.trim()));
            // Later settings of a key replace earlier ones, as in upstream's map.
            settings.retain(|(k, _)| *k != key);
            settings.push((key, setting));
        }
        if let [(API_ALL, "false")] = settings[..] {
            // Upstream: a server with nothing at all to serve has no meaning.
            return Err("invalid key with only api/all=false".into());
        }

        let served = resources::groups();
        let mut enablement = ApiEnablement::default();
        let mut warnings = Vec::new();
        let mut unknown_groups = BTreeSet::new();
        // Classes first (in upstream's order), then versions, then resources.
        let mut keyed: Vec<(Key<'_>, &str, &str)> = Vec::new();
        for &(key, setting) in &settings {
            keyed.push((parse_key(key)?, key, setting));
        }
        keyed.sort_by_key(|(k, _, _)| match k {
            Key::Class(API_ALL) => 0,
            Key::Class(API_GA) => 1,
            Key::Class(API_BETA) => 2,
            Key::Class(_) => 3,
            Key::Version(..) => 4,
            Key::Resource(..) => 5,
        });
        for (parsed, key, setting) in keyed {
            match parsed {
                Key::Class(class) => {
                    let on = match setting {
                        "true" => true,
                        "false" => false,
                        other => return Err(format!("invalid value {key}={other}")),
                    };
                    // Every served version is GA (v1, v2): api/all and api/ga switch
                    // them all, api/beta and api/alpha match none.
                    if class == API_ALL || class == API_GA {
                        enablement.all_versions = Some(on);
                    } else if on {
                        warnings.push(format!(
                            "--runtime-config {key}=true: Ferrokube serves no {} API versions",
                            class.trim_start_matches("api/")
                        ));
                    }
                }
                Key::Version(group, version) | Key::Resource(group, version, _) => {
                    let on = parse_bool(key, setting)?;
                    if !served.iter().any(|(g, _)| *g == group) {
                        unknown_groups.insert(group);
                        continue;
                    }
                    if !served.iter().any(|(g, v)| *g == group && *v == version) {
                        let gv = group_version(group, version);
                        if on {
                            return Err(format!(
                                "group version {gv} is not served by Ferrokube (it serves {})",
                                served_versions(&served, group)
                            ));
                        }
                        warnings.push(format!(
                            "--runtime-config {key}=false: Ferrokube does not serve {gv}"
                        ));
                        continue;
                    }
                    match parsed {
                        Key::Resource(_, _, resource) => {
                            if resources::resources_of(group, version).all(|r| r.plural != resource)
                            {
                                warnings.push(format!(
                                    "--runtime-config {key}: {} has no resource {resource}",
                                    group_version(group, version)
                                ));
                            }
                            enablement
                                .resources
                                .insert((group.into(), version.into(), resource.into()), on);
                        }
                        _ => {
                            enablement
                                .versions
                                .insert((group.into(), version.into()), on);
                        }
                    }
                }
            }
        }
        if !unknown_groups.is_empty() {
            let names: Vec<&str> = unknown_groups.into_iter().collect();
            return Err(format!("unknown api groups {}", names.join(",")));
        }
        enablement.disabled = resources::served()
            .filter(|r| !enablement.setting_serves(r.group, r.version, r.plural))
            .map(|r| (r.group, r.version, r.plural))
            .collect();
        Ok((enablement, warnings))
    }

    /// Whether a built-in group-version's resource is served.
    pub fn serves_resource(&self, group: &str, version: &str, resource: &str) -> bool {
        self.disabled.is_empty() || !self.disabled.contains(&(group, version, resource))
    }

    /// Whether any resource of a built-in group-version is served (it is then listed
    /// in discovery and has its local APIService).
    pub fn serves_group_version(&self, group: &str, version: &str) -> bool {
        self.disabled.is_empty()
            || resources::resources_of(group, version)
                .any(|r| self.serves_resource(group, version, r.plural))
    }

    /// This enablement without a built-in subresource (a request for it is answered
    /// 404; discovery and OpenAPI leave it out).
    pub fn without_subresource(
        mut self,
        group: &'static str,
        resource: &'static str,
        subresource: &'static str,
    ) -> Self {
        self.unserved_subresources
            .push((group, resource, subresource));
        self
    }

    /// Whether a served built-in resource's subresource is served.
    pub fn serves_subresource(&self, group: &str, resource: &str, subresource: &str) -> bool {
        !self
            .unserved_subresources
            .iter()
            .any(|&(g, r, s)| g == group && r == resource && s == subresource)
    }

    /// The subresources a built-in resource serves.
    pub fn subresources_of<'a>(
        &'a self,
        r: &'a resources::ResourceInfo,
    ) -> impl Iterator<Item = &'static resources::SubresourceInfo> + 'a {
        r.subresources
            .iter()
            .filter(|s| self.serves_subresource(r.group, r.plural, s.name))
    }

    /// What the settings say of one resource: its own setting, else its version's.
    fn setting_serves(&self, group: &str, version: &str, resource: &str) -> bool {
        let key = (group.to_string(), version.to_string(), resource.to_string());
        match self.resources.get(&key) {
            Some(&on) => on,
            None => self.version_on(group, version),
        }
    }

    fn version_on(&self, group: &str, version: &str) -> bool {
        self.versions
            .get(&(group.to_string(), version.to_string()))
            .copied()
            .or(self.all_versions)
            .unwrap_or(true)
    }
}

fn parse_key(key: &str) -> Result<Key<'_>, String> {
    if [API_ALL, API_GA, API_BETA, API_ALPHA].contains(&key) {
        return Ok(Key::Class(key));
    }
    if key == API_LEGACY {
        return Ok(Key::Version("", "v1"));
    }
    let tokens: Vec<&str> = key.split('/').collect();
    // The core group: `v1` (upstream's help), `/v1`, or `api/v1`.
    let (group, rest) = match tokens[..] {
        [version] => ("", vec![version]),
        ["" | "api", version, ref resource @ ..] => ("", [&[version][..], resource].concat()),
        [group, ref rest @ ..] => (group, rest.to_vec()),
        [] => return Err(format!("runtime-config invalid key {key}")),
    };
    match rest[..] {
        [version] if !version.is_empty() => Ok(Key::Version(group, version)),
        [version, resource] if !version.is_empty() && !resource.is_empty() => {
            if resource.to_lowercase() != resource {
                return Err(format!(
                    "invalid key {key}: group/version/resource and resource is always lowercase plural, not {resource:?}"
                ));
            }
            Ok(Key::Resource(group, version, resource))
        }
        _ => Err(format!("runtime-config invalid key {key}")),
    }
}

/// Go's `strconv.ParseBool`, an empty value meaning true (upstream's
/// `getRuntimeConfigValue`).
fn parse_bool(key: &str, value: &str) -> Result<bool, String> {
    match value {
        "" | "1" | "t" | "T" | "TRUE" | "true" | "True" => Ok(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Ok(false),
        other => Err(format!(
            "invalid value of {key}: {other}, err: strconv.ParseBool: parsing {other:?}: invalid syntax"
        )),
    }
}

fn group_version(group: &str, version: &str) -> String {
    if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    }
}

fn served_versions(served: &[(&str, &str)], group: &str) -> String {
    served
        .iter()
        .filter(|(g, _)| *g == group)
        .map(|(g, v)| group_version(g, v))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::ApiEnablement;

    fn parse(value: &str) -> ApiEnablement {
        ApiEnablement::parse(value).unwrap().0
    }

    #[test]
    fn everything_is_served_by_default_and_when_turned_on() {
        for value in ["", "api/all=true", "v1=true,apps/v1,batch/v1=true,api/v1"] {
            let e = parse(value);
            assert!(e.serves_resource("", "v1", "pods"), "{value}");
            assert!(e.serves_group_version("batch", "v1"), "{value}");
        }
        let (_, warnings) = ApiEnablement::parse("api/alpha=true").unwrap();
        assert_eq!(warnings.len(), 1);
    }

    #[test]
    fn versions_and_resources_are_switched_most_specific_first() {
        let e = parse("batch/v1=false");
        assert!(!e.serves_resource("batch", "v1", "jobs"));
        assert!(!e.serves_group_version("batch", "v1"));
        assert!(e.serves_resource("apps", "v1", "deployments"));

        let e = parse("apps/v1/daemonsets=false");
        assert!(!e.serves_resource("apps", "v1", "daemonsets"));
        assert!(e.serves_resource("apps", "v1", "deployments"));
        assert!(e.serves_group_version("apps", "v1"));

        // Everything off but the core group and one resource of apps/v1; the order of
        // the keys does not matter.
        let e = parse("apps/v1/deployments=true,v1=true,api/all=false");
        assert!(e.serves_resource("", "v1", "pods"));
        assert!(e.serves_resource("apps", "v1", "deployments"));
        assert!(!e.serves_resource("apps", "v1", "replicasets"));
        assert!(!e.serves_group_version("batch", "v1"));
        assert!(e.serves_group_version("apps", "v1"));

        // A later setting of the same key wins.
        assert!(parse("batch/v1=false,batch/v1=true").serves_group_version("batch", "v1"));
    }

    #[test]
    fn bad_settings_are_refused_with_upstreams_messages() {
        let err = |value: &str| ApiEnablement::parse(value).unwrap_err();
        assert_eq!(err("api/all=false"), "invalid key with only api/all=false");
        assert_eq!(err("api/all=yes"), "invalid value api/all=yes");
        assert!(err("batch/v1=yes").contains("invalid value of batch/v1: yes"));
        assert_eq!(
            err("foo.example.com/v1=true,bar.io/v1/things=false"),
            "unknown api groups bar.io,foo.example.com"
        );
        assert!(err("resource.k8s.io/v1beta1=true").contains("unknown api groups"));
        assert!(err("apps/v1beta1=true").contains("not served by Ferrokube (it serves apps/v1)"));
        assert!(err("apps/v1/Deployments=false").contains("always lowercase plural"));
        assert!(err("apps/v1/deployments/x=false").contains("runtime-config invalid key"));
        // Turning off what is not served does nothing, with a warning.
        let (e, warnings) = ApiEnablement::parse("apps/v1beta1=false").unwrap();
        assert_eq!(e, ApiEnablement::default());
        assert_eq!(warnings.len(), 1);
    }
}
