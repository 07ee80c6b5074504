//! Where controllers send their Events (`ScalingReplicaSet`, `SuccessfulCreate`, ...).
//!
//! Controllers hold an `Arc<dyn EventSink>`; the manager plugs in the client's
//! events.k8s.io recorder. Tests use [`MemorySink`] to assert on events.

use k8s_openapi::api::core::v1::ObjectReference;
use parking_lot::Mutex;

/// `Normal` or `Warning`, as upstream's `v1.EventType*`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    Normal,
    Warning,
}

/// One event a controller emits.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    pub regarding: ObjectReference,
    pub type_: EventType,
    pub reason: String,
    pub action: String,
    pub note: String,
}

/// Receives events (upstream's `record.EventRecorder`).
pub trait EventSink: Send + Sync {
    fn publish(&self, event: Event);
}

/// Logs events through `tracing` only.
#[derive(Debug, Default)]
pub struct LogSink;

impl EventSink for LogSink {
    fn publish(&self, e: Event) {
        tracing::info!(
            kind = e.regarding.kind.as_deref().unwrap_or(""),
            namespace = e.regarding.namespace.as_deref().unwrap_or(""),
            name = e.regarding.name.as_deref().unwrap_or(""),
            reason = %e.reason,
            "{}",
            e.note
        );
    }
}

/// Keeps events in memory (tests).
#[derive(Debug, Default)]
pub struct MemorySink {
    pub events: Mutex<Vec<Event>>,
}

impl EventSink for MemorySink {
    fn publish(&self, e: Event) {
        self.events.lock().push(e);
    }
}

/// A reference to `obj` for the `regarding` field.
pub fn reference_to<K: kube::Resource<DynamicType = ()>>(obj: &K) -> ObjectReference {
    let m = obj.meta();
    ObjectReference {
        api_version: Some(K::api_version(&()).to_string()),
        kind: Some(K::kind(&()).to_string()),
        namespace: m.namespace.clone(),
        name: m.name.clone(),
        uid: m.uid.clone(),
        resource_version: m.resource_version.clone(),
        field_path: None,
    }
}

/// Emits one event about `obj`.
pub fn emit<K: kube::Resource<DynamicType = ()>>(
    sink: &dyn EventSink,
    obj: &K,
    type_: EventType,
    reason: &str,
    note: String,
) {
    sink.publish(Event {
        regarding: reference_to(obj),
        type_,
        reason: reason.to_string(),
        action: reason.to_string(),
        note,
    });
}

/// A reference from an apiVersion, kind and metadata.
pub fn reference(
    api_version: &str,
    kind: &str,
    meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
) -> ObjectReference {
    ObjectReference {
        api_version: Some(api_version.to_string()),
        kind: Some(kind.to_string()),
        namespace: meta.namespace.clone(),
        name: meta.name.clone(),
        uid: meta.uid.clone(),
        resource_version: meta.resource_version.clone(),
        field_path: None,
    }
}

/// Emits one event about the referenced object.
pub fn emit_ref(
    sink: &dyn EventSink,
    regarding: ObjectReference,
    type_: EventType,
    reason: &str,
    note: String,
) {
    sink.publish(Event {
        regarding,
        type_,
        reason: reason.to_string(),
        action: reason.to_string(),
        note,
    });
}

/// The client's events.k8s.io recorder is a sink.
impl EventSink for ferrokube_client::events::EventRecorder {
    fn publish(&self, e: Event) {
        let t = match e.type_ {
            EventType::Normal => ferrokube_client::events::EventType::Normal,
            EventType::Warning => ferrokube_client::events::EventType::Warning,
        };
        self.event(&e.regarding, None, t, &e.reason, &e.action, &e.note);
    }
}
