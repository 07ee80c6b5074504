//! Content negotiation and response encoding: JSON, YAML, `as=Table` (rows from
//! `ferrokube_api::printers`, the one printer implementation, with `includeObject`),
//! `as=PartialObjectMetadata(List)`, and Kubernetes protobuf
//! (`application/vnd.kubernetes.protobuf`, through `ferrokube_protobuf`) for built-in
//! kinds and partial metadata. JSON lists are written from each object's shared
//! serialization ([`CachedObject::json`]) and streamed ([`ListBody`]) without building
//! the whole list as one value or one buffer.

use std::borrow::Cow;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::{Bytes, BytesMut};
use ferrokube_api::printers;
use ferrokube_api::resources::ResourceInfo;
use ferrokube_apiextensions::printer::PrinterColumns;
use ferrokube_apimachinery::errors::ApiError;
use ferrokube_registry::cache::CachedObject;
use hyper::body::{Frame, SizeHint};
use serde_json::{Value, json};

/// What the client asked for in `Accept`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    Json,
    Yaml,
    /// Kubernetes protobuf: built-in kinds only (a custom resource has no message).
    Protobuf,
    /// A Table, in JSON or YAML (upstream has no protobuf Table).
    Table(IncludeObject, MetaVersion, Wire),
    PartialMetadata(Wire, MetaVersion),
}

/// The `meta.k8s.io` version a transformed answer (a Table, partial metadata) is
/// written in: upstream serves `v1beta1` beside `v1`, for clients older than `v1`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum MetaVersion {
    #[default]
    V1,
    V1beta1,
}

impl MetaVersion {
    /// The version a media range's `g` and `v` parameters name, if one of these.
    fn of(m: &MediaType) -> Option<MetaVersion> {
        match (m.param("g"), m.param("v")) {
            (Some("meta.k8s.io"), Some("v1")) => Some(MetaVersion::V1),
            (Some("meta.k8s.io"), Some("v1beta1")) => Some(MetaVersion::V1beta1),
            _ => None,
        }
    }

    pub fn api_version(self) -> &'static str {
        match self {
            MetaVersion::V1 => "meta.k8s.io/v1",
            MetaVersion::V1beta1 => "meta.k8s.io/v1beta1",
        }
    }
}

/// The encoding an answer is written in. A transformed answer (a Table, partial
/// metadata) takes any encoding its `meta.k8s.io` type has, whatever the resource:
/// `meta.k8s.io/v1` partial metadata has protobuf messages, so custom resources'
/// partial metadata is served in protobuf too (client-go's metadata informers ask for
/// it so).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wire {
    Json,
    Yaml,
    Protobuf,
}

impl Wire {
    /// The encoding a media range names, if one this server writes.
    fn of(m: &MediaType) -> Option<Wire> {
        match m.essence.as_str() {
            "application/json" | "*/*" | "application/*" => Some(Wire::Json),
            "application/yaml" => Some(Wire::Yaml),
            ferrokube_protobuf::MEDIA_TYPE => Some(Wire::Protobuf),
            _ => None,
        }
    }

    /// Its media type, which is also a transformed answer's `Content-Type`: upstream
    /// writes the serializer's media type, without the `as`, `g` and `v` asked for.
    pub fn media_type(self) -> &'static str {
        match self {
            Wire::Json => "application/json",
            Wire::Yaml => "application/yaml",
            Wire::Protobuf => ferrokube_protobuf::MEDIA_TYPE,
        }
    }
}

/// `includeObject` of a Table request: what each row's `object` holds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum IncludeObject {
    None,
    /// A `PartialObjectMetadata` (upstream's default).
    #[default]
    Metadata,
    Object,
}

impl IncludeObject {
    pub fn parse(v: Option<&str>) -> Result<IncludeObject, ApiError> {
        match v {
            None | Some("") | Some("Metadata") => Ok(IncludeObject::Metadata),
            Some("None") => Ok(IncludeObject::None),
            Some("Object") => Ok(IncludeObject::Object),
            Some(o) => Err(ApiError::bad_request(format!(
                "includeObject: Unsupported value: {o:?}: supported values: \"Metadata\", \"None\", \"Object\""
            ))),
        }
    }
}

/// One media range of an `Accept` header.
#[derive(Debug, Clone)]
pub struct MediaType {
    pub essence: String,
    pub params: Vec<(String, String)>,
}

impl MediaType {
    pub fn param(&self, k: &str) -> Option<&str> {
        self.params
            .iter()
            .find(|(n, _)| n == k)
            .map(|(_, v)| v.as_str())
    }
}

pub fn parse_accept(header: &str) -> Vec<MediaType> {
    header
        .split(',')
        .filter_map(|part| {
            let mut it = part.split(';');
            let essence = it.next()?.trim().to_ascii_lowercase();
            if essence.is_empty() {
                return None;
            }
            let params = it
                .filter_map(|p| {
                    let (k, v) = p.split_once('=')?;
                    Some((k.trim().to_string(), v.trim().trim_matches('"').to_string()))
                })
                .collect();
            Some(MediaType { essence, params })
        })
        .collect()
}

/// Picks the first acceptable target in the client's order. `protobuf`: the resource's
/// objects have protobuf messages (a built-in kind); otherwise protobuf is acceptable
/// only for partial metadata, as upstream's custom resource handler (its
/// `StandardSerializers` leave protobuf out of answers that are not transformed).
pub fn negotiate(accept: Option<&str>, protobuf: bool) -> Result<Target, ApiError> {
    let Some(accept) = accept.filter(|a| !a.trim().is_empty()) else {
        return Ok(Target::Json);
    };
    for m in parse_accept(accept) {
        let wire = Wire::of(&m);
        // Upstream's `AllowsMediaTypeTransform`: Tables in JSON and YAML, partial
        // metadata in every encoding (`v1beta1`'s protobuf list message, whose field
        // numbers differ from `v1`'s, is not offered here).
        match (m.param("as"), MetaVersion::of(&m), wire) {
            (Some("Table"), Some(version), Some(w @ (Wire::Json | Wire::Yaml))) => {
                return Ok(Target::Table(IncludeObject::Metadata, version, w));
            }
            (
                Some("PartialObjectMetadata" | "PartialObjectMetadataList"),
                Some(version),
                Some(w),
            ) if !(w == Wire::Protobuf && version == MetaVersion::V1beta1) => {
                return Ok(Target::PartialMetadata(w, version));
            }
            (Some(_), _, _) => continue,
            (None, _, _) => {}
        }
        match wire {
            Some(Wire::Json) => return Ok(Target::Json),
            Some(Wire::Yaml) => return Ok(Target::Yaml),
            Some(Wire::Protobuf) if protobuf => return Ok(Target::Protobuf),
            _ => {}
        }
    }
    Err(not_acceptable())
}

/// The 406 of an `Accept` this server cannot answer: it names every served media type,
/// protobuf for a custom resource too (upstream's handler's serializers have it, for
/// partial metadata).
pub fn not_acceptable() -> ApiError {
    ApiError::not_acceptable(&[
        "application/json",
        "application/yaml",
        ferrokube_protobuf::MEDIA_TYPE,
    ])
}

/// The form an error is answered in: the first of JSON, YAML and protobuf the
/// client's `Accept` names, as upstream negotiates an error's Status (any kind's
/// endpoint has it in every form). A range asking for a transformed answer (`as=Table`)
/// is passed over, and with none of them named the Status is JSON.
pub fn error_form(accept: Option<&str>) -> Target {
    let Some(accept) = accept else {
        return Target::Json;
    };
    parse_accept(accept)
        .iter()
        .filter(|m| m.param("as").is_none())
        .find_map(|m| match Wire::of(m)? {
            Wire::Json => Some(Target::Json),
            Wire::Yaml => Some(Target::Yaml),
            Wire::Protobuf => Some(Target::Protobuf),
        })
        .unwrap_or(Target::Json)
}

/// A media type without its parameters: `application/json` of
/// `application/json; charset=utf-8`.
pub fn media_essence(content_type: &str) -> &str {
    content_type.split(';').next().unwrap_or("").trim()
}

/// The encoding of an answer in `t`.
pub fn wire(t: Target) -> Wire {
    match t {
        Target::Json => Wire::Json,
        Target::Yaml => Wire::Yaml,
        Target::Protobuf => Wire::Protobuf,
        Target::Table(_, _, w) | Target::PartialMetadata(w, _) => w,
    }
}

/// The media type of an answer in `t`.
pub fn content_type(t: Target) -> &'static str {
    wire(t).media_type()
}

/// Whether `t` is answered in protobuf.
pub fn is_protobuf(t: Target) -> bool {
    wire(t) == Wire::Protobuf
}

/// `v` (an object already in the form `t` asks for, see [`object`]) encoded for `t`,
/// and the target it was encoded for: an object protobuf has no message for (not
/// expected of a served built-in kind) goes out as JSON rather than not at all, and
/// the client reads the answer by its `Content-Type`.
pub fn encode(t: Target, v: &Value) -> (Target, Bytes) {
    match wire(t) {
        Wire::Yaml => (
            t,
            Bytes::from(serde_yaml_ng::to_string(v).unwrap_or_default()),
        ),
        Wire::Protobuf => match ferrokube_protobuf::encode_object(v) {
            Ok(bytes) => (t, Bytes::from(bytes)),
            Err(e) => {
                tracing::warn!(error = %e, kind = ?v.get("kind"), "answering in JSON: no protobuf form");
                let json = match t {
                    Target::PartialMetadata(_, version) => {
                        Target::PartialMetadata(Wire::Json, version)
                    }
                    _ => Target::Json,
                };
                (json, Bytes::from(serde_json::to_vec(v).unwrap_or_default()))
            }
        },
        Wire::Json => (t, Bytes::from(serde_json::to_vec(v).unwrap_or_default())),
    }
}

/// The `Status` body of an error.
pub fn status_value(e: &ApiError) -> Value {
    let mut v = serde_json::to_value(e.to_status()).unwrap_or_else(|_| json!({}));
    if let Some(o) = v.as_object_mut() {
        o.insert("kind".into(), json!("Status"));
        o.insert("apiVersion".into(), json!("v1"));
        o.entry("metadata").or_insert_with(|| json!({}));
    }
    v
}

pub fn partial_metadata(obj: &Value, version: MetaVersion) -> Value {
    json!({
        "kind": "PartialObjectMetadata",
        "apiVersion": version.api_version(),
        "metadata": obj.get("metadata").cloned().unwrap_or_else(|| json!({})),
    })
}

/// What a resource's Table is printed with: the built-in printers by kind, or a custom
/// resource version's `additionalPrinterColumns`.
#[derive(Clone, Copy)]
pub struct Printed<'a> {
    pub info: &'a ResourceInfo,
    pub columns: Option<&'a PrinterColumns>,
}

impl<'a> From<&'a ResourceInfo> for Printed<'a> {
    fn from(info: &'a ResourceInfo) -> Self {
        Printed {
            info,
            columns: None,
        }
    }
}

/// One object in the asked form.
pub fn object<'a>(
    t: Target,
    printed: Printed<'_>,
    obj: &'a Value,
    now: jiff::Timestamp,
) -> Cow<'a, Value> {
    match t {
        Target::Table(inc, version, _) => {
            let meta = json!({"resourceVersion": obj["metadata"]["resourceVersion"]
                .as_str()
                .unwrap_or("")});
            let rows = [Arc::new(obj.clone())];
            Cow::Owned(table(printed, &rows, meta, now, (inc, version)))
        }
        Target::PartialMetadata(_, version) => Cow::Owned(partial_metadata(obj, version)),
        // Served as it is: no copy of the object for every response.
        Target::Json | Target::Yaml | Target::Protobuf => Cow::Borrowed(obj),
    }
}

/// A list in the asked form, and the form it was written in (see [`encode`]). JSON is
/// written from each object's shared serialization (made once per object version, see
/// [`CachedObject`]) and streamed in chunks, so a large list costs no
/// re-serialization and no second full copy; protobuf is transcoded item by item from
/// the same serializations; the other forms are built as one value.
pub fn list(
    t: Target,
    printed: Printed<'_>,
    items: &[CachedObject],
    list_meta: Value,
    now: jiff::Timestamp,
) -> (Target, ListBody) {
    let info = printed.info;
    match t {
        Target::Table(inc, version, _) => {
            let values: Vec<Arc<Value>> = items.iter().map(|o| o.value().clone()).collect();
            let table = table(printed, &values, list_meta, now, (inc, version));
            (t, ListBody::whole(encode(t, &table).1))
        }
        Target::PartialMetadata(_, version) => {
            let list = json!({
                "kind": "PartialObjectMetadataList",
                "apiVersion": version.api_version(),
                "metadata": list_meta,
                "items": items.iter().map(|o| partial_metadata(o, version)).collect::<Vec<_>>(),
            });
            let (t, body) = encode(t, &list);
            (t, ListBody::whole(body))
        }
        Target::Yaml => {
            let list = json!({
                "kind": info.list_kind(), "apiVersion": info.api_version(),
                "metadata": list_meta, "items": items.iter().map(|o| (**o).clone()).collect::<Vec<_>>(),
            });
            (t, ListBody::whole(encode(t, &list).1))
        }
        Target::Protobuf => {
            // From each object's shared JSON, transcoded without a decoded value.
            let items_json = items.iter().map(|o| &o.json()[..]);
            match ferrokube_protobuf::encode_list_json(
                &info.api_version(),
                &info.list_kind(),
                &list_meta,
                items_json,
            ) {
                Ok(bytes) => (t, ListBody::whole(Bytes::from(bytes))),
                Err(e) => {
                    tracing::warn!(error = %e, kind = info.kind, "answering a list in JSON: no protobuf form");
                    list(Target::Json, printed, items, list_meta, now)
                }
            }
        }
        Target::Json => {
            let mut head = Vec::with_capacity(128);
            head.extend_from_slice(b"{\"kind\":");
            serde_json::to_writer(&mut head, &info.list_kind()).unwrap_or_default();
            head.extend_from_slice(b",\"apiVersion\":");
            serde_json::to_writer(&mut head, &info.api_version()).unwrap_or_default();
            head.extend_from_slice(b",\"metadata\":");
            serde_json::to_writer(&mut head, &list_meta).unwrap_or_default();
            head.extend_from_slice(b",\"items\":[");
            let mut pieces = Vec::with_capacity(2 * items.len() + 2);
            pieces.push(Bytes::from(head));
            for (i, o) in items.iter().enumerate() {
                if i > 0 {
                    pieces.push(Bytes::from_static(b","));
                }
                pieces.push(o.json().clone());
            }
            pieces.push(Bytes::from_static(b"]}"));
            (t, ListBody::new(pieces))
        }
    }
}

/// Frames a [`ListBody`] gathers small pieces into (a pod is about 1 KiB of JSON).
const LIST_CHUNK: usize = 64 * 1024;

/// A response body made of pieces sent in order: runs of small pieces are copied into
/// chunks of up to [`LIST_CHUNK`] bytes, larger pieces go out as they are. Its exact
/// length is known up front (a `Content-Length`, and the gzip threshold can be checked).
#[derive(Debug)]
pub struct ListBody {
    pieces: std::iter::Peekable<std::vec::IntoIter<Bytes>>,
    remaining: u64,
}

impl ListBody {
    pub fn new(pieces: Vec<Bytes>) -> ListBody {
        let remaining = pieces.iter().map(|p| p.len() as u64).sum();
        ListBody {
            pieces: pieces.into_iter().peekable(),
            remaining,
        }
    }

    pub fn whole(body: Bytes) -> ListBody {
        ListBody::new(vec![body])
    }
}

impl hyper::body::Body for ListBody {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = &mut *self;
        let Some(first) = this.pieces.next() else {
            return Poll::Ready(None);
        };
        let chunk = if first.len() >= LIST_CHUNK
            || this
                .pieces
                .peek()
                .is_none_or(|p| first.len() + p.len() > LIST_CHUNK)
        {
            first
        } else {
            let mut buf = BytesMut::with_capacity(LIST_CHUNK);
            buf.extend_from_slice(&first);
            while let Some(p) = this.pieces.next_if(|p| buf.len() + p.len() <= LIST_CHUNK) {
                buf.extend_from_slice(&p);
            }
            buf.freeze()
        };
        this.remaining -= chunk.len() as u64;
        Poll::Ready(Some(Ok(Frame::data(chunk))))
    }

    fn is_end_stream(&self) -> bool {
        self.remaining == 0
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.remaining)
    }
}

/// A Table of `items` in the given `meta.k8s.io` version: upstream's default printer
/// columns (`ferrokube_api::printers`), one row per object with its conditions and,
/// per `include`, no object, its `PartialObjectMetadata` (of the Table's version, as
/// upstream's `asTable` writes it), or the whole object.
pub fn table(
    printed: Printed<'_>,
    items: &[Arc<Value>],
    list_meta: Value,
    now: jiff::Timestamp,
    (include, version): (IncludeObject, MetaVersion),
) -> Value {
    let info = printed.info;
    let columns = match printed.columns {
        Some(c) => c.headers().to_vec(),
        None => printers::table_columns(info.group, info.kind),
    };
    // Some built-in printers order their rows (FlowSchemas by matching precedence).
    let mut ordered: Vec<&Arc<Value>> = items.iter().collect();
    if printed.columns.is_none()
        && let Some(order) = printers::table_row_order(info.group, info.kind)
    {
        ordered.sort_by(|a, b| order(a, b));
    }
    let rows: Vec<Value> = ordered
        .into_iter()
        .map(|o| {
            let mut row = match printed.columns {
                Some(c) => json!({"cells": c.cells(o, now)}),
                None => json!({"cells": printers::table_row(info.group, info.kind, o, now)}),
            };
            if let Some(c) = printers::table_row_conditions(info.group, info.kind, o) {
                row["conditions"] = c;
            }
            row["object"] = match include {
                IncludeObject::None => Value::Null,
                IncludeObject::Metadata => partial_metadata(o, version),
                IncludeObject::Object => {
                    let mut full = (**o).clone();
                    if let Some(m) = full.as_object_mut() {
                        m.entry("kind").or_insert_with(|| json!(info.kind));
                        m.entry("apiVersion")
                            .or_insert_with(|| json!(info.api_version()));
                    }
                    full
                }
            };
            row
        })
        .collect();
    json!({
        "kind": "Table",
        "apiVersion": version.api_version(),
        "metadata": list_meta,
        "columnDefinitions": columns,
        "rows": rows,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferrokube_api::resources::lookup;
    use http_body_util::BodyExt;

    async fn collect(mut body: ListBody) -> (Vec<usize>, Bytes) {
        let mut frames = Vec::new();
        let mut all = BytesMut::new();
        let exact = hyper::body::Body::size_hint(&body).exact();
        while let Some(frame) = body.frame().await {
            let data = frame.unwrap().into_data().unwrap();
            frames.push(data.len());
            all.extend_from_slice(&data);
        }
        assert_eq!(exact, Some(all.len() as u64));
        assert!(hyper::body::Body::is_end_stream(&body));
        (frames, all.freeze())
    }

    #[tokio::test]
    async fn json_list_is_the_serialized_list_in_bounded_chunks() {
        let pods = lookup("", "v1", "pods").unwrap();
        let items: Vec<CachedObject> = (0..500)
            .map(|i| {
                CachedObject::new(json!({"metadata": {"name": format!("p{i}"),
                "annotations": {"a": "x".repeat(i)}}, "spec": {"containers": []}}))
            })
            .collect();
        let meta = json!({"resourceVersion": "7", "continue": "c", "remainingItemCount": 3});
        let want = json!({"kind": "PodList", "apiVersion": "v1", "metadata": meta,
            "items": items.iter().map(|o| (**o).clone()).collect::<Vec<_>>()});
        let now = jiff::Timestamp::from_second(0).unwrap();
        let (frames, body) =
            collect(list(Target::Json, pods.into(), &items, meta.clone(), now).1).await;
        assert_eq!(serde_json::from_slice::<Value>(&body).unwrap(), want);
        assert!(frames.len() > 1, "a 130 KiB list is sent in several chunks");
        assert!(frames.iter().all(|&n| n <= LIST_CHUNK));
        // The objects keep their serialization for the next list.
        assert!(items.iter().all(|o| o.json().len() > 20));

        let (_, empty) = collect(list(Target::Json, pods.into(), &[], json!({}), now).1).await;
        assert_eq!(
            serde_json::from_slice::<Value>(&empty).unwrap(),
            json!({"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": []})
        );
        // A piece larger than a chunk goes out whole.
        let big = Bytes::from(vec![b'x'; LIST_CHUNK * 2]);
        let (frames, all) = collect(ListBody::new(vec![
            Bytes::from_static(b"["),
            big.clone(),
            Bytes::from_static(b"]"),
        ]))
        .await;
        assert_eq!(frames, vec![1, LIST_CHUNK * 2, 1]);
        assert_eq!(all.len(), LIST_CHUNK * 2 + 2);
    }

    #[test]
    fn negotiation() {
        let built_in = |accept| negotiate(accept, true);
        assert_eq!(built_in(None).unwrap(), Target::Json);
        assert_eq!(
            built_in(Some("application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json")).unwrap(),
            Target::Table(IncludeObject::Metadata, MetaVersion::V1, Wire::Json)
        );
        // What client-go asks for with protobuf (kubectl's typed clients).
        assert_eq!(
            built_in(Some("application/vnd.kubernetes.protobuf,application/json")).unwrap(),
            Target::Protobuf
        );
        assert_eq!(
            built_in(Some("application/vnd.kubernetes.protobuf;stream=watch")).unwrap(),
            Target::Protobuf
        );
        assert_eq!(built_in(Some("application/yaml")).unwrap(), Target::Yaml);
        // meta.k8s.io/v1beta1 is served as upstream serves it, for clients older than v1;
        // other versions are not.
        let v1beta1 = built_in(Some("application/json;as=Table;v=v1beta1;g=meta.k8s.io")).unwrap();
        assert_eq!(
            v1beta1,
            Target::Table(IncludeObject::Metadata, MetaVersion::V1beta1, Wire::Json)
        );
        // A transformed answer's media type is its encoding's, as upstream writes it.
        assert_eq!(content_type(v1beta1), "application/json");
        // Tables and partial metadata in YAML too (upstream's
        // `AllowsMediaTypeTransform`).
        let yaml_table = built_in(Some("application/yaml;as=Table;v=v1;g=meta.k8s.io")).unwrap();
        assert_eq!(
            yaml_table,
            Target::Table(IncludeObject::Metadata, MetaVersion::V1, Wire::Yaml)
        );
        assert_eq!(content_type(yaml_table), "application/yaml");
        assert_eq!(
            built_in(Some(
                "application/yaml;as=PartialObjectMetadataList;v=v1beta1;g=meta.k8s.io"
            ))
            .unwrap(),
            Target::PartialMetadata(Wire::Yaml, MetaVersion::V1beta1)
        );
        assert_eq!(
            built_in(Some("application/json;as=Table;v=v2;g=meta.k8s.io"))
                .unwrap_err()
                .code,
            406
        );
        assert_eq!(
            built_in(Some(
                "application/vnd.kubernetes.protobuf;as=PartialObjectMetadataList;v=v1beta1;g=meta.k8s.io, application/json;as=PartialObjectMetadataList;v=v1beta1;g=meta.k8s.io"
            ))
            .unwrap(),
            Target::PartialMetadata(Wire::Json, MetaVersion::V1beta1)
        );
        // Protobuf Tables do not exist.
        assert_eq!(
            built_in(Some(
                "application/vnd.kubernetes.protobuf;as=Table;v=v1;g=meta.k8s.io, application/json"
            ))
            .unwrap(),
            Target::Json
        );
        // A custom resource has no protobuf message: JSON when the client takes it,
        // else a 406.
        let custom = |accept| negotiate(Some(accept), false);
        assert_eq!(
            custom("application/vnd.kubernetes.protobuf, application/json").unwrap(),
            Target::Json
        );
        assert_eq!(
            custom("application/vnd.kubernetes.protobuf")
                .unwrap_err()
                .code,
            406
        );
        let refused = built_in(Some("text/plain")).unwrap_err();
        assert!(
            refused
                .message
                .ends_with("application/vnd.kubernetes.protobuf"),
            "{}",
            refused.message
        );
        // Partial metadata is served in protobuf for any resource (meta.k8s.io/v1 has
        // its messages), as client-go's metadata informers ask for it.
        let metadata = "application/vnd.kubernetes.protobuf;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json";
        assert_eq!(
            custom(metadata).unwrap(),
            Target::PartialMetadata(Wire::Protobuf, MetaVersion::V1)
        );
        assert_eq!(
            custom("application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1").unwrap(),
            Target::PartialMetadata(Wire::Json, MetaVersion::V1)
        );
    }

    #[test]
    fn protobuf_answers_and_their_json_fallback() {
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"a": "b"}});
        let (t, body) = encode(Target::Protobuf, &cm);
        assert_eq!(t, Target::Protobuf);
        assert_eq!(ferrokube_protobuf::decode(&body).unwrap().1, cm);
        // A kind without a message goes out as JSON, and says so in its media type.
        let widget =
            json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}});
        let (t, body) = encode(Target::Protobuf, &widget);
        assert_eq!(content_type(t), "application/json");
        assert_eq!(serde_json::from_slice::<Value>(&body).unwrap(), widget);
        let (t, _) = encode(
            Target::PartialMetadata(Wire::Protobuf, MetaVersion::V1),
            &widget,
        );
        assert_eq!(t, Target::PartialMetadata(Wire::Json, MetaVersion::V1));
        assert_eq!(content_type(t), "application/json");
    }

    #[test]
    fn pod_table() {
        let pods = lookup("", "v1", "pods").unwrap();
        let pod = Arc::new(
            json!({"metadata": {"name": "p", "creationTimestamp": "1970-01-01T00:00:00Z"},
            "spec": {"containers": [{"name": "c"}]}, "status": {"phase": "Pending"}}),
        );
        let now = jiff::Timestamp::from_second(30).unwrap();
        let t = table(
            pods.into(),
            std::slice::from_ref(&pod),
            json!({}),
            now,
            (IncludeObject::Metadata, MetaVersion::V1),
        );
        assert_eq!(
            t["rows"][0]["cells"],
            json!(printers::table_row("", "Pod", &pod, now))
        );
        assert_eq!(t["rows"][0]["cells"][0], "p");
        assert_eq!(t["rows"][0]["object"]["kind"], "PartialObjectMetadata");
        let cols = t["columnDefinitions"].as_array().unwrap();
        assert_eq!(cols.len(), t["rows"][0]["cells"].as_array().unwrap().len());
        assert_eq!(cols[0]["name"], "Name");
        let t = table(
            pods.into(),
            std::slice::from_ref(&pod),
            json!({}),
            now,
            (IncludeObject::None, MetaVersion::V1),
        );
        assert!(t["rows"][0]["object"].is_null());
        let t = table(
            pods.into(),
            std::slice::from_ref(&pod),
            json!({}),
            now,
            (IncludeObject::Object, MetaVersion::V1),
        );
        assert_eq!(t["rows"][0]["object"]["kind"], "Pod");
        assert_eq!(t["rows"][0]["object"]["spec"]["containers"][0]["name"], "c");
        // A v1beta1 Table's rows carry v1beta1 partial metadata, as upstream's asTable.
        let t = table(
            pods.into(),
            &[pod],
            json!({}),
            now,
            (IncludeObject::Metadata, MetaVersion::V1beta1),
        );
        assert_eq!(t["apiVersion"], "meta.k8s.io/v1beta1");
        assert_eq!(t["rows"][0]["object"]["apiVersion"], "meta.k8s.io/v1beta1");
    }
}
