//! The checks of the Pod Security Standards at policy version 1.33 (upstream
//! `pod-security-admission/policy/check_*.go`): one function per check, each returning
//! upstream's reason and detail texts word for word, since kubectl users and tests match
//! on them.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::{ContainerPort, PodSpec, SecurityContext};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

/// A failed check: upstream's `ForbiddenReason` and `ForbiddenDetail`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    pub reason: String,
    pub detail: String,
}

fn violation(reason: impl Into<String>, detail: impl Into<String>) -> Option<Violation> {
    Some(Violation {
        reason: reason.into(),
        detail: detail.into(),
    })
}

/// A check: its upstream ID and the function. `None` means allowed.
pub(crate) type CheckFn = fn(&ObjectMeta, &PodSpec) -> Option<Violation>;

/// The baseline checks, in upstream's message order (IDs sorted bytewise).
pub(crate) const BASELINE: &[(&str, CheckFn)] = &[
    ("appArmorProfile", app_armor_profile),
    ("capabilities_baseline", capabilities_baseline),
    ("hostNamespaces", host_namespaces),
    ("hostPathVolumes", host_path_volumes),
    ("hostPorts", host_ports),
    ("privileged", privileged),
    ("procMount", proc_mount),
    ("seLinuxOptions", se_linux_options),
    ("seccompProfile_baseline", seccomp_profile_baseline),
    ("sysctls", sysctls),
    ("windowsHostProcess", windows_host_process),
];

/// The restricted checks after the baseline ones, in upstream's order, with the
/// baseline checks each one replaces at the restricted level.
pub(crate) const RESTRICTED: &[(&str, CheckFn, &[&str])] = &[
    ("allowPrivilegeEscalation", allow_privilege_escalation, &[]),
    (
        "capabilities_restricted",
        capabilities_restricted,
        &["capabilities_baseline"],
    ),
    (
        "restrictedVolumes",
        restricted_volumes,
        &["hostPathVolumes"],
    ),
    ("runAsNonRoot", run_as_non_root, &[]),
    ("runAsUser", run_as_user, &[]),
    (
        "seccompProfile_restricted",
        seccomp_profile_restricted,
        &["seccompProfile_baseline"],
    ),
];

/// What the checks read of a container, an init container or an ephemeral container.
struct ContainerView<'a> {
    name: &'a str,
    security_context: Option<&'a SecurityContext>,
    ports: &'a [ContainerPort],
}

/// Upstream's `visitContainers`: init containers, containers, then ephemeral ones.
fn containers(spec: &PodSpec) -> Vec<ContainerView<'_>> {
    let mut out = Vec::new();
    for c in spec
        .init_containers
        .iter()
        .flatten()
        .chain(&spec.containers)
    {
        out.push(ContainerView {
            name: &c.name,
            security_context: c.security_context.as_ref(),
            ports: c.ports.as_deref().unwrap_or_default(),
        });
    }
    for c in spec.ephemeral_containers.iter().flatten() {
        out.push(ContainerView {
            name: &c.name,
            security_context: c.security_context.as_ref(),
            ports: c.ports.as_deref().unwrap_or_default(),
        });
    }
    out
}

fn pluralize<'a>(singular: &'a str, plural: &'a str, count: usize) -> &'a str {
    if count == 1 { singular } else { plural }
}

/// Go's `%q` of a string (the texts here are plain; escapes as JSON does them).
fn quote(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| format!("\"{s}\""))
}

/// Upstream's `joinQuote`: `"a", "b"`.
fn join_quote<S: AsRef<str>>(items: impl IntoIterator<Item = S>) -> String {
    items
        .into_iter()
        .map(|s| quote(s.as_ref()))
        .collect::<Vec<_>>()
        .join(", ")
}

/// `container "a"` / `containers "a", "b"`.
fn containers_phrase(names: &[&str]) -> String {
    format!(
        "{} {}",
        pluralize("container", "containers", names.len()),
        join_quote(names)
    )
}

fn sc_field<'a, T>(
    c: &ContainerView<'a>,
    f: impl Fn(&'a SecurityContext) -> Option<&'a T>,
) -> Option<&'a T> {
    c.security_context.and_then(f)
}

fn app_armor_profile(meta: &ObjectMeta, spec: &PodSpec) -> Option<Violation> {
    const ANNOTATION_PREFIX: &str = "container.apparmor.security.beta.kubernetes.io/";
    let allowed_type = |t: &str| t == "RuntimeDefault" || t == "Localhost";
    let mut bad_setters = Vec::new();
    let mut bad_values = BTreeSet::new();
    if let Some(p) = spec
        .security_context
        .as_ref()
        .and_then(|s| s.app_armor_profile.as_ref())
        && !allowed_type(&p.type_)
    {
        bad_setters.push("pod".to_string());
        bad_values.insert(p.type_.clone());
    }
    let mut bad = Vec::new();
    for c in containers(spec) {
        if let Some(p) = sc_field(&c, |s| s.app_armor_profile.as_ref())
            && !allowed_type(&p.type_)
        {
            bad.push(c.name);
            bad_values.insert(p.type_.clone());
        }
    }
    if !bad.is_empty() {
        bad_setters.push(containers_phrase(&bad));
    }
    let mut annotations: Vec<String> = meta
        .annotations
        .iter()
        .flatten()
        .filter(|(k, v)| {
            k.starts_with(ANNOTATION_PREFIX)
                && !(v.is_empty() || *v == "runtime/default" || v.starts_with("localhost/"))
        })
        .map(|(k, v)| format!("{k}={}", quote(v)))
        .collect();
    let mut values: Vec<String> = bad_values.into_iter().collect();
    if !annotations.is_empty() {
        annotations.sort();
        bad_setters.push(pluralize("annotation", "annotations", annotations.len()).to_string());
        values.extend(annotations);
    }
    if bad_setters.is_empty() {
        return None;
    }
    violation(
        pluralize(
            "forbidden AppArmor profile",
            "forbidden AppArmor profiles",
            values.len(),
        ),
        format!(
            "{} must not set AppArmor profile type to {}",
            bad_setters.join(" and "),
            join_quote(&values)
        ),
    )
}

/// The capabilities a baseline container may add (the container runtime's defaults).
const BASELINE_CAPABILITIES: &[&str] = &[
    "AUDIT_WRITE",
    "CHOWN",
    "DAC_OVERRIDE",
    "FOWNER",
    "FSETID",
    "KILL",
    "MKNOD",
    "NET_BIND_SERVICE",
    "SETFCAP",
    "SETGID",
    "SETPCAP",
    "SETUID",
    "SYS_CHROOT",
];

fn capabilities_baseline(_: &ObjectMeta, spec: &PodSpec) -> Option<Violation> {
    let mut bad = Vec::new();
    let mut caps = BTreeSet::new();
    for c in containers(spec) {
        let added = sc_field(&c, |s| s.capabilities.as_ref()).and_then(|c| c.add.as_ref());
        let mut valid = true;
        for cap in added.into_iter().flatten() {
            if !BASELINE_CAPABILITIES.contains(&cap.as_str()) {
                valid = false;
                caps.insert(cap.as_str());
            }
        }
        if !valid {
            bad.push(c.name);
        }
    }
    if bad.is_empty() {
        return None;
    }
    violation(
        "non-default capabilities",
        format!(
            "{} must not include {} in securityContext.capabilities.add",
            containers_phrase(&bad),
            join_quote(caps)
        ),
    )
}

fn host_namespaces(_: &ObjectMeta, spec: &PodSpec) -> Option<Violation> {
    let mut set = Vec::new();
    if spec.host_network == Some(true) {
        set.push("hostNetwork=true");
    }
    if spec.host_pid == Some(true) {
        set.push("hostPID=true");
    }
    if spec.host_ipc == Some(true) {
        set.push("hostIPC=true");
    }
    if set.is_empty() {
        return None;
    }
    violation("host namespaces", set.join(", "))
}

fn host_path_volumes(_: &ObjectMeta, spec: &PodSpec) -> Option<Violation> {
    let names: Vec<&str> = spec
        .volumes
        .iter()
        .flatten()
        .filter(|v| v.host_path.is_some())
        .map(|v| v.name.as_str())
        .collect();
    if names.is_empty() {
        return None;
    }
    violation(
        "hostPath volumes",
        format!(
            "{} {}",
            pluralize("volume", "volumes", names.len()),
            join_quote(&names)
        ),
    )
}

fn host_ports(_: &ObjectMeta, spec: &PodSpec) -> Option<Violation> {
    let mut bad = Vec::new();
    // Upstream sorts the ports as strings.
    let mut ports = BTreeSet::new();
    for c in containers(spec) {
        let mut valid = true;
        for p in c.ports {
            if let Some(hp) = p.host_port.filter(|p| *p != 0) {
                valid = false;
                ports.insert(hp.to_string());
            }
        }
        if !valid {
            bad.push(c.name);
        }
    }
    if bad.is_empty() {
        return None;
    }
    violation(
        "hostPort",
        format!(
            "{} {} {} {}",
            containers_phrase(&bad),
            pluralize("uses", "use", bad.len()),
            pluralize("hostPort", "hostPorts", ports.len()),
            ports.into_iter().collect::<Vec<_>>().join(", ")
        ),
    )
}

fn privileged(_: &ObjectMeta, spec: &PodSpec) -> Option<Violation> {
    let bad: Vec<&str> = containers(spec)
        .into_iter()
        .filter(|c| sc_field(c, |s| s.privileged.as_ref()) == Some(&true))
        .map(|c| c.name)
        .collect();
    if bad.is_empty() {
        return None;
    }
    violation(
        "privileged",
        format!(
            "{} must not set securityContext.privileged=true",
            containers_phrase(&bad)
        ),
    )
}

fn proc_mount(_: &ObjectMeta, spec: &PodSpec) -> Option<Violation> {
    let mut bad = Vec::new();
    let mut types = BTreeSet::new();
    for c in containers(spec) {
        if let Some(t) = sc_field(&c, |s| s.proc_mount.as_ref())
            && t != "Default"
        {
            bad.push(c.name);
            types.insert(t.as_str());
        }
    }
    if bad.is_empty() {
        return None;
    }
    violation(
        "procMount",
        format!(
            "{} must not set securityContext.procMount to {}",
            containers_phrase(&bad),
            join_quote(types)
        ),
    )
}

fn se_linux_options(_: &ObjectMeta, spec: &PodSpec) -> Option<Violation> {
    const ALLOWED_TYPES: &[&str] = &[
        "",
        "container_t",
        "container_init_t",
        "container_kvm_t",
        "container_engine_t",
    ];
    let mut bad_types = BTreeSet::new();
    let (mut set_user, mut set_role) = (false, false);
    let mut valid = |o: &k8s_openapi::api::core::v1::SELinuxOptions| {
        let mut ok = true;
        let t = o.type_.as_deref().unwrap_or("");
        if !ALLOWED_TYPES.contains(&t) {
            ok = false;
            bad_types.insert(t.to_string());
        }
        if o.user.as_deref().is_some_and(|u| !u.is_empty()) {
            ok = false;
            set_user = true;
        }
        if o.role.as_deref().is_some_and(|r| !r.is_empty()) {
            ok = false;
            set_role = true;
        }
        ok
    };
    let mut bad_setters = Vec::new();
    if let Some(o) = spec
        .security_context
        .as_ref()
        .and_then(|s| s.se_linux_options.as_ref())
        && !valid(o)
    {
        bad_setters.push("pod".to_string());
    }
    let mut bad = Vec::new();
    for c in containers(spec) {
        if let Some(o) = sc_field(&c, |s| s.se_linux_options.as_ref())
            && !valid(o)
        {
            bad.push(c.name);
        }
    }
    if !bad.is_empty() {
        bad_setters.push(containers_phrase(&bad));
    }
    if bad_setters.is_empty() {
        return None;
    }
    // As upstream, the user and role notes are only added next to a bad type.
    let mut data = Vec::new();
    if !bad_types.is_empty() {
        data.push(format!(
            "{} {}",
            pluralize("type", "types", bad_types.len()),
            join_quote(&bad_types)
        ));
        if set_user {
            data.push("user may not be set".to_string());
        }
        if set_role {
            data.push("role may not be set".to_string());
        }
    }
    violation(
        "seLinuxOptions",
        format!(
            "{} set forbidden securityContext.seLinuxOptions: {}",
            bad_setters.join(" and "),
            data.join("; ")
        ),
    )
}

fn valid_seccomp(t: &str) -> bool {
    t == "RuntimeDefault" || t == "Localhost"
}

fn seccomp_profile_baseline(_: &ObjectMeta, spec: &PodSpec) -> Option<Violation> {
    let mut bad_setters = Vec::new();
    let mut bad_values = BTreeSet::new();
    if let Some(p) = spec
        .security_context
        .as_ref()
        .and_then(|s| s.seccomp_profile.as_ref())
        && !valid_seccomp(&p.type_)
    {
        bad_setters.push("pod".to_string());
        bad_values.insert(p.type_.as_str());
    }
    let mut bad = Vec::new();
    for c in containers(spec) {
        if let Some(p) = sc_field(&c, |s| s.seccomp_profile.as_ref())
            && !valid_seccomp(&p.type_)
        {
            bad.push(c.name);
            bad_values.insert(p.type_.as_str());
        }
    }
    if !bad.is_empty() {
        bad_setters.push(containers_phrase(&bad));
    }
    if bad_setters.is_empty() {
        return None;
    }
    violation(
        "seccompProfile",
        format!(
            "{} must not set securityContext.seccompProfile.type to {}",
            bad_setters.join(" and "),
            join_quote(bad_values)
        ),
    )
}

/// The namespaced, isolated sysctls a baseline pod may set (through policy 1.32).
const SAFE_SYSCTLS: &[&str] = &[
    "kernel.shm_rmid_forced",
    "net.ipv4.ip_local_port_range",
    "net.ipv4.tcp_syncookies",
    "net.ipv4.ping_group_range",
    "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time",
    "net.ipv4.tcp_fin_timeout",
    "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes",
    "net.ipv4.tcp_rmem",
    "net.ipv4.tcp_wmem",
];

fn sysctls(_: &ObjectMeta, spec: &PodSpec) -> Option<Violation> {
    let bad: Vec<&str> = spec
        .security_context
        .as_ref()
        .and_then(|s| s.sysctls.as_ref())
        .into_iter()
        .flatten()
        .filter(|s| !SAFE_SYSCTLS.contains(&s.name.as_str()))
        .map(|s| s.name.as_str())
        .collect();
    if bad.is_empty() {
        return None;
    }
    violation("forbidden sysctls", bad.join(", "))
}

fn windows_host_process(_: &ObjectMeta, spec: &PodSpec) -> Option<Violation> {
    let bad: Vec<&str> = containers(spec)
        .into_iter()
        .filter(|c| {
            sc_field(c, |s| s.windows_options.as_ref()).and_then(|w| w.host_process) == Some(true)
        })
        .map(|c| c.name)
        .collect();
    let mut setters = Vec::new();
    if spec
        .security_context
        .as_ref()
        .and_then(|s| s.windows_options.as_ref())
        .and_then(|w| w.host_process)
        == Some(true)
    {
        setters.push("pod".to_string());
    }
    if !bad.is_empty() {
        setters.push(containers_phrase(&bad));
    }
    if setters.is_empty() {
        return None;
    }
    violation(
        "hostProcess",
        format!(
            "{} must not set securityContext.windowsOptions.hostProcess=true",
            setters.join(" and ")
        ),
    )
}

fn allow_privilege_escalation(_: &ObjectMeta, spec: &PodSpec) -> Option<Violation> {
    let bad: Vec<&str> = containers(spec)
        .into_iter()
        .filter(|c| sc_field(c, |s| s.allow_privilege_escalation.as_ref()) != Some(&false))
        .map(|c| c.name)
        .collect();
    if bad.is_empty() {
        return None;
    }
    violation(
        "allowPrivilegeEscalation != false",
        format!(
            "{} must set securityContext.allowPrivilegeEscalation=false",
            containers_phrase(&bad)
        ),
    )
}

fn capabilities_restricted(_: &ObjectMeta, spec: &PodSpec) -> Option<Violation> {
    let mut missing_drop_all = Vec::new();
    let mut adding = Vec::new();
    let mut forbidden = BTreeSet::new();
    for c in containers(spec) {
        let Some(caps) = sc_field(&c, |s| s.capabilities.as_ref()) else {
            missing_drop_all.push(c.name);
            continue;
        };
        if !caps.drop.iter().flatten().any(|d| d == "ALL") {
            missing_drop_all.push(c.name);
        }
        let mut added_forbidden = false;
        for cap in caps.add.iter().flatten() {
            if cap != "NET_BIND_SERVICE" {
                added_forbidden = true;
                forbidden.insert(cap.as_str());
            }
        }
        if added_forbidden {
            adding.push(c.name);
        }
    }
    let mut details = Vec::new();
    if !missing_drop_all.is_empty() {
        details.push(format!(
            "{} must set securityContext.capabilities.drop=[\"ALL\"]",
            containers_phrase(&missing_drop_all)
        ));
    }
    if !adding.is_empty() {
        details.push(format!(
            "{} must not include {} in securityContext.capabilities.add",
            containers_phrase(&adding),
            join_quote(forbidden)
        ));
    }
    if details.is_empty() {
        return None;
    }
    violation("unrestricted capabilities", details.join("; "))
}

fn restricted_volumes(_: &ObjectMeta, spec: &PodSpec) -> Option<Violation> {
    let mut bad = Vec::new();
    let mut types = BTreeSet::new();
    for v in spec.volumes.iter().flatten() {
        let allowed = v.config_map.is_some()
            || v.csi.is_some()
            || v.downward_api.is_some()
            || v.empty_dir.is_some()
            || v.ephemeral.is_some()
            || v.image.is_some()
            || v.persistent_volume_claim.is_some()
            || v.projected.is_some()
            || v.secret.is_some();
        if allowed {
            continue;
        }
        bad.push(v.name.as_str());
        let t = [
            (v.host_path.is_some(), "hostPath"),
            (v.gce_persistent_disk.is_some(), "gcePersistentDisk"),
            (v.aws_elastic_block_store.is_some(), "awsElasticBlockStore"),
            (v.git_repo.is_some(), "gitRepo"),
            (v.nfs.is_some(), "nfs"),
            (v.iscsi.is_some(), "iscsi"),
            (v.glusterfs.is_some(), "glusterfs"),
            (v.rbd.is_some(), "rbd"),
            (v.flex_volume.is_some(), "flexVolume"),
            (v.cinder.is_some(), "cinder"),
            (v.cephfs.is_some(), "cephfs"),
            (v.flocker.is_some(), "flocker"),
            (v.fc.is_some(), "fc"),
            (v.azure_file.is_some(), "azureFile"),
            (v.vsphere_volume.is_some(), "vsphereVolume"),
            (v.quobyte.is_some(), "quobyte"),
            (v.azure_disk.is_some(), "azureDisk"),
            (v.photon_persistent_disk.is_some(), "photonPersistentDisk"),
            (v.portworx_volume.is_some(), "portworxVolume"),
            (v.scale_io.is_some(), "scaleIO"),
            (v.storageos.is_some(), "storageos"),
        ]
        .into_iter()
        .find(|(set, _)| *set)
        .map_or("unknown", |(_, name)| name);
        types.insert(t);
    }
    if bad.is_empty() {
        return None;
    }
    violation(
        "restricted volume types",
        format!(
            "{} {} {} {} {}",
            pluralize("volume", "volumes", bad.len()),
            join_quote(&bad),
            pluralize("uses", "use", bad.len()),
            pluralize(
                "restricted volume type",
                "restricted volume types",
                types.len()
            ),
            join_quote(types)
        ),
    )
}

fn run_as_non_root(_: &ObjectMeta, spec: &PodSpec) -> Option<Violation> {
    let mut bad_setters = Vec::new();
    let mut pod_non_root = false;
    match spec
        .security_context
        .as_ref()
        .and_then(|s| s.run_as_non_root)
    {
        Some(false) => bad_setters.push("pod".to_string()),
        Some(true) => pod_non_root = true,
        None => {}
    }
    let (mut explicit, mut implicit) = (Vec::new(), Vec::new());
    for c in containers(spec) {
        match sc_field(&c, |s| s.run_as_non_root.as_ref()) {
            Some(false) => explicit.push(c.name),
            Some(true) => {}
            None if !pod_non_root => implicit.push(c.name),
            None => {}
        }
    }
    if !explicit.is_empty() {
        bad_setters.push(containers_phrase(&explicit));
    }
    if !bad_setters.is_empty() {
        return violation(
            "runAsNonRoot != true",
            format!(
                "{} must not set securityContext.runAsNonRoot=false",
                bad_setters.join(" and ")
            ),
        );
    }
    if implicit.is_empty() {
        return None;
    }
    violation(
        "runAsNonRoot != true",
        format!(
            "pod or {} must set securityContext.runAsNonRoot=true",
            containers_phrase(&implicit)
        ),
    )
}

fn run_as_user(_: &ObjectMeta, spec: &PodSpec) -> Option<Violation> {
    let mut setters = Vec::new();
    if spec.security_context.as_ref().and_then(|s| s.run_as_user) == Some(0) {
        setters.push("pod".to_string());
    }
    let bad: Vec<&str> = containers(spec)
        .into_iter()
        .filter(|c| sc_field(c, |s| s.run_as_user.as_ref()) == Some(&0))
        .map(|c| c.name)
        .collect();
    if !bad.is_empty() {
        setters.push(containers_phrase(&bad));
    }
    if setters.is_empty() {
        return None;
    }
    violation(
        "runAsUser=0",
        format!("{} must not set runAsUser=0", setters.join(" and ")),
    )
}

fn seccomp_profile_restricted(_: &ObjectMeta, spec: &PodSpec) -> Option<Violation> {
    let mut bad_setters = Vec::new();
    let mut bad_values = BTreeSet::new();
    let mut pod_set = false;
    if let Some(p) = spec
        .security_context
        .as_ref()
        .and_then(|s| s.seccomp_profile.as_ref())
    {
        if valid_seccomp(&p.type_) {
            pod_set = true;
        } else {
            bad_setters.push("pod".to_string());
            bad_values.insert(p.type_.as_str());
        }
    }
    let (mut explicit, mut implicit) = (Vec::new(), Vec::new());
    for c in containers(spec) {
        match sc_field(&c, |s| s.seccomp_profile.as_ref()) {
            Some(p) if !valid_seccomp(&p.type_) => {
                explicit.push(c.name);
                bad_values.insert(p.type_.as_str());
            }
            Some(_) => {}
            None if !pod_set => implicit.push(c.name),
            None => {}
        }
    }
    if !explicit.is_empty() {
        bad_setters.push(containers_phrase(&explicit));
    }
    if !bad_setters.is_empty() {
        return violation(
            "seccompProfile",
            format!(
                "{} must not set securityContext.seccompProfile.type to {}",
                bad_setters.join(" and "),
                join_quote(bad_values)
            ),
        );
    }
    if implicit.is_empty() {
        return None;
    }
    violation(
        "seccompProfile",
        format!(
            "pod or {} must set securityContext.seccompProfile.type to \"RuntimeDefault\" or \"Localhost\"",
            containers_phrase(&implicit)
        ),
    )
}
