//! core/v1: pods and pod templates, services, config maps, secrets, namespaces,
//! nodes, volumes and claims, limit ranges, quotas, events (`pkg/apis/core/validation`).

use std::collections::{BTreeMap, BTreeSet};

use ferrokube_apimachinery::errors::{FieldError, FieldPath};
use ferrokube_apimachinery::validation::{
    inclusive_range_error, is_dns1123_subdomain, validate_annotations, validate_finalizer_name,
    validate_labels,
};
use k8s_openapi::api::core::v1 as core;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use crate::Validate;
use crate::util::*;

// ---------------------------------------------------------------------------------
// pod spec

const RESTART_POLICIES: &[&str] = &["Always", "OnFailure", "Never"];
const DNS_POLICIES: &[&str] = &["ClusterFirstWithHostNet", "ClusterFirst", "Default", "None"];
const PULL_POLICIES: &[&str] = &["Always", "IfNotPresent", "Never"];
const TERMINATION_MESSAGE_POLICIES: &[&str] = &["File", "FallbackToLogsOnError"];
const TAINT_EFFECTS: &[&str] = &["NoSchedule", "PreferNoSchedule", "NoExecute"];

/// The names of the volume sources set on a volume, in declaration order.
fn volume_sources(v: &core::Volume) -> Vec<&'static str> {
    let mut out = Vec::new();
    macro_rules! src {
        ($($field:ident => $name:literal),* $(,)?) => {$(
            if v.$field.is_some() { out.push($name); }
        )*};
    }
    src!(
        host_path => "hostPath", empty_dir => "emptyDir", gce_persistent_disk => "gcePersistentDisk",
        aws_elastic_block_store => "awsElasticBlockStore", git_repo => "gitRepo", secret => "secret",
        nfs => "nfs", iscsi => "iscsi", glusterfs => "glusterfs",
        persistent_volume_claim => "persistentVolumeClaim", rbd => "rbd", flex_volume => "flexVolume",
        cinder => "cinder", cephfs => "cephfs", flocker => "flocker", downward_api => "downwardAPI",
        fc => "fc", azure_file => "azureFile", config_map => "configMap",
        vsphere_volume => "vsphereVolume", quobyte => "quobyte", azure_disk => "azureDisk",
        photon_persistent_disk => "photonPersistentDisk", portworx_volume => "portworxVolume",
        projected => "projected", scale_io => "scaleIO", storageos => "storageos", csi => "csi",
        ephemeral => "ephemeral", image => "image",
    );
    out
}

fn file_mode(mode: Option<i32>, path: &FieldPath, errs: &mut Errs) {
    if let Some(m) = mode
        && !(0..=0o777).contains(&m)
    {
        errs.push(FieldError::invalid(
            path,
            m,
            "must be a number between 0 and 0777 (octal), both inclusive",
        ));
    }
}

fn key_to_paths(items: Option<&Vec<core::KeyToPath>>, path: &FieldPath, errs: &mut Errs) {
    for (i, item) in items.into_iter().flatten().enumerate() {
        let ip = path.index(i);
        if item.key.is_empty() {
            errs.push(FieldError::required(&ip.child("key"), ""));
        }
        if item.path.is_empty() {
            errs.push(FieldError::required(&ip.child("path"), ""));
        } else {
            local_descending_path(&item.path, &ip.child("path"), errs);
        }
        file_mode(item.mode, &ip.child("mode"), errs);
    }
}

fn validate_volumes(
    volumes: &[core::Volume],
    path: &FieldPath,
    errs: &mut Errs,
) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for (i, v) in volumes.iter().enumerate() {
        let vp = path.index(i);
        if v.name.is_empty() {
            errs.push(FieldError::required(&vp.child("name"), ""));
        } else {
            dns_label(&v.name, &vp.child("name"), errs);
            if !names.insert(v.name.clone()) {
                errs.push(FieldError::duplicate(&vp.child("name"), v.name.as_str()));
            }
        }
        let sources = volume_sources(v);
        match sources.as_slice() {
            [] => errs.push(FieldError::required(&vp, "must specify a volume type")),
            [_] => {}
            [_, second, ..] => errs.push(FieldError::forbidden(
                &vp.child(second),
                "may not specify more than 1 volume type",
            )),
        }
        if let Some(h) = &v.host_path {
            if h.path.is_empty() {
                errs.push(FieldError::required(
                    &vp.child("hostPath").child("path"),
                    "",
                ));
            }
            enum_optional(
                &h.type_.clone().filter(|t| !t.is_empty()),
                &[
                    "DirectoryOrCreate",
                    "Directory",
                    "FileOrCreate",
                    "File",
                    "Socket",
                    "CharDevice",
                    "BlockDevice",
                ],
                &vp.child("hostPath").child("type"),
                errs,
            );
        }
        if let Some(sec) = &v.secret {
            let sp = vp.child("secret");
            if s(&sec.secret_name).is_empty() {
                errs.push(FieldError::required(&sp.child("secretName"), ""));
            }
            file_mode(sec.default_mode, &sp.child("defaultMode"), errs);
            key_to_paths(sec.items.as_ref(), &sp.child("items"), errs);
        }
        if let Some(cm) = &v.config_map {
            let cp = vp.child("configMap");
            if cm.name.is_empty() {
                errs.push(FieldError::required(&cp.child("name"), ""));
            }
            file_mode(cm.default_mode, &cp.child("defaultMode"), errs);
            key_to_paths(cm.items.as_ref(), &cp.child("items"), errs);
        }
        if let Some(pvc) = &v.persistent_volume_claim
            && pvc.claim_name.is_empty()
        {
            errs.push(FieldError::required(
                &vp.child("persistentVolumeClaim").child("claimName"),
                "",
            ));
        }
        if let Some(nfs) = &v.nfs {
            if nfs.server.is_empty() {
                errs.push(FieldError::required(&vp.child("nfs").child("server"), ""));
            }
            if nfs.path.is_empty() {
                errs.push(FieldError::required(&vp.child("nfs").child("path"), ""));
            } else if !nfs.path.starts_with('/') {
                errs.push(FieldError::invalid(
                    &vp.child("nfs").child("path"),
                    nfs.path.as_str(),
                    "must be an absolute path",
                ));
            }
        }
        if let Some(ed) = &v.empty_dir {
            if let Some(size) = &ed.size_limit {
                quantity(&size.0, &vp.child("emptyDir").child("sizeLimit"), errs);
            }
            enum_optional(
                &ed.medium.clone().filter(|m| !m.is_empty()),
                &["Memory", "HugePages"],
                &vp.child("emptyDir").child("medium"),
                errs,
            );
        }
        if let Some(d) = &v.downward_api {
            file_mode(
                d.default_mode,
                &vp.child("downwardAPI").child("defaultMode"),
                errs,
            );
        }
        if let Some(pr) = &v.projected {
            file_mode(
                pr.default_mode,
                &vp.child("projected").child("defaultMode"),
                errs,
            );
        }
    }
    names
}

fn validate_probe(probe: &core::Probe, path: &FieldPath, errs: &mut Errs) {
    let mut handlers = Vec::new();
    if probe.exec.is_some() {
        handlers.push("exec");
    }
    if probe.http_get.is_some() {
        handlers.push("httpGet");
    }
    if probe.tcp_socket.is_some() {
        handlers.push("tcpSocket");
    }
    if probe.grpc.is_some() {
        handlers.push("grpc");
    }
    match handlers.as_slice() {
        [] => errs.push(FieldError::required(path, "must specify a handler type")),
        [_] => {}
        [_, second, ..] => errs.push(FieldError::forbidden(
            &path.child(second),
            "may not specify more than 1 handler type",
        )),
    }
    for (v, name) in [
        (probe.initial_delay_seconds, "initialDelaySeconds"),
        (probe.timeout_seconds, "timeoutSeconds"),
        (probe.period_seconds, "periodSeconds"),
        (probe.success_threshold, "successThreshold"),
        (probe.failure_threshold, "failureThreshold"),
    ] {
        nonnegative(v.map(i64::from), &path.child(name), errs);
    }
    if let Some(t) = probe.termination_grace_period_seconds
        && t <= 0
    {
        errs.push(FieldError::invalid(
            &path.child("terminationGracePeriodSeconds"),
            t,
            "must be greater than 0",
        ));
    }
    if let Some(h) = &probe.http_get {
        validate_http_get(h, &path.child("httpGet"), errs);
    }
    if let Some(t) = &probe.tcp_socket {
        port_num_or_name(&t.port, &path.child("tcpSocket").child("port"), errs);
    }
    if let Some(g) = &probe.grpc {
        port_num(g.port, &path.child("grpc").child("port"), errs);
    }
}

fn validate_http_get(h: &core::HTTPGetAction, path: &FieldPath, errs: &mut Errs) {
    if s(&h.path).is_empty() {
        errs.push(FieldError::required(&path.child("path"), ""));
    }
    port_num_or_name(&h.port, &path.child("port"), errs);
    if let Some(scheme) = &h.scheme
        && !["HTTP", "HTTPS"].contains(&scheme.as_str())
    {
        errs.push(FieldError::not_supported(
            &path.child("scheme"),
            scheme.as_str(),
            &["HTTP", "HTTPS"],
        ));
    }
}

fn is_standard_container_resource(name: &str) -> bool {
    matches!(name, "cpu" | "memory" | "ephemeral-storage") || name.starts_with("hugepages-")
}

/// `ValidateResourceRequirements` for a container (and a RuntimeClass overhead).
pub(crate) fn validate_resources(
    r: &core::ResourceRequirements,
    path: &FieldPath,
    errs: &mut Errs,
) {
    let mut limit_values = BTreeMap::new();
    for (name, q) in r.limits.iter().flatten() {
        let lp = path.child("limits").key(name);
        resource_name(name, &lp, errs);
        if let Some(v) = quantity(&q.0, &lp, errs) {
            limit_values.insert(name.as_str(), (v, q));
        }
    }
    for (name, q) in r.requests.iter().flatten() {
        let rp = path.child("requests").key(name);
        resource_name(name, &rp, errs);
        let Some(v) = quantity(&q.0, &rp, errs) else {
            continue;
        };
        match limit_values.get(name.as_str()) {
            Some((lim, lq)) if v > *lim => errs.push(FieldError::invalid(
                &rp,
                q.0.as_str(),
                format!("must be less than or equal to {name} limit of {}", lq.0),
            )),
            Some((lim, lq)) if !is_overcommittable(name) && v != *lim => {
                errs.push(FieldError::invalid(
                    &rp,
                    q.0.as_str(),
                    format!("must be equal to {name} limit of {}", lq.0),
                ))
            }
            None if !is_overcommittable(name) => errs.push(FieldError::required(
                &path.child("limits"),
                "Limit must be set for non overcommitable resources",
            )),
            _ => {}
        }
    }
}

fn is_overcommittable(name: &str) -> bool {
    // Extended resources (outside kubernetes.io) and hugepages cannot be overcommitted.
    !name.starts_with("hugepages-") && (!name.contains('/') || name.contains("kubernetes.io/"))
}

fn resource_name(name: &str, path: &FieldPath, errs: &mut Errs) {
    if name.contains('/') {
        qualified_name(name, path, errs);
    } else if !is_standard_container_resource(name) {
        errs.push(FieldError::invalid(
            path,
            name,
            "must be a standard resource for containers",
        ));
    }
}

/// Upstream's `validateMountPropagation`: a known mode, and `Bidirectional` only for a
/// privileged container.
fn validate_mount_propagation(
    m: &core::VolumeMount,
    privileged: bool,
    mounts: &FieldPath,
    errs: &mut Errs,
) {
    let Some(mode) = m.mount_propagation.as_deref() else {
        return;
    };
    let path = mounts.child("mountPropagation");
    enum_optional(
        &m.mount_propagation,
        &["Bidirectional", "HostToContainer", "None"],
        &path,
        errs,
    );
    if mode == "Bidirectional" && !privileged {
        errs.push(FieldError::forbidden(
            &path,
            "Bidirectional mount propagation is available only to privileged containers",
        ));
    }
}

/// Upstream's `validateMountRecursiveReadOnly`: `Enabled` and `IfPossible` only on a
/// read-only mount without propagation.
fn validate_mount_recursive_read_only(m: &core::VolumeMount, path: &FieldPath, errs: &mut Errs) {
    match m.recursive_read_only.as_deref() {
        None | Some("Disabled") => {}
        Some("Enabled" | "IfPossible") => {
            if m.read_only != Some(true) {
                errs.push(FieldError::forbidden(
                    path,
                    "may only be specified when readOnly is true",
                ));
            }
            if m.mount_propagation.as_deref().is_some_and(|p| p != "None") {
                errs.push(FieldError::forbidden(
                    path,
                    "may only be specified when mountPropagation is None or not specified",
                ));
            }
        }
        Some(other) => errs.push(FieldError::not_supported(
            path,
            other,
            &["Disabled", "Enabled", "IfPossible"],
        )),
    }
}

/// The fields common to containers, init containers and ephemeral containers.
struct ContainerView<'a> {
    name: &'a str,
    image: &'a Option<String>,
    image_pull_policy: &'a Option<String>,
    termination_message_policy: &'a Option<String>,
    ports: Option<&'a Vec<core::ContainerPort>>,
    env: Option<&'a Vec<core::EnvVar>>,
    env_from: Option<&'a Vec<core::EnvFromSource>>,
    volume_mounts: Option<&'a Vec<core::VolumeMount>>,
    resources: Option<&'a core::ResourceRequirements>,
    liveness: Option<&'a core::Probe>,
    readiness: Option<&'a core::Probe>,
    startup: Option<&'a core::Probe>,
    lifecycle: Option<&'a core::Lifecycle>,
    restart_policy: &'a Option<String>,
    privileged: bool,
}

macro_rules! view {
    ($c:expr) => {
        ContainerView {
            name: &$c.name,
            image: &$c.image,
            image_pull_policy: &$c.image_pull_policy,
            termination_message_policy: &$c.termination_message_policy,
            ports: $c.ports.as_ref(),
            env: $c.env.as_ref(),
            env_from: $c.env_from.as_ref(),
            volume_mounts: $c.volume_mounts.as_ref(),
            resources: $c.resources.as_ref(),
            liveness: $c.liveness_probe.as_ref(),
            readiness: $c.readiness_probe.as_ref(),
            startup: $c.startup_probe.as_ref(),
            lifecycle: $c.lifecycle.as_ref(),
            restart_policy: &$c.restart_policy,
            privileged: $c
                .security_context
                .as_ref()
                .and_then(|s| s.privileged)
                .unwrap_or(false),
        }
    };
}

#[derive(Clone, Copy, PartialEq)]
enum ContainerKind {
    Regular,
    Init,
    Ephemeral,
}

fn validate_container(
    c: &ContainerView<'_>,
    kind: ContainerKind,
    volumes: &BTreeSet<String>,
    names: &mut BTreeSet<String>,
    path: &FieldPath,
    errs: &mut Errs,
) {
    if c.name.is_empty() {
        errs.push(FieldError::required(&path.child("name"), ""));
    } else {
        dns_label(c.name, &path.child("name"), errs);
        if !names.insert(c.name.to_owned()) {
            errs.push(FieldError::duplicate(&path.child("name"), c.name));
        }
    }
    let image = s(c.image);
    if image.is_empty() {
        errs.push(FieldError::required(&path.child("image"), ""));
    } else if image.trim() != image {
        errs.push(FieldError::invalid(
            &path.child("image"),
            image,
            "must not have leading or trailing whitespace",
        ));
    }
    enum_required(
        s(c.image_pull_policy),
        PULL_POLICIES,
        &path.child("imagePullPolicy"),
        errs,
    );
    enum_required(
        s(c.termination_message_policy),
        TERMINATION_MESSAGE_POLICIES,
        &path.child("terminationMessagePolicy"),
        errs,
    );
    match (kind, c.restart_policy.as_deref()) {
        (_, None) => {}
        (ContainerKind::Init, Some("Always")) => {}
        (ContainerKind::Init, Some(other)) => errs.push(FieldError::not_supported(
            &path.child("restartPolicy"),
            other,
            &["Always"],
        )),
        (_, Some(_)) => errs.push(FieldError::forbidden(
            &path.child("restartPolicy"),
            "may not be set for non-init containers",
        )),
    }
    let mut port_names = BTreeSet::new();
    for (i, port) in c.ports.into_iter().flatten().enumerate() {
        let pp = path.child("ports").index(i);
        if kind == ContainerKind::Ephemeral {
            errs.push(FieldError::forbidden(
                &path.child("ports"),
                "cannot be set on ephemeral containers",
            ));
            break;
        }
        if let Some(name) = port.name.as_deref().filter(|n| !n.is_empty()) {
            msgs_invalid(
                ferrokube_apimachinery::validation::is_valid_port_name(name),
                name,
                &pp.child("name"),
                errs,
            );
            if !port_names.insert(name.to_owned()) {
                errs.push(FieldError::duplicate(&pp.child("name"), name));
            }
        }
        if port.container_port == 0 {
            errs.push(FieldError::required(&pp.child("containerPort"), ""));
        } else {
            port_num(port.container_port, &pp.child("containerPort"), errs);
        }
        if let Some(hp) = port.host_port
            && hp != 0
        {
            port_num(hp, &pp.child("hostPort"), errs);
        }
        enum_required(s(&port.protocol), PROTOCOLS, &pp.child("protocol"), errs);
        if let Some(ip_value) = port.host_ip.as_deref().filter(|h| !h.is_empty()) {
            ip(ip_value, &pp.child("hostIP"), errs);
        }
    }
    for (i, env) in c.env.into_iter().flatten().enumerate() {
        let ep = path.child("env").index(i);
        if env.name.is_empty() {
            errs.push(FieldError::required(&ep.child("name"), ""));
        } else {
            msgs_invalid(
                is_env_var_name(&env.name),
                &env.name,
                &ep.child("name"),
                errs,
            );
        }
        if let Some(vf) = &env.value_from {
            let vp = ep.child("valueFrom");
            let count = [
                vf.field_ref.is_some(),
                vf.resource_field_ref.is_some(),
                vf.config_map_key_ref.is_some(),
                vf.secret_key_ref.is_some(),
            ]
            .into_iter()
            .filter(|b| *b)
            .count();
            if !s(&env.value).is_empty() && count != 0 {
                errs.push(FieldError::invalid(
                    &vp,
                    "",
                    "may not be specified when `value` is not empty",
                ));
            }
            if count == 0 {
                errs.push(FieldError::invalid(
                    &vp,
                    "",
                    "must specify one of: `fieldRef`, `resourceFieldRef`, `configMapKeyRef` or `secretKeyRef`",
                ));
            } else if count > 1 {
                errs.push(FieldError::invalid(
                    &vp,
                    "",
                    "may not have more than one field specified at a time",
                ));
            }
            if let Some(f) = &vf.field_ref
                && f.field_path.is_empty()
            {
                errs.push(FieldError::required(
                    &vp.child("fieldRef").child("fieldPath"),
                    "",
                ));
            }
            if let Some(k) = &vf.config_map_key_ref {
                if k.key.is_empty() {
                    errs.push(FieldError::required(
                        &vp.child("configMapKeyRef").child("key"),
                        "",
                    ));
                } else {
                    msgs_invalid(
                        is_config_map_key(&k.key),
                        &k.key,
                        &vp.child("configMapKeyRef").child("key"),
                        errs,
                    );
                }
            }
            if let Some(k) = &vf.secret_key_ref {
                if k.key.is_empty() {
                    errs.push(FieldError::required(
                        &vp.child("secretKeyRef").child("key"),
                        "",
                    ));
                } else {
                    msgs_invalid(
                        is_config_map_key(&k.key),
                        &k.key,
                        &vp.child("secretKeyRef").child("key"),
                        errs,
                    );
                }
            }
            if let Some(r) = &vf.resource_field_ref
                && r.resource.is_empty()
            {
                errs.push(FieldError::required(
                    &vp.child("resourceFieldRef").child("resource"),
                    "",
                ));
            }
        }
    }
    for (i, ef) in c.env_from.into_iter().flatten().enumerate() {
        let ep = path.child("envFrom").index(i);
        match (&ef.config_map_ref, &ef.secret_ref) {
            (None, None) => errs.push(FieldError::invalid(
                &ep,
                "",
                "must specify one of: `configMapRef` or `secretRef`",
            )),
            (Some(_), Some(_)) => errs.push(FieldError::invalid(
                &ep,
                "",
                "may not have more than one field specified at a time",
            )),
            _ => {}
        }
        if let Some(prefix) = ef.prefix.as_deref().filter(|p| !p.is_empty()) {
            msgs_invalid(is_env_var_name(prefix), prefix, &ep.child("prefix"), errs);
        }
    }
    let mut mount_paths = BTreeSet::new();
    for (i, m) in c.volume_mounts.into_iter().flatten().enumerate() {
        let mp = path.child("volumeMounts").index(i);
        if m.name.is_empty() {
            errs.push(FieldError::required(&mp.child("name"), ""));
        } else if !volumes.contains(&m.name) {
            errs.push(FieldError::not_found(&mp.child("name"), m.name.as_str()));
        }
        if m.mount_path.is_empty() {
            errs.push(FieldError::required(&mp.child("mountPath"), ""));
        } else if !mount_paths.insert(m.mount_path.clone()) {
            errs.push(FieldError::invalid(
                &mp.child("mountPath"),
                m.mount_path.as_str(),
                "must be unique",
            ));
        }
        // Upstream names the paths of these checks without the mount's index
        // (`spec.containers[0].volumeMounts.subPath`), and so do we.
        let unindexed = path.child("volumeMounts");
        let sub_path = m.sub_path.as_deref().filter(|p| !p.is_empty());
        if let Some(sub) = sub_path {
            local_descending_path(sub, &unindexed.child("subPath"), errs);
        }
        if let Some(expr) = m.sub_path_expr.as_deref().filter(|p| !p.is_empty()) {
            if sub_path.is_some() {
                errs.push(FieldError::invalid(
                    &mp.child("subPathExpr"),
                    expr,
                    "subPathExpr and subPath are mutually exclusive",
                ));
            }
            local_descending_path(expr, &unindexed.child("subPathExpr"), errs);
        }
        validate_mount_propagation(m, c.privileged, &unindexed, errs);
        validate_mount_recursive_read_only(m, &unindexed.child("recursiveReadOnly"), errs);
    }
    if let Some(r) = c.resources {
        validate_resources(r, &path.child("resources"), errs);
    }
    let restartable_init =
        kind == ContainerKind::Init && c.restart_policy.as_deref() == Some("Always");
    for (probe, name) in [
        (c.liveness, "livenessProbe"),
        (c.readiness, "readinessProbe"),
        (c.startup, "startupProbe"),
    ] {
        let Some(probe) = probe else { continue };
        let pp = path.child(name);
        if kind == ContainerKind::Ephemeral || (kind == ContainerKind::Init && !restartable_init) {
            errs.push(FieldError::forbidden(
                &pp,
                format!("may not be set for {}", kind_name(kind)),
            ));
            continue;
        }
        validate_probe(probe, &pp, errs);
        if name == "readinessProbe" {
            if probe.termination_grace_period_seconds.is_some() {
                errs.push(FieldError::invalid(
                    &pp.child("terminationGracePeriodSeconds"),
                    probe.termination_grace_period_seconds.unwrap_or_default(),
                    "must not be set for readinessProbes",
                ));
            }
        } else if let Some(st) = probe.success_threshold
            && st != 1
        {
            errs.push(FieldError::invalid(
                &pp.child("successThreshold"),
                st,
                "must be 1",
            ));
        }
    }
    if let Some(l) = c.lifecycle {
        for (h, name) in [(&l.post_start, "postStart"), (&l.pre_stop, "preStop")] {
            let Some(h) = h else { continue };
            let hp = path.child("lifecycle").child(name);
            let n = [
                h.exec.is_some(),
                h.http_get.is_some(),
                h.tcp_socket.is_some(),
                h.sleep.is_some(),
            ]
            .into_iter()
            .filter(|b| *b)
            .count();
            if n == 0 {
                errs.push(FieldError::required(&hp, "must specify a handler type"));
            } else if n > 1 {
                errs.push(FieldError::forbidden(
                    &hp,
                    "may not specify more than 1 handler type",
                ));
            }
            if let Some(g) = &h.http_get {
                validate_http_get(g, &hp.child("httpGet"), errs);
            }
            if let Some(t) = &h.tcp_socket {
                port_num_or_name(&t.port, &hp.child("tcpSocket").child("port"), errs);
            }
        }
    }
}

fn kind_name(kind: ContainerKind) -> &'static str {
    match kind {
        ContainerKind::Init => "init containers",
        ContainerKind::Ephemeral => "ephemeral containers",
        ContainerKind::Regular => "containers",
    }
}

pub(crate) fn validate_tolerations(
    tolerations: &[core::Toleration],
    path: &FieldPath,
    errs: &mut Errs,
) {
    for (i, t) in tolerations.iter().enumerate() {
        let tp = path.index(i);
        let key = s(&t.key);
        let op = s(&t.operator);
        if !key.is_empty() {
            errs.extend(ferrokube_apimachinery::validation::validate_label_name(
                key,
                &tp.child("key"),
            ));
        } else if op != "Exists" {
            errs.push(FieldError::invalid(
                &tp.child("operator"),
                op,
                "operator must be Exists when `key` is empty, which means \"match all values and all keys\"",
            ));
        }
        if t.toleration_seconds.is_some() && s(&t.effect) != "NoExecute" {
            errs.push(FieldError::invalid(
                &tp.child("effect"),
                s(&t.effect),
                "effect must be 'NoExecute' when `tolerationSeconds` is set",
            ));
        }
        match op {
            "" | "Equal" => msgs_invalid(
                ferrokube_apimachinery::validation::is_valid_label_value(s(&t.value)),
                s(&t.value),
                &tp.child("value"),
                errs,
            ),
            "Exists" => {
                if !s(&t.value).is_empty() {
                    errs.push(FieldError::invalid(
                        &tp.child("operator"),
                        s(&t.value),
                        "value must be empty when `operator` is 'Exists'",
                    ));
                }
            }
            other => errs.push(FieldError::not_supported(
                &tp.child("operator"),
                other,
                &["Equal", "Exists"],
            )),
        }
        if !s(&t.effect).is_empty() {
            enum_required(s(&t.effect), TAINT_EFFECTS, &tp.child("effect"), errs);
        }
    }
}

/// `ValidatePodSpec` at `path` (`spec` or `spec.template.spec`).
pub fn validate_pod_spec(spec: &core::PodSpec, path: &FieldPath, errs: &mut Errs) {
    let volumes = validate_volumes(
        spec.volumes.as_deref().unwrap_or(&[]),
        &path.child("volumes"),
        errs,
    );
    let mut names = BTreeSet::new();
    for (i, c) in spec.init_containers.iter().flatten().enumerate() {
        let v = view!(c);
        validate_container(
            &v,
            ContainerKind::Init,
            &volumes,
            &mut names,
            &path.child("initContainers").index(i),
            errs,
        );
    }
    if spec.containers.is_empty() {
        errs.push(FieldError::required(&path.child("containers"), ""));
    }
    let pod_restart = spec.restart_policy.as_deref().unwrap_or("Always");
    for (i, c) in spec.init_containers.iter().flatten().enumerate() {
        if c.restart_policy.as_deref() == Some("Always") {
            let rp = path.child("initContainers").index(i).child("resizePolicy");
            validate_resize_policy(c.resize_policy.as_deref(), pod_restart, &rp, errs);
        }
    }
    for (i, c) in spec.containers.iter().enumerate() {
        let rp = path.child("containers").index(i).child("resizePolicy");
        validate_resize_policy(c.resize_policy.as_deref(), pod_restart, &rp, errs);
    }
    for (i, c) in spec.containers.iter().enumerate() {
        let v = view!(c);
        validate_container(
            &v,
            ContainerKind::Regular,
            &volumes,
            &mut names,
            &path.child("containers").index(i),
            errs,
        );
    }
    for (i, c) in spec.ephemeral_containers.iter().flatten().enumerate() {
        let v = view!(c);
        validate_container(
            &v,
            ContainerKind::Ephemeral,
            &volumes,
            &mut names,
            &path.child("ephemeralContainers").index(i),
            errs,
        );
        if let Some(target) = c.target_container_name.as_deref().filter(|t| !t.is_empty())
            && !spec.containers.iter().any(|k| k.name == target)
            && !spec
                .init_containers
                .iter()
                .flatten()
                .any(|k| k.name == target)
        {
            errs.push(FieldError::not_found(
                &path
                    .child("ephemeralContainers")
                    .index(i)
                    .child("targetContainerName"),
                target,
            ));
        }
    }
    let rp = path.child("restartPolicy");
    match spec.restart_policy.as_deref() {
        None | Some("") => errs.push(FieldError::required(&rp, "")),
        Some(r) if !RESTART_POLICIES.contains(&r) => {
            errs.push(FieldError::not_supported(&rp, r, RESTART_POLICIES))
        }
        _ => {}
    }
    enum_required(
        s(&spec.dns_policy),
        DNS_POLICIES,
        &path.child("dnsPolicy"),
        errs,
    );
    if s(&spec.dns_policy) == "None" && spec.dns_config.is_none() {
        errs.push(FieldError::required(
            &path.child("dnsConfig"),
            "must provide `dnsConfig` when `dnsPolicy` is None",
        ));
    }
    if let Some(sel) = &spec.node_selector {
        errs.extend(validate_labels(sel, &path.child("nodeSelector")));
    }
    if let Some(sa) = spec
        .service_account_name
        .as_deref()
        .filter(|n| !n.is_empty())
    {
        dns_subdomain(sa, &path.child("serviceAccountName"), errs);
    }
    if let Some(node) = spec.node_name.as_deref().filter(|n| !n.is_empty()) {
        dns_subdomain(node, &path.child("nodeName"), errs);
    }
    if let Some(ads) = spec.active_deadline_seconds
        && !(1..=i64::from(i32::MAX)).contains(&ads)
    {
        errs.push(FieldError::invalid(
            &path.child("activeDeadlineSeconds"),
            ads,
            inclusive_range_error(1, i32::MAX.into()),
        ));
    }
    if let Some(h) = spec.hostname.as_deref().filter(|n| !n.is_empty()) {
        dns_label(h, &path.child("hostname"), errs);
    }
    if let Some(sd) = spec.subdomain.as_deref().filter(|n| !n.is_empty()) {
        dns_label(sd, &path.child("subdomain"), errs);
    }
    if let Some(t) = &spec.tolerations {
        validate_tolerations(t, &path.child("tolerations"), errs);
    }
    if let Some(pc) = spec
        .priority_class_name
        .as_deref()
        .filter(|n| !n.is_empty())
    {
        dns_subdomain(pc, &path.child("priorityClassName"), errs);
    }
    // Upstream `ValidateRuntimeClassName`: any set value, even "", is a class name.
    if let Some(rc) = &spec.runtime_class_name {
        dns_subdomain(rc, &path.child("runtimeClassName"), errs);
    }
    // Upstream `validateOverhead`: checked as container limits are (RuntimeClass
    // admission sets it; pod templates carry it unchecked by admission).
    if let Some(overhead) = &spec.overhead {
        let as_limits = core::ResourceRequirements {
            limits: Some(overhead.clone()),
            ..Default::default()
        };
        validate_resources(&as_limits, &path.child("overhead"), errs);
    }
    enum_optional(
        &spec.preemption_policy,
        &["Never", "PreemptLowerPriority"],
        &path.child("preemptionPolicy"),
        errs,
    );
    if spec.host_network == Some(true) {
        let all = spec
            .containers
            .iter()
            .chain(spec.init_containers.iter().flatten());
        for (ci, c) in all.enumerate() {
            for (pi, port) in c.ports.iter().flatten().enumerate() {
                if port.host_port.is_some_and(|h| h != port.container_port) {
                    let base = if ci < spec.containers.len() {
                        path.child("containers").index(ci)
                    } else {
                        path.child("initContainers")
                            .index(ci - spec.containers.len())
                    };
                    errs.push(FieldError::invalid(
                        &base.child("ports").index(pi).child("hostPort"),
                        port.host_port.unwrap_or_default(),
                        "must match `containerPort` when `hostNetwork` is true",
                    ));
                }
            }
        }
    }
}

/// `ValidatePodTemplateSpec`: template labels/annotations and the pod spec.
pub fn validate_pod_template_spec(t: &core::PodTemplateSpec, path: &FieldPath, errs: &mut Errs) {
    if let Some(meta) = &t.metadata {
        if let Some(l) = &meta.labels {
            errs.extend(validate_labels(l, &path.child("metadata").child("labels")));
        }
        if let Some(a) = &meta.annotations {
            errs.extend(validate_annotations(
                a,
                &path.child("metadata").child("annotations"),
            ));
        }
    }
    match &t.spec {
        Some(spec) => validate_pod_spec(spec, &path.child("spec"), errs),
        None => errs.push(FieldError::required(
            &path.child("spec").child("containers"),
            "",
        )),
    }
}

const POD_UPDATE_FORBIDDEN: &str = "pod updates may not change fields other than `spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)";

impl Validate for core::Pod {
    fn validate_create(&self) -> Vec<FieldError> {
        let mut errs = Vec::new();
        match &self.spec {
            Some(spec) => validate_pod_spec(spec, &p("spec"), &mut errs),
            None => errs.push(FieldError::required(&p("spec").child("containers"), "")),
        }
        errs
    }

    fn validate_update(&self, old: &Self) -> Vec<FieldError> {
        let mut errs = self.validate_create();
        let default = core::PodSpec::default();
        let new_spec = self.spec.as_ref().unwrap_or(&default);
        let old_spec = old.spec.as_ref().unwrap_or(&default);
        let sp = p("spec");
        validate_ephemeral_containers_update(new_spec, old_spec, &sp, &mut errs);
        if new_spec.containers.len() != old_spec.containers.len()
            || new_spec.init_containers.as_ref().map_or(0, Vec::len)
                != old_spec.init_containers.as_ref().map_or(0, Vec::len)
        {
            errs.push(FieldError::forbidden(
                &sp.child("containers"),
                "pod updates may not add or remove containers",
            ));
            return errs;
        }
        match (
            new_spec.active_deadline_seconds,
            old_spec.active_deadline_seconds,
        ) {
            (Some(n), Some(o)) if n > o => errs.push(FieldError::invalid(
                &sp.child("activeDeadlineSeconds"),
                n,
                "must be less than or equal to previous value",
            )),
            (None, Some(_)) => errs.push(FieldError::invalid(
                &sp.child("activeDeadlineSeconds"),
                serde_json::Value::Null,
                "must not update from a positive integer to nil value",
            )),
            _ => {}
        }
        let old_tolerations = old_spec.tolerations.as_deref().unwrap_or(&[]);
        let new_tolerations = new_spec.tolerations.as_deref().unwrap_or(&[]);
        for (i, t) in old_tolerations.iter().enumerate() {
            let kept = new_tolerations.iter().any(|n| {
                n.key == t.key
                    && n.operator == t.operator
                    && n.value == t.value
                    && n.effect == t.effect
                    && (n.toleration_seconds == t.toleration_seconds
                        || (s(&t.effect) == "NoExecute" && n.toleration_seconds.is_some()))
            });
            if !kept {
                errs.push(FieldError::forbidden(
                    &sp.child("tolerations").index(i),
                    "existing toleration can not be modified except its tolerationSeconds",
                ));
            }
        }
        // Munge the mutable fields to their old values, then compare.
        let mut munged = new_spec.clone();
        for (n, o) in munged.containers.iter_mut().zip(&old_spec.containers) {
            n.image.clone_from(&o.image);
        }
        if let (Some(n), Some(o)) = (&mut munged.init_containers, &old_spec.init_containers) {
            for (n, o) in n.iter_mut().zip(o) {
                n.image.clone_from(&o.image);
            }
        }
        munged.active_deadline_seconds = old_spec.active_deadline_seconds;
        munged.tolerations.clone_from(&old_spec.tolerations);
        munged
            .scheduling_gates
            .clone_from(&old_spec.scheduling_gates);
        if old_spec
            .termination_grace_period_seconds
            .is_some_and(|t| t < 0)
            && munged.termination_grace_period_seconds == Some(1)
        {
            munged.termination_grace_period_seconds = old_spec.termination_grace_period_seconds;
        }
        if old_spec
            .scheduling_gates
            .as_ref()
            .is_some_and(|g| !g.is_empty())
        {
            // Gated pods may get node selectors and affinity added.
            munged.node_selector.clone_from(&old_spec.node_selector);
            munged.affinity.clone_from(&old_spec.affinity);
        }
        // The ephemeralContainers subresource owns ephemeral containers.
        munged
            .ephemeral_containers
            .clone_from(&old_spec.ephemeral_containers);
        if munged != *old_spec {
            let changed = changed_fields(&json(&munged), &json(old_spec));
            errs.push(FieldError::forbidden(
                &sp,
                format!("{POD_UPDATE_FORBIDDEN}\n  changed: {}", changed.join(", ")),
            ));
        }
        errs
    }
}

/// Ephemeral containers (changed only through `pods/ephemeralcontainers`) are only
/// ever added: an existing one may neither change nor go (upstream's
/// `ValidatePodEphemeralContainersUpdate`).
fn validate_ephemeral_containers_update(
    new: &core::PodSpec,
    old: &core::PodSpec,
    sp: &FieldPath,
    errs: &mut Errs,
) {
    let path = sp.child("ephemeralContainers");
    let new_ones = new.ephemeral_containers.as_deref().unwrap_or(&[]);
    for o in old.ephemeral_containers.iter().flatten() {
        match new_ones.iter().find(|n| n.name == o.name) {
            None => errs.push(FieldError::forbidden(
                &path,
                format!(
                    "existing ephemeral containers {:?} may not be removed\n",
                    o.name
                ),
            )),
            Some(n) if n != o => errs.push(FieldError::forbidden(
                &path,
                format!(
                    "existing ephemeral containers {:?} may not be changed\n",
                    o.name
                ),
            )),
            Some(_) => {}
        }
    }
}

/// The top-level keys whose values differ between two JSON objects.
fn changed_fields(new: &serde_json::Value, old: &serde_json::Value) -> Vec<String> {
    let empty = serde_json::Map::new();
    let n = new.as_object().unwrap_or(&empty);
    let o = old.as_object().unwrap_or(&empty);
    let keys: BTreeSet<&String> = n.keys().chain(o.keys()).collect();
    keys.into_iter()
        .filter(|k| n.get(*k) != o.get(*k))
        .map(|k| format!("spec.{k}"))
        .collect()
}

impl Validate for core::PodTemplate {
    fn validate_create(&self) -> Vec<FieldError> {
        let mut errs = Vec::new();
        match &self.template {
            Some(t) => validate_pod_template_spec(t, &p("template"), &mut errs),
            None => errs.push(FieldError::required(&p("template"), "")),
        }
        errs
    }
    fn validate_update(&self, _old: &Self) -> Vec<FieldError> {
        self.validate_create()
    }
}

impl Validate for core::ReplicationController {
    fn validate_create(&self) -> Vec<FieldError> {
        let mut errs = Vec::new();
        let sp = p("spec");
        let default = core::ReplicationControllerSpec::default();
        let spec = self.spec.as_ref().unwrap_or(&default);
        nonnegative(
            spec.replicas.map(i64::from),
            &sp.child("replicas"),
            &mut errs,
        );
        nonnegative(
            spec.min_ready_seconds.map(i64::from),
            &sp.child("minReadySeconds"),
            &mut errs,
        );
        let selector = spec.selector.clone().unwrap_or_default();
        if selector.is_empty() {
            errs.push(FieldError::required(&sp.child("selector"), ""));
        } else {
            errs.extend(validate_labels(&selector, &sp.child("selector")));
        }
        match &spec.template {
            None => errs.push(FieldError::required(&sp.child("template"), "")),
            Some(t) => {
                let labels = t
                    .metadata
                    .as_ref()
                    .and_then(|m| m.labels.clone())
                    .unwrap_or_default();
                if !selector.is_empty() && !selector.iter().all(|(k, v)| labels.get(k) == Some(v)) {
                    errs.push(FieldError::invalid(
                        &sp.child("template").child("metadata").child("labels"),
                        json(&labels),
                        "`selector` does not match template `labels`",
                    ));
                }
                validate_pod_template_spec(t, &sp.child("template"), &mut errs);
                let rp = t
                    .spec
                    .as_ref()
                    .and_then(|s| s.restart_policy.as_deref())
                    .unwrap_or("");
                if rp != "Always" {
                    errs.push(FieldError::not_supported(
                        &sp.child("template").child("spec").child("restartPolicy"),
                        rp,
                        &["Always"],
                    ));
                }
                if t.spec
                    .as_ref()
                    .is_some_and(|s| s.active_deadline_seconds.is_some())
                {
                    errs.push(FieldError::forbidden(
                        &sp.child("template")
                            .child("spec")
                            .child("activeDeadlineSeconds"),
                        "activeDeadlineSeconds in ReplicationController is not Supported",
                    ));
                }
            }
        }
        errs
    }
    fn validate_update(&self, _old: &Self) -> Vec<FieldError> {
        self.validate_create()
    }
}

// ---------------------------------------------------------------------------------
// services

const SERVICE_TYPES: &[&str] = &["ClusterIP", "ExternalName", "LoadBalancer", "NodePort"];

impl Validate for core::Service {
    fn validate_create(&self) -> Vec<FieldError> {
        let mut errs = Vec::new();
        let sp = p("spec");
        let default = core::ServiceSpec::default();
        let spec = self.spec.as_ref().unwrap_or(&default);
        let type_ = s(&spec.type_);
        let cluster_ip = s(&spec.cluster_ip);
        let headless = cluster_ip == "None";
        let ports = spec.ports.as_deref().unwrap_or(&[]);
        if ports.is_empty() && !headless && type_ != "ExternalName" {
            errs.push(FieldError::required(&sp.child("ports"), ""));
        }
        enum_required(type_, SERVICE_TYPES, &sp.child("type"), &mut errs);
        match type_ {
            "ExternalName" => {
                if !cluster_ip.is_empty() {
                    errs.push(FieldError::forbidden(
                        &sp.child("clusterIP"),
                        "may not be set for ExternalName services",
                    ));
                }
                let name = s(&spec.external_name);
                if name.is_empty() {
                    errs.push(FieldError::required(&sp.child("externalName"), ""));
                } else {
                    let trimmed = name.strip_suffix('.').unwrap_or(name);
                    msgs_invalid(
                        is_dns1123_subdomain(trimmed),
                        name,
                        &sp.child("externalName"),
                        &mut errs,
                    );
                }
                if spec.ip_family_policy.is_some() {
                    errs.push(FieldError::forbidden(
                        &sp.child("ipFamilyPolicy"),
                        "may not be set for ExternalName services",
                    ));
                }
                if spec.ip_families.as_ref().is_some_and(|f| !f.is_empty()) {
                    errs.push(FieldError::forbidden(
                        &sp.child("ipFamilies"),
                        "may not be set for ExternalName services",
                    ));
                }
            }
            "NodePort" | "LoadBalancer" if headless => errs.push(FieldError::invalid(
                &sp.child("clusterIPs").index(0),
                cluster_ip,
                format!("may not be set to 'None' for {type_} services"),
            )),
            _ => {}
        }
        if !cluster_ip.is_empty() && !headless {
            ip(cluster_ip, &sp.child("clusterIPs").index(0), &mut errs);
        }
        let mut names = BTreeSet::new();
        let mut keys = BTreeSet::new();
        let mut node_ports = BTreeSet::new();
        for (i, port) in ports.iter().enumerate() {
            let pp = sp.child("ports").index(i);
            let name = s(&port.name);
            if ports.len() > 1 && name.is_empty() {
                errs.push(FieldError::required(&pp.child("name"), ""));
            } else if !name.is_empty() {
                dns_label(name, &pp.child("name"), &mut errs);
                if !names.insert(name.to_owned()) {
                    errs.push(FieldError::duplicate(&pp.child("name"), name));
                }
            }
            port_num(port.port, &pp.child("port"), &mut errs);
            let protocol = s(&port.protocol);
            enum_required(protocol, PROTOCOLS, &pp.child("protocol"), &mut errs);
            if let Some(tp) = &port.target_port {
                port_num_or_name(tp, &pp.child("targetPort"), &mut errs);
            }
            if !keys.insert((port.port, protocol.to_owned())) {
                errs.push(FieldError::duplicate(
                    &pp,
                    serde_json::json!({"port": port.port, "protocol": protocol}),
                ));
            }
            if let Some(np) = port.node_port.filter(|n| *n != 0) {
                if type_ == "ClusterIP" || type_ == "ExternalName" {
                    errs.push(FieldError::forbidden(
                        &pp.child("nodePort"),
                        format!("may not be used when `type` is '{type_}'"),
                    ));
                } else {
                    port_num(np, &pp.child("nodePort"), &mut errs);
                    if !node_ports.insert((np, protocol.to_owned())) {
                        errs.push(FieldError::duplicate(&pp.child("nodePort"), np));
                    }
                }
            }
            if let Some(app) = port.app_protocol.as_deref() {
                qualified_name(app, &pp.child("appProtocol"), &mut errs);
            }
        }
        if let Some(sel) = &spec.selector {
            errs.extend(validate_labels(sel, &sp.child("selector")));
        }
        let affinity = s(&spec.session_affinity);
        enum_required(
            affinity,
            &["ClientIP", "None"],
            &sp.child("sessionAffinity"),
            &mut errs,
        );
        match affinity {
            "ClientIP" => {
                let t = spec
                    .session_affinity_config
                    .as_ref()
                    .and_then(|c| c.client_ip.as_ref())
                    .and_then(|c| c.timeout_seconds);
                if let Some(t) = t
                    && !(1..=86400).contains(&t)
                {
                    errs.push(FieldError::invalid(
                        &sp.child("sessionAffinityConfig")
                            .child("clientIP")
                            .child("timeoutSeconds"),
                        t,
                        "must be greater than 0 and less than 86400",
                    ));
                }
            }
            "None" if spec.session_affinity_config.is_some() => errs.push(FieldError::invalid(
                &sp.child("sessionAffinityConfig"),
                json(&spec.session_affinity_config),
                "must not be set when session affinity is None",
            )),
            _ => {}
        }
        let external = matches!(type_, "NodePort" | "LoadBalancer")
            || (type_ == "ClusterIP" && spec.external_ips.as_ref().is_some_and(|e| !e.is_empty()));
        let etp = s(&spec.external_traffic_policy);
        if external {
            enum_required(
                etp,
                &["Cluster", "Local"],
                &sp.child("externalTrafficPolicy"),
                &mut errs,
            );
        } else if !etp.is_empty() {
            errs.push(FieldError::invalid(
                &sp.child("externalTrafficPolicy"),
                etp,
                "may only be set for externally-accessible services",
            ));
        }
        if matches!(type_, "ClusterIP" | "NodePort" | "LoadBalancer") {
            enum_required(
                s(&spec.internal_traffic_policy),
                &["Cluster", "Local"],
                &sp.child("internalTrafficPolicy"),
                &mut errs,
            );
        }
        if let Some(hc) = spec.health_check_node_port.filter(|h| *h != 0)
            && !(type_ == "LoadBalancer" && etp == "Local")
        {
            errs.push(FieldError::invalid(
                &sp.child("healthCheckNodePort"),
                hc,
                "may only be set when `type` is 'LoadBalancer' and `externalTrafficPolicy` is 'Local'",
            ));
        }
        for (i, e) in spec.external_ips.iter().flatten().enumerate() {
            ip(e, &sp.child("externalIPs").index(i), &mut errs);
        }
        if let Some(ranges) = spec
            .load_balancer_source_ranges
            .as_ref()
            .filter(|r| !r.is_empty())
        {
            if type_ != "LoadBalancer" {
                errs.push(FieldError::forbidden(
                    &sp.child("loadBalancerSourceRanges"),
                    "may only be used when `type` is 'LoadBalancer'",
                ));
            }
            for (i, r) in ranges.iter().enumerate() {
                cidr(
                    r.trim(),
                    &sp.child("loadBalancerSourceRanges").index(i),
                    &mut errs,
                );
            }
        }
        if spec.allocate_load_balancer_node_ports.is_some() && type_ != "LoadBalancer" {
            errs.push(FieldError::forbidden(
                &sp.child("allocateLoadBalancerNodePorts"),
                "may only be used when `type` is 'LoadBalancer'",
            ));
        }
        if type_ == "LoadBalancer" && spec.allocate_load_balancer_node_ports.is_none() {
            errs.push(FieldError::required(
                &sp.child("allocateLoadBalancerNodePorts"),
                "",
            ));
        }
        enum_optional(
            &spec.ip_family_policy,
            &["PreferDualStack", "RequireDualStack", "SingleStack"],
            &sp.child("ipFamilyPolicy"),
            &mut errs,
        );
        let mut families = BTreeSet::new();
        for (i, f) in spec.ip_families.iter().flatten().enumerate() {
            let fp = sp.child("ipFamilies").index(i);
            if !["IPv4", "IPv6"].contains(&f.as_str()) {
                errs.push(FieldError::not_supported(
                    &fp,
                    f.as_str(),
                    &["IPv4", "IPv6"],
                ));
            } else if !families.insert(f.clone()) {
                errs.push(FieldError::duplicate(&fp, f.as_str()));
            }
        }
        errs
    }

    fn validate_update(&self, old: &Self) -> Vec<FieldError> {
        let mut errs = self.validate_create();
        let (Some(new_spec), Some(old_spec)) = (&self.spec, &old.spec) else {
            return errs;
        };
        let on_external_name =
            s(&new_spec.type_) == "ExternalName" || s(&old_spec.type_) == "ExternalName";
        let old_ip = s(&old_spec.cluster_ip);
        if !on_external_name && !old_ip.is_empty() && s(&new_spec.cluster_ip) != old_ip {
            immutable(
                &new_spec.cluster_ip,
                &old_spec.cluster_ip,
                &p("spec").child("clusterIP"),
                &mut errs,
            );
        }
        errs
    }
}

// ---------------------------------------------------------------------------------
// config maps and secrets

/// `core.MaxSecretSize`, also the config map limit.
pub const MAX_DATA_SIZE: usize = 1024 * 1024;

fn data_keys<'a>(keys: impl Iterator<Item = &'a String>, path: &FieldPath, errs: &mut Errs) {
    for key in keys {
        msgs_invalid(is_config_map_key(key), key, &path.key(key), errs);
    }
}

fn immutable_contents(
    new_immutable: Option<bool>,
    old_immutable: Option<bool>,
    contents: &[(&str, bool)],
    errs: &mut Errs,
) {
    if old_immutable == Some(true) {
        if new_immutable != Some(true) {
            errs.push(FieldError::forbidden(
                &p("immutable"),
                "field is immutable when `immutable` is set",
            ));
        }
        for (field, changed) in contents {
            if *changed {
                errs.push(FieldError::forbidden(
                    &p(field),
                    "field is immutable when `immutable` is set",
                ));
            }
        }
    }
}

impl Validate for core::ConfigMap {
    fn validate_create(&self) -> Vec<FieldError> {
        let mut errs = Vec::new();
        let data = self.data.clone().unwrap_or_default();
        let binary = self.binary_data.clone().unwrap_or_default();
        data_keys(data.keys(), &p("data"), &mut errs);
        data_keys(binary.keys(), &p("binaryData"), &mut errs);
        for key in binary.keys() {
            if data.contains_key(key) {
                errs.push(FieldError::invalid(
                    &p("binaryData").key(key),
                    key.as_str(),
                    "duplicate of key present in data",
                ));
            }
        }
        let size: usize = data.iter().map(|(k, v)| k.len() + v.len()).sum::<usize>()
            + binary
                .iter()
                .map(|(k, v)| k.len() + v.0.len())
                .sum::<usize>();
        if size > MAX_DATA_SIZE {
            errs.push(FieldError::too_long(&p(""), Some(MAX_DATA_SIZE)));
        }
        errs
    }
    fn validate_update(&self, old: &Self) -> Vec<FieldError> {
        let mut errs = self.validate_create();
        immutable_contents(
            self.immutable,
            old.immutable,
            &[
                ("data", self.data != old.data),
                ("binaryData", self.binary_data != old.binary_data),
            ],
            &mut errs,
        );
        errs
    }
}

fn secret_has(secret: &core::Secret, key: &str) -> bool {
    secret.data.as_ref().is_some_and(|d| d.contains_key(key))
        || secret
            .string_data
            .as_ref()
            .is_some_and(|d| d.contains_key(key))
}

fn secret_value(secret: &core::Secret, key: &str) -> Option<Vec<u8>> {
    secret
        .string_data
        .as_ref()
        .and_then(|d| d.get(key))
        .map(|v| v.as_bytes().to_vec())
        .or_else(|| {
            secret
                .data
                .as_ref()
                .and_then(|d| d.get(key))
                .map(|v| v.0.clone())
        })
}

impl Validate for core::Secret {
    fn validate_create(&self) -> Vec<FieldError> {
        let mut errs = Vec::new();
        let dp = p("data");
        let data = self.data.clone().unwrap_or_default();
        let string_data = self.string_data.clone().unwrap_or_default();
        data_keys(data.keys(), &dp, &mut errs);
        data_keys(
            string_data.keys().filter(|k| !data.contains_key(*k)),
            &dp,
            &mut errs,
        );
        let size: usize = data.values().map(|v| v.0.len()).sum::<usize>()
            + string_data
                .iter()
                .filter(|(k, _)| !data.contains_key(*k))
                .map(|(_, v)| v.len())
                .sum::<usize>();
        if size > MAX_DATA_SIZE {
            errs.push(FieldError::too_long(&dp, Some(MAX_DATA_SIZE)));
        }
        let required = |key: &str, errs: &mut Errs| {
            if !secret_has(self, key) {
                errs.push(FieldError::required(&dp.key(key), ""));
            }
        };
        match s(&self.type_) {
            "kubernetes.io/service-account-token" => {
                let has_name = self
                    .metadata
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get("kubernetes.io/service-account.name"))
                    .is_some_and(|n| !n.is_empty());
                if !has_name {
                    errs.push(FieldError::required(
                        &p("metadata")
                            .child("annotations")
                            .key("kubernetes.io/service-account.name"),
                        "",
                    ));
                }
            }
            t @ ("kubernetes.io/dockercfg" | "kubernetes.io/dockerconfigjson") => {
                let key = if t == "kubernetes.io/dockercfg" {
                    ".dockercfg"
                } else {
                    ".dockerconfigjson"
                };
                match secret_value(self, key) {
                    None => errs.push(FieldError::required(&dp.key(key), "")),
                    Some(v) => {
                        if let Err(e) =
                            serde_json::from_slice::<serde_json::Map<String, serde_json::Value>>(&v)
                        {
                            errs.push(FieldError::invalid(
                                &dp.key(key),
                                "<secret contents redacted>",
                                e.to_string(),
                            ));
                        }
                    }
                }
            }
            "kubernetes.io/basic-auth"
                if !secret_has(self, "username") && !secret_has(self, "password") =>
            {
                errs.push(FieldError::required(&dp.key("username"), ""));
                errs.push(FieldError::required(&dp.key("password"), ""));
            }
            "kubernetes.io/ssh-auth" => required("ssh-privatekey", &mut errs),
            "kubernetes.io/tls" => {
                required("tls.crt", &mut errs);
                required("tls.key", &mut errs);
            }
            _ => {}
        }
        errs
    }
    fn validate_update(&self, old: &Self) -> Vec<FieldError> {
        let mut errs = self.validate_create();
        immutable(&s(&self.type_), &s(&old.type_), &p("type"), &mut errs);
        immutable_contents(
            self.immutable,
            old.immutable,
            &[("data", self.data != old.data)],
            &mut errs,
        );
        errs
    }
}

// ---------------------------------------------------------------------------------
// namespaces and nodes

/// Finalizer names that need no domain prefix.
const STANDARD_FINALIZERS: &[&str] = &["kubernetes", "orphan", "foregroundDeletion"];

impl Validate for core::Namespace {
    fn validate_create(&self) -> Vec<FieldError> {
        let mut errs = Vec::new();
        let fp = p("spec").child("finalizers");
        for (i, f) in self
            .spec
            .iter()
            .flat_map(|s| s.finalizers.iter().flatten())
            .enumerate()
        {
            let before = errs.len();
            errs.extend(validate_finalizer_name(f, &fp.index(i)));
            // core's validateFinalizerName: an unqualified name must be a standard one.
            if errs.len() == before
                && !f.contains('/')
                && !STANDARD_FINALIZERS.contains(&f.as_str())
            {
                errs.push(FieldError::invalid(
                    &fp.index(i),
                    f.as_str(),
                    "name is neither a standard finalizer name nor is it fully qualified",
                ));
            }
        }
        errs
    }
    fn validate_update(&self, _old: &Self) -> Vec<FieldError> {
        self.validate_create()
    }
}

impl Validate for core::Node {
    fn validate_create(&self) -> Vec<FieldError> {
        let mut errs = Vec::new();
        let sp = p("spec");
        let Some(spec) = &self.spec else { return errs };
        let mut seen = BTreeSet::new();
        for (i, t) in spec.taints.iter().flatten().enumerate() {
            let tp = sp.child("taints").index(i);
            if t.key.is_empty() {
                errs.push(FieldError::required(&tp.child("key"), ""));
            } else {
                qualified_name(&t.key, &tp.child("key"), &mut errs);
            }
            if let Some(v) = t.value.as_deref() {
                msgs_invalid(
                    ferrokube_apimachinery::validation::is_valid_label_value(v),
                    v,
                    &tp.child("value"),
                    &mut errs,
                );
            }
            enum_required(&t.effect, TAINT_EFFECTS, &tp.child("effect"), &mut errs);
            if !seen.insert((t.key.clone(), t.effect.clone())) {
                errs.push(FieldError::duplicate(
                    &tp,
                    serde_json::json!({"key": t.key, "effect": t.effect}),
                ));
            }
        }
        if let Some(cidr_value) = spec.pod_cidr.as_deref().filter(|c| !c.is_empty()) {
            cidr(cidr_value, &sp.child("podCIDR"), &mut errs);
        }
        for (i, c) in spec.pod_cidrs.iter().flatten().enumerate() {
            cidr(c, &sp.child("podCIDRs").index(i), &mut errs);
        }
        errs
    }
    fn validate_update(&self, old: &Self) -> Vec<FieldError> {
        let mut errs = self.validate_create();
        let default = core::NodeSpec::default();
        let new_spec = self.spec.as_ref().unwrap_or(&default);
        let old_spec = old.spec.as_ref().unwrap_or(&default);
        if old_spec.pod_cidrs.as_ref().is_some_and(|c| !c.is_empty())
            && new_spec.pod_cidrs != old_spec.pod_cidrs
        {
            errs.push(FieldError::forbidden(
                &p("spec").child("podCIDRs"),
                "node updates may not change podCIDR except from \"\" to valid",
            ));
        }
        if !s(&old_spec.provider_id).is_empty() && new_spec.provider_id != old_spec.provider_id {
            errs.push(FieldError::forbidden(
                &p("spec").child("providerID"),
                "node updates may not change providerID except from \"\" to valid",
            ));
        }
        errs
    }
}

// ---------------------------------------------------------------------------------
// endpoints, events, service accounts

impl Validate for core::Endpoints {
    fn validate_create(&self) -> Vec<FieldError> {
        let mut errs = Vec::new();
        for (i, subset) in self.subsets.iter().flatten().enumerate() {
            let sp = p("subsets").index(i);
            let addrs = subset.addresses.iter().flatten().map(|a| ("addresses", a));
            let not_ready = subset
                .not_ready_addresses
                .iter()
                .flatten()
                .map(|a| ("notReadyAddresses", a));
            let mut idx: BTreeMap<&str, usize> = BTreeMap::new();
            for (field, a) in addrs.chain(not_ready) {
                let n = idx.entry(field).or_default();
                ip(&a.ip, &sp.child(field).index(*n).child("ip"), &mut errs);
                *n += 1;
            }
            let ports = subset.ports.as_deref().unwrap_or(&[]);
            for (j, port) in ports.iter().enumerate() {
                let pp = sp.child("ports").index(j);
                let name = s(&port.name);
                if ports.len() > 1 && name.is_empty() {
                    errs.push(FieldError::required(&pp.child("name"), ""));
                } else if !name.is_empty() {
                    dns_label(name, &pp.child("name"), &mut errs);
                }
                port_num(port.port, &pp.child("port"), &mut errs);
                enum_required(
                    s(&port.protocol),
                    PROTOCOLS,
                    &pp.child("protocol"),
                    &mut errs,
                );
            }
        }
        errs
    }
    fn validate_update(&self, _old: &Self) -> Vec<FieldError> {
        self.validate_create()
    }
}

impl Validate for core::Event {
    fn validate_create(&self) -> Vec<FieldError> {
        let mut errs = Vec::new();
        let ns = s(&self.metadata.namespace);
        let involved = s(&self.involved_object.namespace);
        let mismatch = if involved.is_empty() {
            !ns.is_empty() && ns != "default"
        } else {
            ns != involved
        };
        if mismatch {
            errs.push(FieldError::invalid(
                &p("involvedObject").child("namespace"),
                involved,
                "does not match event.namespace",
            ));
        }
        if let Some(t) = self.type_.as_deref().filter(|t| !t.is_empty())
            && !["Normal", "Warning"].contains(&t)
        {
            errs.push(FieldError::invalid(
                &p("type"),
                "",
                format!("has invalid value: {t}"),
            ));
        }
        errs
    }
    fn validate_update(&self, old: &Self) -> Vec<FieldError> {
        let mut errs = self.validate_create();
        immutable(
            &self.involved_object,
            &old.involved_object,
            &p("involvedObject"),
            &mut errs,
        );
        immutable(&self.reason, &old.reason, &p("reason"), &mut errs);
        immutable(&self.source, &old.source, &p("source"), &mut errs);
        errs
    }
}

crate::no_rules!(core::ServiceAccount);

// ---------------------------------------------------------------------------------
// limit ranges and quotas

type ResourceList = BTreeMap<String, Quantity>;

fn resource_list(
    list: Option<&ResourceList>,
    path: &FieldPath,
    errs: &mut Errs,
) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    for (name, q) in list.into_iter().flatten() {
        let rp = path.key(name);
        qualified_name(name, &rp, errs);
        if let Some(v) = quantity(&q.0, &rp, errs) {
            out.insert(name.clone(), v);
        }
    }
    out
}

impl Validate for core::LimitRange {
    fn validate_create(&self) -> Vec<FieldError> {
        let mut errs = Vec::new();
        let lp = p("spec").child("limits");
        for (i, item) in self.spec.iter().flat_map(|s| s.limits.iter()).enumerate() {
            let ip = lp.index(i);
            enum_required(
                &item.type_,
                &["Container", "Pod", "PersistentVolumeClaim"],
                &ip.child("type"),
                &mut errs,
            );
            let max = resource_list(item.max.as_ref(), &ip.child("max"), &mut errs);
            let min = resource_list(item.min.as_ref(), &ip.child("min"), &mut errs);
            let default = resource_list(item.default.as_ref(), &ip.child("default"), &mut errs);
            let default_request = resource_list(
                item.default_request.as_ref(),
                &ip.child("defaultRequest"),
                &mut errs,
            );
            resource_list(
                item.max_limit_request_ratio.as_ref(),
                &ip.child("maxLimitRequestRatio"),
                &mut errs,
            );
            if item.type_ == "Pod" {
                if item.default.as_ref().is_some_and(|d| !d.is_empty()) {
                    errs.push(FieldError::forbidden(
                        &ip.child("default"),
                        "may not be specified when `type` is 'Pod'",
                    ));
                }
                if item.default_request.as_ref().is_some_and(|d| !d.is_empty()) {
                    errs.push(FieldError::forbidden(
                        &ip.child("defaultRequest"),
                        "may not be specified when `type` is 'Pod'",
                    ));
                }
            }
            let raw = |list: &Option<ResourceList>, k: &str| {
                list.as_ref()
                    .and_then(|l| l.get(k))
                    .map(|q| q.0.clone())
                    .unwrap_or_default()
            };
            for (k, mn) in &min {
                if let Some(mx) = max.get(k)
                    && mn > mx
                {
                    errs.push(FieldError::invalid(
                        &ip.child("min").key(k),
                        raw(&item.min, k),
                        format!(
                            "min value {} is greater than max value {}",
                            raw(&item.min, k),
                            raw(&item.max, k)
                        ),
                    ));
                }
            }
            for (k, dr) in &default_request {
                if let Some(mn) = min.get(k)
                    && mn > dr
                {
                    errs.push(FieldError::invalid(
                        &ip.child("defaultRequest").key(k),
                        raw(&item.default_request, k),
                        format!(
                            "min value {} is greater than default request value {}",
                            raw(&item.min, k),
                            raw(&item.default_request, k)
                        ),
                    ));
                }
                if let Some(d) = default.get(k)
                    && dr > d
                {
                    errs.push(FieldError::invalid(
                        &ip.child("defaultRequest").key(k),
                        raw(&item.default_request, k),
                        format!(
                            "default request value {} is greater than default limit value {}",
                            raw(&item.default_request, k),
                            raw(&item.default, k)
                        ),
                    ));
                }
            }
            for (k, d) in &default {
                if let Some(mx) = max.get(k)
                    && d > mx
                {
                    errs.push(FieldError::invalid(
                        &ip.child("default").key(k),
                        raw(&item.default, k),
                        format!(
                            "default value {} is greater than max value {}",
                            raw(&item.default, k),
                            raw(&item.max, k)
                        ),
                    ));
                }
            }
        }
        errs
    }
    fn validate_update(&self, _old: &Self) -> Vec<FieldError> {
        self.validate_create()
    }
}

const QUOTA_SCOPES: &[&str] = &[
    "BestEffort",
    "CrossNamespacePodAffinity",
    "NotBestEffort",
    "NotTerminating",
    "PriorityClass",
    "Terminating",
    "VolumeAttributesClass",
];

impl Validate for core::ResourceQuota {
    fn validate_create(&self) -> Vec<FieldError> {
        let mut errs = Vec::new();
        let sp = p("spec");
        let Some(spec) = &self.spec else { return errs };
        resource_list(spec.hard.as_ref(), &sp.child("hard"), &mut errs);
        for (i, scope) in spec.scopes.iter().flatten().enumerate() {
            if !QUOTA_SCOPES.contains(&scope.as_str()) {
                errs.push(FieldError::not_supported(
                    &sp.child("scopes").index(i),
                    scope.as_str(),
                    QUOTA_SCOPES,
                ));
            }
        }
        for (i, req) in spec
            .scope_selector
            .iter()
            .flat_map(|s| s.match_expressions.iter().flatten())
            .enumerate()
        {
            let rp = sp.child("scopeSelector").child("matchExpressions").index(i);
            if !QUOTA_SCOPES.contains(&req.scope_name.as_str()) {
                errs.push(FieldError::not_supported(
                    &rp.child("scopeName"),
                    req.scope_name.as_str(),
                    QUOTA_SCOPES,
                ));
            }
            let values = req.values.as_deref().unwrap_or(&[]);
            match req.operator.as_str() {
                "In" | "NotIn" if values.is_empty() => errs.push(FieldError::required(
                    &rp.child("values"),
                    "must be at least one value when `operator` is 'In' or 'NotIn' for scope selector",
                )),
                "Exists" | "DoesNotExist" if !values.is_empty() => errs.push(FieldError::invalid(
                    &rp.child("values"),
                    json(&req.values),
                    "must be no value when `operator` is 'Exist' or 'DoesNotExist' for scope selector",
                )),
                "In" | "NotIn" | "Exists" | "DoesNotExist" => {}
                op => errs.push(FieldError::not_supported(
                    &rp.child("operator"),
                    op,
                    &["DoesNotExist", "Exists", "In", "NotIn"],
                )),
            }
        }
        errs
    }
    fn validate_update(&self, _old: &Self) -> Vec<FieldError> {
        self.validate_create()
    }
}

// ---------------------------------------------------------------------------------
// persistent volumes and claims

const ACCESS_MODES: &[&str] = &[
    "ReadOnlyMany",
    "ReadWriteMany",
    "ReadWriteOnce",
    "ReadWriteOncePod",
];

fn access_modes(
    modes: Option<&Vec<String>>,
    path: &FieldPath,
    required_detail: &str,
    errs: &mut Errs,
) {
    let modes = modes.map(Vec::as_slice).unwrap_or(&[]);
    if modes.is_empty() {
        errs.push(FieldError::required(path, required_detail));
    }
    for m in modes {
        if !ACCESS_MODES.contains(&m.as_str()) {
            errs.push(FieldError::not_supported(path, m.as_str(), ACCESS_MODES));
        }
    }
    if modes.len() > 1 && modes.iter().any(|m| m == "ReadWriteOncePod") {
        errs.push(FieldError::forbidden(
            path,
            "may not use ReadWriteOncePod with other access modes",
        ));
    }
}

fn pv_sources(spec: &core::PersistentVolumeSpec) -> Vec<&'static str> {
    let mut out = Vec::new();
    macro_rules! src {
        ($($field:ident => $name:literal),* $(,)?) => {$(
            if spec.$field.is_some() { out.push($name); }
        )*};
    }
    src!(
        gce_persistent_disk => "gcePersistentDisk", aws_elastic_block_store => "awsElasticBlockStore",
        host_path => "hostPath", glusterfs => "glusterfs", nfs => "nfs", rbd => "rbd", quobyte => "quobyte",
        iscsi => "iscsi", cinder => "cinder", cephfs => "cephfs", fc => "fc", flocker => "flocker",
        flex_volume => "flexVolume", azure_file => "azureFile", vsphere_volume => "vsphereVolume",
        azure_disk => "azureDisk", photon_persistent_disk => "photonPersistentDisk",
        portworx_volume => "portworxVolume", scale_io => "scaleIO", local => "local",
        storageos => "storageos", csi => "csi",
    );
    out
}

impl Validate for core::PersistentVolume {
    fn validate_create(&self) -> Vec<FieldError> {
        let mut errs = Vec::new();
        let sp = p("spec");
        let default = core::PersistentVolumeSpec::default();
        let spec = self.spec.as_ref().unwrap_or(&default);
        access_modes(
            spec.access_modes.as_ref(),
            &sp.child("accessModes"),
            "",
            &mut errs,
        );
        match &spec.capacity {
            None => errs.push(FieldError::required(&sp.child("capacity"), "")),
            Some(c) if c.len() != 1 || !c.contains_key("storage") => errs.push(
                FieldError::not_supported(&sp.child("capacity"), json(c), &["storage"]),
            ),
            Some(c) => {
                resource_list(Some(c), &sp.child("capacity"), &mut errs);
            }
        }
        enum_optional(
            &spec.persistent_volume_reclaim_policy,
            &["Delete", "Recycle", "Retain"],
            &sp.child("persistentVolumeReclaimPolicy"),
            &mut errs,
        );
        enum_optional(
            &spec.volume_mode,
            &["Block", "Filesystem"],
            &sp.child("volumeMode"),
            &mut errs,
        );
        match pv_sources(spec).as_slice() {
            [] => errs.push(FieldError::required(&sp, "must specify a volume type")),
            [_] => {}
            [_, second, ..] => errs.push(FieldError::forbidden(
                &sp.child(second),
                "may not specify more than 1 volume type",
            )),
        }
        if let Some(h) = &spec.host_path
            && h.path.is_empty()
        {
            errs.push(FieldError::required(
                &sp.child("hostPath").child("path"),
                "",
            ));
        }
        if let Some(l) = &spec.local
            && l.path.is_empty()
        {
            errs.push(FieldError::required(&sp.child("local").child("path"), ""));
        }
        if let Some(c) = &spec.csi
            && c.driver.is_empty()
        {
            errs.push(FieldError::required(&sp.child("csi").child("driver"), ""));
        }
        errs
    }
    fn validate_update(&self, old: &Self) -> Vec<FieldError> {
        let mut errs = self.validate_create();
        let (Some(new_spec), Some(old_spec)) = (&self.spec, &old.spec) else {
            return errs;
        };
        let source_of = |spec: &core::PersistentVolumeSpec| {
            let mut v = json(spec);
            if let Some(o) = v.as_object_mut() {
                for k in ferrokube_api::persistentvolume::SPEC_NON_SOURCE_FIELDS {
                    o.remove(*k);
                }
            }
            v
        };
        if source_of(new_spec) != source_of(old_spec) {
            errs.push(FieldError::forbidden(
                &p("spec").child("persistentvolumesource"),
                "spec.persistentvolumesource is immutable after creation",
            ));
        }
        immutable(
            &new_spec.volume_mode,
            &old_spec.volume_mode,
            &p("spec").child("volumeMode"),
            &mut errs,
        );
        errs
    }
}

/// `ValidatePersistentVolumeClaimSpec` at `path`.
pub fn validate_pvc_spec(
    spec: &core::PersistentVolumeClaimSpec,
    path: &FieldPath,
    errs: &mut Errs,
) {
    access_modes(
        spec.access_modes.as_ref(),
        &path.child("accessModes"),
        "at least 1 access mode is required",
        errs,
    );
    if let Some(sel) = &spec.selector {
        label_selector(sel, &path.child("selector"), errs);
    }
    let storage = spec
        .resources
        .as_ref()
        .and_then(|r| r.requests.as_ref())
        .and_then(|r| r.get("storage"));
    let rp = path.child("resources").key("storage");
    match storage {
        None => errs.push(FieldError::required(&rp, "")),
        Some(q) => {
            if let Some(v) = quantity(&q.0, &rp, errs)
                && v == 0.0
            {
                errs.push(FieldError::invalid(
                    &rp,
                    q.0.as_str(),
                    "must be greater than zero",
                ));
            }
        }
    }
    enum_optional(
        &spec.volume_mode,
        &["Block", "Filesystem"],
        &path.child("volumeMode"),
        errs,
    );
    if let Some(sc) = spec.storage_class_name.as_deref().filter(|n| !n.is_empty()) {
        dns_subdomain(sc, &path.child("storageClassName"), errs);
    }
}

impl Validate for core::PersistentVolumeClaim {
    fn validate_create(&self) -> Vec<FieldError> {
        let mut errs = Vec::new();
        let default = core::PersistentVolumeClaimSpec::default();
        validate_pvc_spec(
            self.spec.as_ref().unwrap_or(&default),
            &p("spec"),
            &mut errs,
        );
        errs
    }
    fn validate_update(&self, old: &Self) -> Vec<FieldError> {
        let mut errs = self.validate_create();
        let default = core::PersistentVolumeClaimSpec::default();
        let new_spec = self.spec.as_ref().unwrap_or(&default);
        let old_spec = old.spec.as_ref().unwrap_or(&default);
        let bound = old.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound");
        let mut munged = new_spec.clone();
        // The PV controller binds a claim by setting volumeName once.
        if s(&old_spec.volume_name).is_empty() {
            munged.volume_name.clone_from(&old_spec.volume_name);
        }
        if bound {
            let requests = |spec: &core::PersistentVolumeClaimSpec| {
                spec.resources.as_ref().and_then(|r| r.requests.clone())
            };
            let (new_req, old_req) = (requests(new_spec), requests(old_spec));
            if let Some(r) = &mut munged.resources {
                r.requests.clone_from(&old_req);
            }
            let size = |r: &Option<ResourceList>| {
                r.as_ref()
                    .and_then(|r| r.get("storage"))
                    .and_then(|q| parse_quantity(&q.0))
            };
            if let (Some(n), Some(o)) = (size(&new_req), size(&old_req))
                && n < o
            {
                errs.push(FieldError::forbidden(
                    &p("spec")
                        .child("resources")
                        .child("requests")
                        .child("storage"),
                    "field can not be less than status.capacity",
                ));
            }
        }
        if munged != *old_spec {
            errs.push(FieldError::forbidden(
                &p("spec"),
                "spec is immutable after creation except resources.requests for bound claims",
            ));
        }
        errs
    }
}

/// Upstream `ValidatePodResize` (`pods/<name>/resize`), but for the QoS class rule (the
/// registry checks it, where the class is computed): `new` differs from `old` only in
/// the containers' `resources` and `resizePolicy`.
pub fn validate_pod_resize(new: &core::Pod, old: &core::Pod) -> Vec<FieldError> {
    let mut errs = new.validate_create();
    let default = core::PodSpec::default();
    let new_spec = new.spec.as_ref().unwrap_or(&default);
    let old_spec = old.spec.as_ref().unwrap_or(&default);
    let root = FieldPath::new("[]");
    let pod_level = |s: &core::PodSpec| {
        s.resources.as_ref().is_some_and(|r| {
            r.requests.as_ref().map_or(0, BTreeMap::len)
                + r.limits.as_ref().map_or(0, BTreeMap::len)
                > 0
        })
    };
    if pod_level(old_spec) || pod_level(new_spec) {
        return vec![FieldError::forbidden(
            &root,
            "pods with pod-level resources cannot be resized",
        )];
    }
    let mirror = old
        .metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key("kubernetes.io/config.mirror"));
    if mirror {
        return vec![FieldError::forbidden(
            &root,
            "static pods cannot be resized",
        )];
    }
    if old_spec.os.as_ref().is_some_and(|o| o.name == "windows") {
        return vec![FieldError::forbidden(
            &root,
            "windows pods cannot be resized",
        )];
    }
    let sp = p("spec");
    if !resize_supported_by_node(old) {
        errs.push(FieldError::forbidden(
            &sp,
            "Pod running on node without support for resize",
        ));
    }
    let old_inits = old_spec.init_containers.as_deref().unwrap_or_default();
    let new_inits = new_spec.init_containers.as_deref().unwrap_or_default();
    for (i, o) in old_inits.iter().enumerate() {
        if o.restart_policy.as_deref() == Some("Always")
            && let Some(n) = new_inits.get(i)
        {
            let path = sp.child("initContainers").index(i).child("resources");
            validate_container_resize(n, o, &path, &mut errs);
        }
    }
    for (i, o) in old_spec.containers.iter().enumerate() {
        if let Some(n) = new_spec.containers.get(i) {
            let path = sp.child("containers").index(i).child("resources");
            validate_container_resize(n, o, &path, &mut errs);
        }
    }
    // Only cpu and memory may change: with theirs put back, the spec must be the old one.
    let mut munged = new_spec.clone();
    for (i, c) in munged.containers.iter_mut().enumerate() {
        if let Some(o) = old_spec.containers.get(i) {
            restore_cpu_memory(c, o);
            if c != o {
                errs.push(FieldError::forbidden(
                    &sp,
                    "only cpu and memory resources are mutable",
                ));
            }
        }
    }
    for (i, c) in munged.init_containers.iter_mut().flatten().enumerate() {
        let Some(o) = old_inits.get(i) else { continue };
        if o.restart_policy.as_deref() == Some("Always") {
            restore_cpu_memory(c, o);
            if c != o {
                errs.push(FieldError::forbidden(
                    &sp,
                    "only cpu and memory resources for sidecar containers are mutable",
                ));
            }
        } else if c != o {
            errs.push(FieldError::forbidden(
                &sp,
                "resources for non-sidecar init containers are immutable",
            ));
        }
    }
    if errs.is_empty() && munged != *old_spec {
        errs.push(FieldError::forbidden(
            &sp,
            "only cpu and memory resources are mutable",
        ));
    }
    errs
}

/// Upstream `isPodResizeRequestSupported`: a node that resizes reports the resources of
/// its running containers (`status.containerStatuses[*].resources`).
fn resize_supported_by_node(pod: &core::Pod) -> bool {
    let statuses = pod
        .status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref());
    match statuses
        .into_iter()
        .flatten()
        .find(|c| c.state.as_ref().is_some_and(|s| s.running.is_some()))
    {
        Some(running) => running.resources.is_some(),
        None => true,
    }
}

/// Upstream `validateContainerResize`: requests and limits are not removed, and without
/// a restart a memory limit is neither lowered nor added.
fn validate_container_resize(
    new: &core::Container,
    old: &core::Container,
    path: &FieldPath,
    errs: &mut Errs,
) {
    let empty = core::ResourceRequirements::default();
    let (n, o) = (
        new.resources.as_ref().unwrap_or(&empty),
        old.resources.as_ref().unwrap_or(&empty),
    );
    let removed = |new: &Option<BTreeMap<String, Quantity>>,
                   old: &Option<BTreeMap<String, Quantity>>| {
        let new = new.as_ref();
        old.iter()
            .flatten()
            .any(|(k, _)| !new.is_some_and(|n| n.contains_key(k)))
    };
    if removed(&n.requests, &o.requests) {
        errs.push(FieldError::forbidden(
            &path.child("requests"),
            "resource requests cannot be removed",
        ));
    }
    if removed(&n.limits, &o.limits) {
        errs.push(FieldError::forbidden(
            &path.child("limits"),
            "resource limits cannot be removed",
        ));
    }
    let memory_policy = new
        .resize_policy
        .iter()
        .flatten()
        .find(|p| p.resource_name == "memory")
        .map(|p| p.restart_policy.as_str())
        .unwrap_or("");
    if memory_policy == "NotRequired" || memory_policy.is_empty() {
        let limit = |r: &core::ResourceRequirements| {
            r.limits
                .as_ref()
                .and_then(|l| l.get("memory"))
                .map(|q| ferrokube_apimachinery::quantity::milli(&q.0))
        };
        let mp = path.child("limits").key("memory");
        match (limit(n), limit(o)) {
            (Some(new), Some(old)) if new < old => errs.push(FieldError::forbidden(
                &mp,
                "memory limits cannot be decreased unless resizePolicy is RestartContainer",
            )),
            (Some(_), None) => errs.push(FieldError::forbidden(
                &mp,
                "memory limits cannot be added unless resizePolicy is RestartContainer",
            )),
            _ => {}
        }
    }
}

/// Upstream `dropCPUMemoryResourcesFromContainer`: `c`'s cpu and memory requests and
/// limits as `old` has them, its other resources left as they are.
fn restore_cpu_memory(c: &mut core::Container, old: &core::Container) {
    let empty = core::ResourceRequirements::default();
    let o = old.resources.as_ref().unwrap_or(&empty);
    let restore = |list: &Option<BTreeMap<String, Quantity>>,
                   old: &Option<BTreeMap<String, Quantity>>| {
        let old = old.as_ref()?;
        let mut m = list.clone().unwrap_or_default();
        for k in ["cpu", "memory"] {
            m.remove(k);
            if let Some(q) = old.get(k) {
                m.insert(k.to_string(), q.clone());
            }
        }
        Some(m)
    };
    let r = c.resources.clone().unwrap_or_default();
    let limits = restore(&r.limits, &o.limits);
    let requests = restore(&r.requests, &o.requests);
    c.resources = old.resources.as_ref().map(|o| core::ResourceRequirements {
        limits,
        requests,
        ..o.clone()
    });
}

/// Upstream `validateResizePolicy`: cpu and memory once each, `NotRequired` or
/// `RestartContainer`, and only `NotRequired` in a pod that never restarts.
fn validate_resize_policy(
    policies: Option<&[core::ContainerResizePolicy]>,
    pod_restart: &str,
    path: &FieldPath,
    errs: &mut Errs,
) {
    let mut seen = BTreeSet::new();
    for (i, p) in policies.unwrap_or_default().iter().enumerate() {
        if !seen.insert(p.resource_name.as_str()) {
            errs.push(FieldError::duplicate(
                &path.index(i),
                p.resource_name.as_str(),
            ));
        }
        match p.resource_name.as_str() {
            "cpu" | "memory" => {}
            "" => errs.push(FieldError::required(path, "")),
            other => errs.push(FieldError::not_supported(path, other, &["cpu", "memory"])),
        }
        match p.restart_policy.as_str() {
            "NotRequired" | "RestartContainer" => {}
            "" => errs.push(FieldError::required(path, "")),
            other => errs.push(FieldError::not_supported(
                path,
                other,
                &["NotRequired", "RestartContainer"],
            )),
        }
        if pod_restart == "Never" && p.restart_policy != "NotRequired" {
            errs.push(FieldError::invalid(
                path,
                p.restart_policy.as_str(),
                "must be 'NotRequired' when `restartPolicy` is 'Never'",
            ));
        }
    }
}

/// Upstream's `--allow-privileged=false` check (`ValidateSecurityContext` with
/// `capabilities.AllowPrivileged` off): every privileged container of the pod spec at
/// `path` (`spec`, `spec.template.spec`, ...) is refused. It reads the stored JSON, so
/// the store can run it on any kind that carries a pod spec.
pub fn forbid_privileged(spec: &serde_json::Value, path: &FieldPath) -> Vec<FieldError> {
    let mut errs = Vec::new();
    for list in ["initContainers", "containers", "ephemeralContainers"] {
        for (i, c) in spec[list].as_array().into_iter().flatten().enumerate() {
            if c["securityContext"]["privileged"] == serde_json::Value::Bool(true) {
                errs.push(FieldError::forbidden(
                    &path
                        .child(list)
                        .index(i)
                        .child("securityContext")
                        .child("privileged"),
                    "disallowed by cluster policy",
                ));
            }
        }
    }
    errs
}
