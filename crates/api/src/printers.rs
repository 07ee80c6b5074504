//! Server-side Table printing: upstream's default `kubectl get` columns for the
//! built-in kinds (`pkg/printers/internalversion/printers.go`, v1.33).
//!
//! Works on objects as JSON (the registry keeps them so) and takes `now` as an
//! argument: no clock is read here. The apiserver assembles the `meta.k8s.io/v1
//! Table` envelope from [`table_columns`] and one [`table_row`] (plus
//! [`table_row_conditions`]) per object.
//!
//! As upstream's apiserver, rows always carry the wide (priority 1) cells; kubectl
//! hides those columns unless asked for `-o wide`.

use std::cmp::Ordering;
use std::collections::BTreeSet;

use k8s_openapi::jiff::{SignedDuration, Timestamp};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// One column of a `meta.k8s.io/v1 Table` (`metav1.TableColumnDefinition`); every
/// field is always serialized, as upstream's.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TableColumnDefinition {
    pub name: String,
    /// An OpenAPI type: `string`, `integer`, `number`, `boolean`, or `date`.
    #[serde(rename = "type")]
    pub type_: String,
    /// An OpenAPI format hint; `name` marks the column holding the object's name.
    pub format: String,
    pub description: String,
    /// 0: shown by default; 1: shown with `-o wide`.
    pub priority: i32,
}

/// `metav1.ObjectMeta` field descriptions, as upstream's column descriptions use them.
const NAME_DOC: &str = "Name must be unique within a namespace. Is required when creating resources, although some resources may allow a client to request the generation of an appropriate name automatically. Name is primarily intended for creation idempotence and configuration definition. Cannot be updated. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names";
const CREATION_DOC: &str = "CreationTimestamp is a timestamp representing the server time when this object was created. It is not guaranteed to be set in happens-before order across separate operations. Clients may not set this value. It is represented in RFC3339 form and is in UTC.\n\nPopulated by the system. Read-only. Null for lists. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata";
const CONTAINERS_DOC: &str = "Names of each container in the template.";
const IMAGES_DOC: &str = "Images referenced by each container in the template.";
const SELECTOR_DOC: &str = "A label query over pods that should match the replica count. It must match the pod template's labels. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/labels/#label-selectors";

/// `(name, type, format, priority, description)`.
type Col = (&'static str, &'static str, &'static str, i32, &'static str);

const NAME: Col = ("Name", "string", "name", 0, NAME_DOC);
const AGE: Col = ("Age", "string", "", 0, CREATION_DOC);
const CREATED_AT: Col = ("Created At", "date", "", 0, CREATION_DOC);
const W_CONTAINERS: Col = ("Containers", "string", "", 1, CONTAINERS_DOC);
const W_IMAGES: Col = ("Images", "string", "", 1, IMAGES_DOC);
const W_SELECTOR: Col = ("Selector", "string", "", 1, SELECTOR_DOC);

const WEBHOOK_CONFIGURATION: &[Col] = &[
    NAME,
    (
        "Webhooks",
        "integer",
        "",
        0,
        "Webhooks indicates the number of webhooks in the configuration.",
    ),
    AGE,
];

const VALIDATING_ADMISSION_POLICY: &[Col] = &[
    NAME,
    (
        "Validations",
        "integer",
        "",
        0,
        "Validations indicates the number of validation rules defined in this configuration",
    ),
    (
        "ParamKind",
        "string",
        "",
        0,
        "ParamKind specifies the kind of resources used to parameterize this policy",
    ),
    AGE,
];

const VALIDATING_ADMISSION_POLICY_BINDING: &[Col] = &[
    NAME,
    (
        "PolicyName",
        "string",
        "",
        0,
        "PolicyName indicates the policy definition which the policy binding binded to",
    ),
    (
        "ParamRef",
        "string",
        "",
        0,
        "ParamRef indicates the param resource which sets the configration param",
    ),
    AGE,
];

const POD: &[Col] = &[
    NAME,
    (
        "Ready",
        "string",
        "",
        0,
        "The aggregate readiness state of this pod for accepting traffic.",
    ),
    (
        "Status",
        "string",
        "",
        0,
        "The aggregate status of the containers in this pod.",
    ),
    (
        "Restarts",
        "string",
        "",
        0,
        "The number of times the containers in this pod have been restarted and when the last container in this pod has restarted.",
    ),
    AGE,
    (
        "IP",
        "string",
        "",
        1,
        "podIP address allocated to the pod. Routable at least within the cluster. Empty if not yet allocated.",
    ),
    (
        "Node",
        "string",
        "",
        1,
        "NodeName indicates in which node this pod is scheduled. If empty, this pod is a candidate for scheduling by the scheduler defined in schedulerName. Once this field is set, the kubelet for this node becomes responsible for the lifecycle of this pod. This field should not be used to express a desire for the pod to be scheduled on a specific node. https://kubernetes.io/docs/concepts/scheduling-eviction/assign-pod-node/#nodename",
    ),
    (
        "Nominated Node",
        "string",
        "",
        1,
        "nominatedNodeName is set only when this pod preempts other pods on the node, but it cannot be scheduled right away as preemption victims receive their graceful termination periods. This field does not guarantee that the pod will be scheduled on this node. Scheduler may decide to place the pod elsewhere if other nodes become available sooner. Scheduler may also decide to give the resources on this node to a higher priority pod that is created after preemption. As a result, this field may be different than PodSpec.nodeName when the pod is scheduled.",
    ),
    (
        "Readiness Gates",
        "string",
        "",
        1,
        "If specified, all readiness gates will be evaluated for pod readiness. A pod is ready when all its containers are ready AND all conditions specified in the readiness gates have status equal to \"True\" More info: https://git.k8s.io/enhancements/keps/sig-network/580-pod-readiness-gates",
    ),
];

const POD_TEMPLATE: &[Col] = &[
    NAME,
    ("Containers", "string", "", 0, CONTAINERS_DOC),
    ("Images", "string", "", 0, IMAGES_DOC),
    (
        "Pod Labels",
        "string",
        "",
        0,
        "The labels for the pod template.",
    ),
];

const PDB: &[Col] = &[
    NAME,
    (
        "Min Available",
        "string",
        "",
        0,
        "The minimum number of pods that must be available.",
    ),
    (
        "Max Unavailable",
        "string",
        "",
        0,
        "The maximum number of pods that may be unavailable.",
    ),
    (
        "Allowed Disruptions",
        "integer",
        "",
        0,
        "Calculated number of pods that may be disrupted at this time.",
    ),
    AGE,
];

const REPLICAS: &[Col] = &[
    NAME,
    (
        "Desired",
        "integer",
        "",
        0,
        "Replicas is the number of desired pods.",
    ),
    (
        "Current",
        "integer",
        "",
        0,
        "Replicas is the most recently observed number of replicas.",
    ),
    ("Ready", "integer", "", 0, "The number of ready replicas."),
    AGE,
    W_CONTAINERS,
    W_IMAGES,
    W_SELECTOR,
];

const DEPLOYMENT: &[Col] = &[
    NAME,
    (
        "Ready",
        "string",
        "",
        0,
        "Number of the pod with ready state",
    ),
    (
        "Up-to-date",
        "string",
        "",
        0,
        "Total number of non-terminating pods targeted by this deployment that have the desired template spec.",
    ),
    (
        "Available",
        "string",
        "",
        0,
        "Total number of available non-terminating pods (ready for at least minReadySeconds) targeted by this deployment.",
    ),
    AGE,
    W_CONTAINERS,
    W_IMAGES,
    W_SELECTOR,
];

const DAEMON_SET: &[Col] = &[
    NAME,
    (
        "Desired",
        "integer",
        "",
        0,
        "The total number of nodes that should be running the daemon pod (including nodes correctly running the daemon pod).",
    ),
    (
        "Current",
        "integer",
        "",
        0,
        "The number of nodes that are running at least 1 daemon pod and are supposed to run the daemon pod.",
    ),
    (
        "Ready",
        "integer",
        "",
        0,
        "Total number of nodes that should be running the daemon pod and have one or more of the daemon pod running with a Ready Condition.",
    ),
    (
        "Up-to-date",
        "integer",
        "",
        0,
        "The total number of nodes that are running updated daemon pod",
    ),
    (
        "Available",
        "integer",
        "",
        0,
        "The number of nodes that should be running the daemon pod and have one or more of the daemon pod running and available (ready for at least spec.minReadySeconds)",
    ),
    (
        "Node Selector",
        "string",
        "",
        0,
        "NodeSelector is a selector which must be true for the pod to fit on a node. Selector which must match a node's labels for the pod to be scheduled on that node. More info: https://kubernetes.io/docs/concepts/configuration/assign-pod-node/",
    ),
    AGE,
    W_CONTAINERS,
    W_IMAGES,
    W_SELECTOR,
];

const STATEFUL_SET: &[Col] = &[
    NAME,
    (
        "Ready",
        "string",
        "",
        0,
        "Number of the pod with ready state",
    ),
    AGE,
    W_CONTAINERS,
    W_IMAGES,
];

const JOB: &[Col] = &[
    NAME,
    ("Status", "string", "", 0, "Status of the job."),
    (
        "Completions",
        "string",
        "",
        0,
        "The completion status of the job.",
    ),
    (
        "Duration",
        "string",
        "",
        0,
        "Time required to complete the job.",
    ),
    AGE,
    W_CONTAINERS,
    W_IMAGES,
    W_SELECTOR,
];

const CRON_JOB: &[Col] = &[
    NAME,
    (
        "Schedule",
        "string",
        "",
        0,
        "The schedule in Cron format, see https://en.wikipedia.org/wiki/Cron.",
    ),
    (
        "Timezone",
        "string",
        "",
        0,
        "The time zone name for the given schedule, see https://en.wikipedia.org/wiki/List_of_tz_database_time_zones.",
    ),
    (
        "Suspend",
        "boolean",
        "",
        0,
        "This flag tells the controller to suspend subsequent executions, it does not apply to already started executions.  Defaults to false.",
    ),
    (
        "Active",
        "integer",
        "",
        0,
        "A list of pointers to currently running jobs.",
    ),
    (
        "Last Schedule",
        "string",
        "",
        0,
        "Information when was the last time the job was successfully scheduled.",
    ),
    AGE,
    W_CONTAINERS,
    W_IMAGES,
    W_SELECTOR,
];

const SERVICE: &[Col] = &[
    NAME,
    (
        "Type",
        "string",
        "",
        0,
        "type determines how the Service is exposed.",
    ),
    (
        "Cluster-IP",
        "string",
        "",
        0,
        "clusterIP is the IP address of the service and is usually assigned randomly.",
    ),
    (
        "External-IP",
        "string",
        "",
        0,
        "externalIPs is a list of IP addresses for which nodes in the cluster will also accept traffic for this service.",
    ),
    (
        "Port(s)",
        "string",
        "",
        0,
        "The list of ports that are exposed by this service.",
    ),
    AGE,
    (
        "Selector",
        "string",
        "",
        1,
        "Route service traffic to pods with label keys and values matching this selector.",
    ),
];

const INGRESS: &[Col] = &[
    NAME,
    (
        "Class",
        "string",
        "",
        0,
        "The name of the IngressClass resource that should be used to implement this Ingress.",
    ),
    (
        "Hosts",
        "string",
        "",
        0,
        "Hosts that incoming requests are matched against before the ingress rule",
    ),
    (
        "Address",
        "string",
        "",
        0,
        "Address is a list containing ingress points for the load-balancer",
    ),
    (
        "Ports",
        "string",
        "",
        0,
        "Ports of TLS configurations that open",
    ),
    AGE,
];

const INGRESS_CLASS: &[Col] = &[
    NAME,
    (
        "Controller",
        "string",
        "",
        0,
        "Controller that is responsible for handling this class",
    ),
    (
        "Parameters",
        "string",
        "",
        0,
        "A reference to a resource with additional parameters",
    ),
    AGE,
];

/// kube-aggregator's APIService table (its REST storage's `ConvertToTable`).
const API_SERVICE: &[Col] = &[
    NAME,
    (
        "Service",
        "string",
        "",
        0,
        "The reference to the service that hosts this API endpoint.",
    ),
    (
        "Available",
        "string",
        "",
        0,
        "Whether this service is available.",
    ),
    AGE,
];

const ENDPOINTS: &[Col] = &[
    NAME,
    (
        "Endpoints",
        "string",
        "",
        0,
        "The set of all endpoints is the union of all subsets.",
    ),
    AGE,
];

const ENDPOINT_SLICE: &[Col] = &[
    NAME,
    (
        "AddressType",
        "string",
        "",
        0,
        "The type of address carried by this EndpointSlice.",
    ),
    (
        "Ports",
        "string",
        "",
        0,
        "Ports advertised by this EndpointSlice.",
    ),
    (
        "Endpoints",
        "string",
        "",
        0,
        "Endpoints included in this EndpointSlice.",
    ),
    AGE,
];

const NODE: &[Col] = &[
    NAME,
    ("Status", "string", "", 0, "The status of the node"),
    ("Roles", "string", "", 0, "The roles of the node"),
    AGE,
    (
        "Version",
        "string",
        "",
        0,
        "Kubelet Version reported by the node.",
    ),
    (
        "Internal-IP",
        "string",
        "",
        1,
        "List of addresses reachable to the node.",
    ),
    (
        "External-IP",
        "string",
        "",
        1,
        "List of addresses reachable to the node.",
    ),
    (
        "OS-Image",
        "string",
        "",
        1,
        "OS Image reported by the node from /etc/os-release (e.g. Debian GNU/Linux 7 (wheezy)).",
    ),
    (
        "Kernel-Version",
        "string",
        "",
        1,
        "Kernel Version reported by the node from 'uname -r' (e.g. 3.16.0-0.bpo.4-amd64).",
    ),
    (
        "Container-Runtime",
        "string",
        "",
        1,
        "ContainerRuntime Version reported by the node through runtime remote API (e.g. containerd://1.4.2).",
    ),
];

const EVENT: &[Col] = &[
    (
        "Last Seen",
        "string",
        "",
        0,
        "The time at which the most recent occurrence of this event was recorded.",
    ),
    (
        "Type",
        "string",
        "",
        0,
        "Type of this event (Normal, Warning), new types could be added in the future",
    ),
    (
        "Reason",
        "string",
        "",
        0,
        "This should be a short, machine understandable string that gives the reason for the transition into the object's current status.",
    ),
    (
        "Object",
        "string",
        "",
        0,
        "The object that this event is about.",
    ),
    (
        "Subobject",
        "string",
        "",
        1,
        "If referring to a piece of an object instead of an entire object, this string should contain a valid JSON/Go field access statement, such as desiredState.manifest.containers[2].",
    ),
    (
        "Source",
        "string",
        "",
        1,
        "The component reporting this event. Should be a short machine understandable string.",
    ),
    (
        "Message",
        "string",
        "",
        0,
        "A human-readable description of the status of this operation.",
    ),
    (
        "First Seen",
        "string",
        "",
        1,
        "The time at which the event was first recorded. (Time of server receipt is in TypeMeta.)",
    ),
    (
        "Count",
        "string",
        "",
        1,
        "The number of times this event has occurred.",
    ),
    ("Name", "string", "name", 1, NAME_DOC),
];

const NAMESPACE: &[Col] = &[
    NAME,
    ("Status", "string", "", 0, "The status of the namespace"),
    AGE,
];

const SECRET: &[Col] = &[
    NAME,
    (
        "Type",
        "string",
        "",
        0,
        "Used to facilitate programmatic handling of secret data.",
    ),
    ("Data", "string", "", 0, "Data contains the secret data."),
    AGE,
];

const SERVICE_ACCOUNT: &[Col] = &[
    NAME,
    (
        "Secrets",
        "string",
        "",
        0,
        "Secrets is a list of the secrets in the same namespace that pods running using this ServiceAccount are allowed to use.",
    ),
    AGE,
];

const PERSISTENT_VOLUME: &[Col] = &[
    NAME,
    (
        "Capacity",
        "string",
        "",
        0,
        "capacity is the description of the persistent volume's resources and capacity.",
    ),
    (
        "Access Modes",
        "string",
        "",
        0,
        "accessModes contains all ways the volume can be mounted.",
    ),
    (
        "Reclaim Policy",
        "string",
        "",
        0,
        "persistentVolumeReclaimPolicy defines what happens to a persistent volume when released from its claim.",
    ),
    (
        "Status",
        "string",
        "",
        0,
        "phase indicates if a volume is available, bound to a claim, or released by a claim.",
    ),
    (
        "Claim",
        "string",
        "",
        0,
        "claimRef is part of a bi-directional binding between PersistentVolume and PersistentVolumeClaim.",
    ),
    (
        "StorageClass",
        "string",
        "",
        0,
        "storageClassName is the name of StorageClass to which this persistent volume belongs.",
    ),
    (
        "VolumeAttributesClass",
        "string",
        "",
        0,
        "Name of VolumeAttributesClass to which this persistent volume belongs.",
    ),
    (
        "Reason",
        "string",
        "",
        0,
        "reason is a brief CamelCase string that describes any failure and is meant for machine parsing and tidy display in the CLI.",
    ),
    AGE,
    (
        "VolumeMode",
        "string",
        "",
        1,
        "volumeMode defines if a volume is intended to be used with a formatted filesystem or to remain in raw block state.",
    ),
];

const PERSISTENT_VOLUME_CLAIM: &[Col] = &[
    NAME,
    (
        "Status",
        "string",
        "",
        0,
        "phase represents the current phase of PersistentVolumeClaim.",
    ),
    (
        "Volume",
        "string",
        "",
        0,
        "volumeName is the binding reference to the PersistentVolume backing this claim.",
    ),
    (
        "Capacity",
        "string",
        "",
        0,
        "capacity represents the actual resources of the underlying volume.",
    ),
    (
        "Access Modes",
        "string",
        "",
        0,
        "accessModes contains the actual access modes the volume backing the PVC has.",
    ),
    (
        "StorageClass",
        "string",
        "",
        0,
        "storageClassName is the name of the StorageClass required by the claim.",
    ),
    (
        "VolumeAttributesClass",
        "string",
        "",
        0,
        "volumeAttributesClassName may be used to set the VolumeAttributesClass used by this claim.",
    ),
    AGE,
    (
        "VolumeMode",
        "string",
        "",
        1,
        "volumeMode defines what type of volume is required by the claim.",
    ),
];

const CONFIG_MAP: &[Col] = &[
    NAME,
    (
        "Data",
        "string",
        "",
        0,
        "Data contains the configuration data.",
    ),
    AGE,
];

const SCALE: &[Col] = &[
    NAME,
    (
        "Desired",
        "integer",
        "",
        0,
        "replicas is the desired number of instances for the scaled object.",
    ),
    (
        "Available",
        "integer",
        "",
        0,
        "replicas is the actual number of observed instances of the scaled object.",
    ),
    AGE,
];

const LEASE: &[Col] = &[
    NAME,
    (
        "Holder",
        "string",
        "",
        0,
        "holderIdentity contains the identity of the holder of a current lease.",
    ),
    AGE,
];

const HPA: &[Col] = &[
    NAME,
    (
        "Reference",
        "string",
        "",
        0,
        "reference to scaled resource; horizontal pod autoscaler will learn the current resource consumption and will set the desired number of pods by using its Scale subresource.",
    ),
    (
        "Targets",
        "string",
        "",
        0,
        "metrics contains the specifications for which to use to calculate the desired replica count (the maximum replica count across all metrics will be used).",
    ),
    (
        "MinPods",
        "string",
        "",
        0,
        "minReplicas is the lower limit for the number of replicas to which the autoscaler can scale down.",
    ),
    (
        "MaxPods",
        "string",
        "",
        0,
        "maxReplicas is the upper limit for the number of replicas to which the autoscaler can scale up.",
    ),
    (
        "Replicas",
        "string",
        "",
        0,
        "currentReplicas is current number of replicas of pods managed by this autoscaler, as last seen by the autoscaler.",
    ),
    AGE,
];

const PRIORITY_CLASS: &[Col] = &[
    NAME,
    (
        "Value",
        "integer",
        "",
        0,
        "value represents the integer value of this priority class.",
    ),
    (
        "Global-Default",
        "boolean",
        "",
        0,
        "globalDefault specifies whether this PriorityClass should be considered as the default priority for pods that do not have any priority class.",
    ),
    (
        "Preemption Policy",
        "string",
        "",
        0,
        "preemptionPolicy is the Policy for preempting pods with lower priority.",
    ),
    AGE,
];

/// Upstream describes Handler with `ObjectMeta{}.SwaggerDoc()["handler"]`, a key
/// ObjectMeta does not have: the description is empty.
const RUNTIME_CLASS: &[Col] = &[NAME, ("Handler", "string", "", 0, ""), AGE];

const STORAGE_CLASS: &[Col] = &[
    NAME,
    (
        "Provisioner",
        "string",
        "",
        0,
        "provisioner indicates the type of the provisioner.",
    ),
    (
        "ReclaimPolicy",
        "string",
        "",
        0,
        "reclaimPolicy controls the reclaimPolicy for dynamically provisioned PersistentVolumes of this storage class.",
    ),
    (
        "VolumeBindingMode",
        "string",
        "",
        0,
        "volumeBindingMode indicates how PersistentVolumeClaims should be provisioned and bound.",
    ),
    (
        "AllowVolumeExpansion",
        "string",
        "",
        0,
        "allowVolumeExpansion shows whether the storage class allow volume expand.",
    ),
    AGE,
];

const CSI_DRIVER: &[Col] = &[
    NAME,
    (
        "AttachRequired",
        "boolean",
        "",
        0,
        "attachRequired indicates this CSI volume driver requires an attach operation (because it implements the CSI ControllerPublishVolume() method), and that the Kubernetes attach detach controller should call the attach volume interface which checks the volumeattachment status and waits until the volume is attached before proceeding to mounting.",
    ),
    (
        "PodInfoOnMount",
        "boolean",
        "",
        0,
        "podInfoOnMount indicates this CSI volume driver requires additional pod information (like podName, podUID, etc.) during mount operations, if set to true. If set to false, pod information will not be passed on mount. Default is false.",
    ),
    (
        "StorageCapacity",
        "boolean",
        "",
        0,
        "storageCapacity indicates that the CSI volume driver wants pod scheduling to consider the storage capacity that the driver deployment will report by creating CSIStorageCapacity objects with capacity information, if set to true.",
    ),
    (
        "TokenRequests",
        "string",
        "",
        0,
        "tokenRequests indicates the CSI driver needs pods' service account tokens it is mounting volume for to do necessary authentication.",
    ),
    (
        "RequiresRepublish",
        "boolean",
        "",
        0,
        "requiresRepublish indicates the CSI driver wants `NodePublishVolume` being periodically called to reflect any possible change in the mounted volume. This field defaults to false.",
    ),
    (
        "Modes",
        "string",
        "",
        0,
        "volumeLifecycleModes defines what kind of volumes this CSI volume driver supports. The default if the list is empty is \"Persistent\", which is the usage defined by the CSI specification and implemented in Kubernetes via the usual PV/PVC mechanism.",
    ),
    AGE,
];

const CSI_NODE: &[Col] = &[
    NAME,
    (
        "Drivers",
        "integer",
        "",
        0,
        "Drivers indicates the number of CSI drivers registered on the node",
    ),
    AGE,
];

const CSI_STORAGE_CAPACITY: &[Col] = &[
    NAME,
    (
        "StorageClassName",
        "string",
        "",
        0,
        "storageClassName represents the name of the StorageClass that the reported capacity applies to. It must meet the same requirements as the name of a StorageClass object (non-empty, DNS subdomain). If that object no longer exists, the CSIStorageCapacity object is obsolete and should be removed by its creator. This field is immutable.",
    ),
    (
        "Capacity",
        "string",
        "",
        0,
        "capacity is the value reported by the CSI driver in its GetCapacityResponse for a GetCapacityRequest with topology and parameters that match the previous fields.",
    ),
];

const VOLUME_ATTACHMENT: &[Col] = &[
    NAME,
    (
        "Attacher",
        "string",
        "name",
        0,
        "attacher indicates the name of the volume driver that MUST handle this request. This is the name returned by GetPluginName().",
    ),
    (
        "PV",
        "string",
        "",
        0,
        "persistentVolumeName represents the name of the persistent volume to attach.",
    ),
    (
        "Node",
        "string",
        "",
        0,
        "nodeName represents the node that the volume should be attached to.",
    ),
    (
        "Attached",
        "boolean",
        "",
        0,
        "attached indicates the volume is successfully attached. This field must only be set by the entity completing the attach operation, i.e. the external-attacher.",
    ),
    AGE,
];

const FLOW_SCHEMA: &[Col] = &[
    NAME,
    (
        "PriorityLevel",
        "string",
        "",
        0,
        "`name` is the name of the priority level configuration being referenced Required.",
    ),
    (
        "MatchingPrecedence",
        "string",
        "",
        0,
        "`matchingPrecedence` is used to choose among the FlowSchemas that match a given request. The chosen FlowSchema is among those with the numerically lowest (which we take to be logically highest) MatchingPrecedence.  Each MatchingPrecedence value must be ranged in [1,10000]. Note that if the precedence is not specified, it will be set to 1000 as default.",
    ),
    (
        "DistinguisherMethod",
        "string",
        "",
        0,
        "`distinguisherMethod` defines how to compute the flow distinguisher for requests that match this schema. `nil` specifies that the distinguisher is disabled and thus will always be the empty string.",
    ),
    AGE,
    (
        "MissingPL",
        "string",
        "",
        0,
        "references a broken or non-existent PriorityLevelConfiguration",
    ),
];

const PRIORITY_LEVEL_CONFIGURATION: &[Col] = &[
    NAME,
    (
        "Type",
        "string",
        "",
        0,
        "`type` indicates whether this priority level is subject to limitation on request execution.  A value of `\"Exempt\"` means that requests of this priority level are not subject to a limit (and thus are never queued) and do not detract from the capacity made available to other priority levels.  A value of `\"Limited\"` means that (a) requests of this priority level _are_ subject to limits and (b) some of the server's limited capacity is made available exclusively to this priority level. Required.",
    ),
    (
        "NominalConcurrencyShares",
        "string",
        "",
        0,
        "`nominalConcurrencyShares` (NCS) contributes to the computation of the NominalConcurrencyLimit (NominalCL) of this level. This is the number of execution seats available at this priority level. This is used both for requests dispatched from this priority level as well as requests dispatched from other priority levels borrowing seats from this level. The server's concurrency limit (ServerCL) is divided among the Limited priority levels in proportion to their NCS values:\n\nNominalCL(i)  = ceil( ServerCL * NCS(i) / sum_ncs ) sum_ncs = sum[priority level k] NCS(k)\n\nBigger numbers mean a larger nominal concurrency limit, at the expense of every other priority level.\n\nIf not specified, this field defaults to a value of 30.\n\nSetting this field to zero supports the construction of a \"jail\" for this priority level that is used to hold some request(s)",
    ),
    (
        "Queues",
        "string",
        "",
        0,
        "`queues` is the number of queues for this priority level. The queues exist independently at each apiserver. The value must be positive.  Setting it to 1 effectively precludes shufflesharding and thus makes the distinguisher method of associated flow schemas irrelevant.  This field has a default value of 64.",
    ),
    (
        "HandSize",
        "string",
        "",
        0,
        "`handSize` is a small positive number that configures the shuffle sharding of requests into queues.  When enqueuing a request at this priority level the request's flow identifier (a string pair) is hashed and the hash value is used to shuffle the list of queues and deal a hand of the size specified here.  The request is put into one of the shortest queues in that hand. `handSize` must be no larger than `queues`, and should be significantly smaller (so that a few heavy flows do not saturate most of the queues).  See the user-facing documentation for more extensive guidance on setting this field.  This field has a default value of 8.",
    ),
    (
        "QueueLengthLimit",
        "string",
        "",
        0,
        "`queueLengthLimit` is the maximum number of requests allowed to be waiting in a given queue of this priority level at a time; excess requests are rejected.  This value must be positive.  If not specified, it will be defaulted to 50.",
    ),
    AGE,
];

/// Upstream's `ipAddressColumnDefinitions`: no Age column, though `printIPAddress`
/// appends the age as a third cell (kubectl prints the two columns).
const IP_ADDRESS: &[Col] = &[
    NAME,
    (
        "ParentRef",
        "string",
        "",
        0,
        "ParentRef references the resource that an IPAddress is attached to. An IPAddress must reference a parent object.",
    ),
];

const SERVICE_CIDR: &[Col] = &[
    NAME,
    (
        "CIDRs",
        "string",
        "",
        0,
        "CIDRs defines the IP blocks in CIDR notation (e.g. \"192.168.0.0/24\" or \"2001:db8::/64\") from which to assign service cluster IPs. Max of two CIDRs is allowed, one of each IP family. This field is immutable.",
    ),
    AGE,
];

const NAME_CREATED_AT: &[Col] = &[NAME, CREATED_AT];

const ROLE_BINDING: &[Col] = &[
    NAME,
    (
        "Role",
        "string",
        "",
        0,
        "RoleRef can reference a Role in the current namespace or a ClusterRole in the global namespace.",
    ),
    AGE,
    ("Users", "string", "", 1, "Users in the roleBinding"),
    ("Groups", "string", "", 1, "Groups in the roleBinding"),
    (
        "ServiceAccounts",
        "string",
        "",
        1,
        "ServiceAccounts in the roleBinding",
    ),
];

const NETWORK_POLICY: &[Col] = &[
    NAME,
    (
        "Pod-Selector",
        "string",
        "",
        0,
        "podSelector selects the pods to which this NetworkPolicy object applies.",
    ),
    AGE,
];

const CONTROLLER_REVISION: &[Col] = &[
    NAME,
    ("Controller", "string", "", 0, "Controller of the object"),
    (
        "Revision",
        "string",
        "",
        0,
        "Revision indicates the revision of the state represented by Data.",
    ),
    AGE,
];

const COMPONENT_STATUS: &[Col] = &[
    NAME,
    (
        "Status",
        "string",
        "",
        0,
        "Status of the component conditions",
    ),
    (
        "Message",
        "string",
        "",
        0,
        "Message of the component conditions",
    ),
    (
        "Error",
        "string",
        "",
        0,
        "Error of the component conditions",
    ),
];

const RESOURCE_QUOTA: &[Col] = &[
    NAME,
    AGE,
    (
        "Request",
        "string",
        "",
        0,
        "Request represents a minimum amount of cpu/memory that a container may consume.",
    ),
    (
        "Limit",
        "string",
        "",
        0,
        "Limits control the maximum amount of cpu/memory that a container may use independent of contention on the node.",
    ),
];

const CSR: &[Col] = &[
    NAME,
    AGE,
    (
        "SignerName",
        "string",
        "",
        0,
        "Only one signer name is allowed per request.",
    ),
    (
        "Requestor",
        "string",
        "",
        0,
        "Request information of the certificate",
    ),
    (
        "RequestedDuration",
        "string",
        "",
        0,
        "Requested duration of the certificate",
    ),
    ("Condition", "string", "", 0, "Condition of the certificate"),
];

fn columns_of(group: &str, kind: &str) -> &'static [Col] {
    match (group, kind) {
        ("", "Pod") => POD,
        ("", "PodTemplate") => POD_TEMPLATE,
        ("", "ReplicationController") | ("apps", "ReplicaSet") => REPLICAS,
        ("", "Service") => SERVICE,
        ("", "Endpoints") => ENDPOINTS,
        ("", "Node") => NODE,
        ("", "Event") | ("events.k8s.io", "Event") => EVENT,
        ("", "Namespace") => NAMESPACE,
        ("", "Secret") => SECRET,
        ("", "ServiceAccount") => SERVICE_ACCOUNT,
        ("", "PersistentVolume") => PERSISTENT_VOLUME,
        ("", "PersistentVolumeClaim") => PERSISTENT_VOLUME_CLAIM,
        ("", "ConfigMap") => CONFIG_MAP,
        ("", "ResourceQuota") => RESOURCE_QUOTA,
        ("", "ComponentStatus") => COMPONENT_STATUS,
        (
            "admissionregistration.k8s.io",
            "ValidatingWebhookConfiguration" | "MutatingWebhookConfiguration",
        ) => WEBHOOK_CONFIGURATION,
        ("admissionregistration.k8s.io", "ValidatingAdmissionPolicy") => {
            VALIDATING_ADMISSION_POLICY
        }
        ("admissionregistration.k8s.io", "ValidatingAdmissionPolicyBinding") => {
            VALIDATING_ADMISSION_POLICY_BINDING
        }
        ("apiregistration.k8s.io", "APIService") => API_SERVICE,
        ("apps", "Deployment") => DEPLOYMENT,
        ("apps", "DaemonSet") => DAEMON_SET,
        ("apps", "StatefulSet") => STATEFUL_SET,
        ("apps", "ControllerRevision") => CONTROLLER_REVISION,
        ("batch", "Job") => JOB,
        ("batch", "CronJob") => CRON_JOB,
        ("autoscaling", "HorizontalPodAutoscaler") => HPA,
        ("autoscaling", "Scale") => SCALE,
        ("certificates.k8s.io", "CertificateSigningRequest") => CSR,
        ("coordination.k8s.io", "Lease") => LEASE,
        ("flowcontrol.apiserver.k8s.io", "FlowSchema") => FLOW_SCHEMA,
        ("flowcontrol.apiserver.k8s.io", "PriorityLevelConfiguration") => {
            PRIORITY_LEVEL_CONFIGURATION
        }
        ("discovery.k8s.io", "EndpointSlice") => ENDPOINT_SLICE,
        ("networking.k8s.io", "Ingress") => INGRESS,
        ("networking.k8s.io", "IngressClass") => INGRESS_CLASS,
        ("networking.k8s.io", "IPAddress") => IP_ADDRESS,
        ("networking.k8s.io", "NetworkPolicy") => NETWORK_POLICY,
        ("networking.k8s.io", "ServiceCIDR") => SERVICE_CIDR,
        ("policy", "PodDisruptionBudget") => PDB,
        ("rbac.authorization.k8s.io", "RoleBinding" | "ClusterRoleBinding") => ROLE_BINDING,
        ("node.k8s.io", "RuntimeClass") => RUNTIME_CLASS,
        ("scheduling.k8s.io", "PriorityClass") => PRIORITY_CLASS,
        ("storage.k8s.io", "StorageClass") => STORAGE_CLASS,
        ("storage.k8s.io", "CSIDriver") => CSI_DRIVER,
        ("storage.k8s.io", "CSINode") => CSI_NODE,
        ("storage.k8s.io", "CSIStorageCapacity") => CSI_STORAGE_CAPACITY,
        ("storage.k8s.io", "VolumeAttachment") => VOLUME_ATTACHMENT,
        // Role, ClusterRole and LimitRange print Name and Created At upstream, which is
        // also the default table convertor's layout for every kind without a printer.
        _ => NAME_CREATED_AT,
    }
}

/// The column definitions of `group`/`kind` (`""` for the core group), upstream's
/// default printer columns, or `Name` + `Created At` (upstream's default table
/// convertor) for a kind without a printer.
pub fn table_columns(group: &str, kind: &str) -> Vec<TableColumnDefinition> {
    columns_of(group, kind)
        .iter()
        .map(
            |(name, ty, format, priority, description)| TableColumnDefinition {
                name: (*name).to_string(),
                type_: (*ty).to_string(),
                format: (*format).to_string(),
                description: (*description).to_string(),
                priority: *priority,
            },
        )
        .collect()
}

/// The cells of one object's row, matching [`table_columns`] one for one (wide cells
/// included). `now` is the time ages are measured against.
pub fn table_row(group: &str, kind: &str, obj: &Value, now: Timestamp) -> Vec<Value> {
    let p = Printer { obj, now };
    match (group, kind) {
        ("", "Pod") => p.pod(),
        ("", "PodTemplate") => p.pod_template(),
        ("", "ReplicationController") | ("apps", "ReplicaSet") => p.replicas(),
        ("", "Service") => p.service(),
        ("", "Endpoints") => p.endpoints(),
        ("", "Node") => p.node(),
        ("", "Event") => p.event(&CORE_EVENT_FIELDS),
        ("events.k8s.io", "Event") => p.event(&EVENTS_V1_FIELDS),
        ("", "Namespace") => vec![p.name(), str_cell(p.s(&["status", "phase"])), p.age()],
        ("", "Secret") => vec![
            p.name(),
            str_cell(p.s(&["type"])),
            json!(p.len(&["data"])),
            p.age(),
        ],
        ("", "ServiceAccount") => vec![p.name(), json!(p.len(&["secrets"])), p.age()],
        ("", "ComponentStatus") => p.component_status(),
        ("", "PersistentVolume") => p.persistent_volume(),
        ("", "PersistentVolumeClaim") => p.persistent_volume_claim(),
        ("", "ConfigMap") => vec![
            p.name(),
            json!(p.len(&["data"]) + p.len(&["binaryData"])),
            p.age(),
        ],
        ("", "ResourceQuota") => p.resource_quota(),
        ("apiregistration.k8s.io", "APIService") => p.api_service(),
        ("apps", "Deployment") => p.deployment(),
        ("apps", "DaemonSet") => p.daemon_set(),
        ("apps", "StatefulSet") => p.stateful_set(),
        ("apps", "ControllerRevision") => p.controller_revision(),
        ("batch", "Job") => p.job(),
        ("batch", "CronJob") => p.cron_job(),
        ("autoscaling", "HorizontalPodAutoscaler") => p.hpa(),
        ("autoscaling", "Scale") => vec![
            p.name(),
            json!(p.i(&["spec", "replicas"])),
            json!(p.i(&["status", "replicas"])),
            p.age(),
        ],
        ("certificates.k8s.io", "CertificateSigningRequest") => p.csr(),
        ("coordination.k8s.io", "Lease") => {
            vec![
                p.name(),
                str_cell(p.s(&["spec", "holderIdentity"])),
                p.age(),
            ]
        }
        (
            "admissionregistration.k8s.io",
            "ValidatingWebhookConfiguration" | "MutatingWebhookConfiguration",
        ) => vec![
            p.name(),
            json!(
                p.get(&["webhooks"])
                    .and_then(Value::as_array)
                    .map_or(0, Vec::len)
            ),
            p.age(),
        ],
        ("admissionregistration.k8s.io", "ValidatingAdmissionPolicy") => {
            // Upstream's printer: `<unset>` or `apiVersion/kind`.
            let param_kind = match p.get(&["spec", "paramKind"]) {
                Some(k) if k.is_object() => format!(
                    "{}/{}",
                    k["apiVersion"].as_str().unwrap_or(""),
                    k["kind"].as_str().unwrap_or("")
                ),
                _ => "<unset>".to_string(),
            };
            let validations = p
                .get(&["spec", "validations"])
                .and_then(Value::as_array)
                .map_or(0, Vec::len);
            vec![p.name(), json!(validations), str_cell(&param_kind), p.age()]
        }
        ("admissionregistration.k8s.io", "ValidatingAdmissionPolicyBinding") => {
            // Upstream's printer: `<unset>`, `namespace/name`, `*/name` or the selector.
            let param_ref = match p.get(&["spec", "paramRef"]) {
                Some(r) if r["name"].as_str().is_some_and(|n| !n.is_empty()) => {
                    let ns = r["namespace"].as_str().filter(|n| !n.is_empty());
                    format!("{}/{}", ns.unwrap_or("*"), r["name"].as_str().unwrap_or(""))
                }
                Some(r) if r["selector"].is_object() => format_label_selector(Some(&r["selector"])),
                _ => "<unset>".to_string(),
            };
            vec![
                p.name(),
                str_cell(p.s(&["spec", "policyName"])),
                str_cell(&param_ref),
                p.age(),
            ]
        }
        ("discovery.k8s.io", "EndpointSlice") => p.endpoint_slice(),
        ("flowcontrol.apiserver.k8s.io", "FlowSchema") => p.flow_schema(),
        ("flowcontrol.apiserver.k8s.io", "PriorityLevelConfiguration") => p.priority_level(),
        ("networking.k8s.io", "Ingress") => p.ingress(),
        ("networking.k8s.io", "IngressClass") => p.ingress_class(),
        ("networking.k8s.io", "IPAddress") => vec![p.name(), str_cell(&p.parent_ref()), p.age()],
        ("networking.k8s.io", "NetworkPolicy") => vec![
            p.name(),
            str_cell(&format_label_selector(p.get(&["spec", "podSelector"]))),
            p.age(),
        ],
        ("networking.k8s.io", "ServiceCIDR") => {
            let cidrs: Vec<&str> = p
                .arr(&["spec", "cidrs"])
                .iter()
                .filter_map(Value::as_str)
                .collect();
            vec![p.name(), str_cell(&cidrs.join(",")), p.age()]
        }
        ("node.k8s.io", "RuntimeClass") => vec![p.name(), str_cell(p.s(&["handler"])), p.age()],
        ("policy", "PodDisruptionBudget") => p.pdb(),
        ("rbac.authorization.k8s.io", "RoleBinding" | "ClusterRoleBinding") => p.role_binding(),
        ("scheduling.k8s.io", "PriorityClass") => p.priority_class(),
        ("storage.k8s.io", "StorageClass") => p.storage_class(),
        ("storage.k8s.io", "CSIDriver") => p.csi_driver(),
        ("storage.k8s.io", "CSINode") => vec![
            p.name(),
            json!(
                p.get(&["spec", "drivers"])
                    .and_then(Value::as_array)
                    .map_or(0, Vec::len)
            ),
            p.age(),
        ],
        ("storage.k8s.io", "CSIStorageCapacity") => vec![
            p.name(),
            str_cell(p.s(&["storageClassName"])),
            str_cell(
                p.get(&["capacity"])
                    .and_then(Value::as_str)
                    .unwrap_or("<unset>"),
            ),
        ],
        ("storage.k8s.io", "VolumeAttachment") => vec![
            p.name(),
            str_cell(p.s(&["spec", "attacher"])),
            str_cell(p.s(&["spec", "source", "persistentVolumeName"])),
            str_cell(p.s(&["spec", "nodeName"])),
            json!(
                p.get(&["status", "attached"])
                    .and_then(Value::as_bool)
                    .unwrap_or(false)
            ),
            p.age(),
        ],
        _ => vec![p.name(), p.created_at()],
    }
}

/// The order upstream's list printer gives the rows when it is not the list's own:
/// FlowSchemas by matching precedence, then by name (`printFlowSchemaList` sorts a
/// `FlowSchemaSequence`). `None`: the rows follow the list.
pub fn table_row_order(group: &str, kind: &str) -> Option<fn(&Value, &Value) -> Ordering> {
    match (group, kind) {
        ("flowcontrol.apiserver.k8s.io", "FlowSchema") => Some(|a, b| {
            let key = |o: &Value| {
                (
                    i_of(o, &["spec", "matchingPrecedence"]),
                    s_of(o, &["metadata", "name"]).to_string(),
                )
            };
            key(a).cmp(&key(b))
        }),
        _ => None,
    }
}

/// Row conditions (`TableRow.conditions`) upstream attaches: pods that succeeded or
/// failed carry a `Completed` condition. `None` when the row has none.
pub fn table_row_conditions(group: &str, kind: &str, obj: &Value) -> Option<Value> {
    if (group, kind) != ("", "Pod") {
        return None;
    }
    let (reason, message) = match get(obj, &["status", "phase"]).and_then(Value::as_str) {
        Some("Succeeded") => ("Succeeded", "The pod has completed successfully."),
        Some("Failed") => ("Failed", "The pod failed."),
        _ => return None,
    };
    Some(json!([{
        "type": "Completed",
        "status": "True",
        "reason": reason,
        "message": message,
    }]))
}

/// Upstream's `duration.HumanDuration`: a short, rounded-down, human-readable
/// duration (`"5m10s"`, `"3d"`, `"2y45d"`); `<invalid>` below -1s.
pub fn human_duration(d: SignedDuration) -> String {
    let seconds = d.as_secs();
    if seconds < -1 {
        return "<invalid>".to_string();
    } else if seconds < 0 {
        return "0s".to_string();
    } else if seconds < 60 * 2 {
        return format!("{seconds}s");
    }
    let minutes = seconds / 60;
    if minutes < 10 {
        let s = seconds % 60;
        if s == 0 {
            return format!("{minutes}m");
        }
        return format!("{minutes}m{s}s");
    } else if minutes < 60 * 3 {
        return format!("{minutes}m");
    }
    let hours = seconds / 3600;
    if hours < 8 {
        let m = minutes % 60;
        if m == 0 {
            return format!("{hours}h");
        }
        return format!("{hours}h{m}m");
    } else if hours < 48 {
        return format!("{hours}h");
    } else if hours < 24 * 8 {
        let h = hours % 24;
        if h == 0 {
            return format!("{}d", hours / 24);
        }
        return format!("{}d{h}h", hours / 24);
    } else if hours < 24 * 365 * 2 {
        return format!("{}d", hours / 24);
    } else if hours < 24 * 365 * 8 {
        let dy = (hours / 24) % 365;
        if dy == 0 {
            return format!("{}y", hours / 24 / 365);
        }
        return format!("{}y{dy}d", hours / 24 / 365);
    }
    format!("{}y", hours / 24 / 365)
}

/// `translateTimestampSince`: the age of an RFC 3339 timestamp, `<unknown>` when the
/// timestamp is missing or unparsable.
pub fn translate_timestamp_since(ts: Option<&str>, now: Timestamp) -> String {
    match ts.and_then(|t| t.parse::<Timestamp>().ok()) {
        Some(t) => human_duration(now.duration_since(t)),
        None => "<unknown>".to_string(),
    }
}

fn get<'a>(v: &'a Value, path: &[&str]) -> Option<&'a Value> {
    let mut cur = v;
    for key in path {
        cur = cur.get(key)?;
    }
    if cur.is_null() { None } else { Some(cur) }
}

fn s_of<'a>(v: &'a Value, path: &[&str]) -> &'a str {
    get(v, path).and_then(Value::as_str).unwrap_or("")
}

fn i_of(v: &Value, path: &[&str]) -> i64 {
    get(v, path).and_then(Value::as_i64).unwrap_or(0)
}

fn arr_of<'a>(v: &'a Value, path: &[&str]) -> &'a [Value] {
    get(v, path)
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[])
}

fn str_cell(s: &str) -> Value {
    Value::String(s.to_string())
}

fn or_none(s: &str) -> String {
    if s.is_empty() {
        "<none>".to_string()
    } else {
        s.to_string()
    }
}

/// `metav1.Time` parsing of an optional timestamp field.
fn ts_of(v: &Value, path: &[&str]) -> Option<Timestamp> {
    get(v, path)
        .and_then(Value::as_str)
        .and_then(|s| s.parse().ok())
}

/// `labels.FormatLabels`: `k=v` pairs sorted by key, `<none>` when empty.
fn format_labels(map: Option<&Value>) -> String {
    let Some(map) = map.and_then(Value::as_object) else {
        return "<none>".to_string();
    };
    let mut pairs: Vec<String> = map
        .iter()
        .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or("")))
        .collect();
    pairs.sort();
    if pairs.is_empty() {
        "<none>".to_string()
    } else {
        pairs.join(",")
    }
}

/// `metav1.FormatLabelSelector`: the selector's string form (requirements sorted by
/// key), `<none>` for a missing or empty selector, `<error>` for an invalid one.
pub fn format_label_selector(sel: Option<&Value>) -> String {
    let Some(sel) = sel else {
        return "<none>".to_string();
    };
    // (key, rendered requirement)
    let mut reqs: Vec<(String, String)> = Vec::new();
    if let Some(labels) = sel.get("matchLabels").and_then(Value::as_object) {
        for (k, v) in labels {
            reqs.push((k.clone(), format!("{k}={}", v.as_str().unwrap_or(""))));
        }
    }
    for expr in sel
        .get("matchExpressions")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[])
    {
        let key = s_of(expr, &["key"]).to_string();
        let mut values: Vec<&str> = arr_of(expr, &["values"])
            .iter()
            .filter_map(Value::as_str)
            .collect();
        values.sort_unstable();
        values.dedup();
        let rendered = match s_of(expr, &["operator"]) {
            "In" if !values.is_empty() => format!("{key} in ({})", values.join(",")),
            "NotIn" if !values.is_empty() => format!("{key} notin ({})", values.join(",")),
            "Exists" if values.is_empty() => key.clone(),
            "DoesNotExist" if values.is_empty() => format!("!{key}"),
            _ => return "<error>".to_string(),
        };
        reqs.push((key, rendered));
    }
    reqs.sort_by(|a, b| a.0.cmp(&b.0));
    let out: Vec<String> = reqs.into_iter().map(|(_, r)| r).collect();
    if out.is_empty() {
        "<none>".to_string()
    } else {
        out.join(",")
    }
}

/// `layoutContainerCells`: container names and images, comma-separated.
fn container_cells(containers: &[Value]) -> (Value, Value) {
    let names: Vec<&str> = containers.iter().map(|c| s_of(c, &["name"])).collect();
    let images: Vec<&str> = containers.iter().map(|c| s_of(c, &["image"])).collect();
    (str_cell(&names.join(",")), str_cell(&images.join(",")))
}

/// `net.JoinHostPort`.
fn join_host_port(host: &str, port: i64) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

fn list_with_more(list: &[String], more: bool, count: usize, max: usize) -> String {
    let ret = list.join(",");
    if more {
        return format!("{ret} + {} more...", count - max);
    }
    if ret.is_empty() {
        "<unset>".to_string()
    } else {
        ret
    }
}

/// `helper.GetAccessModesAsString`: `RWO,ROX,RWX,RWOP` in that order.
fn access_modes(modes: &[Value]) -> String {
    let has = |m: &str| modes.iter().any(|v| v.as_str() == Some(m));
    let mut out = Vec::new();
    for (mode, short) in [
        ("ReadWriteOnce", "RWO"),
        ("ReadOnlyMany", "ROX"),
        ("ReadWriteMany", "RWX"),
        ("ReadWriteOncePod", "RWOP"),
    ] {
        if has(mode) {
            out.push(short);
        }
    }
    out.join(",")
}

/// A `resource.Quantity` as printed (`"0"` when absent).
fn quantity(v: Option<&Value>) -> String {
    match v {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Number(n)) => n.to_string(),
        _ => "0".to_string(),
    }
}

/// An `intstr.IntOrString` as printed.
fn int_or_string(v: Option<&Value>) -> Option<String> {
    match v? {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

fn has_condition(obj: &Value, ty: &str) -> bool {
    arr_of(obj, &["status", "conditions"])
        .iter()
        .any(|c| s_of(c, &["type"]) == ty && s_of(c, &["status"]) == "True")
}

/// Where a core/v1 or events.k8s.io/v1 Event keeps what the printer shows.
struct EventFields {
    first: &'static str,
    last: &'static str,
    count: &'static str,
    source: &'static str,
    /// The reporter's name when `source` has none (core/v1 calls it
    /// `reportingComponent`).
    reporting_controller: &'static str,
    object: &'static str,
    message: &'static str,
}

const CORE_EVENT_FIELDS: EventFields = EventFields {
    first: "firstTimestamp",
    last: "lastTimestamp",
    count: "count",
    source: "source",
    reporting_controller: "reportingComponent",
    object: "involvedObject",
    message: "message",
};

const EVENTS_V1_FIELDS: EventFields = EventFields {
    first: "deprecatedFirstTimestamp",
    last: "deprecatedLastTimestamp",
    count: "deprecatedCount",
    source: "deprecatedSource",
    reporting_controller: "reportingController",
    object: "regarding",
    message: "note",
};

struct Printer<'a> {
    obj: &'a Value,
    now: Timestamp,
}

impl<'a> Printer<'a> {
    fn get(&self, path: &[&str]) -> Option<&'a Value> {
        get(self.obj, path)
    }

    fn s(&self, path: &[&str]) -> &'a str {
        s_of(self.obj, path)
    }

    fn i(&self, path: &[&str]) -> i64 {
        i_of(self.obj, path)
    }

    fn arr(&self, path: &[&str]) -> &'a [Value] {
        arr_of(self.obj, path)
    }

    /// Number of entries of a map or list field.
    fn len(&self, path: &[&str]) -> i64 {
        match self.get(path) {
            Some(Value::Object(m)) => m.len() as i64,
            Some(Value::Array(a)) => a.len() as i64,
            _ => 0,
        }
    }

    fn name(&self) -> Value {
        str_cell(self.s(&["metadata", "name"]))
    }

    fn since(&self, t: Option<Timestamp>) -> String {
        match t {
            Some(t) => human_duration(self.now.duration_since(t)),
            None => "<unknown>".to_string(),
        }
    }

    fn age(&self) -> Value {
        str_cell(&self.since(ts_of(self.obj, &["metadata", "creationTimestamp"])))
    }

    fn created_at(&self) -> Value {
        match ts_of(self.obj, &["metadata", "creationTimestamp"]) {
            Some(t) => str_cell(&t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()),
            None => Value::Null,
        }
    }

    fn deleting(&self) -> bool {
        self.get(&["metadata", "deletionTimestamp"]).is_some()
    }

    /// `spec.replicas`, defaulted to 1 as upstream's defaulting does.
    fn spec_replicas(&self) -> i64 {
        self.get(&["spec", "replicas"])
            .and_then(Value::as_i64)
            .unwrap_or(1)
    }

    fn pod(&self) -> Vec<Value> {
        let spec_containers = self.arr(&["spec", "containers"]);
        let init_specs = self.arr(&["spec", "initContainers"]);
        let restartable = |name: &str| {
            init_specs
                .iter()
                .any(|c| s_of(c, &["name"]) == name && s_of(c, &["restartPolicy"]) == "Always")
        };
        let mut total = spec_containers.len();
        total += init_specs
            .iter()
            .filter(|c| s_of(c, &["restartPolicy"]) == "Always")
            .count();
        let mut ready = 0usize;
        let mut restarts: i64 = 0;
        let mut restartable_restarts: i64 = 0;
        let mut last_restart: Option<Timestamp> = None;
        let mut last_restartable_restart: Option<Timestamp> = None;

        let phase = self.s(&["status", "phase"]);
        let mut reason = phase.to_string();
        let status_reason = self.s(&["status", "reason"]);
        if !status_reason.is_empty() {
            reason = status_reason.to_string();
        }
        let conditions = self.arr(&["status", "conditions"]);
        for c in conditions {
            if s_of(c, &["type"]) == "PodScheduled" && s_of(c, &["reason"]) == "SchedulingGated" {
                reason = "SchedulingGated".to_string();
            }
        }
        let condition_true = |ty: &str| {
            conditions
                .iter()
                .any(|c| s_of(c, &["type"]) == ty && s_of(c, &["status"]) == "True")
        };

        let mut initializing = false;
        for (i, c) in self
            .arr(&["status", "initContainerStatuses"])
            .iter()
            .enumerate()
        {
            let count = i_of(c, &["restartCount"]);
            restarts += count;
            let finished = ts_of(c, &["lastState", "terminated", "finishedAt"]);
            if get(c, &["lastState", "terminated"]).is_some() {
                last_restart = last_restart.max(finished);
            }
            let is_restartable = restartable(s_of(c, &["name"]));
            if is_restartable {
                restartable_restarts += count;
                if get(c, &["lastState", "terminated"]).is_some() {
                    last_restartable_restart = last_restartable_restart.max(finished);
                }
            }
            let terminated = get(c, &["state", "terminated"]);
            let waiting_reason = s_of(c, &["state", "waiting", "reason"]);
            if terminated.is_some_and(|t| i_of(t, &["exitCode"]) == 0) {
                continue;
            }
            if is_restartable && get(c, &["started"]).and_then(Value::as_bool) == Some(true) {
                if get(c, &["ready"]).and_then(Value::as_bool) == Some(true) {
                    ready += 1;
                }
                continue;
            }
            if let Some(t) = terminated {
                let r = s_of(t, &["reason"]);
                reason = if !r.is_empty() {
                    format!("Init:{r}")
                } else if i_of(t, &["signal"]) != 0 {
                    format!("Init:Signal:{}", i_of(t, &["signal"]))
                } else {
                    format!("Init:ExitCode:{}", i_of(t, &["exitCode"]))
                };
            } else if !waiting_reason.is_empty() && waiting_reason != "PodInitializing" {
                reason = format!("Init:{waiting_reason}");
            } else {
                reason = format!("Init:{i}/{}", init_specs.len());
            }
            initializing = true;
            break;
        }

        if !initializing || condition_true("Initialized") {
            restarts = restartable_restarts;
            last_restart = last_restartable_restart;
            let mut has_running = false;
            for c in self.arr(&["status", "containerStatuses"]).iter().rev() {
                restarts += i_of(c, &["restartCount"]);
                if get(c, &["lastState", "terminated"]).is_some() {
                    last_restart =
                        last_restart.max(ts_of(c, &["lastState", "terminated", "finishedAt"]));
                }
                let waiting_reason = s_of(c, &["state", "waiting", "reason"]);
                let terminated = get(c, &["state", "terminated"]);
                if !waiting_reason.is_empty() {
                    reason = waiting_reason.to_string();
                } else if let Some(t) = terminated {
                    let r = s_of(t, &["reason"]);
                    reason = if !r.is_empty() {
                        r.to_string()
                    } else if i_of(t, &["signal"]) != 0 {
                        format!("Signal:{}", i_of(t, &["signal"]))
                    } else {
                        format!("ExitCode:{}", i_of(t, &["exitCode"]))
                    };
                } else if get(c, &["ready"]).and_then(Value::as_bool) == Some(true)
                    && get(c, &["state", "running"]).is_some()
                {
                    has_running = true;
                    ready += 1;
                }
            }
            if reason == "Completed" && has_running {
                reason = if condition_true("Ready") {
                    "Running".to_string()
                } else {
                    "NotReady".to_string()
                };
            }
        }

        if self.deleting() && status_reason == "NodeLost" {
            reason = "Unknown".to_string();
        } else if self.deleting() && phase != "Succeeded" && phase != "Failed" {
            reason = "Terminating".to_string();
        }

        let restarts_str = match last_restart {
            Some(t) if restarts != 0 => format!("{restarts} ({} ago)", self.since(Some(t))),
            _ => restarts.to_string(),
        };

        let pod_ip = self
            .arr(&["status", "podIPs"])
            .first()
            .map(|ip| s_of(ip, &["ip"]))
            .unwrap_or("");
        let gates = self.arr(&["spec", "readinessGates"]);
        let readiness_gates = if gates.is_empty() {
            "<none>".to_string()
        } else {
            let true_count = gates
                .iter()
                .filter(|g| {
                    let ty = s_of(g, &["conditionType"]);
                    conditions
                        .iter()
                        .find(|c| s_of(c, &["type"]) == ty)
                        .is_some_and(|c| s_of(c, &["status"]) == "True")
                })
                .count();
            format!("{true_count}/{}", gates.len())
        };
        vec![
            self.name(),
            str_cell(&format!("{ready}/{total}")),
            str_cell(&reason),
            str_cell(&restarts_str),
            self.age(),
            str_cell(&or_none(pod_ip)),
            str_cell(&or_none(self.s(&["spec", "nodeName"]))),
            str_cell(&or_none(self.s(&["status", "nominatedNodeName"]))),
            str_cell(&readiness_gates),
        ]
    }

    fn pod_template(&self) -> Vec<Value> {
        let (names, images) = container_cells(self.arr(&["template", "spec", "containers"]));
        vec![
            self.name(),
            names,
            images,
            str_cell(&format_labels(
                self.get(&["template", "metadata", "labels"]),
            )),
        ]
    }

    fn replicas(&self) -> Vec<Value> {
        let (names, images) =
            container_cells(self.arr(&["spec", "template", "spec", "containers"]));
        // ReplicationControllers select with a plain map, ReplicaSets with a LabelSelector.
        let selector = match self.get(&["spec", "selector"]) {
            Some(sel)
                if sel.get("matchLabels").is_some() || sel.get("matchExpressions").is_some() =>
            {
                format_label_selector(Some(sel))
            }
            Some(sel) if self.s(&["apiVersion"]) == "v1" => format_labels(Some(sel)),
            other => format_label_selector(other),
        };
        vec![
            self.name(),
            json!(self.spec_replicas()),
            json!(self.i(&["status", "replicas"])),
            json!(self.i(&["status", "readyReplicas"])),
            self.age(),
            names,
            images,
            str_cell(&selector),
        ]
    }

    fn deployment(&self) -> Vec<Value> {
        let (names, images) =
            container_cells(self.arr(&["spec", "template", "spec", "containers"]));
        vec![
            self.name(),
            str_cell(&format!(
                "{}/{}",
                self.i(&["status", "readyReplicas"]),
                self.spec_replicas()
            )),
            json!(self.i(&["status", "updatedReplicas"])),
            json!(self.i(&["status", "availableReplicas"])),
            self.age(),
            names,
            images,
            str_cell(&format_label_selector(self.get(&["spec", "selector"]))),
        ]
    }

    fn daemon_set(&self) -> Vec<Value> {
        let (names, images) =
            container_cells(self.arr(&["spec", "template", "spec", "containers"]));
        vec![
            self.name(),
            json!(self.i(&["status", "desiredNumberScheduled"])),
            json!(self.i(&["status", "currentNumberScheduled"])),
            json!(self.i(&["status", "numberReady"])),
            json!(self.i(&["status", "updatedNumberScheduled"])),
            json!(self.i(&["status", "numberAvailable"])),
            str_cell(&format_labels(self.get(&[
                "spec",
                "template",
                "spec",
                "nodeSelector",
            ]))),
            self.age(),
            names,
            images,
            str_cell(&format_label_selector(self.get(&["spec", "selector"]))),
        ]
    }

    fn stateful_set(&self) -> Vec<Value> {
        let (names, images) =
            container_cells(self.arr(&["spec", "template", "spec", "containers"]));
        vec![
            self.name(),
            str_cell(&format!(
                "{}/{}",
                self.i(&["status", "readyReplicas"]),
                self.spec_replicas()
            )),
            self.age(),
            names,
            images,
        ]
    }

    fn controller_revision(&self) -> Vec<Value> {
        let controller = self
            .arr(&["metadata", "ownerReferences"])
            .iter()
            .find(|r| get(r, &["controller"]).and_then(Value::as_bool) == Some(true))
            .map(|r| {
                let api_version = s_of(r, &["apiVersion"]);
                let kind = s_of(r, &["kind"]).to_ascii_lowercase();
                let group_kind = match api_version.rsplit_once('/') {
                    Some((group, _)) if !group.is_empty() => format!("{kind}.{group}"),
                    _ => kind,
                };
                format!("{group_kind}/{}", s_of(r, &["name"]))
            })
            .unwrap_or_else(|| "<none>".to_string());
        vec![
            self.name(),
            str_cell(&controller),
            json!(self.i(&["revision"])),
            self.age(),
        ]
    }

    fn job(&self) -> Vec<Value> {
        let succeeded = self.i(&["status", "succeeded"]);
        let completions = match self.get(&["spec", "completions"]).and_then(Value::as_i64) {
            Some(c) => format!("{succeeded}/{c}"),
            None => {
                let parallelism = self.i(&["spec", "parallelism"]);
                if parallelism > 1 {
                    format!("{succeeded}/1 of {parallelism}")
                } else {
                    format!("{succeeded}/1")
                }
            }
        };
        let start = ts_of(self.obj, &["status", "startTime"]);
        let completion = ts_of(self.obj, &["status", "completionTime"]);
        let duration = match (start, completion) {
            (None, _) => String::new(),
            (Some(s), None) => human_duration(self.now.duration_since(s)),
            (Some(s), Some(c)) => human_duration(c.duration_since(s)),
        };
        let status = if has_condition(self.obj, "Complete") {
            "Complete"
        } else if has_condition(self.obj, "Failed") {
            "Failed"
        } else if self.deleting() {
            "Terminating"
        } else if has_condition(self.obj, "Suspended") {
            "Suspended"
        } else if has_condition(self.obj, "FailureTarget") {
            "FailureTarget"
        } else if has_condition(self.obj, "SuccessCriteriaMet") {
            "SuccessCriteriaMet"
        } else {
            "Running"
        };
        let (names, images) =
            container_cells(self.arr(&["spec", "template", "spec", "containers"]));
        vec![
            self.name(),
            str_cell(status),
            str_cell(&completions),
            str_cell(&duration),
            self.age(),
            names,
            images,
            str_cell(&format_label_selector(self.get(&["spec", "selector"]))),
        ]
    }

    fn cron_job(&self) -> Vec<Value> {
        let last_schedule = match ts_of(self.obj, &["status", "lastScheduleTime"]) {
            Some(t) => self.since(Some(t)),
            None => "<none>".to_string(),
        };
        let suspend = match self.get(&["spec", "suspend"]).and_then(Value::as_bool) {
            Some(b) => b.to_string(),
            None => "<unset>".to_string(),
        };
        let job_spec = &["spec", "jobTemplate", "spec"];
        let containers: Vec<&str> = job_spec
            .iter()
            .copied()
            .chain(["template", "spec", "containers"])
            .collect();
        let (names, images) = container_cells(self.arr(&containers));
        let selector: Vec<&str> = job_spec.iter().copied().chain(["selector"]).collect();
        vec![
            self.name(),
            str_cell(self.s(&["spec", "schedule"])),
            str_cell(&or_none(self.s(&["spec", "timeZone"]))),
            str_cell(&suspend),
            json!(self.len(&["status", "active"])),
            str_cell(&last_schedule),
            self.age(),
            names,
            images,
            str_cell(&format_label_selector(self.get(&selector))),
        ]
    }

    fn service(&self) -> Vec<Value> {
        let svc_type = self.s(&["spec", "type"]);
        let cluster_ip = self
            .arr(&["spec", "clusterIPs"])
            .first()
            .and_then(Value::as_str)
            .unwrap_or_else(|| self.s(&["spec", "clusterIP"]));
        let external_ips: Vec<&str> = self
            .arr(&["spec", "externalIPs"])
            .iter()
            .filter_map(Value::as_str)
            .collect();
        let external = match svc_type {
            "ClusterIP" | "NodePort" => {
                if external_ips.is_empty() {
                    "<none>".to_string()
                } else {
                    external_ips.join(",")
                }
            }
            "LoadBalancer" => {
                let lb = load_balancer_ips(self.arr(&["status", "loadBalancer", "ingress"]));
                if !external_ips.is_empty() {
                    let mut all: Vec<&str> = lb.iter().map(String::as_str).collect();
                    all.extend(external_ips.iter().copied());
                    all.join(",")
                } else if !lb.is_empty() {
                    lb.join(",")
                } else {
                    "<pending>".to_string()
                }
            }
            "ExternalName" => self.s(&["spec", "externalName"]).to_string(),
            _ => "<unknown>".to_string(),
        };
        let ports = make_port_string(self.arr(&["spec", "ports"]));
        vec![
            self.name(),
            str_cell(svc_type),
            str_cell(&or_none(cluster_ip)),
            str_cell(&external),
            str_cell(&or_none(&ports)),
            self.age(),
            str_cell(&format_labels(self.get(&["spec", "selector"]))),
        ]
    }

    fn endpoints(&self) -> Vec<Value> {
        let subsets = self.arr(&["subsets"]);
        let text = if subsets.is_empty() {
            "<none>".to_string()
        } else {
            let max = 3;
            let mut list: Vec<String> = Vec::new();
            let mut more = false;
            let mut count = 0;
            for ss in subsets {
                let addresses = arr_of(ss, &["addresses"]);
                let ports = arr_of(ss, &["ports"]);
                if ports.is_empty() {
                    count += addresses.len();
                    for a in addresses {
                        if list.len() == max {
                            more = true;
                            break;
                        }
                        list.push(s_of(a, &["ip"]).to_string());
                    }
                } else {
                    for port in ports {
                        count += addresses.len();
                        for a in addresses {
                            if list.len() == max {
                                more = true;
                                break;
                            }
                            list.push(join_host_port(s_of(a, &["ip"]), i_of(port, &["port"])));
                        }
                    }
                }
            }
            let ret = list.join(",");
            if more {
                format!("{ret} + {} more...", count - max)
            } else {
                ret
            }
        };
        vec![self.name(), str_cell(&text), self.age()]
    }

    fn endpoint_slice(&self) -> Vec<Value> {
        let max = 3;
        let mut ports = Vec::new();
        let mut more = false;
        let mut count = 0;
        for p in self.arr(&["ports"]) {
            if ports.len() < max {
                let port = match get(p, &["port"]).and_then(Value::as_i64) {
                    Some(n) => n.to_string(),
                    None => match get(p, &["name"]).and_then(Value::as_str) {
                        Some(name) => name.to_string(),
                        None => "*".to_string(),
                    },
                };
                ports.push(port);
            } else if ports.len() == max {
                more = true;
            }
            count += 1;
        }
        let ports = list_with_more(&ports, more, count, max);
        let mut addrs = Vec::new();
        let mut more = false;
        let mut count = 0;
        for e in self.arr(&["endpoints"]) {
            for a in arr_of(e, &["addresses"]) {
                if addrs.len() < max {
                    addrs.push(a.as_str().unwrap_or("").to_string());
                } else if addrs.len() == max {
                    more = true;
                }
                count += 1;
            }
        }
        let endpoints = list_with_more(&addrs, more, count, max);
        vec![
            self.name(),
            str_cell(self.s(&["addressType"])),
            str_cell(&ports),
            str_cell(&endpoints),
            self.age(),
        ]
    }

    fn node(&self) -> Vec<Value> {
        // The last Ready condition wins, as upstream's condition map.
        let ready = self
            .arr(&["status", "conditions"])
            .iter()
            .rfind(|c| s_of(c, &["type"]) == "Ready");
        let mut status = vec![match ready {
            Some(c) if s_of(c, &["status"]) == "True" => "Ready",
            Some(_) => "NotReady",
            None => "Unknown",
        }];
        if self
            .get(&["spec", "unschedulable"])
            .and_then(Value::as_bool)
            .unwrap_or(false)
        {
            status.push("SchedulingDisabled");
        }
        let mut roles = BTreeSet::new();
        if let Some(labels) = self.get(&["metadata", "labels"]).and_then(Value::as_object) {
            for (k, v) in labels {
                if let Some(role) = k.strip_prefix("node-role.kubernetes.io/") {
                    if !role.is_empty() {
                        roles.insert(role.to_string());
                    }
                } else if k == "kubernetes.io/role" {
                    let v = v.as_str().unwrap_or("");
                    if !v.is_empty() {
                        roles.insert(v.to_string());
                    }
                }
            }
        }
        let roles: Vec<String> = roles.into_iter().collect();
        let address = |ty: &str| {
            self.arr(&["status", "addresses"])
                .iter()
                .find(|a| s_of(a, &["type"]) == ty)
                .map(|a| s_of(a, &["address"]).to_string())
                .unwrap_or_else(|| "<none>".to_string())
        };
        let info = |field: &str| {
            let v = self.s(&["status", "nodeInfo", field]);
            if v.is_empty() {
                "<unknown>".to_string()
            } else {
                v.to_string()
            }
        };
        vec![
            self.name(),
            str_cell(&status.join(",")),
            str_cell(&or_none(&roles.join(","))),
            self.age(),
            str_cell(self.s(&["status", "nodeInfo", "kubeletVersion"])),
            str_cell(&address("InternalIP")),
            str_cell(&address("ExternalIP")),
            str_cell(&info("osImage")),
            str_cell(&info("kernelVersion")),
            str_cell(&info("containerRuntimeVersion")),
        ]
    }

    fn event(&self, f: &EventFields) -> Vec<Value> {
        let first = if self.get(&[f.first]).is_some() {
            self.since(ts_of(self.obj, &[f.first]))
        } else {
            self.since(ts_of(self.obj, &["eventTime"]))
        };
        let mut last = if self.get(&[f.last]).is_some() {
            self.since(ts_of(self.obj, &[f.last]))
        } else {
            first.clone()
        };
        let mut count = self.i(&[f.count]);
        if let Some(series) = self.get(&["series"]) {
            last = self.since(ts_of(series, &["lastObservedTime"]));
            count = i_of(series, &["count"]);
        } else if count == 0 {
            count = 1;
        }
        let kind = s_of(self.obj, &[f.object, "kind"]).to_ascii_lowercase();
        let name = self.s(&[f.object, "name"]);
        let target = if name.is_empty() {
            kind
        } else {
            format!("{kind}/{name}")
        };
        let first_non_empty = |a: &'a str, b: &'a str| if a.is_empty() { b } else { a };
        let component = first_non_empty(
            self.s(&[f.source, "component"]),
            self.s(&[f.reporting_controller]),
        );
        let instance = first_non_empty(self.s(&[f.source, "host"]), self.s(&["reportingInstance"]));
        let source = if instance.is_empty() {
            component.to_string()
        } else {
            format!("{component}, {instance}")
        };
        vec![
            str_cell(&last),
            str_cell(self.s(&["type"])),
            str_cell(self.s(&["reason"])),
            str_cell(&target),
            str_cell(self.s(&[f.object, "fieldPath"])),
            str_cell(&source),
            str_cell(self.s(&[f.message]).trim()),
            str_cell(&first),
            json!(count),
            self.name(),
        ]
    }

    fn persistent_volume(&self) -> Vec<Value> {
        let claim = match self.get(&["spec", "claimRef"]) {
            Some(r) => format!("{}/{}", s_of(r, &["namespace"]), s_of(r, &["name"])),
            None => String::new(),
        };
        let phase = if self.deleting() {
            "Terminating"
        } else {
            self.s(&["status", "phase"])
        };
        let class = match self
            .get(&[
                "metadata",
                "annotations",
                "volume.beta.kubernetes.io/storage-class",
            ])
            .and_then(Value::as_str)
        {
            Some(c) => c,
            None => self.s(&["spec", "storageClassName"]),
        };
        vec![
            self.name(),
            str_cell(&quantity(self.get(&["spec", "capacity", "storage"]))),
            str_cell(&access_modes(self.arr(&["spec", "accessModes"]))),
            str_cell(self.s(&["spec", "persistentVolumeReclaimPolicy"])),
            str_cell(phase),
            str_cell(&claim),
            str_cell(class),
            str_cell(&unset(self.s(&["spec", "volumeAttributesClassName"]))),
            str_cell(self.s(&["status", "reason"])),
            self.age(),
            str_cell(&unset(self.s(&["spec", "volumeMode"]))),
        ]
    }

    fn persistent_volume_claim(&self) -> Vec<Value> {
        let phase = if self.deleting() {
            "Terminating"
        } else {
            self.s(&["status", "phase"])
        };
        let volume = self.s(&["spec", "volumeName"]);
        let (capacity, modes) = if volume.is_empty() {
            (String::new(), String::new())
        } else {
            (
                quantity(self.get(&["status", "capacity", "storage"])),
                access_modes(self.arr(&["status", "accessModes"])),
            )
        };
        let class = match self
            .get(&[
                "metadata",
                "annotations",
                "volume.beta.kubernetes.io/storage-class",
            ])
            .and_then(Value::as_str)
        {
            Some(c) => c,
            None => self.s(&["spec", "storageClassName"]),
        };
        vec![
            self.name(),
            str_cell(phase),
            str_cell(volume),
            str_cell(&capacity),
            str_cell(&modes),
            str_cell(class),
            str_cell(&unset(
                self.s(&["status", "currentVolumeAttributesClassName"]),
            )),
            self.age(),
            str_cell(&unset(self.s(&["spec", "volumeMode"]))),
        ]
    }

    fn resource_quota(&self) -> Vec<Value> {
        let mut resources: Vec<&String> = self
            .get(&["spec", "hard"])
            .and_then(Value::as_object)
            .map(|m| m.keys().collect())
            .unwrap_or_default();
        resources.sort();
        let mut request = Vec::new();
        let mut limit = Vec::new();
        for r in resources {
            let used = quantity(self.get(&["status", "used", r]));
            let hard = quantity(self.get(&["status", "hard", r]));
            let text = format!("{r}: {used}/{hard}");
            let pieces: Vec<&str> = r.split('.').collect();
            if pieces.len() > 1 && pieces[0] == "limits" {
                limit.push(text);
            } else {
                request.push(text);
            }
        }
        vec![
            self.name(),
            self.age(),
            str_cell(&request.join(", ")),
            str_cell(&limit.join(", ")),
        ]
    }

    fn hpa(&self) -> Vec<Value> {
        // Upstream prints every version from the internal object, which has v2's shape:
        // a v1 HPA's other metrics (in an annotation) are in its TARGETS too.
        if self.obj["apiVersion"] == "autoscaling/v1"
            && let Ok(v1) = serde_json::from_value(self.obj.clone())
            && let Ok(v2) = serde_json::to_value(crate::conversion::autoscaling::hpa_v1_to_v2(v1))
        {
            let as_v2 = Printer {
                obj: &v2,
                now: self.now,
            };
            return as_v2.hpa_v2();
        }
        self.hpa_v2()
    }

    fn hpa_v2(&self) -> Vec<Value> {
        let reference = format!(
            "{}/{}",
            self.s(&["spec", "scaleTargetRef", "kind"]),
            self.s(&["spec", "scaleTargetRef", "name"])
        );
        let min = match self.get(&["spec", "minReplicas"]).and_then(Value::as_i64) {
            Some(n) => n.to_string(),
            None => "<unset>".to_string(),
        };
        vec![
            self.name(),
            str_cell(&reference),
            str_cell(&format_hpa_metrics(
                self.arr(&["spec", "metrics"]),
                self.arr(&["status", "currentMetrics"]),
            )),
            str_cell(&min),
            json!(self.i(&["spec", "maxReplicas"])),
            json!(self.i(&["status", "currentReplicas"])),
            self.age(),
        ]
    }

    /// Upstream's `printComponentStatus`: the `Healthy` condition gives the status
    /// (`Healthy` when True, else `Unhealthy`; `Unknown` without one), message and error.
    fn component_status(&self) -> Vec<Value> {
        let healthy = self
            .arr(&["conditions"])
            .iter()
            .find(|c| c["type"] == "Healthy");
        let (status, message, error) = match healthy {
            Some(c) => (
                if c["status"] == "True" {
                    "Healthy"
                } else {
                    "Unhealthy"
                },
                s_of(c, &["message"]),
                s_of(c, &["error"]),
            ),
            None => ("Unknown", "", ""),
        };
        vec![
            self.name(),
            str_cell(status),
            str_cell(message),
            str_cell(error),
        ]
    }

    fn csr(&self) -> Vec<Value> {
        let (mut approved, mut denied, mut failed) = (false, false, false);
        for c in self.arr(&["status", "conditions"]) {
            match s_of(c, &["type"]) {
                "Approved" => approved = true,
                "Denied" => denied = true,
                "Failed" => failed = true,
                _ => {}
            }
        }
        let mut status = if denied {
            "Denied".to_string()
        } else if approved {
            "Approved".to_string()
        } else {
            "Pending".to_string()
        };
        if failed {
            status.push_str(",Failed");
        }
        if !self.s(&["status", "certificate"]).is_empty() {
            status.push_str(",Issued");
        }
        let duration = match self
            .get(&["spec", "expirationSeconds"])
            .and_then(Value::as_i64)
        {
            Some(secs) => human_duration(SignedDuration::from_secs(secs)),
            None => "<none>".to_string(),
        };
        vec![
            self.name(),
            self.age(),
            str_cell(self.s(&["spec", "signerName"])),
            str_cell(self.s(&["spec", "username"])),
            str_cell(&duration),
            str_cell(&status),
        ]
    }

    fn ingress(&self) -> Vec<Value> {
        let class = or_none(self.s(&["spec", "ingressClassName"]));
        let rules = self.arr(&["spec", "rules"]);
        let max = 3;
        let mut hosts: Vec<&str> = Vec::new();
        let mut more = false;
        for rule in rules {
            if hosts.len() == max {
                more = true;
            }
            let host = s_of(rule, &["host"]);
            if !more && !host.is_empty() {
                hosts.push(host);
            }
        }
        let hosts = if hosts.is_empty() {
            "*".to_string()
        } else if more {
            format!("{} + {} more...", hosts.join(","), rules.len() - max)
        } else {
            hosts.join(",")
        };
        let address = load_balancer_ips(self.arr(&["status", "loadBalancer", "ingress"])).join(",");
        let ports = if self.arr(&["spec", "tls"]).is_empty() {
            "80"
        } else {
            "80, 443"
        };
        vec![
            self.name(),
            str_cell(&class),
            str_cell(&hosts),
            str_cell(&address),
            str_cell(ports),
            self.age(),
        ]
    }

    /// `Local` or `<namespace>/<name>`; the Available condition's status, with its
    /// reason when not True (`False (MissingEndpoints)`), `Unknown` without one.
    fn api_service(&self) -> Vec<Value> {
        let service = match self.get(&["spec", "service"]) {
            Some(svc) if !svc.is_null() => {
                format!("{}/{}", s_of(svc, &["namespace"]), s_of(svc, &["name"]))
            }
            _ => "Local".to_string(),
        };
        let available = self
            .arr(&["status", "conditions"])
            .iter()
            .find(|c| s_of(c, &["type"]) == "Available")
            .map_or_else(
                || "Unknown".to_string(),
                |c| {
                    let (status, reason) = (s_of(c, &["status"]), s_of(c, &["reason"]));
                    if status == "True" || reason.is_empty() {
                        status.to_string()
                    } else {
                        format!("{status} ({reason})")
                    }
                },
            );
        vec![
            self.name(),
            str_cell(&service),
            str_cell(&available),
            self.age(),
        ]
    }

    fn ingress_class(&self) -> Vec<Value> {
        let parameters = match self.get(&["spec", "parameters"]) {
            Some(p) => {
                let mut out = s_of(p, &["kind"]).to_string();
                if let Some(group) = get(p, &["apiGroup"]).and_then(Value::as_str) {
                    out = format!("{out}.{group}");
                }
                format!("{out}/{}", s_of(p, &["name"]))
            }
            None => "<none>".to_string(),
        };
        vec![
            self.name(),
            str_cell(self.s(&["spec", "controller"])),
            str_cell(&parameters),
            self.age(),
        ]
    }

    fn pdb(&self) -> Vec<Value> {
        let or_na = |v: Option<String>| v.unwrap_or_else(|| "N/A".to_string());
        vec![
            self.name(),
            str_cell(&or_na(int_or_string(self.get(&["spec", "minAvailable"])))),
            str_cell(&or_na(int_or_string(self.get(&["spec", "maxUnavailable"])))),
            json!(self.i(&["status", "disruptionsAllowed"])),
            self.age(),
        ]
    }

    fn role_binding(&self) -> Vec<Value> {
        let role = format!(
            "{}/{}",
            self.s(&["roleRef", "kind"]),
            self.s(&["roleRef", "name"])
        );
        let (mut users, mut groups, mut sas) = (Vec::new(), Vec::new(), Vec::new());
        for subject in self.arr(&["subjects"]) {
            let name = s_of(subject, &["name"]);
            match s_of(subject, &["kind"]) {
                "User" => users.push(name.to_string()),
                "Group" => groups.push(name.to_string()),
                "ServiceAccount" => sas.push(format!("{}:{name}", s_of(subject, &["namespace"]))),
                _ => {}
            }
        }
        vec![
            self.name(),
            str_cell(&role),
            self.age(),
            str_cell(&users.join(", ")),
            str_cell(&groups.join(", ")),
            str_cell(&sas.join(", ")),
        ]
    }

    fn priority_class(&self) -> Vec<Value> {
        vec![
            self.name(),
            json!(self.i(&["value"])),
            json!(
                self.get(&["globalDefault"])
                    .and_then(Value::as_bool)
                    .unwrap_or(false)
            ),
            str_cell(&unset(self.s(&["preemptionPolicy"]))),
            self.age(),
        ]
    }

    /// Upstream's `printFlowSchema`: the precedence as a number, `<none>` without a
    /// distinguisher method, and MissingPL the `Dangling` condition's status (`?`
    /// before the APF controller has set one).
    fn flow_schema(&self) -> Vec<Value> {
        let distinguisher = match self.get(&["spec", "distinguisherMethod"]) {
            Some(m) if m.is_object() => m["type"].as_str().unwrap_or(""),
            _ => "<none>",
        };
        let dangling = self
            .get(&["status", "conditions"])
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .find(|c| c["type"] == "Dangling")
            .map_or("?", |c| c["status"].as_str().unwrap_or(""));
        vec![
            self.name(),
            str_cell(self.s(&["spec", "priorityLevelConfiguration", "name"])),
            json!(self.i(&["spec", "matchingPrecedence"])),
            str_cell(distinguisher),
            self.age(),
            str_cell(dangling),
        ]
    }

    /// Upstream's `printPriorityLevelConfiguration`: the shares of a Limited level and
    /// its queuing parameters when it queues, `<none>` otherwise.
    fn priority_level(&self) -> Vec<Value> {
        let none = || str_cell("<none>");
        let (mut shares, mut queues, mut hand_size, mut queue_length_limit) =
            (none(), none(), none(), none());
        if let Some(limited) = self.get(&["spec", "limited"]).filter(|l| l.is_object()) {
            shares = json!(i_of(limited, &["nominalConcurrencyShares"]));
            if let Some(q) = get(limited, &["limitResponse", "queuing"]).filter(|q| q.is_object()) {
                queues = json!(i_of(q, &["queues"]));
                hand_size = json!(i_of(q, &["handSize"]));
                queue_length_limit = json!(i_of(q, &["queueLengthLimit"]));
            }
        }
        vec![
            self.name(),
            str_cell(self.s(&["spec", "type"])),
            shares,
            queues,
            hand_size,
            queue_length_limit,
            self.age(),
        ]
    }

    /// `printIPAddress`'s ParentRef cell: `<resource>[.<group>][/<namespace>]/<name>`
    /// in lower case (the group-resource part), `<none>` without a parent reference.
    fn parent_ref(&self) -> String {
        let Some(r) = self.get(&["spec", "parentRef"]).filter(|r| r.is_object()) else {
            return "<none>".to_owned();
        };
        let field = |k: &str| r.get(k).and_then(Value::as_str).unwrap_or("");
        let mut out = match field("group") {
            "" => field("resource").to_owned(),
            g => format!("{}.{g}", field("resource")),
        }
        .to_lowercase();
        let ns = field("namespace");
        if !ns.is_empty() {
            out.push('/');
            out.push_str(ns);
        }
        out.push('/');
        out.push_str(field("name"));
        out
    }

    fn csi_driver(&self) -> Vec<Value> {
        let flag = |field: &str, default: bool| {
            json!(
                self.get(&["spec", field])
                    .and_then(Value::as_bool)
                    .unwrap_or(default)
            )
        };
        let token_requests = match self
            .get(&["spec", "tokenRequests"])
            .and_then(Value::as_array)
        {
            Some(requests) => requests
                .iter()
                .map(|r| r.get("audience").and_then(Value::as_str).unwrap_or(""))
                .collect::<Vec<_>>()
                .join(","),
            None => "<unset>".to_owned(),
        };
        let modes = self
            .get(&["spec", "volumeLifecycleModes"])
            .and_then(Value::as_array)
            .map(|m| {
                m.iter()
                    .filter_map(Value::as_str)
                    .collect::<Vec<_>>()
                    .join(",")
            })
            .filter(|m| !m.is_empty())
            .unwrap_or_else(|| "<none>".to_owned());
        vec![
            self.name(),
            flag("attachRequired", true),
            flag("podInfoOnMount", false),
            flag("storageCapacity", false),
            str_cell(&token_requests),
            flag("requiresRepublish", false),
            str_cell(&modes),
            self.age(),
        ]
    }

    fn storage_class(&self) -> Vec<Value> {
        let is_default = [
            "storageclass.kubernetes.io/is-default-class",
            "storageclass.beta.kubernetes.io/is-default-class",
        ]
        .iter()
        .any(|a| self.s(&["metadata", "annotations", a]) == "true");
        let mut name = self.s(&["metadata", "name"]).to_string();
        if is_default {
            name.push_str(" (default)");
        }
        let or = |v: &str, d: &str| {
            if v.is_empty() {
                d.to_string()
            } else {
                v.to_string()
            }
        };
        vec![
            str_cell(&name),
            str_cell(self.s(&["provisioner"])),
            str_cell(&or(self.s(&["reclaimPolicy"]), "Delete")),
            str_cell(&or(self.s(&["volumeBindingMode"]), "Immediate")),
            json!(
                self.get(&["allowVolumeExpansion"])
                    .and_then(Value::as_bool)
                    .unwrap_or(false)
            ),
            self.age(),
        ]
    }
}

fn unset(s: &str) -> String {
    if s.is_empty() {
        "<unset>".to_string()
    } else {
        s.to_string()
    }
}

/// The IPs (or hostnames) of a load balancer status' ingress points.
fn load_balancer_ips(ingress: &[Value]) -> Vec<String> {
    ingress
        .iter()
        .filter_map(|i| {
            let ip = s_of(i, &["ip"]);
            let host = s_of(i, &["hostname"]);
            if !ip.is_empty() {
                Some(ip.to_string())
            } else if !host.is_empty() {
                Some(host.to_string())
            } else {
                None
            }
        })
        .collect()
}

/// `makePortString`: `80/TCP,443:30443/TCP`.
pub fn make_port_string(ports: &[Value]) -> String {
    ports
        .iter()
        .map(|p| {
            let port = i_of(p, &["port"]);
            let protocol = s_of(p, &["protocol"]);
            let node_port = i_of(p, &["nodePort"]);
            if node_port > 0 {
                format!("{port}:{node_port}/{protocol}")
            } else {
                format!("{port}/{protocol}")
            }
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// `formatHPAMetrics` over autoscaling/v2 metric specs and statuses.
fn format_hpa_metrics(specs: &[Value], statuses: &[Value]) -> String {
    if specs.is_empty() {
        return "<none>".to_string();
    }
    let max = 2;
    let mut list = Vec::new();
    for (i, spec) in specs.iter().enumerate() {
        let status = statuses.get(i);
        let current = |source: &str, field: &str| {
            status
                .and_then(|s| get(s, &[source, "current", field]))
                .map(|q| quantity(Some(q)))
                .unwrap_or_else(|| "<unknown>".to_string())
        };
        let target = |source: &str, field: &str| quantity(get(spec, &[source, "target", field]));
        let text = match s_of(spec, &["type"]) {
            source @ ("External" | "Object") => {
                let key = if source == "External" {
                    "external"
                } else {
                    "object"
                };
                if get(spec, &[key, "target", "averageValue"]).is_some() {
                    format!(
                        "{}/{} (avg)",
                        current(key, "averageValue"),
                        target(key, "averageValue")
                    )
                } else {
                    format!("{}/{}", current(key, "value"), target(key, "value"))
                }
            }
            "Pods" => format!(
                "{}/{}",
                current("pods", "averageValue"),
                target("pods", "averageValue")
            ),
            source @ ("Resource" | "ContainerResource") => {
                let key = if source == "Resource" {
                    "resource"
                } else {
                    "containerResource"
                };
                let name = s_of(spec, &[key, "name"]);
                if get(spec, &[key, "target", "averageValue"]).is_some() {
                    format!(
                        "{name}: {}/{}",
                        current(key, "averageValue"),
                        target(key, "averageValue")
                    )
                } else {
                    let cur = status
                        .and_then(|s| get(s, &[key, "current", "averageUtilization"]))
                        .and_then(Value::as_i64)
                        .map(|u| format!("{u}%"))
                        .unwrap_or_else(|| "<unknown>".to_string());
                    let tgt = get(spec, &[key, "target", "averageUtilization"])
                        .and_then(Value::as_i64)
                        .map(|u| format!("{u}%"))
                        .unwrap_or_else(|| "<auto>".to_string());
                    format!("{name}: {cur}/{tgt}")
                }
            }
            _ => "<unknown type>".to_string(),
        };
        list.push(text);
    }
    let count = list.len();
    if count > max {
        list.truncate(max);
        return format!("{} + {} more...", list.join(", "), count - max);
    }
    list.join(", ")
}

#[cfg(test)]
mod tests;
