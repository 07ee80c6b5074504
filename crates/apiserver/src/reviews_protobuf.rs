//! Protobuf request bodies of the review kinds and TokenRequest (kubectl sends
//! `application/vnd.kubernetes.protobuf` for them): the `k8s\0` envelope is opened by
//! ferrokube-protobuf, the message decoded with k8s-pb's prost types, and the
//! fields the apiserver reads are turned into the JSON a JSON client would send.
//! These kinds are never stored, so they are not in the generated field table.

use ferrokube_apimachinery::errors::ApiError;
use k8s_pb::api::authentication::v1 as authn;
use k8s_pb::api::authorization::v1 as authz;
use prost::Message;
use serde_json::{Map, Value, json};

fn bad(e: impl std::fmt::Display) -> ApiError {
    ApiError::bad_request(format!("decoding the protobuf body: {e}"))
}

fn put_str(m: &mut Map<String, Value>, key: &str, v: &Option<String>) {
    if let Some(s) = v {
        m.insert(key.into(), json!(s));
    }
}

fn resource_attributes(r: &authz::ResourceAttributes) -> Value {
    let mut m = Map::new();
    for (k, v) in [
        ("namespace", &r.namespace),
        ("verb", &r.verb),
        ("group", &r.group),
        ("version", &r.version),
        ("resource", &r.resource),
        ("subresource", &r.subresource),
        ("name", &r.name),
    ] {
        put_str(&mut m, k, v);
    }
    Value::Object(m)
}

fn non_resource_attributes(r: &authz::NonResourceAttributes) -> Value {
    let mut m = Map::new();
    put_str(&mut m, "path", &r.path);
    put_str(&mut m, "verb", &r.verb);
    Value::Object(m)
}

fn attributes(
    spec: &mut Map<String, Value>,
    ra: &Option<authz::ResourceAttributes>,
    nra: &Option<authz::NonResourceAttributes>,
) {
    if let Some(r) = ra {
        spec.insert("resourceAttributes".into(), resource_attributes(r));
    }
    if let Some(n) = nra {
        spec.insert("nonResourceAttributes".into(), non_resource_attributes(n));
    }
}

fn sar_spec(s: &authz::SubjectAccessReviewSpec) -> Value {
    let mut m = Map::new();
    attributes(&mut m, &s.resource_attributes, &s.non_resource_attributes);
    put_str(&mut m, "user", &s.user);
    put_str(&mut m, "uid", &s.uid);
    m.insert("groups".into(), json!(s.groups));
    let extra: Map<String, Value> = s
        .extra
        .iter()
        .map(|(k, v)| (k.clone(), json!(v.items)))
        .collect();
    m.insert("extra".into(), Value::Object(extra));
    Value::Object(m)
}

/// The JSON form of an enveloped review or TokenRequest body.
pub(crate) fn decode(bytes: &[u8]) -> Result<Value, ApiError> {
    let (tm, raw) = ferrokube_protobuf::decode_envelope(bytes).map_err(bad)?;
    let spec = match tm.kind.as_str() {
        "SelfSubjectAccessReview" => {
            let r = authz::SelfSubjectAccessReview::decode(raw).map_err(bad)?;
            let mut m = Map::new();
            if let Some(s) = &r.spec {
                attributes(&mut m, &s.resource_attributes, &s.non_resource_attributes);
            }
            Value::Object(m)
        }
        "SubjectAccessReview" => {
            let r = authz::SubjectAccessReview::decode(raw).map_err(bad)?;
            r.spec.as_ref().map(sar_spec).unwrap_or_else(|| json!({}))
        }
        "LocalSubjectAccessReview" => {
            let r = authz::LocalSubjectAccessReview::decode(raw).map_err(bad)?;
            r.spec.as_ref().map(sar_spec).unwrap_or_else(|| json!({}))
        }
        "SelfSubjectRulesReview" => {
            let r = authz::SelfSubjectRulesReview::decode(raw).map_err(bad)?;
            json!({"namespace": r.spec.and_then(|s| s.namespace).unwrap_or_default()})
        }
        "SelfSubjectReview" => {
            authn::SelfSubjectReview::decode(raw).map_err(bad)?;
            json!({})
        }
        "TokenReview" => {
            let r = authn::TokenReview::decode(raw).map_err(bad)?;
            let s = r.spec.unwrap_or_default();
            json!({"token": s.token.unwrap_or_default(), "audiences": s.audiences})
        }
        "TokenRequest" => {
            let r = authn::TokenRequest::decode(raw).map_err(bad)?;
            let s = r.spec.unwrap_or_default();
            let mut m = Map::new();
            m.insert("audiences".into(), json!(s.audiences));
            if let Some(e) = s.expiration_seconds {
                m.insert("expirationSeconds".into(), json!(e));
            }
            if let Some(b) = s.bound_object_ref {
                let mut bm = Map::new();
                put_str(&mut bm, "kind", &b.kind);
                put_str(&mut bm, "apiVersion", &b.api_version);
                put_str(&mut bm, "name", &b.name);
                put_str(&mut bm, "uid", &b.u_id);
                m.insert("boundObjectRef".into(), Value::Object(bm));
            }
            Value::Object(m)
        }
        other => {
            return Err(ApiError::bad_request(format!(
                "unexpected kind {other:?} in the protobuf body"
            )));
        }
    };
    Ok(json!({"apiVersion": tm.api_version, "kind": tm.kind, "metadata": {}, "spec": spec}))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn envelope(api_version: &str, kind: &str, raw: Vec<u8>) -> Vec<u8> {
        use k8s_pb::apimachinery::pkg::runtime::{TypeMeta, Unknown};
        let unknown = Unknown {
            type_meta: Some(TypeMeta {
                api_version: Some(api_version.into()),
                kind: Some(kind.into()),
            }),
            raw: Some(raw),
            content_encoding: Some(String::new()),
            content_type: Some(String::new()),
        };
        let mut out = b"k8s\0".to_vec();
        out.extend(unknown.encode_to_vec());
        out
    }

    #[test]
    fn decodes_access_reviews_and_token_requests() {
        let ssar = authz::SelfSubjectAccessReview {
            spec: Some(authz::SelfSubjectAccessReviewSpec {
                resource_attributes: Some(authz::ResourceAttributes {
                    verb: Some("list".into()),
                    resource: Some("pods".into()),
                    namespace: Some("default".into()),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        };
        let v = decode(&envelope(
            "authorization.k8s.io/v1",
            "SelfSubjectAccessReview",
            ssar.encode_to_vec(),
        ))
        .unwrap();
        assert_eq!(
            v["spec"]["resourceAttributes"],
            json!({"verb": "list", "resource": "pods", "namespace": "default"})
        );
        let tr = authn::TokenRequest {
            spec: Some(authn::TokenRequestSpec {
                audiences: vec!["a".into()],
                expiration_seconds: Some(600),
                bound_object_ref: None,
            }),
            ..Default::default()
        };
        let v = decode(&envelope(
            "authentication.k8s.io/v1",
            "TokenRequest",
            tr.encode_to_vec(),
        ))
        .unwrap();
        assert_eq!(
            v["spec"],
            json!({"audiences": ["a"], "expirationSeconds": 600})
        );
        assert_eq!(
            decode(&envelope("v1", "Pod", vec![])).unwrap_err().code,
            400
        );
        assert_eq!(decode(b"k8s\0\xff\xff").unwrap_err().code, 400);
        assert_eq!(decode(b"").unwrap_err().code, 400);
    }
}
