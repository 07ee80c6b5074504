//! `--runtime-config`: upstream's switches of API group versions
//! (`api/all=true`, `api/ga`, `api/beta`, `api/alpha`, `api/legacy`, `<group>/<version>`,
//! a key alone meaning `=true`).
//!
//! Ferrokube serves one version of each built-in group, all of them GA, always. So
//! what the flag asks is checked against that: turning on what is served (e.g.
//! "Kubernetes the hard way"'s `api/all=true`) is accepted; turning on the beta or
//! alpha versions as a class is accepted with a warning (there are none); naming a
//! group version that is not served, or turning anything off, stops the start with a
//! message that says so, rather than running without what the operator asked for.

use ferrokube_api::resources;

/// Checks `--runtime-config`; returns the warnings to log.
pub fn check(value: &str) -> Result<Vec<String>, String> {
    let mut warnings = Vec::new();
    for item in value.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let (key, setting) = match item.split_once('=') {
            Some((k, v)) => (k.trim(), v.trim()),
            None => (item, "true"),
        };
        let on = match setting {
            "true" => true,
            "false" => false,
            other => {
                return Err(format!(
                    "invalid value of {key}: {other}, err: strconv.ParseBool: parsing {other:?}: invalid syntax"
                ));
            }
        };
        if !on {
            return Err(format!(
                "{key}=false: turning API group versions off is not supported (Ferrokube serves every built-in group it has)"
            ));
        }
        match key {
            "api/all" | "api/ga" | "api/legacy" => {}
            "api/beta" | "api/alpha" => warnings.push(format!(
                "--runtime-config {key}=true: Ferrokube serves no {} API versions",
                key.trim_start_matches("api/")
            )),
            gv => {
                let (group, version) = match gv.split('/').collect::<Vec<_>>()[..] {
                    [version] => ("", version),
                    ["api", version] => ("", version),
                    [group, version] => (group, version),
                    _ => {
                        return Err(format!(
                            "{gv}: resource-level settings are not supported, only <group>/<version>"
                        ));
                    }
                };
                if !resources::groups()
                    .iter()
                    .any(|(g, v)| *g == group && *v == version)
                {
                    return Err(format!("unknown api groups {gv}: not served by Ferrokube"));
                }
            }
        }
    }
    Ok(warnings)
}

#[cfg(test)]
mod tests {
    use super::check;

    #[test]
    fn served_versions_may_be_turned_on_nothing_off() {
        assert_eq!(check(""), Ok(vec![]));
        assert_eq!(check("api/all=true"), Ok(vec![]));
        assert_eq!(check("api/all"), Ok(vec![]));
        assert_eq!(check("v1=true,apps/v1,batch/v1=true,api/v1"), Ok(vec![]));
        assert_eq!(check("api/alpha=true").unwrap().len(), 1);
        assert!(
            check("resource.k8s.io/v1beta1=true")
                .unwrap_err()
                .contains("unknown api groups resource.k8s.io/v1beta1")
        );
        assert!(
            check("batch/v1=false")
                .unwrap_err()
                .contains("not supported")
        );
        assert!(check("api/all=yes").unwrap_err().contains("invalid value"));
        assert!(
            check("apps/v1/deployments=true")
                .unwrap_err()
                .contains("resource-level")
        );
    }
}
