//! CustomResourceDefinitions (`apiextensions.k8s.io/v1`), the pure part.
//!
//! - [`crd`]: validation of a CustomResourceDefinition on create and update (names,
//!   versions, scope, subresources, and that every schema is structural), with
//!   upstream's field paths and messages.
//! - [`schema`]: a custom resource against its version's structural schema:
//!   validation (types, formats, bounds, enums, list types, CEL rules), pruning of
//!   unknown fields and defaulting, as upstream's apiextensions-apiserver does.
//! - [`printer`]: `additionalPrinterColumns` (JSONPath cells, types, formats) for the
//!   Table form of custom resources.
//!
//! Layer: beside `validation`; below `registry` and `apiserver`. No IO, no storage,
//! no HTTP; types are k8s-openapi's.

pub mod crd;
pub mod printer;
pub mod schema;
