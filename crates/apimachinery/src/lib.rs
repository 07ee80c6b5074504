//! Ferrokube API machinery: the pure, shared building blocks that the registry, the
//! apiserver and the client side all need to agree on with upstream Kubernetes
//! (`k8s.io/apimachinery`).
//!
//! * [`labels`] and [`fields`]: label and field selectors (parse, print, match).
//! * [`duration`]: durations printed as Go prints them.
//! * [`depth`]: how deeply JSON nests, measured with a bounded stack.
//! * [`document_order`]: where fields stand in a JSON document (strict decoding's
//!   problems in the body's order).
//! * [`errors`]: field errors (`field.Error`) and API errors (`metav1.Status`) with
//!   upstream's codes, reasons and message texts.
//! * [`validation`]: name, label, annotation and `ObjectMeta` validation helpers.
//! * [`resource_version`]: resourceVersion parsing and list-option validation.
//! * [`quantity`]: resource quantities: exact values and canonical strings.
//! * [`quota`]: ResourceQuota accounting of built-in objects (usage, scopes, sums).
//! * [`patch`]: JSON patch (RFC 6902), JSON merge patch (RFC 7386) and strategic
//!   merge patch; [`patch::meta`] holds the built-in types' patch strategies, merge
//!   keys, list types and field type graph (v1.33), also meant for OpenAPI output.
//! * [`request_header`]: the front-proxy headers' settings and the user they name.
//! * [`managedfields`]: server-side apply over the same tables: field sets
//!   (`FieldsV1`), merge, prune, conflicts, and ownership taken by other writes.
//!
//! Layer: below `registry`, `apiserver` and `client`, next to `api`. This crate does
//! no IO at all: no sockets, no files, no tokio, no clock (time is passed in). It must
//! never depend on `storage*`, `registry`, `admission` or `apiserver`.

pub mod depth;
pub mod document_order;
pub mod duration;
pub mod errors;
pub mod fields;
pub mod labels;
pub mod managedfields;
pub mod patch;
pub mod pretty;
pub mod quantity;
pub mod quota;
pub mod request_header;
pub mod resource_version;
pub mod validation;

pub use errors::{ApiError, FieldError, FieldErrorKind, FieldPath};
pub use fields::FieldSelector;
pub use labels::{Selector, SelectorError};
pub use patch::{BuiltinPatchSchema, PatchError, PatchSchema, Strategy};
