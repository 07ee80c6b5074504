//! Each check against upstream's texts (`policy/check_*_test.go`), the check order
//! and overrides per level, the label parsing and the three modes.

use super::*;
use serde_json::{Value, json};

fn pod(meta: Value, spec: Value) -> (ObjectMeta, PodSpec) {
    let mut spec = spec;
    if spec.get("containers").is_none() {
        spec["containers"] = json!([]);
    }
    (
        serde_json::from_value(meta).unwrap(),
        serde_json::from_value(spec).unwrap(),
    )
}

fn lv(level: Level) -> LevelVersion {
    LevelVersion {
        level,
        version: Version::Latest,
    }
}

/// The one violation of `level` for the pod, as `reason (detail)`.
fn only(level: Level, meta: Value, spec: Value) -> String {
    let (m, s) = pod(meta, spec);
    let v = evaluate(lv(level), &m, &s);
    assert_eq!(v.len(), 1, "{v:?}");
    forbidden_detail(&v)
}

fn baseline(spec: Value) -> String {
    only(Level::Baseline, json!({}), spec)
}

/// A container that passes every restricted check, with extra securityContext fields.
fn good(name: &str, extra: Value) -> Value {
    let mut sc = json!({"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}});
    if let (Some(sc), Some(extra)) = (sc.as_object_mut(), extra.as_object()) {
        for (k, v) in extra {
            sc.insert(k.clone(), v.clone());
        }
    }
    json!({"name": name, "image": "x", "securityContext": sc})
}

fn restricted_pod(containers: Value, pod_sc: Value) -> Value {
    let mut sc = json!({"runAsNonRoot": true, "seccompProfile": {"type": "RuntimeDefault"}});
    if let (Some(sc), Some(extra)) = (sc.as_object_mut(), pod_sc.as_object()) {
        for (k, v) in extra {
            sc.insert(k.clone(), v.clone());
        }
    }
    json!({"containers": containers, "securityContext": sc})
}

fn restricted(spec: Value) -> String {
    only(Level::Restricted, json!({}), spec)
}

#[test]
fn plain_pod_passes_baseline_and_fails_restricted_with_upstreams_message() {
    let (m, s) = pod(
        json!({}),
        json!({"containers": [{"name": "c", "image": "nginx"}]}),
    );
    assert!(evaluate(lv(Level::Baseline), &m, &s).is_empty());
    assert!(evaluate(lv(Level::Privileged), &m, &s).is_empty());
    assert_eq!(
        forbidden_detail(&evaluate(lv(Level::Restricted), &m, &s)),
        "allowPrivilegeEscalation != false (container \"c\" must set securityContext.allowPrivilegeEscalation=false), \
unrestricted capabilities (container \"c\" must set securityContext.capabilities.drop=[\"ALL\"]), \
runAsNonRoot != true (pod or container \"c\" must set securityContext.runAsNonRoot=true), \
seccompProfile (pod or container \"c\" must set securityContext.seccompProfile.type to \"RuntimeDefault\" or \"Localhost\")"
    );
    let (m, s) = pod(
        json!({}),
        restricted_pod(json!([good("c", json!({}))]), json!({})),
    );
    assert!(evaluate(lv(Level::Restricted), &m, &s).is_empty());
}

#[test]
fn privileged_and_host_process() {
    assert_eq!(
        baseline(json!({"containers": [
            {"name": "a", "securityContext": {"privileged": true}},
            {"name": "b", "securityContext": {"privileged": false}}],
            "initContainers": [{"name": "i", "securityContext": {"privileged": true}}]})),
        "privileged (containers \"i\", \"a\" must not set securityContext.privileged=true)"
    );
    assert_eq!(
        baseline(
            json!({"securityContext": {"windowsOptions": {"hostProcess": true}},
            "containers": [{"name": "a", "securityContext": {"windowsOptions": {"hostProcess": true}}}]})
        ),
        "hostProcess (pod and container \"a\" must not set securityContext.windowsOptions.hostProcess=true)"
    );
}

#[test]
fn host_namespaces_ports_and_paths() {
    assert_eq!(
        baseline(json!({"hostNetwork": true, "hostIPC": true, "hostPID": true})),
        "host namespaces (hostNetwork=true, hostPID=true, hostIPC=true)"
    );
    assert_eq!(
        baseline(json!({"containers": [
            {"name": "a", "ports": [{"containerPort": 80, "hostPort": 8080}, {"containerPort": 81, "hostPort": 10}]},
            {"name": "b", "ports": [{"containerPort": 82}]}]})),
        "hostPort (container \"a\" uses hostPorts 10, 8080)"
    );
    assert_eq!(
        baseline(
            json!({"volumes": [{"name": "h", "hostPath": {"path": "/"}}, {"name": "e", "emptyDir": {}}]})
        ),
        "hostPath volumes (volume \"h\")"
    );
    // restricted reports the hostPath volume as a restricted type, not twice.
    let spec = restricted_pod(json!([good("c", json!({}))]), json!({}));
    let mut spec = spec;
    spec["volumes"] = json!([{"name": "h", "hostPath": {"path": "/"}}, {"name": "n", "nfs": {"server": "s", "path": "/"}},
        {"name": "ok", "projected": {"sources": []}}, {"name": "img", "image": {"reference": "x"}}]);
    assert_eq!(
        restricted(spec),
        "restricted volume types (volumes \"h\", \"n\" use restricted volume types \"hostPath\", \"nfs\")"
    );
}

#[test]
fn capabilities_baseline_and_restricted() {
    assert_eq!(
        baseline(
            json!({"containers": [{"name": "a", "securityContext": {"capabilities": {"add": ["NET_RAW", "CHOWN", "SYS_ADMIN"]}}}]})
        ),
        "non-default capabilities (container \"a\" must not include \"NET_RAW\", \"SYS_ADMIN\" in securityContext.capabilities.add)"
    );
    assert_eq!(
        restricted(restricted_pod(
            json!([
                good(
                    "a",
                    json!({"capabilities": {"drop": ["ALL"], "add": ["NET_BIND_SERVICE", "CHOWN"]}})
                ),
                good("b", json!({"capabilities": {"drop": ["NET_RAW"]}})),
            ]),
            json!({})
        )),
        "unrestricted capabilities (container \"b\" must set securityContext.capabilities.drop=[\"ALL\"]; container \"a\" must not include \"CHOWN\" in securityContext.capabilities.add)"
    );
}

#[test]
fn apparmor_selinux_procmount_sysctls() {
    assert_eq!(
        only(
            Level::Baseline,
            json!({"annotations": {"container.apparmor.security.beta.kubernetes.io/a": "unconfined",
                "container.apparmor.security.beta.kubernetes.io/b": "localhost/x"}}),
            json!({"securityContext": {"appArmorProfile": {"type": "Unconfined"}}})
        ),
        "forbidden AppArmor profiles (pod and annotation must not set AppArmor profile type to \"Unconfined\", \"container.apparmor.security.beta.kubernetes.io/a=\\\"unconfined\\\"\")"
    );
    assert_eq!(
        baseline(
            json!({"containers": [{"name": "a", "securityContext": {"appArmorProfile": {"type": "Unconfined"}}}]})
        ),
        "forbidden AppArmor profile (container \"a\" must not set AppArmor profile type to \"Unconfined\")"
    );
    assert_eq!(
        baseline(
            json!({"securityContext": {"seLinuxOptions": {"type": "spc_t", "user": "u"}},
            "containers": [{"name": "a", "securityContext": {"seLinuxOptions": {"role": "r", "type": "container_t"}}}]})
        ),
        "seLinuxOptions (pod and container \"a\" set forbidden securityContext.seLinuxOptions: type \"spc_t\"; user may not be set; role may not be set)"
    );
    assert_eq!(
        baseline(
            json!({"containers": [{"name": "a", "securityContext": {"procMount": "Unmasked"}},
            {"name": "b", "securityContext": {"procMount": "Default"}}]})
        ),
        "procMount (container \"a\" must not set securityContext.procMount to \"Unmasked\")"
    );
    assert_eq!(
        baseline(
            json!({"securityContext": {"sysctls": [{"name": "kernel.msgmax", "value": "1"},
            {"name": "net.ipv4.tcp_syncookies", "value": "1"}, {"name": "a.b", "value": "1"}]}})
        ),
        "forbidden sysctls (kernel.msgmax, a.b)"
    );
}

#[test]
fn seccomp_baseline_and_restricted() {
    assert_eq!(
        baseline(
            json!({"securityContext": {"seccompProfile": {"type": "Unconfined"}},
            "containers": [{"name": "a", "securityContext": {"seccompProfile": {"type": "Unconfined"}}}]})
        ),
        "seccompProfile (pod and container \"a\" must not set securityContext.seccompProfile.type to \"Unconfined\")"
    );
    // Container-level profiles make up for a missing pod-level one.
    let spec = json!({"securityContext": {"runAsNonRoot": true}, "containers": [
        good("a", json!({"seccompProfile": {"type": "Localhost", "localhostProfile": "p"}})),
        good("b", json!({}))]});
    assert_eq!(
        restricted(spec),
        "seccompProfile (pod or container \"b\" must set securityContext.seccompProfile.type to \"RuntimeDefault\" or \"Localhost\")"
    );
}

#[test]
fn run_as_non_root_user_and_privilege_escalation() {
    assert_eq!(
        restricted(restricted_pod(
            json!([
                good("a", json!({"runAsNonRoot": false})),
                good("b", json!({}))
            ]),
            json!({"runAsNonRoot": false})
        )),
        "runAsNonRoot != true (pod and container \"a\" must not set securityContext.runAsNonRoot=false)"
    );
    assert_eq!(
        restricted(restricted_pod(
            json!([
                good("a", json!({"runAsUser": 0})),
                good("b", json!({"runAsUser": 1000}))
            ]),
            json!({"runAsUser": 0})
        )),
        "runAsUser=0 (pod and container \"a\" must not set runAsUser=0)"
    );
    assert_eq!(
        restricted(restricted_pod(
            json!([good("a", json!({"allowPrivilegeEscalation": true}))]),
            json!({})
        )),
        "allowPrivilegeEscalation != false (container \"a\" must set securityContext.allowPrivilegeEscalation=false)"
    );
}

#[test]
fn restricted_message_lists_baseline_failures_first() {
    let (m, s) = pod(
        json!({}),
        restricted_pod(
            json!([good("c", json!({"privileged": true, "runAsUser": 0}))]),
            json!({}),
        ),
    );
    let (_, mut s2) = pod(json!({}), json!({}));
    s2.host_pid = Some(true);
    let mut s = s;
    s.host_pid = s2.host_pid;
    assert_eq!(
        forbidden_detail(&evaluate(lv(Level::Restricted), &m, &s)),
        "host namespaces (hostPID=true), privileged (container \"c\" must not set securityContext.privileged=true), runAsUser=0 (container \"c\" must not set runAsUser=0)"
    );
    // Before 1.23 runAsUser was not part of restricted.
    let old = LevelVersion {
        level: Level::Restricted,
        version: Version::Minor(22),
    };
    assert_eq!(evaluate(old, &m, &s).len(), 2);
}

#[test]
fn labels_choose_the_policy() {
    let labels = |kvs: &[(&str, &str)]| -> BTreeMap<String, String> {
        kvs.iter()
            .map(|(k, v)| (format!("pod-security.kubernetes.io/{k}"), v.to_string()))
            .collect()
    };
    let policy = |kvs: &[(&str, &str)]| Policy::from_labels(Some(&labels(kvs)), Policy::default());
    let (p, errors) = policy(&[
        ("enforce", "baseline"),
        ("warn", "restricted"),
        ("warn-version", "v1.30"),
        ("audit", "bogus"),
    ]);
    assert_eq!(p.enforce.to_string(), "baseline:latest");
    assert_eq!(p.warn.to_string(), "restricted:v1.30");
    assert_eq!(p.audit.to_string(), "privileged:latest");
    assert_eq!(errors.len(), 1);
    assert_eq!(
        errors[0].to_string(),
        "metadata.labels[pod-security.kubernetes.io/audit]: Invalid value: \"bogus\": must be one of privileged, baseline, restricted"
    );
    // Warn follows a stricter enforce level unless warn is labelled.
    let (p, _) = policy(&[("enforce", "baseline"), ("enforce-version", "v1.22")]);
    assert_eq!(p.warn.to_string(), "baseline:v1.22");
    let (p, _) = policy(&[("enforce", "baseline"), ("warn", "privileged")]);
    assert_eq!(p.warn.level, Level::Privileged);
    // An invalid enforce level fails closed.
    let (p, errors) = policy(&[("enforce", "foo")]);
    assert_eq!(p.enforce.to_string(), "restricted:latest");
    assert_eq!(p.warn.level, Level::Privileged);
    assert_eq!(errors.len(), 1);
    let (p, errors) = Policy::from_labels(None, Policy::default());
    assert!(p.fully_privileged() && errors.is_empty());
    assert_eq!(Version::parse("v1.x"), None);
    assert_eq!(Version::parse("v1.25"), Some(Version::Minor(25)));
}

#[test]
fn enforce_denies_warn_warns_and_controllers_only_warn() {
    let (m, s) = pod(
        json!({}),
        json!({"containers": [{"name": "c", "image": "x", "securityContext": {"privileged": true}}]}),
    );
    let enforce = Policy {
        enforce: lv(Level::Restricted),
        ..Policy::default()
    };
    let d = decide(&enforce, Subject::Pod, &m, &s);
    let denial = d.forbidden.unwrap();
    assert!(
        denial.starts_with("violates PodSecurity \"restricted:latest\": privileged (container \"c\" must not set securityContext.privileged=true), allowPrivilegeEscalation != false"),
        "{denial}"
    );
    assert!(d.warnings.is_empty());
    // The same policy on a Deployment's template: a warning, never a denial.
    let both = Policy {
        enforce: lv(Level::Restricted),
        warn: lv(Level::Baseline),
        ..Policy::default()
    };
    let d = decide(&both, Subject::PodController, &m, &s);
    assert_eq!(d.forbidden, None);
    assert_eq!(
        d.warnings,
        vec![
            "would violate PodSecurity \"baseline:latest\": privileged (container \"c\" must not set securityContext.privileged=true)"
                .to_string()
        ]
    );
    let warn_only = Policy {
        warn: lv(Level::Baseline),
        audit: lv(Level::Baseline),
        ..Policy::default()
    };
    let d = decide(&warn_only, Subject::Pod, &m, &s);
    assert_eq!(d.forbidden, None);
    assert_eq!(d.warnings.len(), 1);
    assert!(
        d.audit
            .unwrap()
            .starts_with("would violate PodSecurity \"baseline:latest\": privileged")
    );
}

#[test]
fn only_image_and_container_changes_are_significant_updates() {
    let (m, s) = pod(
        json!({}),
        json!({"containers": [{"name": "c", "image": "a"}]}),
    );
    let (m2, mut s2) = pod(
        json!({"labels": {"x": "y"}}),
        json!({"containers": [{"name": "c", "image": "a"}]}),
    );
    assert!(!is_significant_pod_update(&m2, &s2, &m, &s));
    s2.containers[0].image = Some("b".into());
    assert!(is_significant_pod_update(&m2, &s2, &m, &s));
}

#[test]
fn relabelled_namespaces_warn_about_existing_pods() {
    let pods: Vec<(String, ObjectMeta, PodSpec)> = [
        (
            "web-1",
            json!({"containers": [{"name": "c", "securityContext": {"privileged": true}}]}),
        ),
        ("plain", json!({"containers": [{"name": "c"}]})),
        (
            "web-2",
            json!({"containers": [{"name": "c", "securityContext": {"privileged": true}}]}),
        ),
        (
            "host",
            json!({"hostPID": true, "containers": [{"name": "c"}]}),
        ),
    ]
    .into_iter()
    .map(|(n, spec)| {
        let (m, s) = pod(json!({"name": n}), spec);
        (n.to_string(), m, s)
    })
    .collect();
    let old = Policy::default();
    let new = Policy {
        enforce: lv(Level::Baseline),
        ..Policy::default()
    };
    assert_eq!(
        namespace_update_warnings("ns", &new, &old, &pods),
        vec![
            "existing pods in namespace \"ns\" violate the new PodSecurity enforce level \"baseline:latest\"",
            "web-1 (and 1 other pod): privileged",
            "host: host namespaces",
        ]
    );
    assert!(namespace_update_warnings("ns", &new, &new, &pods).is_empty());
    assert!(namespace_update_warnings("ns", &old, &new, &pods).is_empty());
}
