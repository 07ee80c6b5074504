//! Upstream's defaulting (`SetDefaults_*` in k8s.io/kubernetes/pkg/apis/*/v1/defaults.go
//! plus the declarative `+default` markers that `defaulter-gen` folds into
//! `zz_generated.defaults.go`) for built-in kinds, applied on create and update before
//! validation.
//!
//! `kubectl apply` computes its 3-way merge against what the server stored, so every
//! default here must match upstream exactly: the same fields, the same values, and no
//! extra ones. Go's "zero value means unset" maps onto k8s-openapi's `Option`s as
//! "`None` or the empty string".
//!
//! Deliberately not here (upstream does them elsewhere, in the registry's strategies):
//! Pod `status.phase`, Namespace `spec.finalizers: [kubernetes]` (upstream adds it in
//! `PrepareForCreate` only, because the namespace controller removes it later),
//! Service `clusterIP(s)`/`ipFamilies` allocation and Job selectors/`controller-uid`
//! labels. Quantities are kept as written (upstream rounds them up to milli scale).
//!
//! One deviation, on request of the registry: a Service that is not ExternalName and
//! not headless-without-selector gets `ipFamilyPolicy: SingleStack` here (upstream
//! sets the same value in the service REST storage of a single-stack cluster).

use std::collections::BTreeMap;

use k8s_openapi::api::admissionregistration::v1 as admissionregistration;
use k8s_openapi::api::apps::v1 as apps;
use k8s_openapi::api::autoscaling::v2 as autoscaling;
use k8s_openapi::api::batch::v1 as batch;
use k8s_openapi::api::certificates::v1 as certificates;
use k8s_openapi::api::coordination::v1 as coordination;
use k8s_openapi::api::core::v1 as core;
use k8s_openapi::api::discovery::v1 as discovery;
use k8s_openapi::api::events::v1 as events;
use k8s_openapi::api::flowcontrol::v1 as flowcontrol;
use k8s_openapi::api::networking::v1 as networking;
use k8s_openapi::api::node::v1 as node;
use k8s_openapi::api::policy::v1 as policy;
use k8s_openapi::api::rbac::v1 as rbac;
use k8s_openapi::api::scheduling::v1 as scheduling;
use k8s_openapi::api::storage::v1 as storage;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::kube_aggregator::pkg::apis::apiregistration::v1 as apiregistration;

/// Upstream's defaulting for one API type. The default body does nothing, for kinds
/// upstream has no defaults for.
pub trait ApplyDefaults {
    /// Fills every unset field that upstream defaults, in place. Idempotent.
    fn apply_defaults(&mut self) {}
}

/// `v1.TerminationMessagePathDefault`.
pub const TERMINATION_MESSAGE_PATH_DEFAULT: &str = "/dev/termination-log";
/// `v1.DefaultSchedulerName`.
pub const DEFAULT_SCHEDULER_NAME: &str = "default-scheduler";
/// `v1.DefaultTerminationGracePeriodSeconds`.
pub const DEFAULT_TERMINATION_GRACE_PERIOD_SECONDS: i64 = 30;
/// Default file mode (0644) of configMap, secret, downwardAPI and projected volumes.
pub const DEFAULT_VOLUME_MODE: i32 = 0o644;
/// `v1.DefaultClientIPServiceAffinitySeconds` (3 hours).
pub const DEFAULT_CLIENT_IP_SERVICE_AFFINITY_SECONDS: i32 = 10800;
/// `autoscaling.DefaultCPUUtilization`.
pub const DEFAULT_CPU_UTILIZATION: i32 = 80;
/// The namespace label upstream keeps equal to the namespace's name.
pub const LABEL_METADATA_NAME: &str = "kubernetes.io/metadata.name";
/// `rbacv1.GroupName`.
pub const RBAC_GROUP: &str = "rbac.authorization.k8s.io";

// ---------------------------------------------------------------------------------
// small helpers

fn is_unset(s: &Option<String>) -> bool {
    s.as_deref().is_none_or(str::is_empty)
}

fn default_str(s: &mut Option<String>, value: &str) {
    if is_unset(s) {
        *s = Some(value.to_owned());
    }
}

fn default_opt<T>(o: &mut Option<T>, value: T) {
    if o.is_none() {
        *o = Some(value);
    }
}

fn default_labels_from(
    target: &mut Option<BTreeMap<String, String>>,
    from: Option<&BTreeMap<String, String>>,
) {
    // Go: `if labels != nil && len(obj.Labels) == 0 { obj.Labels = labels }`. An empty
    // map is omitted on the wire, so only a non-empty one makes a visible difference.
    if let Some(from) = from
        && !from.is_empty()
        && target.as_ref().is_none_or(BTreeMap::is_empty)
    {
        *target = Some(from.clone());
    }
}

fn pull_policy_for(image: Option<&str>) -> &'static str {
    if crate::image::is_latest(image.unwrap_or_default()) {
        "Always"
    } else {
        "IfNotPresent"
    }
}

// ---------------------------------------------------------------------------------
// core/v1 building blocks

fn default_object_field_selector(s: &mut core::ObjectFieldSelector) {
    default_str(&mut s.api_version, "v1");
}

fn default_http_get(h: &mut core::HTTPGetAction) {
    default_str(&mut h.path, "/");
    default_str(&mut h.scheme, "HTTP");
}

fn default_probe(p: &mut core::Probe) {
    // Go: `if obj.TimeoutSeconds == 0` -- an explicit 0 is defaulted too.
    for (field, value) in [
        (&mut p.timeout_seconds, 1),
        (&mut p.period_seconds, 10),
        (&mut p.success_threshold, 1),
        (&mut p.failure_threshold, 3),
    ] {
        if field.unwrap_or(0) == 0 {
            *field = Some(value);
        }
    }
    if let Some(h) = &mut p.http_get {
        default_http_get(h);
    }
    if let Some(g) = &mut p.grpc {
        // `+default=""` on GRPCAction.Service.
        default_opt(&mut g.service, String::new());
    }
}

fn default_lifecycle(l: &mut core::Lifecycle) {
    for handler in [&mut l.post_start, &mut l.pre_stop].into_iter().flatten() {
        if let Some(h) = &mut handler.http_get {
            default_http_get(h);
        }
    }
}

/// Container and EphemeralContainer share their fields but not their type.
macro_rules! default_container_fields {
    ($c:expr) => {{
        let c = $c;
        if is_unset(&c.image_pull_policy) {
            c.image_pull_policy = Some(pull_policy_for(c.image.as_deref()).to_owned());
        }
        default_str(
            &mut c.termination_message_path,
            TERMINATION_MESSAGE_PATH_DEFAULT,
        );
        default_str(&mut c.termination_message_policy, "File");
        for port in c.ports.iter_mut().flatten() {
            default_str(&mut port.protocol, "TCP");
        }
        for env in c.env.iter_mut().flatten() {
            if let Some(field_ref) = env.value_from.as_mut().and_then(|v| v.field_ref.as_mut()) {
                default_object_field_selector(field_ref);
            }
        }
        for probe in [
            &mut c.liveness_probe,
            &mut c.readiness_probe,
            &mut c.startup_probe,
        ]
        .into_iter()
        .flatten()
        {
            default_probe(probe);
        }
        if let Some(l) = &mut c.lifecycle {
            default_lifecycle(l);
        }
    }};
}

/// `SetDefaults_Container` plus the nested defaults `defaulter-gen` applies to it.
pub fn default_container(c: &mut core::Container) {
    default_container_fields!(c);
}

/// `SetDefaults_EphemeralContainer` plus nested defaults.
pub fn default_ephemeral_container(c: &mut core::EphemeralContainer) {
    default_container_fields!(c);
}

fn volume_has_source(v: &core::Volume) -> bool {
    let core::Volume {
        aws_elastic_block_store,
        azure_disk,
        azure_file,
        cephfs,
        cinder,
        config_map,
        csi,
        downward_api,
        empty_dir,
        ephemeral,
        fc,
        flex_volume,
        flocker,
        gce_persistent_disk,
        git_repo,
        glusterfs,
        host_path,
        image,
        iscsi,
        name: _,
        nfs,
        persistent_volume_claim,
        photon_persistent_disk,
        portworx_volume,
        projected,
        quobyte,
        rbd,
        scale_io,
        secret,
        storageos,
        vsphere_volume,
    } = v;
    aws_elastic_block_store.is_some()
        || azure_disk.is_some()
        || azure_file.is_some()
        || cephfs.is_some()
        || cinder.is_some()
        || config_map.is_some()
        || csi.is_some()
        || downward_api.is_some()
        || empty_dir.is_some()
        || ephemeral.is_some()
        || fc.is_some()
        || flex_volume.is_some()
        || flocker.is_some()
        || gce_persistent_disk.is_some()
        || git_repo.is_some()
        || glusterfs.is_some()
        || host_path.is_some()
        || image.is_some()
        || iscsi.is_some()
        || nfs.is_some()
        || persistent_volume_claim.is_some()
        || photon_persistent_disk.is_some()
        || portworx_volume.is_some()
        || projected.is_some()
        || quobyte.is_some()
        || rbd.is_some()
        || scale_io.is_some()
        || secret.is_some()
        || storageos.is_some()
        || vsphere_volume.is_some()
}

fn default_azure_disk(a: &mut core::AzureDiskVolumeSource) {
    default_str(&mut a.caching_mode, "ReadWrite");
    default_str(&mut a.fs_type, "ext4");
    default_opt(&mut a.read_only, false);
    default_str(&mut a.kind, "Shared");
}

macro_rules! default_rbd {
    ($r:expr) => {{
        let r = $r;
        default_str(&mut r.pool, "rbd");
        default_str(&mut r.user, "admin");
        default_str(&mut r.keyring, "/etc/ceph/keyring");
    }};
}

macro_rules! default_scale_io {
    ($s:expr) => {{
        let s = $s;
        default_str(&mut s.storage_mode, "ThinProvisioned");
        default_str(&mut s.fs_type, "xfs");
    }};
}

fn default_host_path(h: &mut core::HostPathVolumeSource) {
    // `v1.HostPathUnset` is the empty string, and it is written out.
    default_opt(&mut h.type_, String::new());
}

/// The defaults of a PersistentVolumeSpec's volume sources, in a PersistentVolume or
/// inline in a VolumeAttachment.
fn default_persistent_volume_sources(spec: &mut core::PersistentVolumeSpec) {
    if let Some(h) = &mut spec.host_path {
        default_host_path(h);
    }
    if let Some(r) = &mut spec.rbd {
        default_rbd!(r);
    }
    if let Some(i) = &mut spec.iscsi {
        default_str(&mut i.iscsi_interface, "default");
    }
    if let Some(a) = &mut spec.azure_disk {
        default_azure_disk(a);
    }
    if let Some(s) = &mut spec.scale_io {
        default_scale_io!(s);
    }
}

/// `SetDefaults_Volume` plus the defaults of every volume source.
pub fn default_volume(v: &mut core::Volume) {
    if !volume_has_source(v) {
        v.empty_dir = Some(core::EmptyDirVolumeSource::default());
    }
    if let Some(image) = &mut v.image
        && is_unset(&image.pull_policy)
    {
        image.pull_policy = Some(pull_policy_for(image.reference.as_deref()).to_owned());
    }
    if let Some(h) = &mut v.host_path {
        default_host_path(h);
    }
    if let Some(s) = &mut v.secret {
        default_opt(&mut s.default_mode, DEFAULT_VOLUME_MODE);
    }
    if let Some(i) = &mut v.iscsi {
        default_str(&mut i.iscsi_interface, "default");
    }
    if let Some(r) = &mut v.rbd {
        default_rbd!(r);
    }
    if let Some(d) = &mut v.downward_api {
        default_opt(&mut d.default_mode, DEFAULT_VOLUME_MODE);
        for item in d.items.iter_mut().flatten() {
            if let Some(f) = &mut item.field_ref {
                default_object_field_selector(f);
            }
        }
    }
    if let Some(c) = &mut v.config_map {
        default_opt(&mut c.default_mode, DEFAULT_VOLUME_MODE);
    }
    if let Some(a) = &mut v.azure_disk {
        default_azure_disk(a);
    }
    if let Some(p) = &mut v.projected {
        default_opt(&mut p.default_mode, DEFAULT_VOLUME_MODE);
        for source in p.sources.iter_mut().flatten() {
            if let Some(d) = &mut source.downward_api {
                for item in d.items.iter_mut().flatten() {
                    if let Some(f) = &mut item.field_ref {
                        default_object_field_selector(f);
                    }
                }
            }
            if let Some(t) = &mut source.service_account_token {
                default_opt(&mut t.expiration_seconds, 3600);
            }
        }
    }
    if let Some(s) = &mut v.scale_io {
        default_scale_io!(s);
    }
    if let Some(t) = v
        .ephemeral
        .as_mut()
        .and_then(|e| e.volume_claim_template.as_mut())
    {
        default_pvc_spec(&mut t.spec);
    }
}

/// `SetDefaults_PodSpec` plus the nested defaults of volumes and containers. This is
/// what every pod template (Deployment, Job, ...) gets; a Pod additionally gets
/// [`default_pod_only`].
pub fn default_pod_spec(spec: &mut core::PodSpec) {
    default_str(&mut spec.dns_policy, "ClusterFirst");
    default_str(&mut spec.restart_policy, "Always");
    default_opt(
        &mut spec.security_context,
        core::PodSecurityContext::default(),
    );
    default_opt(
        &mut spec.termination_grace_period_seconds,
        DEFAULT_TERMINATION_GRACE_PERIOD_SECONDS,
    );
    default_str(&mut spec.scheduler_name, DEFAULT_SCHEDULER_NAME);
    for v in spec.volumes.iter_mut().flatten() {
        default_volume(v);
    }
    for c in spec.init_containers.iter_mut().flatten() {
        default_container(c);
    }
    for c in &mut spec.containers {
        default_container(c);
    }
    for c in spec.ephemeral_containers.iter_mut().flatten() {
        default_ephemeral_container(c);
    }
}

/// Defaults a pod template: its spec exists afterwards (Go's is a value, not a
/// pointer) and carries [`default_pod_spec`]'s defaults.
pub fn default_pod_template_spec(t: &mut core::PodTemplateSpec) {
    default_pod_spec(t.spec.get_or_insert_with(Default::default));
}

fn default_requests_to_limits(resources: &mut Option<core::ResourceRequirements>) {
    let Some(r) = resources else { return };
    let Some(limits) = &r.limits else { return };
    let requests = r.requests.get_or_insert_with(BTreeMap::new);
    for (k, v) in limits {
        requests.entry(k.clone()).or_insert_with(|| v.clone());
    }
}

/// `SetDefaults_Pod`: the defaults only a Pod gets, not a pod template.
pub fn default_pod_only(spec: &mut core::PodSpec) {
    for c in &mut spec.containers {
        default_requests_to_limits(&mut c.resources);
    }
    for c in spec.init_containers.iter_mut().flatten() {
        default_requests_to_limits(&mut c.resources);
    }
    default_opt(&mut spec.enable_service_links, true);
    if spec.host_network == Some(true) {
        let containers = spec
            .containers
            .iter_mut()
            .chain(spec.init_containers.iter_mut().flatten());
        for c in containers {
            for p in c.ports.iter_mut().flatten() {
                if p.host_port.unwrap_or(0) == 0 {
                    p.host_port = Some(p.container_port);
                }
            }
        }
    }
}

/// `SetDefaults_PersistentVolumeClaimSpec`.
pub fn default_pvc_spec(spec: &mut core::PersistentVolumeClaimSpec) {
    default_str(&mut spec.volume_mode, "Filesystem");
}

// ---------------------------------------------------------------------------------
// core/v1 kinds

impl ApplyDefaults for core::Pod {
    fn apply_defaults(&mut self) {
        let spec = self.spec.get_or_insert_with(Default::default);
        default_pod_only(spec);
        default_pod_spec(spec);
    }
}

impl ApplyDefaults for core::PodTemplate {
    fn apply_defaults(&mut self) {
        default_pod_template_spec(self.template.get_or_insert_with(Default::default));
    }
}

impl ApplyDefaults for core::ReplicationController {
    fn apply_defaults(&mut self) {
        let spec = self.spec.get_or_insert_with(Default::default);
        if let Some(template) = &mut spec.template {
            let labels = template.metadata.as_ref().and_then(|m| m.labels.as_ref());
            if labels.is_some_and(|l| !l.is_empty()) {
                if spec.selector.as_ref().is_none_or(BTreeMap::is_empty) {
                    spec.selector = labels.cloned();
                }
                default_labels_from(&mut self.metadata.labels, labels);
            }
            default_pod_template_spec(template);
        }
        default_opt(&mut spec.replicas, 1);
    }
}

impl ApplyDefaults for core::Namespace {
    fn apply_defaults(&mut self) {
        if let Some(name) = self.metadata.name.as_ref().filter(|n| !n.is_empty()) {
            self.metadata
                .labels
                .get_or_insert_with(BTreeMap::new)
                .insert(LABEL_METADATA_NAME.to_owned(), name.clone());
        }
        default_str(
            &mut self.status.get_or_insert_with(Default::default).phase,
            "Active",
        );
    }
}

impl ApplyDefaults for core::Node {
    fn apply_defaults(&mut self) {
        if let Some(status) = &mut self.status
            && status.allocatable.is_none()
            && status.capacity.is_some()
        {
            status.allocatable = status.capacity.clone();
        }
    }
}

/// Whether a Service is reachable from outside the cluster (`service.ExternallyAccessible`).
fn externally_accessible(spec: &core::ServiceSpec) -> bool {
    match spec.type_.as_deref() {
        Some("LoadBalancer" | "NodePort") => true,
        Some("ClusterIP") => spec
            .external_ips
            .as_ref()
            .is_some_and(|ips| !ips.is_empty()),
        _ => false,
    }
}

impl ApplyDefaults for core::Service {
    fn apply_defaults(&mut self) {
        let spec = self.spec.get_or_insert_with(Default::default);
        default_str(&mut spec.session_affinity, "None");
        match spec.session_affinity.as_deref() {
            Some("None") => spec.session_affinity_config = None,
            Some("ClientIP") => {
                let has_timeout = spec
                    .session_affinity_config
                    .as_ref()
                    .and_then(|c| c.client_ip.as_ref())
                    .is_some_and(|c| c.timeout_seconds.is_some());
                if !has_timeout {
                    spec.session_affinity_config = Some(core::SessionAffinityConfig {
                        client_ip: Some(core::ClientIPConfig {
                            timeout_seconds: Some(DEFAULT_CLIENT_IP_SERVICE_AFFINITY_SECONDS),
                        }),
                    });
                }
            }
            _ => {}
        }
        default_str(&mut spec.type_, "ClusterIP");
        for port in spec.ports.iter_mut().flatten() {
            default_str(&mut port.protocol, "TCP");
            let unset = match &port.target_port {
                None => true,
                Some(IntOrString::Int(0)) => true,
                Some(IntOrString::String(s)) => s.is_empty(),
                Some(IntOrString::Int(_)) => false,
            };
            if unset {
                port.target_port = Some(IntOrString::Int(port.port));
            }
        }
        if externally_accessible(spec) {
            default_str(&mut spec.external_traffic_policy, "Cluster");
        }
        let type_ = spec.type_.clone().unwrap_or_default();
        if spec.internal_traffic_policy.is_none()
            && matches!(type_.as_str(), "NodePort" | "LoadBalancer" | "ClusterIP")
        {
            spec.internal_traffic_policy = Some("Cluster".to_owned());
        }
        if type_ == "LoadBalancer" {
            default_opt(&mut spec.allocate_load_balancer_node_ports, true);
        }
        // Ferrokube: see the module docs. Headless services without a selector are
        // left to the registry, which knows whether the cluster is dual-stack.
        let headless_selectorless = spec.cluster_ip.as_deref() == Some("None")
            && spec.selector.as_ref().is_none_or(BTreeMap::is_empty);
        if type_ != "ExternalName" && !headless_selectorless {
            default_str(&mut spec.ip_family_policy, "SingleStack");
        }
        if type_ == "LoadBalancer"
            && let Some(ingress) = self
                .status
                .as_mut()
                .and_then(|s| s.load_balancer.as_mut())
                .and_then(|lb| lb.ingress.as_mut())
        {
            for ing in ingress {
                if !is_unset(&ing.ip) && ing.ip_mode.is_none() {
                    ing.ip_mode = Some("VIP".to_owned());
                }
            }
        }
    }
}

impl ApplyDefaults for core::Endpoints {
    fn apply_defaults(&mut self) {
        for subset in self.subsets.iter_mut().flatten() {
            for port in subset.ports.iter_mut().flatten() {
                default_str(&mut port.protocol, "TCP");
            }
        }
    }
}

/// Upstream sets `data` to an empty map, which `omitempty` then drops from the wire;
/// nothing observable remains, so this is empty on purpose.
impl ApplyDefaults for core::ConfigMap {}

impl ApplyDefaults for core::Secret {
    fn apply_defaults(&mut self) {
        default_str(&mut self.type_, "Opaque");
    }
}

impl ApplyDefaults for core::ServiceAccount {}
impl ApplyDefaults for core::Event {}
impl ApplyDefaults for core::ResourceQuota {}

fn fill_missing(
    target: &mut Option<BTreeMap<String, Quantity>>,
    from: Option<&BTreeMap<String, Quantity>>,
) {
    let Some(from) = from else { return };
    for (k, v) in from {
        if !target.as_ref().is_some_and(|t| t.contains_key(k)) {
            target
                .get_or_insert_with(BTreeMap::new)
                .insert(k.clone(), v.clone());
        }
    }
}

impl ApplyDefaults for core::LimitRange {
    fn apply_defaults(&mut self) {
        let Some(spec) = &mut self.spec else { return };
        for item in &mut spec.limits {
            if item.type_ != "Container" {
                continue;
            }
            // Upstream allocates empty maps first; empty maps are omitted on the wire,
            // so they are only created here once they get an entry.
            let max = item.max.clone();
            fill_missing(&mut item.default, max.as_ref());
            let default = item.default.clone();
            fill_missing(&mut item.default_request, default.as_ref());
            let min = item.min.clone();
            fill_missing(&mut item.default_request, min.as_ref());
        }
    }
}

impl ApplyDefaults for core::PersistentVolume {
    fn apply_defaults(&mut self) {
        default_str(
            &mut self.status.get_or_insert_with(Default::default).phase,
            "Pending",
        );
        let spec = self.spec.get_or_insert_with(Default::default);
        default_str(&mut spec.persistent_volume_reclaim_policy, "Retain");
        default_str(&mut spec.volume_mode, "Filesystem");
        default_persistent_volume_sources(spec);
    }
}

impl ApplyDefaults for core::PersistentVolumeClaim {
    fn apply_defaults(&mut self) {
        default_str(
            &mut self.status.get_or_insert_with(Default::default).phase,
            "Pending",
        );
        default_pvc_spec(self.spec.get_or_insert_with(Default::default));
    }
}

// ---------------------------------------------------------------------------------
// apps/v1

impl ApplyDefaults for apps::Deployment {
    fn apply_defaults(&mut self) {
        let spec = self.spec.get_or_insert_with(Default::default);
        default_opt(&mut spec.replicas, 1);
        let strategy = spec.strategy.get_or_insert_with(Default::default);
        default_str(&mut strategy.type_, "RollingUpdate");
        if strategy.type_.as_deref() == Some("RollingUpdate") {
            let ru = strategy.rolling_update.get_or_insert_with(Default::default);
            default_opt(
                &mut ru.max_unavailable,
                IntOrString::String("25%".to_owned()),
            );
            default_opt(&mut ru.max_surge, IntOrString::String("25%".to_owned()));
        }
        default_opt(&mut spec.revision_history_limit, 10);
        default_opt(&mut spec.progress_deadline_seconds, 600);
        default_pod_template_spec(&mut spec.template);
    }
}

impl ApplyDefaults for apps::ReplicaSet {
    fn apply_defaults(&mut self) {
        let spec = self.spec.get_or_insert_with(Default::default);
        default_opt(&mut spec.replicas, 1);
        // Go's ReplicaSetSpec.Template is a value, so it always gets defaulted.
        default_pod_template_spec(spec.template.get_or_insert_with(Default::default));
    }
}

impl ApplyDefaults for apps::StatefulSet {
    fn apply_defaults(&mut self) {
        let spec = self.spec.get_or_insert_with(Default::default);
        default_str(&mut spec.pod_management_policy, "OrderedReady");
        let strategy = spec.update_strategy.get_or_insert_with(Default::default);
        if is_unset(&strategy.type_) {
            strategy.type_ = Some("RollingUpdate".to_owned());
            default_opt(&mut strategy.rolling_update, Default::default());
        }
        if strategy.type_.as_deref() == Some("RollingUpdate")
            && let Some(ru) = &mut strategy.rolling_update
        {
            default_opt(&mut ru.partition, 0);
        }
        let policy = spec
            .persistent_volume_claim_retention_policy
            .get_or_insert_with(Default::default);
        default_str(&mut policy.when_deleted, "Retain");
        default_str(&mut policy.when_scaled, "Retain");
        default_opt(&mut spec.replicas, 1);
        default_opt(&mut spec.revision_history_limit, 10);
        default_pod_template_spec(&mut spec.template);
        for pvc in spec.volume_claim_templates.iter_mut().flatten() {
            pvc.apply_defaults();
        }
    }
}

impl ApplyDefaults for apps::DaemonSet {
    fn apply_defaults(&mut self) {
        let spec = self.spec.get_or_insert_with(Default::default);
        let strategy = spec.update_strategy.get_or_insert_with(Default::default);
        default_str(&mut strategy.type_, "RollingUpdate");
        if strategy.type_.as_deref() == Some("RollingUpdate") {
            let ru = strategy.rolling_update.get_or_insert_with(Default::default);
            default_opt(&mut ru.max_unavailable, IntOrString::Int(1));
            default_opt(&mut ru.max_surge, IntOrString::Int(0));
        }
        default_opt(&mut spec.revision_history_limit, 10);
        default_pod_template_spec(&mut spec.template);
    }
}

impl ApplyDefaults for apps::ControllerRevision {}

// ---------------------------------------------------------------------------------
// batch/v1

impl ApplyDefaults for batch::Job {
    fn apply_defaults(&mut self) {
        let spec = self.spec.get_or_insert_with(Default::default);
        if spec.completions.is_none() && spec.parallelism.is_none() {
            spec.completions = Some(1);
        }
        default_opt(&mut spec.parallelism, 1);
        if spec.backoff_limit.is_none() {
            spec.backoff_limit = Some(if spec.backoff_limit_per_index.is_some() {
                i32::MAX
            } else {
                6
            });
        }
        default_labels_from(
            &mut self.metadata.labels,
            spec.template
                .metadata
                .as_ref()
                .and_then(|m| m.labels.as_ref()),
        );
        default_str(&mut spec.completion_mode, "NonIndexed");
        default_opt(&mut spec.suspend, false);
        if let Some(pfp) = &mut spec.pod_failure_policy {
            for rule in &mut pfp.rules {
                for pattern in rule.on_pod_conditions.iter_mut().flatten() {
                    if pattern.status.is_empty() {
                        pattern.status = "True".to_owned();
                    }
                }
            }
        }
        if spec.pod_replacement_policy.is_none() {
            let policy = if spec.pod_failure_policy.is_some() {
                "Failed"
            } else {
                "TerminatingOrFailed"
            };
            spec.pod_replacement_policy = Some(policy.to_owned());
        }
        default_pod_template_spec(&mut spec.template);
    }
}

impl ApplyDefaults for batch::CronJob {
    fn apply_defaults(&mut self) {
        let spec = self.spec.get_or_insert_with(Default::default);
        default_str(&mut spec.concurrency_policy, "Allow");
        default_opt(&mut spec.suspend, false);
        default_opt(&mut spec.successful_jobs_history_limit, 3);
        default_opt(&mut spec.failed_jobs_history_limit, 1);
        // The job template gets only the nested (pod template) defaults, not
        // SetDefaults_Job.
        let job_spec = spec.job_template.spec.get_or_insert_with(Default::default);
        default_pod_template_spec(&mut job_spec.template);
    }
}

// ---------------------------------------------------------------------------------
// the other groups

/// Upstream `SetDefaults_Rule` and `SetDefaults_ServiceReference`, shared by both
/// webhook kinds.
fn default_webhook_common(
    rules: Option<&mut Vec<admissionregistration::RuleWithOperations>>,
    client: &mut admissionregistration::WebhookClientConfig,
    match_policy: &mut Option<String>,
    failure_policy: &mut Option<String>,
    namespace_selector: &mut Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector>,
    object_selector: &mut Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector>,
    timeout_seconds: &mut Option<i32>,
) {
    default_str(failure_policy, "Fail");
    default_str(match_policy, "Equivalent");
    default_opt(namespace_selector, Default::default());
    default_opt(object_selector, Default::default());
    default_opt(timeout_seconds, 10);
    for rule in rules.into_iter().flatten() {
        default_str(&mut rule.scope, "*");
    }
    if let Some(service) = &mut client.service {
        default_opt(&mut service.port, 443);
    }
}

impl ApplyDefaults for admissionregistration::ValidatingWebhookConfiguration {
    fn apply_defaults(&mut self) {
        for w in self.webhooks.iter_mut().flatten() {
            default_webhook_common(
                w.rules.as_mut(),
                &mut w.client_config,
                &mut w.match_policy,
                &mut w.failure_policy,
                &mut w.namespace_selector,
                &mut w.object_selector,
                &mut w.timeout_seconds,
            );
        }
    }
}

impl ApplyDefaults for admissionregistration::MutatingWebhookConfiguration {
    fn apply_defaults(&mut self) {
        for w in self.webhooks.iter_mut().flatten() {
            default_webhook_common(
                w.rules.as_mut(),
                &mut w.client_config,
                &mut w.match_policy,
                &mut w.failure_policy,
                &mut w.namespace_selector,
                &mut w.object_selector,
                &mut w.timeout_seconds,
            );
            default_str(&mut w.reinvocation_policy, "Never");
        }
    }
}

/// Upstream `SetDefaults_MatchResources` (and `SetDefaults_NamedRuleWithOperations`).
fn default_match_resources(m: &mut admissionregistration::MatchResources) {
    default_str(&mut m.match_policy, "Equivalent");
    default_opt(&mut m.namespace_selector, Default::default());
    default_opt(&mut m.object_selector, Default::default());
    for rule in m
        .resource_rules
        .iter_mut()
        .flatten()
        .chain(m.exclude_resource_rules.iter_mut().flatten())
    {
        default_str(&mut rule.scope, "*");
    }
}

impl ApplyDefaults for admissionregistration::ValidatingAdmissionPolicy {
    /// Upstream `SetDefaults_ValidatingAdmissionPolicySpec`.
    fn apply_defaults(&mut self) {
        if let Some(spec) = &mut self.spec {
            default_str(&mut spec.failure_policy, "Fail");
            if let Some(m) = &mut spec.match_constraints {
                default_match_resources(m);
            }
        }
    }
}

impl ApplyDefaults for admissionregistration::ValidatingAdmissionPolicyBinding {
    fn apply_defaults(&mut self) {
        if let Some(m) = self.spec.as_mut().and_then(|s| s.match_resources.as_mut()) {
            default_match_resources(m);
        }
    }
}

impl ApplyDefaults for coordination::Lease {}
impl ApplyDefaults for events::Event {}
impl ApplyDefaults for policy::PodDisruptionBudget {}
impl ApplyDefaults for rbac::Role {}
/// Upstream's node/v1 has no defaults: `handler`, `overhead` and `scheduling` are
/// kept as written.
impl ApplyDefaults for node::RuntimeClass {}
impl ApplyDefaults for rbac::ClusterRole {}
impl ApplyDefaults for certificates::CertificateSigningRequest {}
impl ApplyDefaults for networking::Ingress {}

impl ApplyDefaults for discovery::EndpointSlice {
    fn apply_defaults(&mut self) {
        for port in self.ports.iter_mut().flatten() {
            default_opt(&mut port.name, String::new());
            default_opt(&mut port.protocol, "TCP".to_owned());
        }
    }
}

fn default_subjects(subjects: &mut Option<Vec<rbac::Subject>>) {
    for s in subjects.iter_mut().flatten() {
        if is_unset(&s.api_group) && matches!(s.kind.as_str(), "User" | "Group") {
            s.api_group = Some(RBAC_GROUP.to_owned());
        }
    }
}

impl ApplyDefaults for rbac::RoleBinding {
    fn apply_defaults(&mut self) {
        if self.role_ref.api_group.is_empty() {
            self.role_ref.api_group = RBAC_GROUP.to_owned();
        }
        default_subjects(&mut self.subjects);
    }
}

impl ApplyDefaults for rbac::ClusterRoleBinding {
    fn apply_defaults(&mut self) {
        if self.role_ref.api_group.is_empty() {
            self.role_ref.api_group = RBAC_GROUP.to_owned();
        }
        default_subjects(&mut self.subjects);
    }
}

impl ApplyDefaults for scheduling::PriorityClass {
    fn apply_defaults(&mut self) {
        default_str(&mut self.preemption_policy, "PreemptLowerPriority");
    }
}

impl ApplyDefaults for storage::StorageClass {
    fn apply_defaults(&mut self) {
        default_str(&mut self.reclaim_policy, "Delete");
        default_str(&mut self.volume_binding_mode, "Immediate");
    }
}

/// `SetDefaults_CSIDriver` at 1.33's gates (`SELinuxMountReadWriteOncePod` on, so
/// `seLinuxMount` is defaulted). Only unset pointers are filled: an explicit `""`
/// fsGroupPolicy stays (and is refused by validation), as upstream.
impl ApplyDefaults for storage::CSIDriver {
    fn apply_defaults(&mut self) {
        let spec = &mut self.spec;
        default_opt(&mut spec.attach_required, true);
        default_opt(&mut spec.pod_info_on_mount, false);
        default_opt(&mut spec.storage_capacity, false);
        default_opt(
            &mut spec.fs_group_policy,
            "ReadWriteOnceWithFSType".to_owned(),
        );
        if spec
            .volume_lifecycle_modes
            .as_ref()
            .is_none_or(Vec::is_empty)
        {
            spec.volume_lifecycle_modes = Some(vec!["Persistent".to_owned()]);
        }
        default_opt(&mut spec.requires_republish, false);
        default_opt(&mut spec.se_linux_mount, false);
    }
}

impl ApplyDefaults for storage::CSINode {}
impl ApplyDefaults for storage::CSIStorageCapacity {}

/// `SetObjectDefaults_VolumeAttachment`: the volume-source defaults of an inline
/// persistent volume spec (not `SetDefaults_PersistentVolume`'s reclaim policy and
/// volume mode, which belong to the PersistentVolume object).
impl ApplyDefaults for storage::VolumeAttachment {
    fn apply_defaults(&mut self) {
        let Some(spec) = &mut self.spec.source.inline_volume_spec else {
            return;
        };
        default_persistent_volume_sources(spec);
    }
}

/// `flowcontrol/v1.FlowSchemaDefaultMatchingPrecedence`.
pub const FLOW_SCHEMA_DEFAULT_MATCHING_PRECEDENCE: i32 = 1000;
/// `flowcontrol/v1.PriorityLevelConfigurationDefaultNominalConcurrencyShares`.
pub const PRIORITY_LEVEL_DEFAULT_NOMINAL_CONCURRENCY_SHARES: i32 = 30;
/// `flowcontrol/v1.PriorityLevelConfigurationDefaultQueues`.
pub const PRIORITY_LEVEL_DEFAULT_QUEUES: i32 = 64;
/// `flowcontrol/v1.PriorityLevelConfigurationDefaultHandSize`.
pub const PRIORITY_LEVEL_DEFAULT_HAND_SIZE: i32 = 8;
/// `flowcontrol/v1.PriorityLevelConfigurationDefaultQueueLengthLimit`.
pub const PRIORITY_LEVEL_DEFAULT_QUEUE_LENGTH_LIMIT: i32 = 50;

/// An `int32` Go defaults when it is zero (unset and `0` alike).
fn default_nonzero(o: &mut Option<i32>, value: i32) {
    if o.is_none_or(|v| v == 0) {
        *o = Some(value);
    }
}

/// `SetDefaults_FlowSchemaSpec`: a zero (or absent) `matchingPrecedence` becomes 1000.
/// The spec is a struct upstream, never absent, so it is created when missing.
impl ApplyDefaults for flowcontrol::FlowSchema {
    fn apply_defaults(&mut self) {
        let spec = self.spec.get_or_insert_with(Default::default);
        default_nonzero(
            &mut spec.matching_precedence,
            FLOW_SCHEMA_DEFAULT_MATCHING_PRECEDENCE,
        );
    }
}

/// `SetObjectDefaults_PriorityLevelConfiguration` (v1): `limited` gets
/// `nominalConcurrencyShares: 30` when unset (an explicit 0 stays, as v1's field is a
/// pointer) and `lendablePercent: 0`; a present `limitResponse.queuing` gets
/// `queues: 64`, `handSize: 8` and `queueLengthLimit: 50` for zero fields (an absent
/// `queuing` stays absent, and validation asks for it when the type is `Queue`);
/// `exempt` gets `nominalConcurrencyShares: 0` and `lendablePercent: 0`.
impl ApplyDefaults for flowcontrol::PriorityLevelConfiguration {
    fn apply_defaults(&mut self) {
        let Some(spec) = &mut self.spec else {
            return;
        };
        if let Some(limited) = &mut spec.limited {
            default_opt(
                &mut limited.nominal_concurrency_shares,
                PRIORITY_LEVEL_DEFAULT_NOMINAL_CONCURRENCY_SHARES,
            );
            default_opt(&mut limited.lendable_percent, 0);
            if let Some(q) = limited
                .limit_response
                .as_mut()
                .and_then(|r| r.queuing.as_mut())
            {
                default_nonzero(&mut q.hand_size, PRIORITY_LEVEL_DEFAULT_HAND_SIZE);
                default_nonzero(&mut q.queues, PRIORITY_LEVEL_DEFAULT_QUEUES);
                default_nonzero(
                    &mut q.queue_length_limit,
                    PRIORITY_LEVEL_DEFAULT_QUEUE_LENGTH_LIMIT,
                );
            }
        }
        if let Some(exempt) = &mut spec.exempt {
            default_opt(&mut exempt.nominal_concurrency_shares, 0);
            default_opt(&mut exempt.lendable_percent, 0);
        }
    }
}

impl ApplyDefaults for networking::NetworkPolicy {
    fn apply_defaults(&mut self) {
        let spec = self.spec.get_or_insert_with(Default::default);
        let ingress_ports = spec
            .ingress
            .iter_mut()
            .flatten()
            .flat_map(|r| r.ports.iter_mut().flatten());
        let egress_ports = spec
            .egress
            .iter_mut()
            .flatten()
            .flat_map(|r| r.ports.iter_mut().flatten());
        for port in ingress_ports.chain(egress_ports) {
            default_str(&mut port.protocol, "TCP");
        }
        if spec.policy_types.as_ref().is_none_or(Vec::is_empty) {
            let mut types = vec!["Ingress".to_owned()];
            if spec.egress.as_ref().is_some_and(|e| !e.is_empty()) {
                types.push("Egress".to_owned());
            }
            spec.policy_types = Some(types);
        }
    }
}

impl ApplyDefaults for networking::IngressClass {
    fn apply_defaults(&mut self) {
        if let Some(p) = self.spec.as_mut().and_then(|s| s.parameters.as_mut()) {
            default_opt(&mut p.scope, "Cluster".to_owned());
        }
    }
}

/// Upstream's networking/v1 defaults have no `SetDefaults_IPAddress` or
/// `SetDefaults_ServiceCIDR`.
impl ApplyDefaults for networking::IPAddress {}
impl ApplyDefaults for networking::ServiceCIDR {}

/// kube-aggregator's `SetDefaults_ServiceReference`: an extension apiserver's Service
/// is reached on port 443 unless told otherwise.
impl ApplyDefaults for apiregistration::APIService {
    fn apply_defaults(&mut self) {
        if let Some(service) = self.spec.as_mut().and_then(|s| s.service.as_mut()) {
            default_opt(&mut service.port, 443);
        }
    }
}

fn hpa_scale_up_rules() -> autoscaling::HPAScalingRules {
    autoscaling::HPAScalingRules {
        stabilization_window_seconds: Some(0),
        select_policy: Some("Max".to_owned()),
        policies: Some(vec![
            autoscaling::HPAScalingPolicy {
                type_: "Pods".to_owned(),
                value: 4,
                period_seconds: 15,
            },
            autoscaling::HPAScalingPolicy {
                type_: "Percent".to_owned(),
                value: 100,
                period_seconds: 15,
            },
        ]),
        tolerance: None,
    }
}

fn hpa_scale_down_rules() -> autoscaling::HPAScalingRules {
    autoscaling::HPAScalingRules {
        // Left unset: the controller's --horizontal-pod-autoscaler-downscale-stabilization
        // flag applies.
        stabilization_window_seconds: None,
        select_policy: Some("Max".to_owned()),
        policies: Some(vec![autoscaling::HPAScalingPolicy {
            type_: "Percent".to_owned(),
            value: 100,
            period_seconds: 15,
        }]),
        tolerance: None,
    }
}

/// `copyHPAScalingRules`: every field set in `from` wins over the defaults in `to`.
fn merge_hpa_rules(
    from: Option<autoscaling::HPAScalingRules>,
    mut to: autoscaling::HPAScalingRules,
) -> autoscaling::HPAScalingRules {
    let Some(from) = from else { return to };
    if from.select_policy.is_some() {
        to.select_policy = from.select_policy;
    }
    if from.stabilization_window_seconds.is_some() {
        to.stabilization_window_seconds = from.stabilization_window_seconds;
    }
    if from.policies.is_some() {
        to.policies = from.policies;
    }
    if from.tolerance.is_some() {
        to.tolerance = from.tolerance;
    }
    to
}

/// Upstream's v1 default; the CPU target v1 implies is added by the conversion, which
/// sees the other metrics in the annotation.
impl ApplyDefaults for k8s_openapi::api::autoscaling::v1::HorizontalPodAutoscaler {
    fn apply_defaults(&mut self) {
        let spec = self.spec.get_or_insert_with(Default::default);
        default_opt(&mut spec.min_replicas, 1);
    }
}

impl ApplyDefaults for autoscaling::HorizontalPodAutoscaler {
    fn apply_defaults(&mut self) {
        let spec = self.spec.get_or_insert_with(Default::default);
        default_opt(&mut spec.min_replicas, 1);
        if spec.metrics.as_ref().is_none_or(Vec::is_empty) {
            spec.metrics = Some(vec![autoscaling::MetricSpec {
                type_: "Resource".to_owned(),
                resource: Some(autoscaling::ResourceMetricSource {
                    name: "cpu".to_owned(),
                    target: autoscaling::MetricTarget {
                        type_: "Utilization".to_owned(),
                        average_utilization: Some(DEFAULT_CPU_UTILIZATION),
                        ..Default::default()
                    },
                }),
                ..Default::default()
            }]);
        }
        if let Some(behavior) = &mut spec.behavior {
            behavior.scale_up = Some(merge_hpa_rules(
                behavior.scale_up.take(),
                hpa_scale_up_rules(),
            ));
            behavior.scale_down = Some(merge_hpa_rules(
                behavior.scale_down.take(),
                hpa_scale_down_rules(),
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::Resource;
    use serde::Serialize;
    use serde::de::DeserializeOwned;
    use serde_json::{Value, json};

    /// Deserializes `input` (apiVersion/kind added), defaults it, and compares the whole
    /// serialized object (apiVersion/kind removed) with `expected`: a missing default
    /// and an extra, non-upstream field both fail. Also checks idempotence.
    fn check<T>(name: &str, mut input: Value, expected: Value)
    where
        T: ApplyDefaults
            + Resource
            + Serialize
            + DeserializeOwned
            + PartialEq
            + Clone
            + std::fmt::Debug,
    {
        let obj = input.as_object_mut().expect("object");
        obj.insert("apiVersion".into(), T::API_VERSION.into());
        obj.insert("kind".into(), T::KIND.into());
        let mut value: T = serde_json::from_value(input).expect(name);
        value.apply_defaults();
        let mut out = serde_json::to_value(&value).expect(name);
        let out_obj = out.as_object_mut().expect("object");
        out_obj.remove("apiVersion");
        out_obj.remove("kind");
        assert_eq!(out, expected, "case {name}");
        let once = value.clone();
        value.apply_defaults();
        assert_eq!(value, once, "case {name}: not idempotent");
    }

    fn template_spec_defaults(containers: Value) -> Value {
        json!({
            "containers": containers,
            "dnsPolicy": "ClusterFirst",
            "restartPolicy": "Always",
            "schedulerName": "default-scheduler",
            "securityContext": {},
            "terminationGracePeriodSeconds": 30
        })
    }

    fn defaulted_container(name: &str, image: &str, pull: &str) -> Value {
        json!({
            "name": name,
            "image": image,
            "imagePullPolicy": pull,
            "resources": {},
            "terminationMessagePath": "/dev/termination-log",
            "terminationMessagePolicy": "File"
        })
    }

    #[test]
    fn image_latest_detection() {
        let cases = [
            ("nginx", true),
            ("nginx:latest", true),
            ("nginx:1.25", false),
            ("docker.io/library/nginx", true),
            ("localhost:5000/app", true),
            ("localhost:5000/app:v1", false),
            ("registry.k8s.io/pause:3.9", false),
            (
                "nginx@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
                false,
            ),
            (
                "nginx:latest@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
                true,
            ),
            ("", false),
            ("Nginx", false),
            ("nginx:", false),
            ("nginx:-bad", false),
            ("my--app/name_x:1", false),
            ("my--app/name__x", true),
            ("a/b/c", true),
            ("Example.COM/app", true),
            ("nginx@sha256:short", false),
        ];
        for (image, latest) in cases {
            assert_eq!(crate::image::is_latest(image), latest, "image {image:?}");
        }
    }

    #[test]
    fn pod_defaults() {
        check::<core::Pod>(
            "minimal pod",
            json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "nginx"}]}}),
            json!({
                "metadata": {"name": "p"},
                "spec": {
                    "containers": [{
                        "name": "c", "image": "nginx", "imagePullPolicy": "Always",
                        "terminationMessagePath": "/dev/termination-log",
                        "terminationMessagePolicy": "File"
                    }],
                    "dnsPolicy": "ClusterFirst",
                    "enableServiceLinks": true,
                    "restartPolicy": "Always",
                    "schedulerName": "default-scheduler",
                    "securityContext": {},
                    "terminationGracePeriodSeconds": 30
                }
            }),
        );
        check::<core::Pod>(
            "explicit values are kept",
            json!({"metadata": {}, "spec": {
                "containers": [{"name": "c", "image": "nginx:1.0", "imagePullPolicy": "Never",
                    "terminationMessagePath": "/tmp/x", "terminationMessagePolicy": "FallbackToLogsOnError"}],
                "dnsPolicy": "Default", "enableServiceLinks": false, "restartPolicy": "Never",
                "schedulerName": "s", "securityContext": {"runAsUser": 1}, "terminationGracePeriodSeconds": 0
            }}),
            json!({"metadata": {}, "spec": {
                "containers": [{"name": "c", "image": "nginx:1.0", "imagePullPolicy": "Never",
                    "terminationMessagePath": "/tmp/x", "terminationMessagePolicy": "FallbackToLogsOnError"}],
                "dnsPolicy": "Default", "enableServiceLinks": false, "restartPolicy": "Never",
                "schedulerName": "s", "securityContext": {"runAsUser": 1}, "terminationGracePeriodSeconds": 0
            }}),
        );
        check::<core::Pod>(
            "containers: ports, env, probes, lifecycle, resources; host network",
            json!({"metadata": {}, "spec": {
                "hostNetwork": true,
                "initContainers": [{"name": "i", "image": "busybox:1", "resources": {"limits": {"cpu": "1"}},
                    "ports": [{"containerPort": 53, "protocol": "UDP"}]}],
                "containers": [{
                    "name": "c", "image": "nginx:1.25",
                    "ports": [{"containerPort": 80}, {"containerPort": 81, "hostPort": 8081}],
                    "env": [{"name": "N", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}, {"name": "X", "value": "1"}],
                    "resources": {"limits": {"cpu": "2", "memory": "1Gi"}, "requests": {"cpu": "1"}},
                    "livenessProbe": {"httpGet": {"port": 80}},
                    "readinessProbe": {"tcpSocket": {"port": 80}, "periodSeconds": 5, "timeoutSeconds": 0},
                    "startupProbe": {"grpc": {"port": 9000}},
                    "lifecycle": {"preStop": {"httpGet": {"port": "http", "path": "/stop"}}}
                }]
            }}),
            json!({"metadata": {}, "spec": {
                "hostNetwork": true,
                "initContainers": [{"name": "i", "image": "busybox:1", "imagePullPolicy": "IfNotPresent",
                    "resources": {"limits": {"cpu": "1"}, "requests": {"cpu": "1"}},
                    "ports": [{"containerPort": 53, "hostPort": 53, "protocol": "UDP"}],
                    "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File"}],
                "containers": [{
                    "name": "c", "image": "nginx:1.25", "imagePullPolicy": "IfNotPresent",
                    "ports": [{"containerPort": 80, "hostPort": 80, "protocol": "TCP"},
                              {"containerPort": 81, "hostPort": 8081, "protocol": "TCP"}],
                    "env": [{"name": "N", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.name"}}},
                            {"name": "X", "value": "1"}],
                    "resources": {"limits": {"cpu": "2", "memory": "1Gi"}, "requests": {"cpu": "1", "memory": "1Gi"}},
                    "livenessProbe": {"httpGet": {"path": "/", "port": 80, "scheme": "HTTP"},
                        "failureThreshold": 3, "periodSeconds": 10, "successThreshold": 1, "timeoutSeconds": 1},
                    "readinessProbe": {"tcpSocket": {"port": 80},
                        "failureThreshold": 3, "periodSeconds": 5, "successThreshold": 1, "timeoutSeconds": 1},
                    "startupProbe": {"grpc": {"port": 9000, "service": ""},
                        "failureThreshold": 3, "periodSeconds": 10, "successThreshold": 1, "timeoutSeconds": 1},
                    "lifecycle": {"preStop": {"httpGet": {"port": "http", "path": "/stop", "scheme": "HTTP"}}},
                    "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File"
                }],
                "dnsPolicy": "ClusterFirst", "enableServiceLinks": true, "restartPolicy": "Always",
                "schedulerName": "default-scheduler", "securityContext": {}, "terminationGracePeriodSeconds": 30
            }}),
        );
    }

    #[test]
    fn volume_defaults() {
        let cases = [
            (
                "no source is emptyDir",
                json!({"name": "v"}),
                json!({"name": "v", "emptyDir": {}}),
            ),
            (
                "hostPath type",
                json!({"name": "v", "hostPath": {"path": "/x"}}),
                json!({"name": "v", "hostPath": {"path": "/x", "type": ""}}),
            ),
            (
                "secret mode",
                json!({"name": "v", "secret": {"secretName": "s"}}),
                json!({"name": "v", "secret": {"secretName": "s", "defaultMode": 420}}),
            ),
            (
                "configMap explicit mode",
                json!({"name": "v", "configMap": {"name": "c", "defaultMode": 256}}),
                json!({"name": "v", "configMap": {"name": "c", "defaultMode": 256}}),
            ),
            (
                "configMap mode",
                json!({"name": "v", "configMap": {"name": "c"}}),
                json!({"name": "v", "configMap": {"name": "c", "defaultMode": 420}}),
            ),
            (
                "downwardAPI",
                json!({"name": "v", "downwardAPI": {"items": [{"path": "n", "fieldRef": {"fieldPath": "metadata.name"}}]}}),
                json!({"name": "v", "downwardAPI": {"defaultMode": 420,
                    "items": [{"path": "n", "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.name"}}]}}),
            ),
            (
                "projected",
                json!({"name": "v", "projected": {"sources": [
                    {"serviceAccountToken": {"path": "token"}},
                    {"downwardAPI": {"items": [{"path": "n", "fieldRef": {"fieldPath": "metadata.name"}}]}}]}}),
                json!({"name": "v", "projected": {"defaultMode": 420, "sources": [
                    {"serviceAccountToken": {"path": "token", "expirationSeconds": 3600}},
                    {"downwardAPI": {"items": [{"path": "n", "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.name"}}]}}]}}),
            ),
            (
                "ephemeral",
                json!({"name": "v", "ephemeral": {"volumeClaimTemplate": {"spec": {"accessModes": ["ReadWriteOnce"]}}}}),
                json!({"name": "v", "ephemeral": {"volumeClaimTemplate": {"spec": {"accessModes": ["ReadWriteOnce"], "volumeMode": "Filesystem"}}}}),
            ),
            (
                "iscsi",
                json!({"name": "v", "iscsi": {"targetPortal": "t", "iqn": "q", "lun": 0}}),
                json!({"name": "v", "iscsi": {"targetPortal": "t", "iqn": "q", "lun": 0, "iscsiInterface": "default"}}),
            ),
            (
                "rbd",
                json!({"name": "v", "rbd": {"monitors": ["m"], "image": "i"}}),
                json!({"name": "v", "rbd": {"monitors": ["m"], "image": "i", "pool": "rbd", "user": "admin", "keyring": "/etc/ceph/keyring"}}),
            ),
            (
                "azureDisk",
                json!({"name": "v", "azureDisk": {"diskName": "d", "diskURI": "u"}}),
                json!({"name": "v", "azureDisk": {"diskName": "d", "diskURI": "u", "cachingMode": "ReadWrite", "fsType": "ext4", "readOnly": false, "kind": "Shared"}}),
            ),
            (
                "image volume",
                json!({"name": "v", "image": {"reference": "repo/art:v1"}}),
                json!({"name": "v", "image": {"reference": "repo/art:v1", "pullPolicy": "IfNotPresent"}}),
            ),
            (
                "pvc untouched",
                json!({"name": "v", "persistentVolumeClaim": {"claimName": "c"}}),
                json!({"name": "v", "persistentVolumeClaim": {"claimName": "c"}}),
            ),
        ];
        for (name, input, expected) in cases {
            let mut v: core::Volume = serde_json::from_value(input).expect(name);
            default_volume(&mut v);
            assert_eq!(
                serde_json::to_value(&v).expect(name),
                expected,
                "case {name}"
            );
        }
    }

    #[test]
    fn pod_template_does_not_get_pod_only_defaults() {
        let containers =
            json!([{"name": "c", "image": "nginx:1", "resources": {"limits": {"cpu": "1"}}}]);
        let mut expected_containers = defaulted_container("c", "nginx:1", "IfNotPresent");
        expected_containers["resources"] = json!({"limits": {"cpu": "1"}});
        check::<core::PodTemplate>(
            "pod template",
            json!({"metadata": {}, "template": {"spec": {"containers": containers}}}),
            json!({"metadata": {}, "template": {"spec": template_spec_defaults(json!([expected_containers]))}}),
        );
    }

    #[test]
    fn namespace_defaults() {
        check::<core::Namespace>(
            "named",
            json!({"metadata": {"name": "ns1", "labels": {"a": "b", "kubernetes.io/metadata.name": "wrong"}}}),
            json!({"metadata": {"name": "ns1", "labels": {"a": "b", "kubernetes.io/metadata.name": "ns1"}},
                   "status": {"phase": "Active"}}),
        );
        check::<core::Namespace>(
            "generateName only",
            json!({"metadata": {"generateName": "ns-"}}),
            json!({"metadata": {"generateName": "ns-"}, "status": {"phase": "Active"}}),
        );
        check::<core::Namespace>(
            "terminating kept, finalizers untouched",
            json!({"metadata": {"name": "x"}, "spec": {"finalizers": []}, "status": {"phase": "Terminating"}}),
            json!({"metadata": {"name": "x", "labels": {"kubernetes.io/metadata.name": "x"}},
                   "spec": {"finalizers": []}, "status": {"phase": "Terminating"}}),
        );
    }

    #[test]
    fn service_defaults() {
        let cases = [
            (
                "cluster ip",
                json!({"selector": {"app": "a"}, "ports": [{"port": 80}, {"port": 53, "protocol": "UDP", "targetPort": "dns"}]}),
                json!({"selector": {"app": "a"}, "type": "ClusterIP", "sessionAffinity": "None",
                    "internalTrafficPolicy": "Cluster", "ipFamilyPolicy": "SingleStack",
                    "ports": [{"port": 80, "protocol": "TCP", "targetPort": 80},
                              {"port": 53, "protocol": "UDP", "targetPort": "dns"}]}),
            ),
            (
                "target port 0 and empty string are unset",
                json!({"ports": [{"port": 80, "targetPort": 0}, {"port": 81, "targetPort": ""}]}),
                json!({"type": "ClusterIP", "sessionAffinity": "None",
                    "internalTrafficPolicy": "Cluster", "ipFamilyPolicy": "SingleStack",
                    "ports": [{"port": 80, "protocol": "TCP", "targetPort": 80},
                              {"port": 81, "protocol": "TCP", "targetPort": 81}]}),
            ),
            (
                "node port",
                json!({"type": "NodePort", "ports": [{"port": 80, "nodePort": 30080}]}),
                json!({"type": "NodePort", "sessionAffinity": "None", "externalTrafficPolicy": "Cluster",
                    "internalTrafficPolicy": "Cluster", "ipFamilyPolicy": "SingleStack",
                    "ports": [{"port": 80, "nodePort": 30080, "protocol": "TCP", "targetPort": 80}]}),
            ),
            (
                "load balancer",
                json!({"type": "LoadBalancer", "externalTrafficPolicy": "Local"}),
                json!({"type": "LoadBalancer", "sessionAffinity": "None", "externalTrafficPolicy": "Local",
                    "internalTrafficPolicy": "Cluster", "ipFamilyPolicy": "SingleStack",
                    "allocateLoadBalancerNodePorts": true}),
            ),
            (
                "cluster ip with external ips",
                json!({"externalIPs": ["1.2.3.4"]}),
                json!({"externalIPs": ["1.2.3.4"], "type": "ClusterIP", "sessionAffinity": "None",
                    "externalTrafficPolicy": "Cluster", "internalTrafficPolicy": "Cluster",
                    "ipFamilyPolicy": "SingleStack"}),
            ),
            (
                "external name",
                json!({"type": "ExternalName", "externalName": "example.com"}),
                json!({"type": "ExternalName", "externalName": "example.com", "sessionAffinity": "None"}),
            ),
            (
                "headless without selector: ip family left to the registry",
                json!({"clusterIP": "None"}),
                json!({"clusterIP": "None", "type": "ClusterIP", "sessionAffinity": "None",
                    "internalTrafficPolicy": "Cluster"}),
            ),
            (
                "client ip affinity",
                json!({"sessionAffinity": "ClientIP", "selector": {"a": "b"}}),
                json!({"sessionAffinity": "ClientIP", "selector": {"a": "b"}, "type": "ClusterIP",
                    "sessionAffinityConfig": {"clientIP": {"timeoutSeconds": 10800}},
                    "internalTrafficPolicy": "Cluster", "ipFamilyPolicy": "SingleStack"}),
            ),
            (
                "affinity None drops config",
                json!({"sessionAffinityConfig": {"clientIP": {"timeoutSeconds": 5}}, "ipFamilyPolicy": "PreferDualStack"}),
                json!({"sessionAffinity": "None", "type": "ClusterIP",
                    "internalTrafficPolicy": "Cluster", "ipFamilyPolicy": "PreferDualStack"}),
            ),
        ];
        for (name, spec, expected) in cases {
            check::<core::Service>(
                name,
                json!({"metadata": {}, "spec": spec}),
                json!({"metadata": {}, "spec": expected}),
            );
        }
        check::<core::Service>(
            "lb status ip mode",
            json!({"metadata": {}, "spec": {"type": "LoadBalancer", "allocateLoadBalancerNodePorts": false},
                "status": {"loadBalancer": {"ingress": [{"ip": "1.1.1.1"}, {"hostname": "h"}]}}}),
            json!({"metadata": {}, "spec": {"type": "LoadBalancer", "allocateLoadBalancerNodePorts": false,
                    "sessionAffinity": "None", "externalTrafficPolicy": "Cluster",
                    "internalTrafficPolicy": "Cluster", "ipFamilyPolicy": "SingleStack"},
                "status": {"loadBalancer": {"ingress": [{"ip": "1.1.1.1", "ipMode": "VIP"}, {"hostname": "h"}]}}}),
        );
    }

    #[test]
    fn simple_core_kinds() {
        check::<core::Secret>(
            "secret",
            json!({"metadata": {}}),
            json!({"metadata": {}, "type": "Opaque"}),
        );
        check::<core::Secret>(
            "secret typed",
            json!({"metadata": {}, "type": "kubernetes.io/tls"}),
            json!({"metadata": {}, "type": "kubernetes.io/tls"}),
        );
        check::<core::ConfigMap>(
            "configmap",
            json!({"metadata": {}}),
            json!({"metadata": {}}),
        );
        check::<core::Endpoints>(
            "endpoints",
            json!({"metadata": {}, "subsets": [{"ports": [{"port": 80}, {"port": 53, "protocol": "UDP"}]}]}),
            json!({"metadata": {}, "subsets": [{"ports": [{"port": 80, "protocol": "TCP"}, {"port": 53, "protocol": "UDP"}]}]}),
        );
        check::<core::Node>(
            "node allocatable",
            json!({"metadata": {}, "status": {"capacity": {"cpu": "4"}}}),
            json!({"metadata": {}, "status": {"capacity": {"cpu": "4"}, "allocatable": {"cpu": "4"}}}),
        );
        check::<core::Node>(
            "node without status",
            json!({"metadata": {}}),
            json!({"metadata": {}}),
        );
        check::<core::PersistentVolume>(
            "pv",
            json!({"metadata": {}, "spec": {"hostPath": {"path": "/d"}}}),
            json!({"metadata": {}, "spec": {"hostPath": {"path": "/d", "type": ""},
                "persistentVolumeReclaimPolicy": "Retain", "volumeMode": "Filesystem"},
                "status": {"phase": "Pending"}}),
        );
        check::<core::PersistentVolumeClaim>(
            "pvc",
            json!({"metadata": {}, "spec": {"accessModes": ["ReadWriteOnce"]}}),
            json!({"metadata": {}, "spec": {"accessModes": ["ReadWriteOnce"], "volumeMode": "Filesystem"},
                "status": {"phase": "Pending"}}),
        );
        check::<core::PersistentVolumeClaim>(
            "pvc bound keeps phase and block mode",
            json!({"metadata": {}, "spec": {"volumeMode": "Block"}, "status": {"phase": "Bound"}}),
            json!({"metadata": {}, "spec": {"volumeMode": "Block"}, "status": {"phase": "Bound"}}),
        );
        check::<core::LimitRange>(
            "limit range container",
            json!({"metadata": {}, "spec": {"limits": [
                {"type": "Container", "max": {"cpu": "2"}, "min": {"memory": "1Mi"}},
                {"type": "Pod", "max": {"cpu": "4"}}]}}),
            json!({"metadata": {}, "spec": {"limits": [
                {"type": "Container", "max": {"cpu": "2"}, "min": {"memory": "1Mi"},
                 "default": {"cpu": "2"}, "defaultRequest": {"cpu": "2", "memory": "1Mi"}},
                {"type": "Pod", "max": {"cpu": "4"}}]}}),
        );
        check::<core::ReplicationController>(
            "rc",
            json!({"metadata": {}, "spec": {"template": {"metadata": {"labels": {"app": "a"}},
                "spec": {"containers": [{"name": "c", "image": "i:1"}]}}}}),
            json!({"metadata": {"labels": {"app": "a"}}, "spec": {"replicas": 1, "selector": {"app": "a"},
                "template": {"metadata": {"labels": {"app": "a"}},
                "spec": template_spec_defaults(json!([{"name": "c", "image": "i:1", "imagePullPolicy": "IfNotPresent",
                    "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File"}]))}}}),
        );
        check::<core::ServiceAccount>("sa", json!({"metadata": {}}), json!({"metadata": {}}));
    }

    fn template(labels: Value) -> Value {
        json!({"metadata": {"labels": labels}, "spec": {"containers": [{"name": "c", "image": "nginx"}]}})
    }

    fn defaulted_template(labels: Value) -> Value {
        let mut c = defaulted_container("c", "nginx", "Always");
        c.as_object_mut().expect("object").remove("resources");
        json!({"metadata": {"labels": labels}, "spec": template_spec_defaults(json!([c]))})
    }

    #[test]
    fn apps_defaults() {
        check::<apps::Deployment>(
            "deployment",
            json!({"metadata": {}, "spec": {"selector": {"matchLabels": {"a": "b"}}, "template": template(json!({"a": "b"}))}}),
            json!({"metadata": {}, "spec": {
                "selector": {"matchLabels": {"a": "b"}}, "replicas": 1, "revisionHistoryLimit": 10,
                "progressDeadlineSeconds": 600,
                "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"}},
                "template": defaulted_template(json!({"a": "b"}))}}),
        );
        check::<apps::Deployment>(
            "deployment recreate keeps no rolling update",
            json!({"metadata": {}, "spec": {"replicas": 0, "strategy": {"type": "Recreate"},
                "selector": {}, "template": template(json!({}))}}),
            json!({"metadata": {}, "spec": {
                "selector": {}, "replicas": 0, "revisionHistoryLimit": 10, "progressDeadlineSeconds": 600,
                "strategy": {"type": "Recreate"}, "template": defaulted_template(json!({}))}}),
        );
        check::<apps::ReplicaSet>(
            "replicaset",
            json!({"metadata": {}, "spec": {"selector": {}, "template": template(json!({"a": "b"}))}}),
            json!({"metadata": {}, "spec": {"selector": {}, "replicas": 1, "template": defaulted_template(json!({"a": "b"}))}}),
        );
        check::<apps::StatefulSet>(
            "statefulset",
            json!({"metadata": {}, "spec": {"selector": {}, "serviceName": "s", "template": template(json!({})),
                "volumeClaimTemplates": [{"metadata": {"name": "d"}, "spec": {"accessModes": ["ReadWriteOnce"]}}]}}),
            json!({"metadata": {}, "spec": {"selector": {}, "serviceName": "s",
                "podManagementPolicy": "OrderedReady", "replicas": 1, "revisionHistoryLimit": 10,
                "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"partition": 0}},
                "persistentVolumeClaimRetentionPolicy": {"whenDeleted": "Retain", "whenScaled": "Retain"},
                "template": defaulted_template(json!({})),
                "volumeClaimTemplates": [{"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                    "metadata": {"name": "d"}, "spec": {"accessModes": ["ReadWriteOnce"], "volumeMode": "Filesystem"},
                    "status": {"phase": "Pending"}}]}}),
        );
        check::<apps::StatefulSet>(
            "statefulset OnDelete",
            json!({"metadata": {}, "spec": {"selector": {}, "template": template(json!({})),
                "updateStrategy": {"type": "OnDelete"}}}),
            json!({"metadata": {}, "spec": {"selector": {},
                "podManagementPolicy": "OrderedReady", "replicas": 1, "revisionHistoryLimit": 10,
                "updateStrategy": {"type": "OnDelete"},
                "persistentVolumeClaimRetentionPolicy": {"whenDeleted": "Retain", "whenScaled": "Retain"},
                "template": defaulted_template(json!({}))}}),
        );
        check::<apps::DaemonSet>(
            "daemonset",
            json!({"metadata": {}, "spec": {"selector": {}, "template": template(json!({}))}}),
            json!({"metadata": {}, "spec": {"selector": {}, "revisionHistoryLimit": 10,
                "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}},
                "template": defaulted_template(json!({}))}}),
        );
    }

    #[test]
    fn batch_defaults() {
        let mut job_template = defaulted_template(json!({"j": "1"}));
        job_template["spec"]["restartPolicy"] = json!("Never");
        let mut input_template = template(json!({"j": "1"}));
        input_template["spec"]["restartPolicy"] = json!("Never");
        check::<batch::Job>(
            "job",
            json!({"metadata": {}, "spec": {"template": input_template}}),
            json!({"metadata": {"labels": {"j": "1"}}, "spec": {
                "completions": 1, "parallelism": 1, "backoffLimit": 6, "completionMode": "NonIndexed",
                "suspend": false, "podReplacementPolicy": "TerminatingOrFailed", "template": job_template}}),
        );
        check::<batch::Job>(
            "job parallel with per-index backoff and failure policy",
            json!({"metadata": {"labels": {"own": "x"}}, "spec": {"parallelism": 3, "backoffLimitPerIndex": 1,
                "completionMode": "Indexed", "completions": 3,
                "podFailurePolicy": {"rules": [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": ""}]}]},
                "template": input_template}}),
            json!({"metadata": {"labels": {"own": "x"}}, "spec": {"parallelism": 3, "backoffLimitPerIndex": 1,
                "completionMode": "Indexed", "completions": 3, "backoffLimit": 2147483647, "suspend": false,
                "podFailurePolicy": {"rules": [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}]},
                "podReplacementPolicy": "Failed", "template": job_template}}),
        );
        check::<batch::CronJob>(
            "cronjob",
            json!({"metadata": {}, "spec": {"schedule": "@hourly", "jobTemplate": {"spec": {"template": input_template}}}}),
            json!({"metadata": {}, "spec": {"schedule": "@hourly", "concurrencyPolicy": "Allow", "suspend": false,
                "successfulJobsHistoryLimit": 3, "failedJobsHistoryLimit": 1,
                "jobTemplate": {"spec": {"template": job_template}}}}),
        );
    }

    #[test]
    fn other_group_defaults() {
        check::<discovery::EndpointSlice>(
            "endpointslice",
            json!({"metadata": {}, "addressType": "IPv4", "endpoints": [], "ports": [{"port": 80}, {"name": "dns", "protocol": "UDP", "port": 53}]}),
            json!({"metadata": {}, "addressType": "IPv4", "endpoints": [],
                "ports": [{"port": 80, "name": "", "protocol": "TCP"}, {"name": "dns", "protocol": "UDP", "port": 53}]}),
        );
        check::<rbac::RoleBinding>(
            "rolebinding",
            json!({"metadata": {}, "roleRef": {"apiGroup": "", "kind": "Role", "name": "r"},
                "subjects": [{"kind": "User", "name": "u"}, {"kind": "Group", "name": "g"}, {"kind": "ServiceAccount", "name": "s", "namespace": "n"}]}),
            json!({"metadata": {}, "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "r"},
                "subjects": [{"kind": "User", "name": "u", "apiGroup": "rbac.authorization.k8s.io"},
                    {"kind": "Group", "name": "g", "apiGroup": "rbac.authorization.k8s.io"},
                    {"kind": "ServiceAccount", "name": "s", "namespace": "n"}]}),
        );
        check::<rbac::ClusterRoleBinding>(
            "clusterrolebinding",
            json!({"metadata": {}, "roleRef": {"apiGroup": "", "kind": "ClusterRole", "name": "r"}}),
            json!({"metadata": {}, "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "r"}}),
        );
        check::<scheduling::PriorityClass>(
            "priorityclass",
            json!({"metadata": {}, "value": 10}),
            json!({"metadata": {}, "value": 10, "preemptionPolicy": "PreemptLowerPriority"}),
        );
        check::<storage::StorageClass>(
            "storageclass",
            json!({"metadata": {}, "provisioner": "p"}),
            json!({"metadata": {}, "provisioner": "p", "reclaimPolicy": "Delete", "volumeBindingMode": "Immediate"}),
        );
        check::<networking::NetworkPolicy>(
            "networkpolicy ingress only",
            json!({"metadata": {}, "spec": {"podSelector": {}, "ingress": [{"ports": [{"port": 80}]}]}}),
            json!({"metadata": {}, "spec": {"podSelector": {}, "ingress": [{"ports": [{"port": 80, "protocol": "TCP"}]}],
                "policyTypes": ["Ingress"]}}),
        );
        check::<networking::NetworkPolicy>(
            "networkpolicy egress",
            json!({"metadata": {}, "spec": {"podSelector": {}, "egress": [{"ports": [{"port": 53, "protocol": "UDP"}]}]}}),
            json!({"metadata": {}, "spec": {"podSelector": {}, "egress": [{"ports": [{"port": 53, "protocol": "UDP"}]}],
                "policyTypes": ["Ingress", "Egress"]}}),
        );
        check::<networking::IngressClass>(
            "ingressclass",
            json!({"metadata": {}, "spec": {"controller": "c", "parameters": {"kind": "K", "name": "n"}}}),
            json!({"metadata": {}, "spec": {"controller": "c", "parameters": {"kind": "K", "name": "n", "scope": "Cluster"}}}),
        );
        check::<networking::Ingress>(
            "ingress",
            json!({"metadata": {}, "spec": {}}),
            json!({"metadata": {}, "spec": {}}),
        );
        check::<coordination::Lease>("lease", json!({"metadata": {}}), json!({"metadata": {}}));
    }

    #[test]
    fn apiservice_defaults() {
        check::<apiregistration::APIService>(
            "apiservice service port",
            json!({"metadata": {}, "spec": {"group": "g.example.com", "version": "v1",
                "groupPriorityMinimum": 100, "versionPriority": 10,
                "service": {"namespace": "ns", "name": "api"}}}),
            json!({"metadata": {}, "spec": {"group": "g.example.com", "version": "v1",
                "groupPriorityMinimum": 100, "versionPriority": 10,
                "service": {"namespace": "ns", "name": "api", "port": 443}}}),
        );
        check::<apiregistration::APIService>(
            "apiservice port kept",
            json!({"metadata": {}, "spec": {"group": "g.example.com", "version": "v1",
                "groupPriorityMinimum": 100, "versionPriority": 10,
                "service": {"namespace": "ns", "name": "api", "port": 8443}}}),
            json!({"metadata": {}, "spec": {"group": "g.example.com", "version": "v1",
                "groupPriorityMinimum": 100, "versionPriority": 10,
                "service": {"namespace": "ns", "name": "api", "port": 8443}}}),
        );
        check::<apiregistration::APIService>(
            "apiservice local",
            json!({"metadata": {}, "spec": {"group": "g.example.com", "version": "v1",
                "groupPriorityMinimum": 100, "versionPriority": 10}}),
            json!({"metadata": {}, "spec": {"group": "g.example.com", "version": "v1",
                "groupPriorityMinimum": 100, "versionPriority": 10}}),
        );
    }

    #[test]
    fn hpa_defaults() {
        let target = json!({"apiVersion": "apps/v1", "kind": "Deployment", "name": "d"});
        check::<autoscaling::HorizontalPodAutoscaler>(
            "hpa minimal",
            json!({"metadata": {}, "spec": {"maxReplicas": 5, "scaleTargetRef": target}}),
            json!({"metadata": {}, "spec": {"maxReplicas": 5, "scaleTargetRef": target, "minReplicas": 1,
                "metrics": [{"type": "Resource", "resource": {"name": "cpu",
                    "target": {"type": "Utilization", "averageUtilization": 80}}}]}}),
        );
        check::<autoscaling::HorizontalPodAutoscaler>(
            "hpa behavior",
            json!({"metadata": {}, "spec": {"maxReplicas": 5, "minReplicas": 2, "scaleTargetRef": target,
                "metrics": [{"type": "Resource", "resource": {"name": "memory", "target": {"type": "Utilization", "averageUtilization": 50}}}],
                "behavior": {"scaleDown": {"stabilizationWindowSeconds": 60}}}}),
            json!({"metadata": {}, "spec": {"maxReplicas": 5, "minReplicas": 2, "scaleTargetRef": target,
                "metrics": [{"type": "Resource", "resource": {"name": "memory", "target": {"type": "Utilization", "averageUtilization": 50}}}],
                "behavior": {
                    "scaleDown": {"stabilizationWindowSeconds": 60, "selectPolicy": "Max",
                        "policies": [{"type": "Percent", "value": 100, "periodSeconds": 15}]},
                    "scaleUp": {"stabilizationWindowSeconds": 0, "selectPolicy": "Max",
                        "policies": [{"type": "Pods", "value": 4, "periodSeconds": 15},
                                     {"type": "Percent", "value": 100, "periodSeconds": 15}]}}}}),
        );
    }
}
