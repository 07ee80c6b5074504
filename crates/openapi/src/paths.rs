//! The `paths` of the documents: one path item per REST endpoint of every served
//! resource and subresource, with upstream's operation ids, parameters,
//! `x-kubernetes-action` and `x-kubernetes-group-version-kind` (Swagger 2.0 shape; the
//! v3 documents are converted from it).

use ferrokube_api::resources::{self, ResourceInfo, SubresourceInfo};
use serde_json::{Map, Value, json};

use crate::definitions::{V2_REF, list_name};
use crate::kinds::KINDS;

const JSON_YAML_PB: &[&str] = &[
    "application/json",
    "application/yaml",
    "application/vnd.kubernetes.protobuf",
];
const WATCH_PRODUCES: &[&str] = &[
    "application/json",
    "application/yaml",
    "application/vnd.kubernetes.protobuf",
    "application/json;stream=watch",
    "application/vnd.kubernetes.protobuf;stream=watch",
];
const PATCH_CONSUMES: &[&str] = &[
    "application/json-patch+json",
    "application/merge-patch+json",
    "application/strategic-merge-patch+json",
    "application/apply-patch+yaml",
];
/// Custom resources take no strategic merge patch.
const CUSTOM_PATCH_CONSUMES: &[&str] = &[
    "application/json-patch+json",
    "application/merge-patch+json",
    "application/apply-patch+yaml",
];
const STATUS: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.Status";
const DELETE_OPTIONS: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.DeleteOptions";
const PATCH: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.Patch";
const WATCH_EVENT: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.WatchEvent";
const API_RESOURCE_LIST: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.APIResourceList";

/// The definition name of a kind served in `group`/`version`.
pub(crate) fn definition_of(group: &str, version: &str, kind: &str) -> Option<String> {
    KINDS
        .iter()
        .find(|k| k.group == group && k.version == version && k.kind == kind)
        .map(|k| (k.name)().into_owned())
}

/// `CoreV1`, `AppsV1`, `RbacAuthorizationV1`: the group-version part of operation ids.
fn gv_camel(group: &str, version: &str) -> String {
    let group = if group.is_empty() { "core" } else { group };
    let group = group.strip_suffix(".k8s.io").unwrap_or(group);
    let mut out: String = group.split('.').map(capitalize).collect();
    out.push_str(&capitalize(version));
    out
}

/// `core_v1`, `apps_v1`, `rbacAuthorization_v1`: the operations' tag.
fn tag(group: &str, version: &str) -> String {
    let camel = gv_camel(group, "");
    let mut chars = camel.chars();
    let first: String = chars
        .next()
        .map(|c| c.to_ascii_lowercase())
        .into_iter()
        .collect();
    format!("{first}{}_{version}", chars.as_str())
}

/// Upstream's `GetArticleForNoun` with its spaces: ` a `, ` an ` before a vowel, and a
/// lone space before a plural (`create Endpoints`, not `create a Endpoints`).
fn article(noun: &str) -> &'static str {
    if noun.ends_with('s') && !noun.ends_with("ss") {
        " "
    } else if noun
        .chars()
        .next()
        .is_some_and(|c| "aeiou".contains(c.to_ascii_lowercase()))
    {
        " an "
    } else {
        " a "
    }
}

fn capitalize(s: &str) -> String {
    let mut chars = s.chars();
    match chars.next() {
        Some(c) => c.to_ascii_uppercase().to_string() + chars.as_str(),
        None => String::new(),
    }
}

fn query(name: &str, ty: &str, description: &str) -> Value {
    json!({"name": name, "in": "query", "type": ty, "uniqueItems": true, "description": description})
}

fn path_param(name: &str, description: &str) -> Value {
    json!({"name": name, "in": "path", "required": true, "type": "string", "uniqueItems": true, "description": description})
}

fn body(definition: &str) -> Value {
    json!({"name": "body", "in": "body", "required": true, "schema": {"$ref": format!("{V2_REF}{definition}")}})
}

fn pretty() -> Value {
    query(
        "pretty",
        "string",
        "If 'true', then the output is pretty printed. Defaults to 'false' unless the user-agent indicates a browser or command-line HTTP tool (curl and wget).",
    )
}

fn dry_run() -> Value {
    query(
        "dryRun",
        "string",
        "When present, indicates that modifications should not be persisted. An invalid or unrecognized dryRun directive will result in an error response and no further processing of the request. Valid values are: - All: all dry run stages will be processed",
    )
}

const FIELD_MANAGER: &str = "fieldManager is a name associated with the actor or entity that is making these changes. The value must be less than or 128 characters long, and only contain printable characters, as defined by https://golang.org/pkg/unicode/#IsPrint.";

fn field_manager() -> Value {
    query("fieldManager", "string", FIELD_MANAGER)
}

fn field_validation() -> Value {
    query(
        "fieldValidation",
        "string",
        "fieldValidation instructs the server on how to handle objects in the request (POST/PUT/PATCH) containing unknown or duplicate fields. Valid values are: - Ignore: This will ignore any unknown fields that are silently dropped from the object, and will ignore all but the last duplicate field that the decoder encounters. This is the default behavior prior to v1.23. - Warn: This will send a warning via the standard warning response header for each unknown field that is dropped from the object, and for each duplicate field that is encountered. The request will still succeed if there are no other errors, and will only persist the last of any duplicate fields. This is the default in v1.23+ - Strict: This will fail the request with a BadRequest error if any unknown fields would be dropped from the object, or if any duplicate fields are present. The error returned from the server will contain all unknown and duplicate fields encountered.",
    )
}

fn write_params() -> Vec<Value> {
    vec![dry_run(), field_manager(), field_validation()]
}

fn list_params(watch: bool) -> Vec<Value> {
    let mut out = vec![
        query(
            "allowWatchBookmarks",
            "boolean",
            "allowWatchBookmarks requests watch events with type \"BOOKMARK\". Servers that do not implement bookmarks may ignore this flag and bookmarks are sent at the server's discretion. Clients should not assume bookmarks are returned at any specific interval, nor may they assume the server will send any BOOKMARK event during a session. If this is not a watch, this field is ignored.",
        ),
        query(
            "continue",
            "string",
            "The continue option should be set when retrieving more results from the server. Since this value is server defined, clients may only use the continue value from a previous query result with identical query parameters (except for the value of continue) and the server may reject a continue value it does not recognize. If the specified continue value is no longer valid whether due to expiration (generally five to fifteen minutes) or a configuration change on the server, the server will respond with a 410 ResourceExpired error together with a continue token. If the client needs a consistent list, it must restart their list without the continue field. Otherwise, the client may send another list request with the token received with the 410 error, the server will respond with a list starting from the next key, but from the latest snapshot, which is inconsistent from the previous list results - objects that are created, modified, or deleted after the first list request will be included in the response, as long as their keys are after the \"next key\".\n\nThis field is not supported when watch is true. Clients may start a watch from the last resourceVersion value returned by the server and not miss any modifications.",
        ),
        query(
            "fieldSelector",
            "string",
            "A selector to restrict the list of returned objects by their fields. Defaults to everything.",
        ),
        query(
            "labelSelector",
            "string",
            "A selector to restrict the list of returned objects by their labels. Defaults to everything.",
        ),
        query(
            "limit",
            "integer",
            "limit is a maximum number of responses to return for a list call. If more items exist, the server will set the `continue` field on the list metadata to a value that can be used with the same initial query to retrieve the next set of results. Setting a limit may return fewer than the requested amount of items (up to zero items) in the event all requested objects are filtered out and clients should only use the presence of the continue field to determine whether more results are available. Servers may choose not to support the limit argument and will return all of the available results. If limit is specified and the continue field is empty, clients may assume that no more results are available. This field is not supported if watch is true.\n\nThe server guarantees that the objects returned when using continue will be identical to issuing a single list call without a limit - that is, no objects created, modified, or deleted after the first request is issued will be included in any subsequent continued requests. This is sometimes referred to as a consistent snapshot, and ensures that a client that is using limit to receive smaller chunks of a very large result can ensure they see all possible objects. If objects are updated during a chunked list the version of the object that was present at the time the first list result was calculated is returned.",
        ),
        query(
            "resourceVersion",
            "string",
            "resourceVersion sets a constraint on what resource versions a request may be served from. See https://kubernetes.io/docs/reference/using-api/api-concepts/#resource-versions for details.\n\nDefaults to unset",
        ),
        query(
            "resourceVersionMatch",
            "string",
            "resourceVersionMatch determines how resourceVersion is applied to list calls. It is highly recommended that resourceVersionMatch be set for list calls where resourceVersion is set See https://kubernetes.io/docs/reference/using-api/api-concepts/#resource-versions for details.\n\nDefaults to unset",
        ),
        query(
            "sendInitialEvents",
            "boolean",
            "`sendInitialEvents=true` may be set together with `watch=true`. In that case, the watch stream will begin with synthetic events to produce the current state of objects in the collection. Once all such events have been sent, a synthetic \"Bookmark\" event  will be sent. The bookmark will report the ResourceVersion (RV) corresponding to the set of objects, and be marked with `\"k8s.io/initial-events-end\": \"true\"` annotation. Afterwards, the watch stream will proceed as usual, sending watch events corresponding to changes (subsequent to the RV) to objects watched.\n\nWhen `sendInitialEvents` option is set, we require `resourceVersionMatch` option to also be set. The semantic of the watch request is as following: - `resourceVersionMatch` = NotOlderThan\n  is interpreted as \"data at least as new as the provided `resourceVersion`\"\n  and the bookmark event is send when the state is synced\n  to a `resourceVersion` at least as fresh as the one provided by the ListOptions.\n  If `resourceVersion` is unset, this is interpreted as \"consistent read\" and the\n  bookmark event is send when the state is synced at least to the moment\n  when request started being processed.\n- `resourceVersionMatch` set to any other value or unset\n  Invalid error is returned.\n\nDefaults to true if `resourceVersion=\"\"` or `resourceVersion=\"0\"` (for backward compatibility reasons) and to false otherwise.",
        ),
        query(
            "timeoutSeconds",
            "integer",
            "Timeout for the list/watch call. This limits the duration of the call, regardless of any activity or inactivity.",
        ),
    ];
    if watch {
        out.push(query("watch", "boolean", "Watch for changes to the described resources and return them as a stream of add, update, and remove notifications. Specify resourceVersion."));
    }
    out
}

fn delete_params() -> Vec<Value> {
    // DeleteOptions may be left out.
    let mut options = body(DELETE_OPTIONS);
    if let Some(o) = options.as_object_mut() {
        o.remove("required");
    }
    vec![
        options,
        dry_run(),
        query(
            "gracePeriodSeconds",
            "integer",
            "The duration in seconds before the object should be deleted. Value must be non-negative integer. The value zero indicates delete immediately. If this value is nil, the default grace period for the specified type will be used. Defaults to a per object value if not specified. zero means delete immediately.",
        ),
        query(
            "ignoreStoreReadErrorWithClusterBreakingPotential",
            "boolean",
            "if set to true, it will trigger an unsafe deletion of the resource in case the normal deletion flow fails with a corrupt object error. A resource is considered corrupt if it can not be retrieved from the underlying storage successfully because of a) its data can not be transformed e.g. decryption failure, or b) it fails to decode into an object. NOTE: unsafe deletion ignores finalizer constraints, skips precondition checks, and removes the object from the storage. WARNING: This may potentially break the cluster if the workload associated with the resource being unsafe-deleted relies on normal deletion flow. Use only if you REALLY know what you are doing. The default value is false, and the user must opt in to enable it",
        ),
        query(
            "orphanDependents",
            "boolean",
            "Deprecated: please use the PropagationPolicy, this field will be deprecated in 1.7. Should the dependent objects be orphaned. If true/false, the \"orphan\" finalizer will be added to/removed from the object's finalizers list. Either this field or PropagationPolicy may be set, but not both.",
        ),
        query(
            "propagationPolicy",
            "string",
            "Whether and how garbage collection will be performed. Either this field or OrphanDependents may be set, but not both. The default policy is decided by the existing finalizer set in the metadata.finalizers and the resource-specific default policy. Acceptable values are: 'Orphan' - orphan the dependents; 'Background' - allow the garbage collector to delete the dependents in the background; 'Foreground' - a cascading policy that deletes all dependents in the foreground.",
        ),
    ]
}

fn responses(codes: &[(&str, &str)], definition: &str) -> Value {
    let mut out = Map::new();
    for (code, description) in codes {
        out.insert(
            (*code).to_string(),
            json!({"description": description, "schema": {"$ref": format!("{V2_REF}{definition}")}}),
        );
    }
    out.insert("401".into(), json!({"description": "Unauthorized"}));
    Value::Object(out)
}

/// What an operation is about: its gvk (the kind at the endpoint) and naming.
struct Target<'a> {
    group: &'a str,
    version: &'a str,
    /// Group, version and kind of the object at the endpoint (`Scale` for `scale`).
    gvk: (&'a str, &'a str, &'a str),
    /// `NamespacedPod`, `Node`, `NamespacedDeploymentScale`, `PodForAllNamespaces`.
    op_suffix: String,
    kind_for_text: &'a str,
}

impl Target<'_> {
    #[allow(clippy::too_many_arguments)]
    fn op(
        &self,
        verb_id: &str,
        action: &str,
        description: String,
        params: Vec<Value>,
        consumes: &[&str],
        produces: &[&str],
        responses: Value,
    ) -> Value {
        let mut op = json!({
            "description": description,
            "operationId": format!("{verb_id}{}{}", gv_camel(self.group, self.version), self.op_suffix),
            "consumes": consumes,
            "produces": produces,
            "schemes": ["https"],
            "tags": [tag(self.group, self.version)],
            "responses": responses,
            "x-kubernetes-action": action,
            "x-kubernetes-group-version-kind": {"group": self.gvk.0, "kind": self.gvk.2, "version": self.gvk.1},
        });
        if !params.is_empty() {
            op["parameters"] = Value::Array(params);
        }
        op
    }
}

/// The Swagger 2.0 `paths` for every resource of `group`/`version`, plus its
/// discovery endpoint.
pub(crate) fn build_for(group: &str, version: &str) -> Map<String, Value> {
    let mut paths = Map::new();
    let root = if group.is_empty() {
        format!("/api/{version}")
    } else {
        format!("/apis/{group}/{version}")
    };
    paths.insert(
        format!("{root}/"),
        json!({"get": {
            "description": "get available resources",
            "operationId": format!("get{}APIResources", gv_camel(group, version)),
            "consumes": JSON_YAML_PB,
            "produces": JSON_YAML_PB,
            "schemes": ["https"],
            "tags": [tag(group, version)],
            "responses": responses(&[("200", "OK")], API_RESOURCE_LIST),
        }}),
    );
    for r in resources::resources_of(group, version) {
        if let Some(def) = definition_of(r.group, r.version, r.kind) {
            resource_paths(&mut paths, &root, r, &def, PATCH_CONSUMES);
        }
    }
    paths
}

/// Adds the paths of one custom resource version (its kind's definition named `def`)
/// to `paths`: as a built-in resource's, but patched without strategic merge.
pub(crate) fn custom_resource_paths(paths: &mut Map<String, Value>, r: &ResourceInfo, def: &str) {
    let root = format!("/apis/{}/{}", r.group, r.version);
    resource_paths(paths, &root, r, def, CUSTOM_PATCH_CONSUMES);
}

fn resource_paths(
    paths: &mut Map<String, Value>,
    root: &str,
    r: &ResourceInfo,
    def: &str,
    patch_consumes: &[&str],
) {
    let def = def.to_string();
    let list_def = list_name(&def);
    let ns = if r.namespaced { "Namespaced" } else { "" };
    let target = |suffix: String| Target {
        group: r.group,
        version: r.version,
        gvk: (r.group, r.version, r.kind),
        op_suffix: suffix,
        kind_for_text: r.kind,
    };
    let base = if r.namespaced {
        format!("{root}/namespaces/{{namespace}}/{}", r.plural)
    } else {
        format!("{root}/{}", r.plural)
    };
    let scope_params = |name: bool| {
        let mut p = Vec::new();
        if name {
            p.push(path_param("name", &format!("name of the {}", r.kind)));
        }
        if r.namespaced {
            p.push(path_param(
                "namespace",
                "object name and auth scope, such as for teams and projects",
            ));
        }
        p.push(pretty());
        Value::Array(p)
    };

    // Collection.
    let t = target(format!("{ns}{}", r.kind));
    let mut item = Map::new();
    if r.supports("list") {
        item.insert(
            "get".into(),
            t.op(
                "list",
                "list",
                if r.supports("watch") {
                    format!("list or watch objects of kind {}", t.kind_for_text)
                } else {
                    format!("list objects of kind {}", t.kind_for_text)
                },
                list_params(true),
                &["*/*"],
                WATCH_PRODUCES,
                responses(&[("200", "OK")], &list_def),
            ),
        );
    }
    if r.supports("create") {
        let mut params = vec![body(&def)];
        params.extend(write_params());
        item.insert(
            "post".into(),
            t.op(
                "create",
                "post",
                format!("create{}{}", article(r.kind), r.kind),
                params,
                &["*/*"],
                JSON_YAML_PB,
                responses(
                    &[("200", "OK"), ("201", "Created"), ("202", "Accepted")],
                    &def,
                ),
            ),
        );
    }
    if r.supports("deletecollection") {
        let mut params = delete_params();
        params.extend(
            list_params(false)
                .into_iter()
                .filter(|p| p["name"] != "allowWatchBookmarks"),
        );
        let tc = target(format!("Collection{ns}{}", r.kind));
        item.insert(
            "delete".into(),
            tc.op(
                "delete",
                "deletecollection",
                format!("delete collection of {}", r.kind),
                params,
                &["*/*"],
                JSON_YAML_PB,
                responses(&[("200", "OK")], STATUS),
            ),
        );
    }
    item.insert("parameters".into(), scope_params(false));
    paths.insert(base.clone(), Value::Object(item));

    // One object.
    let mut item = Map::new();
    if r.supports("get") {
        item.insert(
            "get".into(),
            t.op(
                "read",
                "get",
                format!("read the specified {}", r.kind),
                vec![],
                &["*/*"],
                JSON_YAML_PB,
                responses(&[("200", "OK")], &def),
            ),
        );
    }
    if r.supports("update") {
        let mut params = vec![body(&def)];
        params.extend(write_params());
        item.insert(
            "put".into(),
            t.op(
                "replace",
                "put",
                format!("replace the specified {}", r.kind),
                params,
                &["*/*"],
                JSON_YAML_PB,
                responses(&[("200", "OK"), ("201", "Created")], &def),
            ),
        );
    }
    if r.supports("patch") {
        item.insert(
            "patch".into(),
            patch_op(
                &t,
                &def,
                &format!("partially update the specified {}", r.kind),
                patch_consumes,
            ),
        );
    }
    if r.supports("delete") {
        item.insert(
            "delete".into(),
            t.op(
                "delete",
                "delete",
                format!("delete{}{}", article(r.kind), r.kind),
                delete_params(),
                &["*/*"],
                JSON_YAML_PB,
                responses(&[("200", "OK"), ("202", "Accepted")], STATUS),
            ),
        );
    }
    // A create-only resource (the reviews) has no path for one object.
    if !item.is_empty() {
        item.insert("parameters".into(), scope_params(true));
        paths.insert(format!("{base}/{{name}}"), Value::Object(item));
    }

    // Subresources.
    for sub in r.subresources {
        subresource_path(
            paths,
            &base,
            r,
            sub,
            &def,
            &scope_params(true),
            patch_consumes,
        );
    }

    // Watch endpoints (deprecated upstream, still served and documented).
    if r.supports("watch") {
        let watch_base = if r.namespaced {
            format!("{root}/watch/namespaces/{{namespace}}/{}", r.plural)
        } else {
            format!("{root}/watch/{}", r.plural)
        };
        let mut with_scope = list_params(true);
        with_scope.extend(scope_params(false).as_array().cloned().unwrap_or_default());
        let tl = target(format!("{ns}{}List", r.kind));
        paths.insert(
            watch_base.clone(),
            json!({
                "get": tl.op("watch", "watchlist",
                    format!("watch individual changes to a list of {}. deprecated: use the 'watch' parameter with a list operation instead.", r.kind),
                    vec![], &["*/*"], WATCH_PRODUCES, responses(&[("200", "OK")], WATCH_EVENT)),
                "parameters": with_scope,
            }),
        );
        let mut with_name = list_params(true);
        with_name.extend(scope_params(true).as_array().cloned().unwrap_or_default());
        paths.insert(
            format!("{watch_base}/{{name}}"),
            json!({
                "get": t.op("watch", "watch",
                    format!("watch changes to an object of kind {}. deprecated: use the 'watch' parameter with a list operation instead, filtered to a single item with the 'fieldSelector' parameter.", r.kind),
                    vec![], &["*/*"], WATCH_PRODUCES, responses(&[("200", "OK")], WATCH_EVENT)),
                "parameters": with_name,
            }),
        );
    }

    // Across namespaces.
    if r.namespaced && r.supports("list") {
        let ta = target(format!("{}ForAllNamespaces", r.kind));
        let mut params = list_params(true);
        params.push(pretty());
        paths.insert(
            format!("{root}/{}", r.plural),
            json!({
                "get": ta.op("list", "list", format!("list or watch objects of kind {}", r.kind),
                    vec![], &["*/*"], WATCH_PRODUCES, responses(&[("200", "OK")], &list_def)),
                "parameters": params,
            }),
        );
        if r.supports("watch") {
            let tw = target(format!("{}ListForAllNamespaces", r.kind));
            let mut params = list_params(true);
            params.push(pretty());
            paths.insert(
                format!("{root}/watch/{}", r.plural),
                json!({
                    "get": tw.op("watch", "watchlist",
                        format!("watch individual changes to a list of {}. deprecated: use the 'watch' parameter with a list operation instead.", r.kind),
                        vec![], &["*/*"], WATCH_PRODUCES, responses(&[("200", "OK")], WATCH_EVENT)),
                    "parameters": params,
                }),
            );
        }
    }
}

fn patch_op(t: &Target<'_>, def: &str, description: &str, consumes: &[&str]) -> Value {
    // A patch's field manager is documented with when it is required.
    let field_manager = query(
        "fieldManager",
        "string",
        &format!(
            "{FIELD_MANAGER} This field is required for apply requests (application/apply-patch) but optional for non-apply patch types (JsonPatch, MergePatch, StrategicMergePatch)."
        ),
    );
    let mut params = vec![body(PATCH), dry_run(), field_manager, field_validation()];
    params.push(query("force", "boolean", "Force is going to \"force\" Apply requests. It means user will re-acquire conflicting fields owned by other people. Force flag must be unset for non-apply patch requests."));
    t.op(
        "patch",
        "patch",
        description.to_string(),
        params,
        consumes,
        JSON_YAML_PB,
        responses(&[("200", "OK"), ("201", "Created")], def),
    )
}

/// The query parameters of a subresource the apiserver serves by connecting to the
/// kubelet (`pods/log`, `exec`, `attach`, `portforward`), `None` for the others.
fn connect_params(r: &ResourceInfo, sub: &SubresourceInfo) -> Option<Vec<Value>> {
    if !r.group.is_empty() || (r.plural != "pods" && sub.name != "proxy") {
        return None;
    }
    let q = |name: &str, ty: &str, text: &str| query(name, ty, text);
    let container = |what: &str| {
        q(
            "container",
            "string",
            &format!(
                "The container {what}. Defaults to only container if there is only one container in the pod."
            ),
        )
    };
    let streams = || {
        vec![
            q(
                "stderr",
                "boolean",
                "Redirect the standard error stream of the pod for this call.",
            ),
            q(
                "stdin",
                "boolean",
                "Redirect the standard input stream of the pod for this call. Defaults to false.",
            ),
            q(
                "stdout",
                "boolean",
                "Redirect the standard output stream of the pod for this call.",
            ),
            q(
                "tty",
                "boolean",
                "TTY if true indicates that a tty will be allocated for the attach call. This is passed through the container runtime so the tty is allocated on the worker node by the container runtime. Defaults to false.",
            ),
        ]
    };
    Some(match sub.name {
        "log" => vec![
            container("for which to stream logs"),
            q(
                "follow",
                "boolean",
                "Follow the log stream of the pod. Defaults to false.",
            ),
            q(
                "insecureSkipTLSVerifyBackend",
                "boolean",
                "insecureSkipTLSVerifyBackend indicates that the apiserver should not confirm the validity of the serving certificate of the backend it is connecting to.",
            ),
            q(
                "limitBytes",
                "integer",
                "If set, the number of bytes to read from the server before terminating the log output.",
            ),
            pretty(),
            q(
                "previous",
                "boolean",
                "Return previous terminated container logs. Defaults to false.",
            ),
            q(
                "sinceSeconds",
                "integer",
                "A relative time in seconds before the current time from which to show logs.",
            ),
            q(
                "stream",
                "string",
                "Specify which container log stream to return to the client. Acceptable values are \"All\", \"Stdout\" and \"Stderr\". If not specified, \"All\" is used, and both stdout and stderr are returned interleaved.",
            ),
            q(
                "tailLines",
                "integer",
                "If set, the number of lines from the end of the logs to show.",
            ),
            q(
                "timestamps",
                "boolean",
                "If true, add an RFC3339 or RFC3339Nano timestamp at the beginning of every line of log output. Defaults to false.",
            ),
        ],
        "exec" => {
            let mut p = vec![
                q(
                    "command",
                    "string",
                    "Command is the remote command to execute. argv array. Not executed within a shell.",
                ),
                container("in which to execute the command"),
            ];
            p.extend(streams());
            p
        }
        "attach" => {
            let mut p = vec![container("in which to execute the command")];
            p.extend(streams());
            p
        }
        "portforward" => vec![q(
            "ports",
            "integer",
            "List of ports to forward Required when using WebSockets",
        )],
        "proxy" => vec![q(
            "path",
            "string",
            &format!(
                "Path is the URL path to use for the current proxy request to {}.",
                r.singular
            ),
        )],
        _ => return None,
    })
}

/// Upstream documents these as `connect` operations (`read` for log) answering a string.
fn connect_path(
    paths: &mut Map<String, Value>,
    base: &str,
    r: &ResourceInfo,
    sub: &SubresourceInfo,
    params: Vec<Value>,
    scope: &Value,
) {
    let ns = if r.namespaced { "Namespaced" } else { "" };
    let target = |method: &str| Target {
        group: r.group,
        version: r.version,
        // Upstream names the parent's kind on a connect operation, not the options
        // kind (`PodExecOptions`) the query parameters decode into.
        gvk: (r.group, r.version, r.kind),
        op_suffix: format!("{method}{ns}{}{}", r.kind, capitalize(sub.name)),
        kind_for_text: r.kind,
    };
    let ok = json!({"200": {"description": "OK", "schema": {"type": "string"}}, "401": {"description": "Unauthorized"}});
    let mut item = Map::new();
    if sub.name == "log" {
        item.insert(
            "get".into(),
            target("").op(
                "read",
                "get",
                format!("read log of the specified {}", r.kind),
                vec![],
                &["*/*"],
                &[
                    "text/plain",
                    "application/json",
                    "application/yaml",
                    "application/vnd.kubernetes.protobuf",
                ],
                ok,
            ),
        );
    } else {
        // A proxy passes HEAD and OPTIONS requests on too.
        let proxy_methods: &[(&str, &str)] = if sub.name == "proxy" {
            &[("head", "Head"), ("options", "Options")]
        } else {
            &[]
        };
        let methods = sub
            .verbs
            .iter()
            .filter_map(|verb| match *verb {
                "get" => Some(("get", "Get")),
                "create" => Some(("post", "Post")),
                "update" => Some(("put", "Put")),
                "patch" => Some(("patch", "Patch")),
                "delete" => Some(("delete", "Delete")),
                _ => None,
            })
            .chain(proxy_methods.iter().copied());
        for (method, name) in methods {
            item.insert(
                method.into(),
                target(name).op(
                    "connect",
                    "connect",
                    format!(
                        "connect {} requests to {} of {}",
                        method.to_uppercase(),
                        sub.name,
                        r.kind
                    ),
                    vec![],
                    &["*/*"],
                    &["*/*"],
                    ok.clone(),
                ),
            );
        }
    }
    // The name and namespace; `pretty` only where the subresource lists it (log).
    let mut all: Vec<Value> = scope
        .as_array()
        .into_iter()
        .flatten()
        .filter(|p| p["in"] == "path")
        .cloned()
        .collect();
    all.extend(params);
    if sub.name == "proxy" {
        // Upstream also documents `.../proxy/{path}`, the path in the URL.
        let mut with_path = item.clone();
        let mut params: Vec<Value> = all
            .iter()
            .filter(|p| p["name"] != "path")
            .cloned()
            .collect();
        params.push(
            json!({"uniqueItems": true, "type": "string", "description": "path to the resource",
            "name": "path", "in": "path", "required": true}),
        );
        with_path.insert("parameters".into(), Value::Array(params));
        for (_, op) in with_path.iter_mut() {
            if let Some(Value::String(id)) = op.get_mut("operationId") {
                id.push_str("WithPath");
            }
        }
        paths.insert(
            format!("{base}/{{name}}/proxy/{{path}}"),
            Value::Object(with_path),
        );
    }
    item.insert("parameters".into(), Value::Array(all));
    paths.insert(format!("{base}/{{name}}/{}", sub.name), Value::Object(item));
}

fn subresource_path(
    paths: &mut Map<String, Value>,
    base: &str,
    r: &ResourceInfo,
    sub: &SubresourceInfo,
    parent_def: &str,
    scope: &Value,
    patch_consumes: &[&str],
) {
    if let Some(params) = connect_params(r, sub) {
        connect_path(paths, base, r, sub, params, scope);
        return;
    }
    let group = sub.group.unwrap_or(r.group);
    let version = sub.version.unwrap_or(r.version);
    let def = if sub.kind == r.kind && sub.group.is_none() {
        parent_def.to_string()
    } else {
        match definition_of(group, version, sub.kind) {
            Some(d) => d,
            None => return,
        }
    };
    let ns = if r.namespaced { "Namespaced" } else { "" };
    let t = Target {
        group: r.group,
        version: r.version,
        gvk: (group, version, sub.kind),
        op_suffix: format!("{ns}{}{}", r.kind, capitalize(sub.name)),
        kind_for_text: r.kind,
    };
    let mut item = Map::new();
    let what = format!("{} of the specified {}", sub.name, t.kind_for_text);
    for verb in sub.verbs {
        match *verb {
            "get" => {
                item.insert(
                    "get".into(),
                    t.op(
                        "read",
                        "get",
                        format!("read {what}"),
                        vec![],
                        &["*/*"],
                        JSON_YAML_PB,
                        responses(&[("200", "OK")], &def),
                    ),
                );
            }
            "update" => {
                let mut params = vec![body(&def)];
                params.extend(write_params());
                item.insert(
                    "put".into(),
                    t.op(
                        "replace",
                        "put",
                        format!("replace {what}"),
                        params,
                        &["*/*"],
                        JSON_YAML_PB,
                        responses(&[("200", "OK"), ("201", "Created")], &def),
                    ),
                );
            }
            "patch" => {
                item.insert(
                    "patch".into(),
                    patch_op(
                        &t,
                        &def,
                        &format!("partially update {what}"),
                        patch_consumes,
                    ),
                );
            }
            "create" => {
                let mut params = vec![body(&def)];
                params.extend(write_params());
                item.insert(
                    "post".into(),
                    t.op(
                        "create",
                        "post",
                        format!("create {} of{}{}", sub.name, article(r.kind), r.kind),
                        params,
                        &["*/*"],
                        JSON_YAML_PB,
                        responses(
                            &[("200", "OK"), ("201", "Created"), ("202", "Accepted")],
                            &def,
                        ),
                    ),
                );
            }
            _ => {}
        }
    }
    item.insert("parameters".into(), scope.clone());
    paths.insert(format!("{base}/{{name}}/{}", sub.name), Value::Object(item));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_connect_subresources_are_documented_as_upstream() {
        let paths = build_for("", "v1");
        let exec = &paths["/api/v1/namespaces/{namespace}/pods/{name}/exec"];
        assert_eq!(
            exec["get"]["operationId"],
            "connectCoreV1GetNamespacedPodExec"
        );
        assert_eq!(
            exec["post"]["operationId"],
            "connectCoreV1PostNamespacedPodExec"
        );
        assert_eq!(exec["post"]["x-kubernetes-action"], "connect");
        // As upstream's 1.33 swagger.json: the parent's kind, not PodExecOptions.
        assert_eq!(
            exec["get"]["x-kubernetes-group-version-kind"]["kind"],
            "Pod"
        );
        assert_eq!(exec["get"]["responses"]["200"]["schema"]["type"], "string");
        let names: Vec<&str> = exec["parameters"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["name"].as_str().unwrap())
            .collect();
        assert_eq!(
            names,
            [
                "name",
                "namespace",
                "command",
                "container",
                "stderr",
                "stdin",
                "stdout",
                "tty"
            ]
        );
        let log = &paths["/api/v1/namespaces/{namespace}/pods/{name}/log"];
        assert_eq!(log["get"]["operationId"], "readCoreV1NamespacedPodLog");
        assert!(log.get("post").is_none());
        let pf = &paths["/api/v1/namespaces/{namespace}/pods/{name}/portforward"];
        assert_eq!(
            pf["post"]["operationId"],
            "connectCoreV1PostNamespacedPodPortforward"
        );
        let attach = &paths["/api/v1/namespaces/{namespace}/pods/{name}/attach"];
        assert_eq!(
            attach["get"]["operationId"],
            "connectCoreV1GetNamespacedPodAttach"
        );
        let proxy = &paths["/api/v1/namespaces/{namespace}/pods/{name}/proxy/{path}"];
        assert_eq!(
            proxy["head"]["operationId"],
            "connectCoreV1HeadNamespacedPodProxyWithPath"
        );
        assert_eq!(
            proxy["options"]["description"],
            "connect OPTIONS requests to proxy of Pod"
        );
        let proxy = &paths["/api/v1/nodes/{name}/proxy"];
        assert_eq!(proxy["head"]["operationId"], "connectCoreV1HeadNodeProxy");
    }

    #[test]
    fn descriptions_use_upstreams_articles() {
        let core = build_for("", "v1");
        let create = |path: &str| core[path]["post"]["description"].clone();
        assert_eq!(
            create("/api/v1/namespaces/{namespace}/endpoints"),
            "create Endpoints"
        );
        assert_eq!(
            create("/api/v1/namespaces/{namespace}/events"),
            "create an Event"
        );
        assert_eq!(
            create("/api/v1/namespaces/{namespace}/pods"),
            "create a Pod"
        );
        assert_eq!(
            core["/api/v1/namespaces/{namespace}/events/{name}"]["delete"]["description"],
            "delete an Event"
        );
        let ingress = build_for("networking.k8s.io", "v1");
        assert_eq!(
            ingress["/apis/networking.k8s.io/v1/namespaces/{namespace}/ingresses"]["post"]["description"],
            "create an Ingress"
        );
        // DeleteOptions may be left out; a collection's delete is not a watch.
        let names = |op: &Value| -> Vec<String> {
            op["parameters"]
                .as_array()
                .unwrap()
                .iter()
                .map(|p| p["name"].as_str().unwrap().to_string())
                .collect()
        };
        let collection = &core["/api/v1/namespaces/{namespace}/configmaps"]["delete"];
        assert!(collection["parameters"][0].get("required").is_none());
        assert!(!names(collection).contains(&"allowWatchBookmarks".to_string()));
        assert!(names(collection).contains(&"sendInitialEvents".to_string()));
        // A resource that cannot be watched is listed only.
        assert_eq!(
            core["/api/v1/componentstatuses"]["get"]["description"],
            "list objects of kind ComponentStatus"
        );
    }

    #[test]
    fn operation_naming_follows_upstream() {
        assert_eq!(gv_camel("", "v1"), "CoreV1");
        assert_eq!(gv_camel("apps", "v1"), "AppsV1");
        assert_eq!(
            gv_camel("rbac.authorization.k8s.io", "v1"),
            "RbacAuthorizationV1"
        );
        assert_eq!(gv_camel("coordination.k8s.io", "v1"), "CoordinationV1");
        assert_eq!(tag("", "v1"), "core_v1");
        assert_eq!(
            tag("rbac.authorization.k8s.io", "v1"),
            "rbacAuthorization_v1"
        );
        let paths = build_for("", "v1");
        assert_eq!(
            paths["/api/v1/namespaces/{namespace}/pods"]["get"]["operationId"],
            "listCoreV1NamespacedPod"
        );
        assert_eq!(
            paths["/api/v1/namespaces/{namespace}/pods"]["delete"]["operationId"],
            "deleteCoreV1CollectionNamespacedPod"
        );
        assert_eq!(
            paths["/api/v1/pods"]["get"]["operationId"],
            "listCoreV1PodForAllNamespaces"
        );
        assert_eq!(
            paths["/api/v1/namespaces/{namespace}/pods/{name}/binding"]["post"]["operationId"],
            "createCoreV1NamespacedPodBinding"
        );
        assert_eq!(
            paths["/api/v1/namespaces/{name}/finalize"]["put"]["operationId"],
            "replaceCoreV1NamespaceFinalize"
        );
        let apps = build_for("apps", "v1");
        let scale = &apps["/apis/apps/v1/namespaces/{namespace}/deployments/{name}/scale"];
        assert_eq!(
            scale["get"]["operationId"],
            "readAppsV1NamespacedDeploymentScale"
        );
        assert_eq!(
            scale["patch"]["x-kubernetes-group-version-kind"],
            json!({"group": "autoscaling", "kind": "Scale", "version": "v1"})
        );
    }
}
