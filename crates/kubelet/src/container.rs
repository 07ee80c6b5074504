//! Container → CRI `ContainerConfig` (upstream `kuberuntime_container.go`
//! `generateContainerConfig`, `kuberuntime_container_linux.go`, `security_context.go`),
//! the container spec hash, and the image pull decision. Pure functions.

use std::collections::HashMap;

use k8s_cri::v1 as cri;
use k8s_openapi::api::core::v1::{Container, EphemeralContainer, Pod};

use crate::config::NodeConfig;
use crate::qos::{container_resources, qos_of};
use crate::sandbox::{
    CONTAINER_NAME_LABEL, POD_NAME_LABEL, POD_NAMESPACE_LABEL, POD_UID_LABEL, name, namespace,
    namespace_options, seccomp_profile, spec, uid,
};

/// Annotations the kubelet keeps on containers (read back after a restart).
pub const CONTAINER_HASH_ANNOTATION: &str = "io.kubernetes.container.hash";
pub const CONTAINER_RESTART_COUNT_ANNOTATION: &str = "io.kubernetes.container.restartCount";
pub const TERMINATION_MESSAGE_PATH_ANNOTATION: &str =
    "io.kubernetes.container.terminationMessagePath";
pub const TERMINATION_MESSAGE_POLICY_ANNOTATION: &str =
    "io.kubernetes.container.terminationMessagePolicy";
pub const POD_TERMINATION_GRACE_ANNOTATION: &str = "io.kubernetes.pod.terminationGracePeriod";
/// Set by this kubelet on init and ephemeral containers, so status can tell them apart
/// after a restart (regular containers have none).
pub const CONTAINER_TYPE_ANNOTATION: &str = "io.kubernetes.container.type";

/// Which list of the pod spec a container comes from (upstream `ContainerType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ContainerType {
    #[default]
    Regular,
    Init,
    Ephemeral,
}

impl ContainerType {
    /// The `container_type` label of the kubelet's start metrics.
    pub fn metric_label(self) -> &'static str {
        match self {
            ContainerType::Regular => "container",
            ContainerType::Init => "init_container",
            ContainerType::Ephemeral => "ephemeral_container",
        }
    }

    /// The value of [`CONTAINER_TYPE_ANNOTATION`] (`init` as this kubelet has always
    /// written it, `EPHEMERAL` as upstream names the type); none for regular containers.
    pub fn annotation(self) -> Option<&'static str> {
        match self {
            ContainerType::Regular => None,
            ContainerType::Init => Some("init"),
            ContainerType::Ephemeral => Some("EPHEMERAL"),
        }
    }

    /// The type an annotation value names (either case); regular for anything else.
    pub fn from_annotation(value: &str) -> Self {
        if value.eq_ignore_ascii_case("init") {
            ContainerType::Init
        } else if value.eq_ignore_ascii_case("ephemeral") {
            ContainerType::Ephemeral
        } else {
            ContainerType::Regular
        }
    }
}

/// A sidecar: an init container with `restartPolicy: Always` (upstream's restartable init
/// container), started in order with the others but kept running beside the regular ones.
pub fn is_sidecar(c: &Container) -> bool {
    c.restart_policy.as_deref() == Some("Always")
}

/// An ephemeral container as the container it runs as (upstream converts its
/// `EphemeralContainerCommon`): no ports, probes, lifecycle hooks, resources or restart
/// policy, whatever the object says.
pub fn ephemeral_container(ec: &EphemeralContainer) -> Container {
    Container {
        name: ec.name.clone(),
        image: ec.image.clone(),
        image_pull_policy: ec.image_pull_policy.clone(),
        command: ec.command.clone(),
        args: ec.args.clone(),
        working_dir: ec.working_dir.clone(),
        env: ec.env.clone(),
        env_from: ec.env_from.clone(),
        volume_mounts: ec.volume_mounts.clone(),
        volume_devices: ec.volume_devices.clone(),
        security_context: ec.security_context.clone(),
        stdin: ec.stdin,
        stdin_once: ec.stdin_once,
        tty: ec.tty,
        termination_message_path: ec.termination_message_path.clone(),
        termination_message_policy: ec.termination_message_policy.clone(),
        ..Default::default()
    }
}

/// Paths hidden from unprivileged containers (upstream `securitycontext` defaults).
pub const DEFAULT_MASKED_PATHS: &[&str] = &[
    "/proc/asound",
    "/proc/acpi",
    "/proc/kcore",
    "/proc/keys",
    "/proc/latency_stats",
    "/proc/timer_list",
    "/proc/timer_stats",
    "/proc/sched_debug",
    "/proc/scsi",
    "/sys/firmware",
    "/sys/devices/virtual/powercap",
];
pub const DEFAULT_READONLY_PATHS: &[&str] = &[
    "/proc/bus",
    "/proc/fs",
    "/proc/irq",
    "/proc/sys",
    "/proc/sysrq-trigger",
];

/// A stable hash of the container spec (FNV-1a 64 over its JSON, resources left out as
/// upstream does); a running container whose hash differs from the spec's is restarted.
pub fn container_hash(c: &Container) -> String {
    let mut c = c.clone();
    c.resources = None;
    let json = serde_json::to_vec(&c).unwrap_or_default();
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in json {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("{h:x}")
}

/// Whether an image reference names a tag other than `latest` or a digest.
fn has_fixed_tag(image: &str) -> bool {
    if image.contains('@') {
        return true;
    }
    let last = image.rsplit('/').next().unwrap_or(image);
    match last.rsplit_once(':') {
        Some((_, tag)) => tag != "latest",
        None => false,
    }
}

/// What to do about a container's image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PullDecision {
    /// Use the image already present.
    UsePresent,
    /// Pull it (through the node's registry mirror).
    Pull,
    /// `imagePullPolicy: Never` and the image is absent (`ErrImageNeverPull`).
    NeverPullAbsent,
}

/// The pull decision from the container's policy (defaulted as the API server does: `Always`
/// for `:latest` or untagged images, else `IfNotPresent`) and whether ImageStatus found it.
pub fn pull_decision(c: &Container, present: bool) -> PullDecision {
    let image = c.image.as_deref().unwrap_or_default();
    let policy = c
        .image_pull_policy
        .as_deref()
        .unwrap_or(if has_fixed_tag(image) {
            "IfNotPresent"
        } else {
            "Always"
        });
    match (policy, present) {
        ("Never", true) | ("IfNotPresent", true) => PullDecision::UsePresent,
        ("Never", false) => PullDecision::NeverPullAbsent,
        _ => PullDecision::Pull,
    }
}

/// Why a container config cannot be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    #[error(
        "container has runAsNonRoot and image will run as root (pod: \"{pod}\", container: {container})"
    )]
    RunAsRoot { pod: String, container: String },
}

/// Everything per-attempt that a container config needs besides the pod and node.
#[derive(Debug, Clone)]
pub struct ContainerInputs<'a> {
    pub container: &'a Container,
    /// The restart count this container instance gets (CRI attempt).
    pub restart_count: u32,
    /// The image reference (ID) the runtime resolved.
    pub image_ref: &'a str,
    /// Resolved environment.
    pub env: &'a [(String, String)],
    /// Whether it is a regular, init or ephemeral container.
    pub kind: ContainerType,
    /// For an ephemeral container with a `targetContainerName`: the runtime ID of the
    /// running target, whose PID namespace it joins.
    pub pid_target: Option<&'a str>,
}

/// Kubernetes labels of a container.
pub fn container_labels(pod: &Pod, container: &str) -> HashMap<String, String> {
    HashMap::from([
        (POD_NAME_LABEL.to_owned(), name(pod).to_owned()),
        (POD_NAMESPACE_LABEL.to_owned(), namespace(pod).to_owned()),
        (POD_UID_LABEL.to_owned(), uid(pod).to_owned()),
        (CONTAINER_NAME_LABEL.to_owned(), container.to_owned()),
    ])
}

fn security_context(
    pod: &Pod,
    c: &Container,
    pid_target: Option<&str>,
) -> Result<cri::LinuxContainerSecurityContext, ConfigError> {
    let psc = spec(pod).security_context.as_ref();
    let sc = c.security_context.as_ref();
    let run_as_user = sc
        .and_then(|s| s.run_as_user)
        .or(psc.and_then(|s| s.run_as_user));
    let run_as_group = sc
        .and_then(|s| s.run_as_group)
        .or(psc.and_then(|s| s.run_as_group));
    let non_root = sc
        .and_then(|s| s.run_as_non_root)
        .or(psc.and_then(|s| s.run_as_non_root));
    if non_root == Some(true) && run_as_user == Some(0) {
        return Err(ConfigError::RunAsRoot {
            pod: format!("{}_{}({})", name(pod), namespace(pod), uid(pod)),
            container: c.name.clone(),
        });
    }
    let privileged = sc.and_then(|s| s.privileged).unwrap_or(false);
    let unmasked = sc.and_then(|s| s.proc_mount.as_deref()) == Some("Unmasked");
    let (masked, readonly) = if privileged || unmasked {
        (vec![], vec![])
    } else {
        (
            DEFAULT_MASKED_PATHS
                .iter()
                .map(|s| (*s).to_owned())
                .collect(),
            DEFAULT_READONLY_PATHS
                .iter()
                .map(|s| (*s).to_owned())
                .collect(),
        )
    };
    let caps = sc.and_then(|s| s.capabilities.as_ref());
    let mut supplemental = psc
        .and_then(|s| s.supplemental_groups.clone())
        .unwrap_or_default();
    if let Some(g) = psc.and_then(|s| s.fs_group) {
        supplemental.push(g);
    }
    let mut namespaces = namespace_options(pod);
    // A debug container joins the PID namespace of its target (upstream
    // `determineEffectiveSecurityContext`): only when containers have their own PID
    // namespace; with a shared or host one it already sees the target's processes.
    if let Some(target) = pid_target.filter(|t| !t.is_empty())
        && namespaces.pid == cri::NamespaceMode::Container as i32
    {
        namespaces.pid = cri::NamespaceMode::Target as i32;
        namespaces.target_id = target.to_owned();
    }
    Ok(cri::LinuxContainerSecurityContext {
        capabilities: caps.map(|c| cri::Capability {
            add_capabilities: c.add.clone().unwrap_or_default(),
            drop_capabilities: c.drop.clone().unwrap_or_default(),
            add_ambient_capabilities: vec![],
        }),
        privileged,
        namespace_options: Some(namespaces),
        run_as_user: run_as_user.map(|value| cri::Int64Value { value }),
        run_as_group: run_as_group.map(|value| cri::Int64Value { value }),
        readonly_rootfs: sc
            .and_then(|s| s.read_only_root_filesystem)
            .unwrap_or(false),
        supplemental_groups: supplemental,
        no_new_privs: sc
            .and_then(|s| s.allow_privilege_escalation)
            .is_some_and(|allow| !allow),
        masked_paths: masked,
        readonly_paths: readonly,
        seccomp: Some(seccomp_profile(
            sc.and_then(|s| s.seccomp_profile.as_ref())
                .or(psc.and_then(|s| s.seccomp_profile.as_ref())),
        )),
        ..Default::default()
    })
}

/// The CRI config of one container instance.
pub fn container_config(
    node: &NodeConfig,
    pod: &Pod,
    input: &ContainerInputs<'_>,
) -> Result<cri::ContainerConfig, ConfigError> {
    let c = input.container;
    let (command, args) = crate::env::expand_command_and_args(c, input.env);
    let mut annotations = HashMap::from([
        (CONTAINER_HASH_ANNOTATION.to_owned(), container_hash(c)),
        (
            CONTAINER_RESTART_COUNT_ANNOTATION.to_owned(),
            input.restart_count.to_string(),
        ),
        (
            TERMINATION_MESSAGE_PATH_ANNOTATION.to_owned(),
            c.termination_message_path
                .clone()
                .unwrap_or_else(|| "/dev/termination-log".into()),
        ),
        (
            TERMINATION_MESSAGE_POLICY_ANNOTATION.to_owned(),
            c.termination_message_policy
                .clone()
                .unwrap_or_else(|| "File".into()),
        ),
        (
            POD_TERMINATION_GRACE_ANNOTATION.to_owned(),
            spec(pod)
                .termination_grace_period_seconds
                .unwrap_or(30)
                .to_string(),
        ),
    ]);
    if let Some(kind) = input.kind.annotation() {
        annotations.insert(CONTAINER_TYPE_ANNOTATION.to_owned(), kind.to_owned());
    }
    Ok(cri::ContainerConfig {
        metadata: Some(cri::ContainerMetadata {
            name: c.name.clone(),
            attempt: input.restart_count,
        }),
        image: Some(cri::ImageSpec {
            image: input.image_ref.to_owned(),
            user_specified_image: c.image.clone().unwrap_or_default(),
            ..Default::default()
        }),
        command,
        args,
        working_dir: c.working_dir.clone().unwrap_or_default(),
        envs: input
            .env
            .iter()
            .map(|(key, value)| cri::KeyValue {
                key: key.clone(),
                value: value.clone(),
            })
            .collect(),
        labels: container_labels(pod, &c.name),
        annotations,
        log_path: format!("{}/{}.log", c.name, input.restart_count),
        stdin: c.stdin.unwrap_or(false),
        stdin_once: c.stdin_once.unwrap_or(false),
        tty: c.tty.unwrap_or(false),
        linux: Some(cri::LinuxContainerConfig {
            resources: Some(container_resources(qos_of(pod), c, node.memory_capacity)),
            security_context: Some(security_context(pod, c, input.pid_target)?),
        }),
        ..Default::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{
        Capabilities, PodSecurityContext, PodSpec, ResourceRequirements, SeccompProfile,
        SecurityContext,
    };
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn pod_with(c: Container, psc: Option<PodSecurityContext>) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some("p".into()),
                namespace: Some("ns".into()),
                uid: Some("u".into()),
                ..Default::default()
            },
            spec: Some(PodSpec {
                containers: vec![c],
                security_context: psc,
                termination_grace_period_seconds: Some(5),
                ..Default::default()
            }),
            status: None,
        }
    }

    #[test]
    fn pull_decisions() {
        let c = |image: &str, policy: Option<&str>| Container {
            name: "c".into(),
            image: Some(image.into()),
            image_pull_policy: policy.map(str::to_owned),
            ..Default::default()
        };
        let cases = [
            (c("nginx", None), true, PullDecision::Pull),
            (c("nginx:latest", None), true, PullDecision::Pull),
            (c("nginx:1.22", None), true, PullDecision::UsePresent),
            (c("nginx:1.22", None), false, PullDecision::Pull),
            (c("localhost:5000/nginx", None), true, PullDecision::Pull),
            (
                c("localhost:5000/nginx:1", None),
                true,
                PullDecision::UsePresent,
            ),
            (c("nginx@sha256:abcd", None), true, PullDecision::UsePresent),
            (
                c("nginx", Some("IfNotPresent")),
                true,
                PullDecision::UsePresent,
            ),
            (c("nginx:1", Some("Always")), true, PullDecision::Pull),
            (c("nginx", Some("Never")), true, PullDecision::UsePresent),
            (
                c("nginx", Some("Never")),
                false,
                PullDecision::NeverPullAbsent,
            ),
        ];
        for (i, (c, present, want)) in cases.into_iter().enumerate() {
            assert_eq!(pull_decision(&c, present), want, "case {i}: {:?}", c.image);
        }
    }

    #[test]
    fn hash_is_stable_and_ignores_resources() {
        let a = Container {
            name: "a".into(),
            image: Some("nginx".into()),
            ..Default::default()
        };
        let mut b = a.clone();
        b.resources = Some(ResourceRequirements {
            limits: Some([("cpu".to_string(), Quantity("1".into()))].into()),
            ..Default::default()
        });
        assert_eq!(container_hash(&a), container_hash(&b));
        assert_eq!(container_hash(&a), container_hash(&a.clone()));
        let mut c = a.clone();
        c.image = Some("nginx:1.22".into());
        assert_ne!(container_hash(&a), container_hash(&c));
    }

    #[test]
    fn full_container_config() {
        let c = Container {
            name: "app".into(),
            image: Some("busybox".into()),
            command: Some(vec!["sh".into(), "-c".into()]),
            args: Some(vec!["echo $(WHO)".into()]),
            working_dir: Some("/tmp".into()),
            tty: Some(true),
            stdin: Some(true),
            security_context: Some(SecurityContext {
                capabilities: Some(Capabilities {
                    add: Some(vec!["NET_ADMIN".into()]),
                    drop: Some(vec!["ALL".into()]),
                }),
                read_only_root_filesystem: Some(true),
                allow_privilege_escalation: Some(false),
                run_as_user: Some(1001),
                ..Default::default()
            }),
            ..Default::default()
        };
        let pod = pod_with(
            c.clone(),
            Some(PodSecurityContext {
                run_as_user: Some(1000),
                run_as_group: Some(3000),
                seccomp_profile: Some(SeccompProfile {
                    type_: "RuntimeDefault".into(),
                    localhost_profile: None,
                }),
                ..Default::default()
            }),
        );
        let env = vec![("WHO".to_string(), "world".to_string())];
        let input = ContainerInputs {
            container: &c,
            restart_count: 3,
            image_ref: "sha256:abc",
            env: &env,
            kind: ContainerType::Regular,
            pid_target: None,
        };
        let cfg = container_config(&NodeConfig::new("n"), &pod, &input).unwrap();
        assert_eq!(cfg.metadata.as_ref().unwrap().attempt, 3);
        assert_eq!(cfg.image.as_ref().unwrap().image, "sha256:abc");
        assert_eq!(cfg.image.as_ref().unwrap().user_specified_image, "busybox");
        assert_eq!(cfg.command, ["sh", "-c"]);
        assert_eq!(cfg.args, ["echo world"]);
        assert_eq!(cfg.working_dir, "/tmp");
        assert_eq!(cfg.log_path, "app/3.log");
        assert!(cfg.tty && cfg.stdin && !cfg.stdin_once);
        assert_eq!(cfg.envs[0].key, "WHO");
        assert_eq!(cfg.labels[CONTAINER_NAME_LABEL], "app");
        assert_eq!(cfg.labels[POD_UID_LABEL], "u");
        assert_eq!(cfg.annotations[CONTAINER_RESTART_COUNT_ANNOTATION], "3");
        assert_eq!(
            cfg.annotations[CONTAINER_HASH_ANNOTATION],
            container_hash(&c)
        );
        assert_eq!(cfg.annotations[POD_TERMINATION_GRACE_ANNOTATION], "5");
        assert!(!cfg.annotations.contains_key(CONTAINER_TYPE_ANNOTATION));
        let linux = cfg.linux.unwrap();
        let sc = linux.security_context.unwrap();
        assert_eq!(
            sc.run_as_user,
            Some(cri::Int64Value { value: 1001 }),
            "container overrides pod"
        );
        assert_eq!(
            sc.run_as_group,
            Some(cri::Int64Value { value: 3000 }),
            "pod value inherited"
        );
        assert!(sc.readonly_rootfs && sc.no_new_privs && !sc.privileged);
        assert_eq!(sc.capabilities.unwrap().add_capabilities, ["NET_ADMIN"]);
        assert_eq!(sc.masked_paths.len(), DEFAULT_MASKED_PATHS.len());
        assert_eq!(
            sc.seccomp.unwrap().profile_type,
            cri::security_profile::ProfileType::RuntimeDefault as i32
        );
        assert_eq!(linux.resources.unwrap().oom_score_adj, 1000, "BestEffort");
    }

    #[test]
    fn privileged_and_run_as_non_root() {
        let mut c = Container {
            name: "c".into(),
            ..Default::default()
        };
        c.security_context = Some(SecurityContext {
            privileged: Some(true),
            ..Default::default()
        });
        let pod = pod_with(c.clone(), None);
        let input = ContainerInputs {
            container: &c,
            restart_count: 0,
            image_ref: "x",
            env: &[],
            kind: ContainerType::Init,
            pid_target: None,
        };
        let cfg = container_config(&NodeConfig::new("n"), &pod, &input).unwrap();
        let sc = cfg.linux.unwrap().security_context.unwrap();
        assert!(sc.privileged && sc.masked_paths.is_empty() && sc.readonly_paths.is_empty());
        assert_eq!(cfg.annotations[CONTAINER_TYPE_ANNOTATION], "init");

        c.security_context = Some(SecurityContext {
            run_as_non_root: Some(true),
            run_as_user: Some(0),
            ..Default::default()
        });
        let pod = pod_with(c.clone(), None);
        let input = ContainerInputs {
            container: &c,
            restart_count: 0,
            image_ref: "x",
            env: &[],
            kind: ContainerType::Regular,
            pid_target: None,
        };
        assert!(matches!(
            container_config(&NodeConfig::new("n"), &pod, &input),
            Err(ConfigError::RunAsRoot { .. })
        ));
    }

    #[test]
    fn ephemeral_container_config() {
        use k8s_openapi::api::core::v1::{EphemeralContainer, Probe, VolumeMount};
        let ec = EphemeralContainer {
            name: "debugger".into(),
            image: Some("busybox".into()),
            command: Some(vec!["sh".into()]),
            stdin: Some(true),
            stdin_once: Some(true),
            tty: Some(true),
            working_dir: Some("/root".into()),
            volume_mounts: Some(vec![VolumeMount {
                name: "data".into(),
                mount_path: "/data".into(),
                ..Default::default()
            }]),
            target_container_name: Some("app".into()),
            readiness_probe: Some(Probe::default()),
            ..Default::default()
        };
        let c = ephemeral_container(&ec);
        assert_eq!(c.name, "debugger");
        assert_eq!(c.volume_mounts.as_ref().unwrap()[0].mount_path, "/data");
        assert!(c.readiness_probe.is_none() && c.lifecycle.is_none() && c.ports.is_none());
        let app = Container {
            name: "app".into(),
            ..Default::default()
        };
        let pod = pod_with(app, None);
        let config = |kind, pid_target| {
            container_config(
                &NodeConfig::new("n"),
                &pod,
                &ContainerInputs {
                    container: &c,
                    restart_count: 0,
                    image_ref: "sha256:bb",
                    env: &[],
                    kind,
                    pid_target,
                },
            )
            .unwrap()
        };
        let ns = |cfg: &cri::ContainerConfig| {
            cfg.linux
                .as_ref()
                .unwrap()
                .security_context
                .as_ref()
                .unwrap()
                .namespace_options
                .clone()
                .unwrap()
        };
        let cfg = config(ContainerType::Ephemeral, Some("target-id"));
        assert_eq!(cfg.annotations[CONTAINER_TYPE_ANNOTATION], "EPHEMERAL");
        assert_eq!(cfg.labels[CONTAINER_NAME_LABEL], "debugger");
        assert_eq!(cfg.log_path, "debugger/0.log");
        assert!(cfg.stdin && cfg.stdin_once && cfg.tty);
        assert_eq!(
            (cfg.command.as_slice(), cfg.working_dir.as_str()),
            (["sh".to_owned()].as_slice(), "/root")
        );
        let n = ns(&cfg);
        assert_eq!(
            (n.pid, n.target_id.as_str()),
            (cri::NamespaceMode::Target as i32, "target-id")
        );
        assert_eq!(n.network, cri::NamespaceMode::Pod as i32);
        // Without a target: its own PID namespace, as any container.
        let n = ns(&config(ContainerType::Ephemeral, None));
        assert_eq!(
            (n.pid, n.target_id.as_str()),
            (cri::NamespaceMode::Container as i32, "")
        );
        // A shared process namespace already shows the target's processes.
        let mut shared = pod.clone();
        shared.spec.as_mut().unwrap().share_process_namespace = Some(true);
        let cfg = container_config(
            &NodeConfig::new("n"),
            &shared,
            &ContainerInputs {
                container: &c,
                restart_count: 0,
                image_ref: "x",
                env: &[],
                kind: ContainerType::Ephemeral,
                pid_target: Some("target-id"),
            },
        )
        .unwrap();
        assert_eq!(ns(&cfg).pid, cri::NamespaceMode::Pod as i32);
        // The annotation round-trips; regular containers have none.
        for kind in [
            ContainerType::Regular,
            ContainerType::Init,
            ContainerType::Ephemeral,
        ] {
            let value = kind.annotation().unwrap_or_default();
            assert_eq!(ContainerType::from_annotation(value), kind);
        }
        assert!(
            !config(ContainerType::Regular, None)
                .annotations
                .contains_key(CONTAINER_TYPE_ANNOTATION)
        );
    }
}
