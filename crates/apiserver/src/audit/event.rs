//! One audit event (upstream `audit.k8s.io/v1` `Event`) as the request path hands it
//! to the writer: cheap to build (shared request facts, raw body bytes), turned into
//! its JSON line by the writer thread, which also decodes the bodies.

use std::sync::Arc;

use bytes::Bytes;
use ferrokube_auth::UserInfo;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use super::policy::{Level, Stage};

/// What every stage of one request shares.
#[derive(Debug)]
pub(crate) struct RequestFacts {
    pub audit_id: String,
    pub level: Level,
    pub omit_managed_fields: bool,
    pub request_uri: String,
    pub verb: String,
    pub user: UserInfo,
    pub source_ips: Vec<String>,
    pub user_agent: Option<String>,
    /// None for non-resource requests.
    pub object_ref: Option<ObjectRef>,
    pub received: jiff::Timestamp,
}

/// Upstream `ObjectReference` (every field omitted when empty).
#[derive(Clone, Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ObjectRef {
    #[serde(skip_serializing_if = "String::is_empty")]
    pub resource: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub name: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub uid: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub api_group: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub api_version: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub resource_version: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub subresource: String,
}

/// A request or response body as sent, decoded only by the writer.
#[derive(Clone, Debug)]
pub(crate) struct RawBody {
    pub bytes: Bytes,
    pub content_type: String,
    /// A patch is recorded as sent (upstream `LogRequestPatch`) and names no object.
    pub is_patch: bool,
}

/// What one stage adds to the request's facts.
#[derive(Clone, Debug)]
pub(crate) struct Event {
    pub facts: Arc<RequestFacts>,
    pub stage: Stage,
    pub stage_timestamp: jiff::Timestamp,
    pub impersonated_user: Option<UserInfo>,
    /// The response code; None at RequestReceived.
    pub code: Option<u16>,
    /// The failure a handler answered with (a `Status` body) or set (a panic).
    pub status: Option<Value>,
    pub request_body: Option<RawBody>,
    pub response_body: Option<RawBody>,
    pub annotations: Vec<(String, String)>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct UserJson<'a> {
    #[serde(skip_serializing_if = "str::is_empty")]
    username: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    uid: &'a str,
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    groups: &'a [String],
    #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    extra: &'a std::collections::BTreeMap<String, Vec<String>>,
}

impl<'a> From<&'a UserInfo> for UserJson<'a> {
    fn from(u: &'a UserInfo) -> Self {
        UserJson {
            username: &u.name,
            uid: &u.uid,
            groups: &u.groups,
            extra: &u.extra,
        }
    }
}

/// Upstream's field order.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct EventJson<'a> {
    kind: &'static str,
    api_version: &'static str,
    level: &'static str,
    #[serde(rename = "auditID")]
    audit_id: &'a str,
    stage: &'static str,
    #[serde(rename = "requestURI")]
    request_uri: &'a str,
    verb: &'a str,
    user: UserJson<'a>,
    #[serde(skip_serializing_if = "Option::is_none")]
    impersonated_user: Option<UserJson<'a>>,
    #[serde(rename = "sourceIPs", skip_serializing_if = "<[String]>::is_empty")]
    source_ips: &'a [String],
    #[serde(skip_serializing_if = "Option::is_none")]
    user_agent: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    object_ref: Option<ObjectRef>,
    #[serde(skip_serializing_if = "Option::is_none")]
    response_status: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    request_object: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    response_object: Option<Value>,
    request_received_timestamp: String,
    stage_timestamp: String,
    #[serde(skip_serializing_if = "Map::is_empty")]
    annotations: Map<String, Value>,
}

/// The annotation of an event whose objects were left out for its size.
pub(crate) const TRUNCATED_ANNOTATION: &str = "audit.k8s.io/truncated";

/// RFC 3339 with microseconds in UTC (upstream `metav1.MicroTime`).
pub(crate) fn micro_time(t: jiff::Timestamp) -> String {
    format!(
        "{}.{:06}Z",
        t.strftime("%Y-%m-%dT%H:%M:%S"),
        t.subsec_microsecond()
    )
}

/// A body as JSON: JSON and YAML as they are, protobuf through the codec.
fn decode(body: &RawBody) -> Option<Value> {
    let essence = crate::output::media_essence(&body.content_type);
    if body.bytes.iter().all(u8::is_ascii_whitespace) {
        return None;
    }
    match essence {
        ferrokube_protobuf::MEDIA_TYPE => {
            ferrokube_protobuf::decode(&body.bytes).ok().map(|(_, v)| v)
        }
        e if e.ends_with("yaml") => crate::yaml_nesting::from_slice(&body.bytes).ok(),
        _ => serde_json::from_slice(&body.bytes).ok(),
    }
}

/// The object metadata that completes objectRef.
#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
struct ObjectMetaRef {
    name: String,
    namespace: String,
    uid: String,
    resource_version: String,
}

/// A body's object, read for its metadata only.
#[derive(Deserialize)]
struct Named {
    #[serde(default)]
    metadata: ObjectMetaRef,
}

fn meta_of(v: &Value) -> Option<ObjectMetaRef> {
    ObjectMetaRef::deserialize(&v["metadata"]).ok()
}

/// Only the metadata of a body: JSON and YAML skip everything else unparsed (the cost
/// of a Metadata-level event), protobuf is decoded whole.
fn decode_meta(body: &RawBody) -> Option<ObjectMetaRef> {
    let essence = crate::output::media_essence(&body.content_type);
    match essence {
        ferrokube_protobuf::MEDIA_TYPE => decode(body).as_ref().and_then(meta_of),
        e if e.ends_with("yaml") => crate::yaml_nesting::from_slice::<Named>(&body.bytes)
            .ok()
            .map(|n| n.metadata),
        _ => serde_json::from_slice::<Named>(&body.bytes)
            .ok()
            .map(|n| n.metadata),
    }
}

/// Upstream `removeManagedFields`: from an object and from a list's items.
fn strip_managed_fields(v: &mut Value) {
    if let Some(meta) = v.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.remove("managedFields");
    }
    if let Some(items) = v.get_mut("items").and_then(Value::as_array_mut) {
        for item in items {
            strip_managed_fields(item);
        }
    }
}

impl Event {
    /// The event's JSON line (with its newline).
    pub(crate) fn to_json_line(&self) -> Vec<u8> {
        self.json_line(false)
    }

    /// The event's JSON line without its request and response objects, marked
    /// `audit.k8s.io/truncated` (upstream's truncating backend).
    pub(crate) fn to_truncated_json_line(&self) -> Vec<u8> {
        self.json_line(true)
    }

    fn json_line(&self, truncated: bool) -> Vec<u8> {
        let facts = &self.facts;
        let mut object_ref = facts.object_ref.clone();
        // Upstream `LogRequestObject`: the request's object completes objectRef at
        // Metadata and above; it is recorded from Request up. A patch names nothing.
        let (request, request_meta) = match &self.request_body {
            Some(b) if facts.level >= Level::Request => {
                let v = decode(b);
                let meta = v.as_ref().filter(|_| !b.is_patch).and_then(meta_of);
                (v, meta)
            }
            Some(b) if !b.is_patch => (None, decode_meta(b)),
            _ => (None, None),
        };
        if let (Some(r), Some(meta)) = (object_ref.as_mut(), request_meta) {
            for (field, value) in [
                (&mut r.namespace, meta.namespace),
                (&mut r.name, meta.name),
                (&mut r.uid, meta.uid),
                (&mut r.resource_version, meta.resource_version),
            ] {
                if field.is_empty() {
                    *field = value;
                }
            }
        }
        let keep = |v: Option<Value>, level: Level| {
            v.filter(|_| facts.level >= level).map(|mut v| {
                if facts.omit_managed_fields {
                    strip_managed_fields(&mut v);
                }
                v
            })
        };
        let request_object = keep(request, Level::Request);
        let response = self.response_body.as_ref().and_then(decode);
        let response_status = self.code.map(|code| {
            let mut status = json!({"metadata": {}});
            // Upstream copies a Status answer's bounded fields at every level.
            let failure = self.status.as_ref().or_else(|| {
                response
                    .as_ref()
                    .filter(|r| r["kind"] == "Status" && r["apiVersion"] == "v1")
            });
            if let Some(s) = failure {
                for key in ["status", "message", "reason", "details"] {
                    if let Some(v) = s.get(key).filter(|v| !v.is_null()) {
                        status[key] = v.clone();
                    }
                }
            }
            status["code"] = json!(code);
            status
        });
        let response_object = keep(response, Level::RequestResponse);
        let mut annotations: Map<String, Value> = self
            .annotations
            .iter()
            .map(|(k, v)| (k.clone(), Value::String(v.clone())))
            .collect();
        let (request_object, response_object) = if truncated {
            annotations.insert(TRUNCATED_ANNOTATION.into(), Value::String("true".into()));
            (None, None)
        } else {
            (request_object, response_object)
        };
        let event = EventJson {
            kind: "Event",
            api_version: "audit.k8s.io/v1",
            level: facts.level.as_str(),
            audit_id: &facts.audit_id,
            stage: self.stage.as_str(),
            request_uri: &facts.request_uri,
            verb: &facts.verb,
            user: (&facts.user).into(),
            impersonated_user: self.impersonated_user.as_ref().map(UserJson::from),
            source_ips: &facts.source_ips,
            user_agent: facts.user_agent.as_deref(),
            object_ref,
            response_status,
            request_object,
            response_object,
            request_received_timestamp: micro_time(facts.received),
            stage_timestamp: micro_time(self.stage_timestamp),
            annotations,
        };
        let mut line = serde_json::to_vec(&event).unwrap_or_default();
        line.push(b'\n');
        line
    }
}

/// Events to test the writers with.
#[cfg(test)]
pub(crate) mod samples {
    use super::*;

    fn facts(level: Level) -> Arc<RequestFacts> {
        Arc::new(RequestFacts {
            audit_id: "id-1".into(),
            level,
            omit_managed_fields: true,
            request_uri: "/api/v1/namespaces/default/configmaps?dryRun=All".into(),
            verb: "create".into(),
            user: UserInfo::new("alice", ["devs".to_string()]),
            source_ips: vec!["127.0.0.1".into()],
            user_agent: Some("kubectl/v1.33.0".into()),
            object_ref: Some(ObjectRef {
                resource: "configmaps".into(),
                namespace: "default".into(),
                api_version: "v1".into(),
                ..Default::default()
            }),
            received: "2026-01-02T03:04:05.123456789Z".parse().unwrap(),
        })
    }

    pub(crate) fn event(level: Level) -> Event {
        Event {
            facts: facts(level),
            stage: Stage::ResponseComplete,
            stage_timestamp: "2026-01-02T03:04:05.2Z".parse().unwrap(),
            impersonated_user: None,
            code: Some(201),
            status: None,
            request_body: Some(RawBody {
                bytes: Bytes::from_static(
                    br#"{"metadata":{"name":"cm","managedFields":[{}]},"data":{"a":"b"}}"#,
                ),
                content_type: "application/json".into(),
                is_patch: false,
            }),
            response_body: Some(RawBody {
                bytes: Bytes::from_static(
                    br#"{"metadata":{"name":"cm","uid":"u1","resourceVersion":"7"},"data":{"a":"b"}}"#,
                ),
                content_type: "application/json".into(),
                is_patch: false,
            }),
            annotations: vec![("authorization.k8s.io/decision".into(), "allow".into())],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::samples::event;
    use super::*;

    fn line(e: &Event) -> Value {
        serde_json::from_slice(&e.to_json_line()).unwrap()
    }

    #[test]
    fn a_truncated_event_keeps_all_but_its_objects() {
        let e = event(Level::RequestResponse);
        let full = line(&e);
        assert_eq!(full["requestObject"]["data"]["a"], "b");
        let truncated: Value = serde_json::from_slice(&e.to_truncated_json_line()).unwrap();
        assert!(truncated.get("requestObject").is_none());
        assert!(truncated.get("responseObject").is_none());
        assert_eq!(truncated["annotations"][TRUNCATED_ANNOTATION], "true");
        assert_eq!(
            truncated["annotations"]["authorization.k8s.io/decision"],
            "allow"
        );
        assert_eq!(truncated["objectRef"], full["objectRef"]);
        assert_eq!(truncated["responseStatus"], full["responseStatus"]);
    }

    #[test]
    fn metadata_level_names_the_object_without_bodies() {
        let v = line(&event(Level::Metadata));
        assert_eq!(v["kind"], "Event");
        assert_eq!(v["apiVersion"], "audit.k8s.io/v1");
        assert_eq!(v["level"], "Metadata");
        assert_eq!(v["auditID"], "id-1");
        assert_eq!(v["stage"], "ResponseComplete");
        assert_eq!(v["user"], json!({"username": "alice", "groups": ["devs"]}));
        assert_eq!(v["objectRef"]["name"], "cm");
        assert_eq!(v["objectRef"]["namespace"], "default");
        assert!(v["objectRef"].get("apiGroup").is_none());
        assert_eq!(v["responseStatus"], json!({"metadata": {}, "code": 201}));
        assert!(v.get("requestObject").is_none() && v.get("responseObject").is_none());
        assert_eq!(v["requestReceivedTimestamp"], "2026-01-02T03:04:05.123456Z");
        assert_eq!(v["stageTimestamp"], "2026-01-02T03:04:05.200000Z");
        assert_eq!(v["annotations"]["authorization.k8s.io/decision"], "allow");
    }

    #[test]
    fn request_response_level_has_both_objects_without_managed_fields() {
        let v = line(&event(Level::RequestResponse));
        assert_eq!(v["requestObject"]["data"]["a"], "b");
        assert!(
            v["requestObject"]["metadata"]
                .get("managedFields")
                .is_none()
        );
        assert_eq!(v["responseObject"]["metadata"]["uid"], "u1");
        let v = line(&event(Level::Request));
        assert!(v.get("requestObject").is_some() && v.get("responseObject").is_none());
    }

    #[test]
    fn failures_carry_the_status_fields() {
        let mut e = event(Level::Metadata);
        e.code = Some(404);
        e.response_body = Some(RawBody {
            bytes: Bytes::from_static(
                br#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"configmaps \"x\" not found","reason":"NotFound","details":{"name":"x","kind":"configmaps"},"code":404}"#,
            ),
            content_type: "application/json".into(),
            is_patch: false,
        });
        let v = line(&e);
        assert_eq!(v["responseStatus"]["status"], "Failure");
        assert_eq!(v["responseStatus"]["reason"], "NotFound");
        assert_eq!(v["responseStatus"]["code"], 404);
        assert_eq!(v["responseStatus"]["details"]["name"], "x");
    }

    #[test]
    fn a_patch_is_recorded_as_sent_and_names_nothing() {
        let mut e = event(Level::Request);
        e.request_body = Some(RawBody {
            bytes: Bytes::from_static(br#"{"metadata":{"name":"other"}}"#),
            content_type: "application/merge-patch+json".into(),
            is_patch: true,
        });
        let v = line(&e);
        assert_eq!(v["requestObject"]["metadata"]["name"], "other");
        assert!(v["objectRef"].get("name").is_none());
    }
}
