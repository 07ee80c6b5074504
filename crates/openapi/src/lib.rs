//! OpenAPI documents for every served built-in type, generated from the k8s-openapi
//! types (schemars) rather than written by hand:
//!
//! * [`swagger_v2`]: Swagger 2.0 as upstream's `/openapi/v2` (JSON), with
//!   [`swagger_v2_protobuf`] the same document as gnostic's `openapi.v2.Document`
//!   protobuf ([`V2_PROTOBUF_CONTENT_TYPE`]), which kubectl asks for and needs (client-go
//!   has no JSON fallback for v2: on 406 it tries `/swagger-2.0.0.pb-v1`).
//! * [`v3_index`] and [`v3_document`]: `/openapi/v3` discovery and the OpenAPI 3.0
//!   document of each group-version (`api/v1`, `apis/apps/v1`).
//! * [`Documents::build`]: everything at once, serialized, hashed and kept only
//!   gzip-compressed ([`Served`]), for the apiserver to serve as bytes: about a tenth of
//!   the resident memory of the JSON, and what gzip-accepting clients (kubectl) get as it
//!   is.
//!
//! Definitions carry upstream's names (`io.k8s.api.core.v1.Pod`), the
//! `x-kubernetes-group-version-kind` of top-level kinds, and the
//! `x-kubernetes-patch-strategy` / `x-kubernetes-patch-merge-key` /
//! `x-kubernetes-list-type` / `x-kubernetes-list-map-keys` extensions from
//! `ferrokube_apimachinery::patch::meta`; paths carry `x-kubernetes-action` and
//! `x-kubernetes-group-version-kind` per operation, so `kubectl apply`, `kubectl
//! explain` and kubectl's field-validation check work.
//!
//! Layer: pure, used by the apiserver. No IO, no clock; must not depend on storage,
//! registry, admission, apiserver or client crates.

mod custom;
mod definitions;
mod enums;
mod kinds;
mod merge;
mod paths;
pub mod proto;
mod v3;

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value, json};

pub use custom::{CustomResourceVersion, definition_name};
pub use merge::merge_v2;

/// The media type clients ask `/openapi/v2` for (in `Accept`) to get the protobuf
/// document.
pub const V2_PROTOBUF_CONTENT_TYPE: &str =
    "application/com.github.proto-openapi.spec.v2@v1.0+protobuf";

/// The `Content-Type` upstream answers the protobuf document with: the `@` of
/// [`V2_PROTOBUF_CONTENT_TYPE`] is not valid in a media type (Go's `mime` parser, and
/// so kubectl, rejects it), so upstream spells it with a dot. Both spellings are
/// accepted in `Accept`.
pub const V2_PROTOBUF_RESPONSE_CONTENT_TYPE: &str =
    "application/com.github.proto-openapi.spec.v2.v1.0+protobuf";

/// The Kubernetes version the documents describe (`info.version`): the release this
/// server reports.
const INFO_VERSION: &str = ferrokube_component_base::version::GIT_VERSION;

/// Definitions and per-group-version paths in Swagger 2.0 form, generated once and
/// shared by every document.
struct Model {
    definitions: Map<String, Value>,
    /// `(group-version path, paths)`, e.g. `("apis/apps/v1", {...})`, core first.
    group_versions: Vec<(String, Map<String, Value>)>,
}

impl Model {
    fn build() -> Model {
        let definitions = definitions::build();
        let group_versions = definitions::group_versions()
            .into_iter()
            .map(|(g, v)| (gv_path(g, v), paths::build_for(g, v)))
            .collect();
        Model {
            definitions,
            group_versions,
        }
    }

    fn swagger_v2(&self) -> Value {
        let mut all_paths = Map::new();
        for (_, paths) in &self.group_versions {
            all_paths.extend(paths.clone());
        }
        json!({
            "swagger": "2.0",
            "info": {"title": "Kubernetes", "version": INFO_VERSION},
            "paths": all_paths,
            "definitions": self.definitions,
            "securityDefinitions": {
                "BearerToken": {
                    "description": "Bearer Token authentication",
                    "in": "header",
                    "name": "authorization",
                    "type": "apiKey",
                },
            },
            "security": [{"BearerToken": []}],
        })
    }

    fn v3_document(&self, group_version: &str) -> Option<Value> {
        let (_, v2_paths) = self
            .group_versions
            .iter()
            .find(|(gv, _)| gv == group_version)?;
        Some(v3_document_of(v2_paths, &self.definitions, &Map::new()))
    }
}

/// The OpenAPI 3.0 document of one group-version's Swagger 2.0 `v2_paths`, with the
/// schemas they reach: from `v3_definitions` (already OpenAPI 3) when there, else
/// converted from `definitions`.
fn v3_document_of(
    v2_paths: &Map<String, Value>,
    definitions: &Map<String, Value>,
    v3_definitions: &Map<String, Value>,
) -> Value {
    let mut schemas = Map::new();
    for name in v3::reachable(v2_paths, definitions) {
        if let Some(def) = v3_definitions.get(&name) {
            schemas.insert(name, def.clone());
        } else if let Some(def) = definitions.get(&name) {
            let mut def = def.clone();
            v3::rewrite_refs(&mut def);
            schemas.insert(name, def);
        }
    }
    let mut paths = Value::Object(v3::paths(v2_paths));
    v3::rewrite_refs(&mut paths);
    json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": INFO_VERSION},
        "paths": paths,
        "components": {
            "schemas": schemas,
            "securitySchemes": {
                "BearerToken": {
                    "description": "Bearer Token authentication",
                    "in": "header",
                    "name": "authorization",
                    "type": "apiKey",
                },
            },
        },
        "security": [{"BearerToken": []}],
    })
}

/// The built-in APIs not served (turned off by `--runtime-config`, or a subresource
/// the server's configuration cannot serve), left out by [`Documents::without`].
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TurnedOff {
    /// Whole group-versions, keyed as [`gv_path`].
    pub group_versions: Vec<String>,
    /// Resources of group-versions otherwise served: the group-version (as
    /// [`gv_path`]) and the resource's plural.
    pub resources: Vec<(String, String)>,
    /// Subresources of resources otherwise served: the group-version (as
    /// [`gv_path`]), the resource's plural and the subresource.
    pub subresources: Vec<(String, String, String)>,
}

impl TurnedOff {
    /// Whether an API path (`/apis/apps/v1/namespaces/{namespace}/daemonsets/{name}`)
    /// is one of what is turned off: under a group-version, or a resource's
    /// collection, item, subresource or watch path, namespaced or not.
    fn covers(&self, path: &str) -> bool {
        let Some(path) = path.strip_prefix('/') else {
            return false;
        };
        let under = |gv: &str| path.strip_prefix(gv).and_then(|p| p.strip_prefix('/'));
        // The path's segments from the resource on.
        let resource_path = |gv: &str| {
            under(gv).map(|rest| {
                let rest = rest.strip_prefix("watch/").unwrap_or(rest);
                let rest = rest.strip_prefix("namespaces/{namespace}/").unwrap_or(rest);
                rest.split('/').collect::<Vec<_>>()
            })
        };
        self.group_versions.iter().any(|gv| under(gv).is_some())
            || self
                .resources
                .iter()
                .any(|(gv, resource)| resource_path(gv).is_some_and(|segs| segs[0] == resource))
            || self.subresources.iter().any(|(gv, resource, sub)| {
                resource_path(gv)
                    .is_some_and(|segs| segs.len() > 2 && segs[0] == resource && segs[2] == sub)
            })
    }

    fn is_empty(&self) -> bool {
        self.group_versions.is_empty() && self.resources.is_empty() && self.subresources.is_empty()
    }
}

/// `api/v1` for the core group, `apis/<group>/<version>` otherwise: the key of a
/// group-version under `/openapi/v3/`.
pub fn gv_path(group: &str, version: &str) -> String {
    if group.is_empty() {
        format!("api/{version}")
    } else {
        format!("apis/{group}/{version}")
    }
}

/// The Swagger 2.0 document served at `/openapi/v2` (JSON).
pub fn swagger_v2() -> Value {
    Model::build().swagger_v2()
}

/// The `/openapi/v2` document as gnostic protobuf ([`V2_PROTOBUF_CONTENT_TYPE`]).
pub fn swagger_v2_protobuf() -> Vec<u8> {
    proto::encode(&swagger_v2())
}

/// Every group-version with a v3 document (`api/v1`, `apis/apps/v1`, ...).
pub fn v3_group_versions() -> Vec<String> {
    definitions::group_versions()
        .into_iter()
        .map(|(g, v)| gv_path(g, v))
        .collect()
}

/// The OpenAPI 3.0 document of one group-version (`api/v1`, `apis/apps/v1`), or
/// `None` when it is not served.
pub fn v3_document(group_version: &str) -> Option<Value> {
    Model::build().v3_document(group_version)
}

/// The `/openapi/v3` discovery document: for each group-version in `hashes` (keyed as
/// [`v3_group_versions`]), its `serverRelativeURL` with `?hash=<hash>`.
pub fn v3_index(hashes: &BTreeMap<String, String>) -> Value {
    let mut paths = Map::new();
    for (gv, hash) in hashes {
        paths.insert(
            gv.clone(),
            json!({"serverRelativeURL": format!("/openapi/v3/{gv}?hash={hash}")}),
        );
    }
    json!({ "paths": paths })
}

/// The etag-like hash upstream serves documents under: upper-case hex SHA-512 of the
/// bytes.
pub fn content_hash(bytes: &[u8]) -> String {
    let digest = ring::digest::digest(&ring::digest::SHA512, bytes);
    digest.as_ref().iter().map(|b| format!("{b:02X}")).collect()
}

/// One serialized document, held only gzip-compressed, with its hash.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Served {
    /// The document as a gzip stream: what is kept resident, and the body of a
    /// response to a client that accepts gzip (kubectl does).
    pub gzip: bytes::Bytes,
    /// The length of the uncompressed document (a `Content-Length` when it is served
    /// decompressed).
    pub len: u64,
    /// [`content_hash`] of the uncompressed document (for `ETag` and the v3 `?hash=`).
    pub hash: String,
}

/// The gzip level the documents are compressed at, once, when built: the best ratio,
/// since the bytes stay resident for the server's lifetime and the build runs once.
const GZIP_LEVEL: u32 = 9;

impl Served {
    /// `bytes` (a whole document) hashed and compressed; the uncompressed copy is
    /// dropped.
    pub fn new(bytes: Vec<u8>) -> Served {
        use std::io::Write;
        let hash = content_hash(&bytes);
        let mut encoder = flate2::write::GzEncoder::new(
            Vec::with_capacity(bytes.len() / 8),
            flate2::Compression::new(GZIP_LEVEL),
        );
        // Writing into a Vec cannot fail.
        let gzip = encoder
            .write_all(&bytes)
            .and_then(|()| encoder.finish())
            .unwrap_or_default();
        Served {
            gzip: bytes::Bytes::from(gzip),
            len: bytes.len() as u64,
            hash,
        }
    }

    /// The uncompressed document.
    pub fn decompressed(&self) -> std::io::Result<Vec<u8>> {
        use std::io::Read;
        let mut out = Vec::with_capacity(usize::try_from(self.len).unwrap_or(0));
        flate2::read::GzDecoder::new(&self.gzip[..]).read_to_end(&mut out)?;
        Ok(out)
    }

    /// The document parsed, or `None` when it is not JSON.
    pub fn json(&self) -> Option<Value> {
        serde_json::from_slice(&self.decompressed().ok()?).ok()
    }
}

/// Every OpenAPI document, serialized and compressed once: build on first use, serve
/// the bytes.
#[derive(Clone, Debug)]
pub struct Documents {
    /// `/openapi/v2` as JSON.
    pub v2_json: Served,
    /// `/openapi/v2` as gnostic protobuf.
    pub v2_protobuf: Served,
    /// `/openapi/v3` (the index), as JSON.
    pub v3_index: Served,
    /// `/openapi/v3/<gv>` documents as JSON, keyed as [`v3_group_versions`].
    pub v3: BTreeMap<String, Served>,
}

impl Documents {
    /// Generates, serializes and compresses every document; each document's
    /// uncompressed form is dropped as soon as it is compressed, and the model once
    /// every document is built.
    pub fn build() -> Documents {
        let model = Model::build();
        let v2 = model.swagger_v2();
        let v2_protobuf = Served::new(proto::encode(&v2));
        let v2_json = Served::new(serde_json::to_vec(&v2).unwrap_or_default());
        drop(v2);
        let mut v3 = BTreeMap::new();
        for (gv, _) in &model.group_versions {
            if let Some(doc) = model.v3_document(gv) {
                v3.insert(
                    gv.clone(),
                    Served::new(serde_json::to_vec(&doc).unwrap_or_default()),
                );
            }
        }
        let v3_index = served_index(&v3);
        Documents {
            v2_json,
            v2_protobuf,
            v3_index,
            v3,
        }
    }

    /// These (built-in) documents with the served custom resources added, as
    /// upstream's apiextensions-apiserver merges them: their definitions and paths in
    /// `/openapi/v2`, a v3 document per custom group-version, listed in the index. The
    /// built-in v3 documents are reused as they are; only `/openapi/v2`, the index and
    /// the custom group-versions' documents are made again.
    pub fn with_custom(&self, resources: &[CustomResourceVersion<'_>]) -> Documents {
        if resources.is_empty() {
            return self.clone();
        }
        let custom = custom::CustomModel::build(resources);
        let mut v2 = self.v2_json.json().unwrap_or_else(|| json!({}));
        if !v2["definitions"].is_object() {
            v2["definitions"] = json!({});
        }
        if !v2["paths"].is_object() {
            v2["paths"] = json!({});
        }
        if let Value::Object(defs) = &mut v2["definitions"] {
            defs.extend(custom.v2_definitions.clone());
        }
        let mut v3 = self.v3.clone();
        let empty = Map::new();
        let definitions = v2["definitions"].as_object().unwrap_or(&empty);
        let built_in_paths = v2["paths"].as_object().unwrap_or(&empty);
        for (gv, paths) in &custom.group_versions {
            // A custom group-version a built-in one shares (a `*.k8s.io` group).
            let prefix = format!("/{gv}/");
            let mut gv_paths: Map<String, Value> = built_in_paths
                .iter()
                .filter(|(k, _)| k.starts_with(&prefix))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            gv_paths.extend(paths.clone());
            let doc = v3_document_of(&gv_paths, definitions, &custom.v3_definitions);
            v3.insert(
                gv.clone(),
                Served::new(serde_json::to_vec(&doc).unwrap_or_default()),
            );
        }
        if let Value::Object(all) = &mut v2["paths"] {
            for paths in custom.group_versions.into_values() {
                all.extend(paths);
            }
        }
        let v2_protobuf = Served::new(proto::encode(&v2));
        let v2_json = Served::new(serde_json::to_vec(&v2).unwrap_or_default());
        drop(v2);
        let v3_index = served_index(&v3);
        Documents {
            v2_json,
            v2_protobuf,
            v3_index,
            v3,
        }
    }

    /// These documents without what is not served (what `--runtime-config` turns
    /// off, a subresource the configuration leaves out): a group-version loses its v3
    /// document, its index entry and its paths in `/openapi/v2`; a resource or
    /// subresource its paths in both. Definitions stay: other kinds may
    /// refer to them.
    pub fn without(&self, off: &TurnedOff) -> Documents {
        if off.is_empty() {
            return self.clone();
        }
        let Some(mut v2) = self.v2_json.json() else {
            return self.clone();
        };
        let removed = |path: &str| off.covers(path);
        if let Value::Object(paths) = &mut v2["paths"] {
            paths.retain(|path, _| !removed(path));
        }
        let mut v3 = self.v3.clone();
        v3.retain(|gv, _| !off.group_versions.contains(gv));
        let touched: BTreeSet<&String> = (off.resources.iter().map(|(gv, _)| gv))
            .chain(off.subresources.iter().map(|(gv, _, _)| gv))
            .collect();
        for gv in touched {
            let Some(mut doc) = v3.get(gv).and_then(Served::json) else {
                continue;
            };
            if let Value::Object(paths) = &mut doc["paths"] {
                paths.retain(|path, _| !removed(path));
            }
            v3.insert(
                gv.clone(),
                Served::new(serde_json::to_vec(&doc).unwrap_or_default()),
            );
        }
        Documents {
            v2_protobuf: Served::new(proto::encode(&v2)),
            v2_json: Served::new(serde_json::to_vec(&v2).unwrap_or_default()),
            v3_index: served_index(&v3),
            v3,
        }
    }

    /// These documents with `extra` v3 documents added (an extension apiserver's,
    /// keyed as [`gv_path`]; one replaces a document of the same key) and listed in
    /// the index. Nothing is serialized again but the index; the other documents'
    /// bytes are shared.
    pub fn with_v3_documents(&self, extra: &BTreeMap<String, Served>) -> Documents {
        if extra.is_empty() {
            return self.clone();
        }
        let mut v3 = self.v3.clone();
        v3.extend(extra.iter().map(|(k, s)| (k.clone(), s.clone())));
        let v3_index = served_index(&v3);
        Documents {
            v2_json: self.v2_json.clone(),
            v2_protobuf: self.v2_protobuf.clone(),
            v3_index,
            v3,
        }
    }

    /// These documents with extension apiservers' Swagger 2.0 documents (`remote`)
    /// merged into `/openapi/v2` ([`merge_v2`], in order: an earlier one's paths and
    /// definitions are kept). Only the v2 documents are made again; one that is not
    /// JSON is skipped.
    pub fn with_v2_documents(&self, remote: &[Served]) -> Documents {
        if remote.is_empty() {
            return self.clone();
        }
        let Some(mut v2) = self.v2_json.json() else {
            return self.clone();
        };
        for r in remote {
            if let Some(doc) = r.json() {
                merge_v2(&mut v2, &doc);
            }
        }
        let v2_protobuf = Served::new(proto::encode(&v2));
        let v2_json = Served::new(serde_json::to_vec(&v2).unwrap_or_default());
        Documents {
            v2_json,
            v2_protobuf,
            v3_index: self.v3_index.clone(),
            v3: self.v3.clone(),
        }
    }

    /// The v3 document of `group_version` (`api/v1`, `apis/apps/v1`).
    pub fn v3(&self, group_version: &str) -> Option<&Served> {
        self.v3.get(group_version)
    }
}

/// The served `/openapi/v3` index of `v3`.
fn served_index(v3: &BTreeMap<String, Served>) -> Served {
    let hashes: BTreeMap<String, String> = v3
        .iter()
        .map(|(k, s)| (k.clone(), s.hash.clone()))
        .collect();
    Served::new(serde_json::to_vec(&v3_index(&hashes)).unwrap_or_default())
}

#[cfg(test)]
mod tests;
