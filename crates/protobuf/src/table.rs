//! The shape of the generated field table (`schema.rs`) and lookups into it.

use crate::schema::{GROUP_VERSIONS, MESSAGES};

/// The field is `repeated` (a JSON array).
pub const REPEATED: u8 = 1;
/// The scalar field is a Go pointer: a zero value on the wire was set explicitly and is
/// kept (`replicas: 0`).
pub const NULLABLE: u8 = 2;
/// The scalar field is a Go non-pointer with `omitempty`: Go writes it to the wire even
/// when zero, and its JSON leaves the zero out, so the decoder drops it.
pub const OMITEMPTY: u8 = 8;
/// The field is a Go embedded struct (`json:",inline"`): its message's fields live in
/// the parent's JSON object (`ConfigMapKeySelector.localObjectReference` -> `name`).
pub const INLINE: u8 = 4;
/// The field is a Go non-pointer `metav1.Time` or `MicroTime`: Go's JSON encoder writes
/// `null` when it is unset, `omitempty` or not.
pub const UNSET_IS_NULL: u8 = 16;
/// The field is a Go non-pointer struct: Go's JSON encoder writes the struct's zero
/// value when it is unset (`status: {}`, `resources: {}`).
pub const ZERO_IS_STRUCT: u8 = 32;
/// The list or map is required by k8s-openapi's type, which writes it even when empty
/// (`limits: []`); a struct's zero value then has it empty.
pub const WRITTEN_EMPTY: u8 = 64;

/// Wire kind and JSON form of a field. Map keys are always strings in Kubernetes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// `string`.
    S,
    /// `bytes`, base64 in JSON.
    B,
    Bool,
    I32,
    I64,
    F64,
    /// A message: index into [`MESSAGES`].
    M(u16),
    /// `map<string, string>`.
    MapS,
    /// `map<string, bytes>`.
    MapB,
    /// `map<string, message>`.
    MapM(u16),
}

#[derive(Clone, Copy, Debug)]
pub struct Field {
    pub tag: u32,
    /// The JSON name; empty for [`INLINE`] fields.
    pub json: &'static str,
    pub kind: Kind,
    pub flags: u8,
}

impl Field {
    pub fn repeated(&self) -> bool {
        self.flags & REPEATED != 0
    }
    pub fn omitempty(&self) -> bool {
        self.flags & OMITEMPTY != 0
    }
    pub fn inline(&self) -> bool {
        self.flags & INLINE != 0
    }
    pub fn nullable(&self) -> bool {
        self.flags & NULLABLE != 0
    }
    pub fn unset_is_null(&self) -> bool {
        self.flags & UNSET_IS_NULL != 0
    }
    pub fn zero_is_struct(&self) -> bool {
        self.flags & ZERO_IS_STRUCT != 0
    }
    pub fn written_empty(&self) -> bool {
        self.flags & WRITTEN_EMPTY != 0
    }
}

pub const fn f(tag: u32, json: &'static str, kind: Kind, flags: u8) -> Field {
    Field {
        tag,
        json,
        kind,
        flags,
    }
}

#[derive(Debug)]
pub struct Message {
    /// Full proto name, e.g. `k8s.io.api.core.v1.Pod`.
    pub name: &'static str,
    /// go-to-protobuf's wrapper of a named slice type (`type Verbs []string`): one
    /// `repeated items = 1` whose JSON is the bare array.
    pub array: bool,
    /// Sorted by tag.
    pub fields: &'static [Field],
}

impl Message {
    pub fn field(&self, tag: u32) -> Option<&'static Field> {
        self.fields
            .binary_search_by_key(&tag, |f| f.tag)
            .ok()
            .map(|i| &self.fields[i])
    }
}

/// Messages whose JSON form is not an object of their fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Special {
    /// `resource.Quantity {string = 1}` <-> `"100m"`.
    Quantity,
    /// `intstr.IntOrString {type = 1, intVal = 2, strVal = 3}` <-> `8080` / `"http"`.
    IntOrString,
    /// `metav1.Time {seconds = 1, nanos = 2}` <-> `"2006-01-02T15:04:05Z"`.
    Time,
    /// `metav1.MicroTime` <-> `"2006-01-02T15:04:05.000000Z"`.
    MicroTime,
    /// `metav1.FieldsV1 {raw = 1}` <-> the raw JSON.
    FieldsV1,
    /// `runtime.RawExtension {raw = 1}` <-> the raw JSON (or a nested protobuf object).
    RawExtension,
}

pub const META_V1: &str = "k8s.io.apimachinery.pkg.apis.meta.v1";

pub fn special(index: u16) -> Option<Special> {
    Some(match message(index).name {
        "k8s.io.apimachinery.pkg.api.resource.Quantity" => Special::Quantity,
        "k8s.io.apimachinery.pkg.util.intstr.IntOrString" => Special::IntOrString,
        "k8s.io.apimachinery.pkg.apis.meta.v1.Time" => Special::Time,
        "k8s.io.apimachinery.pkg.apis.meta.v1.MicroTime" => Special::MicroTime,
        "k8s.io.apimachinery.pkg.apis.meta.v1.FieldsV1" => Special::FieldsV1,
        "k8s.io.apimachinery.pkg.runtime.RawExtension" => Special::RawExtension,
        _ => return None,
    })
}

pub fn message(index: u16) -> &'static Message {
    &MESSAGES[usize::from(index)]
}

/// The index of a message by full proto name.
pub fn index_of(name: &str) -> Option<u16> {
    MESSAGES
        .binary_search_by(|m| m.name.cmp(name))
        .ok()
        .and_then(|i| u16::try_from(i).ok())
}

/// Kinds of meta/v1 every group-version serves (`metav1.AddToGroupVersion`), so e.g.
/// `apps/v1 DeleteOptions` is `meta.v1.DeleteOptions`.
const META_KINDS: &[&str] = &[
    "CreateOptions",
    "DeleteOptions",
    "GetOptions",
    "ListOptions",
    "PatchOptions",
    "Status",
    "UpdateOptions",
    "WatchEvent",
];

/// The message of an `(apiVersion, kind)`: a kind of the group-version's package, or a
/// meta/v1 kind every group-version serves; `meta.k8s.io/v1` names meta/v1 directly.
pub fn message_for(api_version: &str, kind: &str) -> Option<u16> {
    if kind.is_empty() || !kind.bytes().all(|b| b.is_ascii_alphanumeric()) {
        return None;
    }
    if api_version == "meta.k8s.io/v1" {
        return index_of(&format!("{META_V1}.{kind}"));
    }
    let package = GROUP_VERSIONS
        .iter()
        .find(|(av, _)| *av == api_version)
        .map(|(_, p)| *p)?;
    index_of(&format!("{package}.{kind}")).or_else(|| {
        META_KINDS
            .contains(&kind)
            .then(|| index_of(&format!("{META_V1}.{kind}")))
            .flatten()
    })
}
