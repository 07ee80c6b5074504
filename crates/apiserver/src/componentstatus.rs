//! core/v1 `componentstatuses` (`kubectl get cs`), as upstream's
//! `pkg/registry/core/componentstatus`: nothing is stored; every read probes the
//! scheduler's and the controller manager's `/healthz` on this machine (HTTPS on their
//! default secure ports, their certificates not verified, as upstream) and, when the
//! store is etcd, the store itself (`etcd-0`). Deprecated upstream since 1.19, so every
//! answer carries upstream's deprecation warning.

use std::time::Duration;

use ferrokube_api::resources::{ResourceInfo, UNSTORED};
use ferrokube_apimachinery::errors::ApiError;
use ferrokube_apimachinery::fields::FieldSelector;
use ferrokube_registry::cache::CachedObject;
use http::{HeaderValue, Response, StatusCode};
use http_body_util::BodyExt;
use serde_json::{Value, json};

use crate::handler::{Body, State, respond_body};
use crate::output;

const PLURAL: &str = "componentstatuses";
/// Upstream's `probeTimeOut` for a component's `/healthz`.
const PROBE_TIMEOUT: Duration = Duration::from_secs(20);
const DEPRECATION: &str = "299 - \"v1 ComponentStatus is deprecated in v1.19+\"";

/// The components upstream probes over HTTP: name, port (the kube-scheduler's and the
/// kube-controller-manager's default `--secure-port`) and path.
const HTTP_COMPONENTS: &[(&str, u16, &str)] = &[
    ("controller-manager", 10257, "/healthz"),
    ("scheduler", 10259, "/healthz"),
];

/// The object a componentstatuses path names: `Some(None)` for the collection,
/// `Some(Some(name))` for one; `None` when the path is not theirs.
pub(crate) fn componentstatus_path<'a>(segs: &[&'a str]) -> Option<Option<&'a str>> {
    match segs {
        ["api", "v1", PLURAL] => Some(None),
        ["api", "v1", PLURAL, name] => Some(Some(*name)),
        _ => None,
    }
}

fn info() -> Option<&'static ResourceInfo> {
    UNSTORED
        .iter()
        .find(|r| r.group.is_empty() && r.plural == PLURAL)
}

/// The components this server reports on, sorted by name.
fn component_names(etcd: bool) -> Vec<&'static str> {
    let mut names: Vec<&'static str> = HTTP_COMPONENTS.iter().map(|(n, _, _)| *n).collect();
    if etcd {
        names.push("etcd-0");
    }
    names.sort_unstable();
    names
}

/// One probe's outcome, as upstream's `probe.Result` with its output and error.
#[derive(Debug, PartialEq)]
enum Probe {
    Success(String),
    /// The component answered badly or not at all; the message says how.
    Failure(String),
    /// The check itself went wrong; the error says how.
    Failed(String),
}

fn component_status(name: &str, probe: Probe) -> Value {
    let (status, message, error) = match probe {
        Probe::Success(m) => ("True", m, String::new()),
        Probe::Failure(m) => ("False", m, String::new()),
        Probe::Failed(e) => ("False", String::new(), e),
    };
    let mut condition = json!({"type": "Healthy", "status": status});
    if !message.is_empty() {
        condition["message"] = json!(message);
    }
    if !error.is_empty() {
        condition["error"] = json!(error);
    }
    json!({
        "kind": "ComponentStatus",
        "apiVersion": "v1",
        "metadata": {"name": name},
        "conditions": [condition],
    })
}

/// Upstream's HTTP prober: a 2xx or 3xx is a success whose message is the body; any
/// other code, or no answer, a failure that says why.
async fn probe_http(port: u16, path: &str) -> Probe {
    let url = format!("https://127.0.0.1:{port}{path}");
    let get = crate::proxy::insecure_get("127.0.0.1", port, path);
    match tokio::time::timeout(PROBE_TIMEOUT, get).await {
        Err(_) => Probe::Failure(format!(
            "Get \"{url}\": context deadline exceeded (Client.Timeout exceeded while awaiting headers)"
        )),
        Ok(Err(e)) => Probe::Failure(format!("Get \"{url}\": {e}")),
        Ok(Ok((code, body))) if (200..400).contains(&code) => {
            Probe::Success(String::from_utf8_lossy(&body).into_owned())
        }
        Ok(Ok((code, _))) => Probe::Failure(format!("HTTP probe failed with statuscode: {code}")),
    }
}

async fn probe(state: &State, name: &str) -> Probe {
    if name == "etcd-0" {
        return match state.registry.storage().current_revision().await {
            Ok(_) => Probe::Success("ok".into()),
            Err(e) => Probe::Failed(e.to_string()),
        };
    }
    match HTTP_COMPONENTS.iter().find(|(n, _, _)| *n == name) {
        Some((_, port, path)) => probe_http(*port, path).await,
        None => Probe::Failed(format!("Component not found: {name}")),
    }
}

/// The list's label and field selectors as one predicate. The objects have no labels;
/// the fields are upstream's defaults for a kind without its own (`metadata.name`, and
/// `metadata.namespace`, which is empty here).
fn selection(
    label_selector: Option<&str>,
    field_selector: Option<&str>,
) -> Result<impl Fn(&str) -> bool, ApiError> {
    let (labels, fields) = ferrokube_registry::store::parse_selectors(
        label_selector,
        field_selector,
        &["metadata.name", "metadata.namespace"],
    )?;
    let fields = fields.unwrap_or_else(FieldSelector::everything);
    let matches_labels = labels.is_none_or(|l| l.matches(&std::collections::BTreeMap::new()));
    Ok(move |name: &str| {
        matches_labels
            && fields.matches(&|field| match field {
                "metadata.name" => Some(name.to_string()),
                _ => Some(String::new()),
            })
    })
}

/// `list` probes every component (at once), `get` the one named; any other verb (as the
/// request's authorization attributes name it) is a 405.
pub(crate) async fn serve(
    state: &State,
    verb: &str,
    name: Option<&str>,
    query: &std::collections::HashMap<String, String>,
    accept: Option<&str>,
) -> Result<Response<Body>, ApiError> {
    let info = info().ok_or_else(|| ApiError::internal("no ComponentStatus entry"))?;
    let target = output::negotiate(accept, true)?;
    let etcd = state.registry.storage().backend() == ferrokube_storage::Backend::Etcd3;
    let names = component_names(etcd);
    let (content_type, body) = match (verb, name) {
        ("get", Some(name)) => {
            if !names.contains(&name) {
                return Err(ApiError::not_found("", PLURAL, name));
            }
            let status = component_status(name, probe(state, name).await);
            let obj = output::object(target, info.into(), &status, jiff::Timestamp::now());
            let (t, body) = output::encode(target, &obj);
            (
                output::content_type(t),
                http_body_util::Full::new(body).boxed_unsync(),
            )
        }
        ("list", None) => {
            let selected = selection(
                query.get("labelSelector").map(String::as_str),
                query.get("fieldSelector").map(String::as_str),
            )?;
            let wanted: Vec<&str> = names.into_iter().filter(|n| selected(n)).collect();
            let probes = wanted.iter().map(|n| probe(state, n));
            let items: Vec<CachedObject> = futures::future::join_all(probes)
                .await
                .into_iter()
                .zip(&wanted)
                .map(|(p, n)| CachedObject::new(component_status(n, p)))
                .collect();
            let (t, body) = output::list(
                target,
                info.into(),
                &items,
                json!({}),
                jiff::Timestamp::now(),
            );
            (output::content_type(t), body.boxed_unsync())
        }
        _ => return Err(ApiError::method_not_supported("", PLURAL, verb)),
    };
    let mut r = respond_body(StatusCode::OK, content_type, body);
    r.headers_mut()
        .append("Warning", HeaderValue::from_static(DEPRECATION));
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_and_names() {
        assert_eq!(
            componentstatus_path(&["api", "v1", PLURAL]),
            Some(None::<&str>)
        );
        assert_eq!(
            componentstatus_path(&["api", "v1", PLURAL, "scheduler"]),
            Some(Some("scheduler"))
        );
        assert_eq!(componentstatus_path(&["api", "v1", PLURAL, "a", "b"]), None);
        assert_eq!(componentstatus_path(&["apis", "v1", PLURAL]), None);
        assert_eq!(info().unwrap().kind, "ComponentStatus");
        assert_eq!(component_names(false), ["controller-manager", "scheduler"]);
        assert_eq!(
            component_names(true),
            ["controller-manager", "etcd-0", "scheduler"]
        );
    }

    #[test]
    fn statuses_carry_upstream_condition_fields() {
        assert_eq!(
            component_status("scheduler", Probe::Success("ok".into())),
            json!({"kind": "ComponentStatus", "apiVersion": "v1", "metadata": {"name": "scheduler"},
                   "conditions": [{"type": "Healthy", "status": "True", "message": "ok"}]})
        );
        assert_eq!(
            component_status("scheduler", Probe::Failure("refused".into()))["conditions"],
            json!([{"type": "Healthy", "status": "False", "message": "refused"}])
        );
        assert_eq!(
            component_status("etcd-0", Probe::Failed("down".into()))["conditions"],
            json!([{"type": "Healthy", "status": "False", "error": "down"}])
        );
    }

    #[test]
    fn selectors() {
        let all = selection(None, None).unwrap();
        assert!(all("scheduler"));
        let one = selection(None, Some("metadata.name=scheduler")).unwrap();
        assert!(one("scheduler") && !one("etcd-0"));
        let not_one = selection(None, Some("metadata.name!=scheduler")).unwrap();
        assert!(!not_one("scheduler") && not_one("etcd-0"));
        assert!(selection(None, Some("metadata.namespace=")).unwrap()(
            "etcd-0"
        ));
        // No object has labels: a requirement that a label exists matches none.
        assert!(!selection(Some("tier"), None).unwrap()("scheduler"));
        assert!(selection(Some("!tier"), None).unwrap()("scheduler"));
        assert_eq!(
            selection(None, Some("status.phase=x")).err().unwrap().code,
            400
        );
        assert_eq!(selection(Some("a in (b"), None).err().unwrap().code, 400);
    }

    #[tokio::test]
    async fn a_closed_port_is_a_failure_naming_the_url() {
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let Probe::Failure(m) = probe_http(port, "/healthz").await else {
            panic!("not a failure");
        };
        assert_eq!(
            m,
            format!(
                "Get \"https://127.0.0.1:{port}/healthz\": dial tcp 127.0.0.1:{port}: connect: connection refused"
            )
        );
    }
}
