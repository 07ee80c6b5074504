//! Admission of the requests the store does not run the chain for, called by their
//! handlers as upstream's REST handlers do:
//! - the CREATE of `pods/eviction` (object: the `policy/v1` Eviction) and of
//!   `pods/binding` (object: the Binding), mutated then validated before the
//!   eviction or binding happens;
//! - CONNECT to `pods/exec`, `pods/attach`, `pods/portforward` and `nodes/proxy`,
//!   whose object is the options the query carries (`PodExecOptions`, ...).

use ferrokube_apimachinery::errors::ApiError;
use ferrokube_apimachinery::resource_version::query_bool;
use serde_json::{Map, Value, json};

use super::{Attributes, Chain, Operation};

impl Chain {
    /// Mutating, then validating admission of a request's own object.
    pub(crate) async fn admit_request(
        &self,
        a: &Attributes,
        object: &mut Value,
    ) -> Result<(), ApiError> {
        self.admit(a, object, None).await?;
        self.validate(a, Some(object), None).await
    }

    /// CONNECT admission of `<resource>/<name>/<subresource>` with the options
    /// object built from the query (see [`connect_options`]).
    pub(crate) async fn admit_connect(
        &self,
        mut a: Attributes,
        query: &[(String, String)],
    ) -> Result<(), ApiError> {
        a.operation = Operation::Connect;
        let Some(kind) = a
            .resource
            .subresource(&a.subresource)
            .map(|s| s.kind)
            .or_else(|| (a.subresource == "proxy").then_some("NodeProxyOptions"))
        else {
            return Ok(());
        };
        let mut options = connect_options(kind, query);
        self.admit_request(&a, &mut options).await
    }
}

/// The CONNECT options object of `kind` as upstream decodes it from the query
/// (`PodExecOptions`, `PodAttachOptions`, `PodPortForwardOptions`,
/// `NodeProxyOptions`): booleans, the container, the repeated `command` and
/// `ports`, the proxied `path`.
pub(crate) fn connect_options(kind: &str, query: &[(String, String)]) -> Value {
    let mut o = Map::new();
    o.insert("kind".into(), json!(kind));
    o.insert("apiVersion".into(), json!("v1"));
    for (k, v) in query {
        match (kind, k.as_str()) {
            ("PodExecOptions" | "PodAttachOptions", "stdin" | "stdout" | "stderr" | "tty") => {
                o.insert(k.clone(), json!(query_bool(v)));
            }
            ("PodExecOptions" | "PodAttachOptions", "container") => {
                o.insert(k.clone(), json!(v));
            }
            ("PodExecOptions", "command") => {
                let list = o.entry("command").or_insert_with(|| json!([]));
                if let Some(list) = list.as_array_mut() {
                    list.push(json!(v));
                }
            }
            ("PodPortForwardOptions", "ports") => {
                let list = o.entry("ports").or_insert_with(|| json!([]));
                // `ports=80,443` and `ports=80&ports=443` are both accepted upstream.
                for port in v.split(',').filter_map(|p| p.trim().parse::<i64>().ok()) {
                    if let Some(list) = list.as_array_mut() {
                        list.push(json!(port));
                    }
                }
            }
            ("NodeProxyOptions", "path") => {
                o.insert(k.clone(), json!(v));
            }
            _ => {}
        }
    }
    Value::Object(o)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn options_come_from_the_query() {
        let exec = connect_options(
            "PodExecOptions",
            &q(&[
                ("command", "cat"),
                ("command", "/etc/hostname"),
                ("stdout", "1"),
                ("tty", "false"),
                ("container", "web"),
                ("bogus", "x"),
            ]),
        );
        assert_eq!(
            exec,
            json!({"kind": "PodExecOptions", "apiVersion": "v1", "stdout": true,
                "tty": false, "container": "web", "command": ["cat", "/etc/hostname"]})
        );
        let pf = connect_options(
            "PodPortForwardOptions",
            &q(&[("ports", "80,443"), ("ports", "8080")]),
        );
        assert_eq!(pf["ports"], json!([80, 443, 8080]));
        let attach = connect_options("PodAttachOptions", &q(&[("command", "sh")]));
        assert!(attach.get("command").is_none());
    }
}
