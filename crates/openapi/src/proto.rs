//! The Swagger 2.0 document as gnostic's `openapi.v2.Document` protobuf
//! (`application/com.github.proto-openapi.spec.v2@v1.0+protobuf`), which kubectl and
//! client-go ask `/openapi/v2` for. The messages are the subset of gnostic's
//! `OpenAPIv2.proto` the Kubernetes documents use, with its field numbers; vendor
//! extensions and free-form values travel as YAML (JSON text) in `Any.yaml`, as gnostic
//! encodes them.

// The oneofs mirror gnostic's messages; boxing their variants would only obscure that.
#![allow(clippy::large_enum_variant)]

use prost::Message;
use serde_json::Value;

#[derive(Clone, PartialEq, Message)]
pub struct Document {
    #[prost(string, tag = "1")]
    pub swagger: String,
    #[prost(message, optional, tag = "2")]
    pub info: Option<Info>,
    #[prost(message, optional, tag = "8")]
    pub paths: Option<Paths>,
    #[prost(message, optional, tag = "9")]
    pub definitions: Option<Definitions>,
    #[prost(message, repeated, tag = "16")]
    pub vendor_extension: Vec<NamedAny>,
}

#[derive(Clone, PartialEq, Message)]
pub struct Info {
    #[prost(string, tag = "1")]
    pub title: String,
    #[prost(string, tag = "2")]
    pub version: String,
}

#[derive(Clone, PartialEq, Message)]
pub struct Paths {
    #[prost(message, repeated, tag = "1")]
    pub vendor_extension: Vec<NamedAny>,
    #[prost(message, repeated, tag = "2")]
    pub path: Vec<NamedPathItem>,
}

#[derive(Clone, PartialEq, Message)]
pub struct NamedPathItem {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(message, optional, tag = "2")]
    pub value: Option<PathItem>,
}

#[derive(Clone, PartialEq, Message)]
pub struct PathItem {
    #[prost(message, optional, tag = "2")]
    pub get: Option<Operation>,
    #[prost(message, optional, tag = "3")]
    pub put: Option<Operation>,
    #[prost(message, optional, tag = "4")]
    pub post: Option<Operation>,
    #[prost(message, optional, tag = "5")]
    pub delete: Option<Operation>,
    #[prost(message, optional, tag = "8")]
    pub patch: Option<Operation>,
    #[prost(message, repeated, tag = "9")]
    pub parameters: Vec<ParametersItem>,
}

#[derive(Clone, PartialEq, Message)]
pub struct Operation {
    #[prost(string, repeated, tag = "1")]
    pub tags: Vec<String>,
    #[prost(string, tag = "3")]
    pub description: String,
    #[prost(string, tag = "5")]
    pub operation_id: String,
    #[prost(string, repeated, tag = "6")]
    pub produces: Vec<String>,
    #[prost(string, repeated, tag = "7")]
    pub consumes: Vec<String>,
    #[prost(message, repeated, tag = "8")]
    pub parameters: Vec<ParametersItem>,
    #[prost(message, optional, tag = "9")]
    pub responses: Option<Responses>,
    #[prost(string, repeated, tag = "10")]
    pub schemes: Vec<String>,
    #[prost(message, repeated, tag = "13")]
    pub vendor_extension: Vec<NamedAny>,
}

#[derive(Clone, PartialEq, Message)]
pub struct ParametersItem {
    #[prost(message, optional, tag = "1")]
    pub parameter: Option<Parameter>,
}

#[derive(Clone, PartialEq, Message)]
pub struct Parameter {
    #[prost(oneof = "parameter::Oneof", tags = "1, 2")]
    pub oneof: Option<parameter::Oneof>,
}

pub mod parameter {
    #[derive(Clone, PartialEq, prost::Oneof)]
    pub enum Oneof {
        #[prost(message, tag = "1")]
        BodyParameter(super::BodyParameter),
        #[prost(message, tag = "2")]
        NonBodyParameter(super::NonBodyParameter),
    }
}

#[derive(Clone, PartialEq, Message)]
pub struct BodyParameter {
    #[prost(string, tag = "1")]
    pub description: String,
    #[prost(string, tag = "2")]
    pub name: String,
    #[prost(string, tag = "3")]
    pub r#in: String,
    #[prost(bool, tag = "4")]
    pub required: bool,
    #[prost(message, optional, tag = "5")]
    pub schema: Option<Schema>,
}

#[derive(Clone, PartialEq, Message)]
pub struct NonBodyParameter {
    #[prost(oneof = "non_body_parameter::Oneof", tags = "3, 4")]
    pub oneof: Option<non_body_parameter::Oneof>,
}

pub mod non_body_parameter {
    #[derive(Clone, PartialEq, prost::Oneof)]
    pub enum Oneof {
        #[prost(message, tag = "3")]
        QueryParameterSubSchema(super::QueryParameterSubSchema),
        #[prost(message, tag = "4")]
        PathParameterSubSchema(super::PathParameterSubSchema),
    }
}

#[derive(Clone, PartialEq, Message)]
pub struct QueryParameterSubSchema {
    #[prost(bool, tag = "1")]
    pub required: bool,
    #[prost(string, tag = "2")]
    pub r#in: String,
    #[prost(string, tag = "3")]
    pub description: String,
    #[prost(string, tag = "4")]
    pub name: String,
    #[prost(string, tag = "6")]
    pub r#type: String,
    #[prost(bool, tag = "20")]
    pub unique_items: bool,
}

#[derive(Clone, PartialEq, Message)]
pub struct PathParameterSubSchema {
    #[prost(bool, tag = "1")]
    pub required: bool,
    #[prost(string, tag = "2")]
    pub r#in: String,
    #[prost(string, tag = "3")]
    pub description: String,
    #[prost(string, tag = "4")]
    pub name: String,
    #[prost(string, tag = "5")]
    pub r#type: String,
    #[prost(bool, tag = "19")]
    pub unique_items: bool,
}

#[derive(Clone, PartialEq, Message)]
pub struct Responses {
    #[prost(message, repeated, tag = "1")]
    pub response_code: Vec<NamedResponseValue>,
}

#[derive(Clone, PartialEq, Message)]
pub struct NamedResponseValue {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(message, optional, tag = "2")]
    pub value: Option<ResponseValue>,
}

#[derive(Clone, PartialEq, Message)]
pub struct ResponseValue {
    #[prost(message, optional, tag = "1")]
    pub response: Option<Response>,
}

#[derive(Clone, PartialEq, Message)]
pub struct Response {
    #[prost(string, tag = "1")]
    pub description: String,
    #[prost(message, optional, tag = "2")]
    pub schema: Option<SchemaItem>,
}

#[derive(Clone, PartialEq, Message)]
pub struct SchemaItem {
    #[prost(message, optional, tag = "1")]
    pub schema: Option<Schema>,
}

#[derive(Clone, PartialEq, Message)]
pub struct Definitions {
    #[prost(message, repeated, tag = "1")]
    pub additional_properties: Vec<NamedSchema>,
}

#[derive(Clone, PartialEq, Message)]
pub struct NamedSchema {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(message, optional, tag = "2")]
    pub value: Option<Schema>,
}

#[derive(Clone, PartialEq, Message)]
pub struct Schema {
    #[prost(string, tag = "1")]
    pub r#ref: String,
    #[prost(string, tag = "2")]
    pub format: String,
    #[prost(string, tag = "3")]
    pub title: String,
    #[prost(string, tag = "4")]
    pub description: String,
    #[prost(message, optional, tag = "5")]
    pub default: Option<Any>,
    #[prost(double, tag = "7")]
    pub maximum: f64,
    #[prost(double, tag = "9")]
    pub minimum: f64,
    #[prost(bool, tag = "16")]
    pub unique_items: bool,
    #[prost(string, repeated, tag = "19")]
    pub required: Vec<String>,
    #[prost(message, repeated, tag = "20")]
    pub r#enum: Vec<Any>,
    #[prost(message, optional, boxed, tag = "21")]
    pub additional_properties: Option<Box<AdditionalPropertiesItem>>,
    #[prost(message, optional, tag = "22")]
    pub r#type: Option<TypeItem>,
    #[prost(message, optional, tag = "23")]
    pub items: Option<ItemsItem>,
    #[prost(message, repeated, tag = "24")]
    pub all_of: Vec<Schema>,
    #[prost(message, optional, tag = "25")]
    pub properties: Option<Properties>,
    #[prost(bool, tag = "27")]
    pub read_only: bool,
    #[prost(message, optional, tag = "30")]
    pub example: Option<Any>,
    #[prost(message, repeated, tag = "31")]
    pub vendor_extension: Vec<NamedAny>,
}

#[derive(Clone, PartialEq, Message)]
pub struct AdditionalPropertiesItem {
    #[prost(oneof = "additional_properties_item::Oneof", tags = "1, 2")]
    pub oneof: Option<additional_properties_item::Oneof>,
}

pub mod additional_properties_item {
    #[derive(Clone, PartialEq, prost::Oneof)]
    pub enum Oneof {
        #[prost(message, tag = "1")]
        Schema(super::Schema),
        #[prost(bool, tag = "2")]
        Boolean(bool),
    }
}

#[derive(Clone, PartialEq, Message)]
pub struct TypeItem {
    #[prost(string, repeated, tag = "1")]
    pub value: Vec<String>,
}

#[derive(Clone, PartialEq, Message)]
pub struct ItemsItem {
    #[prost(message, repeated, tag = "1")]
    pub schema: Vec<Schema>,
}

#[derive(Clone, PartialEq, Message)]
pub struct Properties {
    #[prost(message, repeated, tag = "1")]
    pub additional_properties: Vec<NamedSchema>,
}

#[derive(Clone, PartialEq, Message)]
pub struct NamedAny {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(message, optional, tag = "2")]
    pub value: Option<Any>,
}

/// gnostic's `Any`: only the YAML text form (field 2) is used.
#[derive(Clone, PartialEq, Message)]
pub struct Any {
    #[prost(string, tag = "2")]
    pub yaml: String,
}

fn any(v: &Value) -> Any {
    Any {
        yaml: v.to_string(),
    }
}

fn s(v: &Value, key: &str) -> String {
    v.get(key).and_then(Value::as_str).unwrap_or("").to_string()
}

fn strings(v: &Value, key: &str) -> Vec<String> {
    v.get(key)
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|x| x.as_str().map(str::to_string))
        .collect()
}

fn extensions(v: &Value) -> Vec<NamedAny> {
    v.as_object()
        .into_iter()
        .flatten()
        .filter(|(k, _)| k.starts_with("x-"))
        .map(|(k, v)| NamedAny {
            name: k.clone(),
            value: Some(any(v)),
        })
        .collect()
}

fn schema(v: &Value) -> Schema {
    let ty = match v.get("type") {
        Some(Value::String(t)) => Some(TypeItem {
            value: vec![t.clone()],
        }),
        Some(Value::Array(ts)) => Some(TypeItem {
            value: ts
                .iter()
                .filter_map(|t| t.as_str().map(str::to_string))
                .collect(),
        }),
        _ => None,
    };
    let additional_properties = v.get("additionalProperties").map(|ap| {
        Box::new(AdditionalPropertiesItem {
            oneof: Some(match ap {
                Value::Bool(b) => additional_properties_item::Oneof::Boolean(*b),
                other => additional_properties_item::Oneof::Schema(schema(other)),
            }),
        })
    });
    let properties = v
        .get("properties")
        .and_then(Value::as_object)
        .map(|props| Properties {
            additional_properties: props
                .iter()
                .map(|(name, p)| NamedSchema {
                    name: name.clone(),
                    value: Some(schema(p)),
                })
                .collect(),
        });
    Schema {
        r#ref: s(v, "$ref"),
        format: s(v, "format"),
        title: s(v, "title"),
        description: s(v, "description"),
        default: v.get("default").map(any),
        maximum: v.get("maximum").and_then(Value::as_f64).unwrap_or(0.0),
        minimum: v.get("minimum").and_then(Value::as_f64).unwrap_or(0.0),
        unique_items: v
            .get("uniqueItems")
            .and_then(Value::as_bool)
            .unwrap_or(false),
        required: strings(v, "required"),
        r#enum: v
            .get("enum")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(any)
            .collect(),
        additional_properties,
        r#type: ty,
        items: v.get("items").map(|i| ItemsItem {
            schema: match i {
                Value::Array(a) => a.iter().map(schema).collect(),
                one => vec![schema(one)],
            },
        }),
        all_of: v
            .get("allOf")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(schema)
            .collect(),
        properties,
        read_only: v.get("readOnly").and_then(Value::as_bool).unwrap_or(false),
        example: v.get("example").map(any),
        vendor_extension: extensions(v),
    }
}

fn parameters(v: &Value) -> Vec<ParametersItem> {
    v.as_array()
        .into_iter()
        .flatten()
        .map(|p| {
            let oneof = if p["in"] == "body" {
                parameter::Oneof::BodyParameter(BodyParameter {
                    description: s(p, "description"),
                    name: s(p, "name"),
                    r#in: s(p, "in"),
                    required: p.get("required").and_then(Value::as_bool).unwrap_or(false),
                    schema: p.get("schema").map(schema),
                })
            } else {
                let required = p.get("required").and_then(Value::as_bool).unwrap_or(false);
                let unique_items = p
                    .get("uniqueItems")
                    .and_then(Value::as_bool)
                    .unwrap_or(false);
                let sub = if p["in"] == "path" {
                    non_body_parameter::Oneof::PathParameterSubSchema(PathParameterSubSchema {
                        required,
                        r#in: s(p, "in"),
                        description: s(p, "description"),
                        name: s(p, "name"),
                        r#type: s(p, "type"),
                        unique_items,
                    })
                } else {
                    non_body_parameter::Oneof::QueryParameterSubSchema(QueryParameterSubSchema {
                        required,
                        r#in: s(p, "in"),
                        description: s(p, "description"),
                        name: s(p, "name"),
                        r#type: s(p, "type"),
                        unique_items,
                    })
                };
                parameter::Oneof::NonBodyParameter(NonBodyParameter { oneof: Some(sub) })
            };
            ParametersItem {
                parameter: Some(Parameter { oneof: Some(oneof) }),
            }
        })
        .collect()
}

fn operation(v: &Value) -> Operation {
    let responses = v
        .get("responses")
        .and_then(Value::as_object)
        .map(|rs| Responses {
            response_code: rs
                .iter()
                .map(|(code, r)| NamedResponseValue {
                    name: code.clone(),
                    value: Some(ResponseValue {
                        response: Some(Response {
                            description: s(r, "description"),
                            schema: r.get("schema").map(|sc| SchemaItem {
                                schema: Some(schema(sc)),
                            }),
                        }),
                    }),
                })
                .collect(),
        });
    Operation {
        tags: strings(v, "tags"),
        description: s(v, "description"),
        operation_id: s(v, "operationId"),
        produces: strings(v, "produces"),
        consumes: strings(v, "consumes"),
        parameters: v.get("parameters").map(parameters).unwrap_or_default(),
        responses,
        schemes: strings(v, "schemes"),
        vendor_extension: extensions(v),
    }
}

/// Converts a Swagger 2.0 document (as JSON) to the gnostic protobuf message.
pub fn document(doc: &Value) -> Document {
    let paths = doc.get("paths").and_then(Value::as_object).map(|ps| Paths {
        vendor_extension: Vec::new(),
        path: ps
            .iter()
            .map(|(name, item)| NamedPathItem {
                name: name.clone(),
                value: Some(PathItem {
                    get: item.get("get").map(operation),
                    put: item.get("put").map(operation),
                    post: item.get("post").map(operation),
                    delete: item.get("delete").map(operation),
                    patch: item.get("patch").map(operation),
                    parameters: item.get("parameters").map(parameters).unwrap_or_default(),
                }),
            })
            .collect(),
    });
    let definitions = doc
        .get("definitions")
        .and_then(Value::as_object)
        .map(|ds| Definitions {
            additional_properties: ds
                .iter()
                .map(|(name, d)| NamedSchema {
                    name: name.clone(),
                    value: Some(schema(d)),
                })
                .collect(),
        });
    Document {
        swagger: s(doc, "swagger"),
        info: doc.get("info").map(|i| Info {
            title: s(i, "title"),
            version: s(i, "version"),
        }),
        paths,
        definitions,
        vendor_extension: extensions(doc),
    }
}

/// Encodes a Swagger 2.0 document (as JSON) as gnostic protobuf bytes.
pub fn encode(doc: &Value) -> Vec<u8> {
    document(doc).encode_to_vec()
}
