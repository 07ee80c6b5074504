//! `apiextensions.k8s.io/v1` CustomResourceDefinitions, served read-only and empty.
//!
//! This server serves no custom resources, so no definition of one can exist. The
//! collection still has to answer: the real kubectl lists it before it validates a kind
//! that has no PATCH operation (`kubectl create -f` of a Binding, an Eviction or a
//! review), and fails when the list does. `kubectl get crd` says there are none, a
//! watch stays open with nothing to tell (`kubectl get crd -w`, informers), and a write
//! answers 405 and says why.

use ferrokube_api::resources::{ResourceInfo, UNSTORED};
use ferrokube_apimachinery::errors::ApiError;
use http::{Response, StatusCode};
use http_body_util::BodyExt;
use serde_json::json;

use std::collections::HashMap;

use ferrokube_registry::WatchItem;

use crate::handler::{Body, State, boolean, respond_body, watch_response};
use crate::output;

const GROUP: &str = "apiextensions.k8s.io";
const PLURAL: &str = "customresourcedefinitions";

/// The object a CustomResourceDefinitions path names: `Some(None)` for the collection,
/// `Some(Some(name))` for one; `None` when the path is not theirs.
pub(crate) fn crd_path<'a>(segs: &[&'a str]) -> Option<Option<&'a str>> {
    match segs {
        ["apis", GROUP, "v1", PLURAL] => Some(None),
        ["apis", GROUP, "v1", PLURAL, name] => Some(Some(*name)),
        // A subresource (`/status`) of a definition that cannot exist.
        ["apis", GROUP, "v1", PLURAL, name, _] => Some(Some(*name)),
        _ => None,
    }
}

fn info() -> Option<&'static ResourceInfo> {
    UNSTORED
        .iter()
        .find(|r| r.group == GROUP && r.plural == PLURAL)
}

/// `list`: an empty list at the store's current revision; `get` of one: 404; `watch`:
/// no events until the watch times out (a `sendInitialEvents` watch first gets its
/// initial-events-end bookmark); any other verb (as the request's authorization
/// attributes name it): 405.
pub(crate) async fn serve(
    state: &State,
    verb: &str,
    name: Option<&str>,
    query: &HashMap<String, String>,
    accept: Option<&str>,
) -> Result<Response<Body>, ApiError> {
    let info = info().ok_or_else(|| ApiError::internal("no CustomResourceDefinitions entry"))?;
    if let ("get", Some(name)) = (verb, name) {
        return Err(ApiError::not_found(GROUP, PLURAL, name));
    }
    if verb == "watch" {
        let target = output::negotiate(accept)?;
        let (tx, rx) = tokio::sync::mpsc::channel(1);
        if boolean(query, "sendInitialEvents") && boolean(query, "allowWatchBookmarks") {
            let revision = current_revision(state).await?;
            // The channel is new and holds one item: this cannot find it full.
            let _ = tx.try_send(WatchItem::Bookmark {
                revision,
                initial_events_end: true,
            });
        }
        return Ok(watch_response(state, info, query, target, rx, Some(tx)));
    }
    if verb != "list" {
        let mut e = ApiError::method_not_supported(GROUP, PLURAL, verb);
        e.message = format!(
            "{}: this server serves no custom resources, so it keeps no CustomResourceDefinitions",
            e.message
        );
        return Err(e);
    }
    let target = output::negotiate(accept)?;
    let revision = current_revision(state).await?;
    let meta = json!({"resourceVersion": revision.to_string()});
    let body = output::list(target, info, &[], meta, jiff::Timestamp::now());
    Ok(respond_body(
        StatusCode::OK,
        output::content_type(target),
        body.boxed_unsync(),
    ))
}

async fn current_revision(state: &State) -> Result<i64, ApiError> {
    state
        .registry
        .storage()
        .current_revision()
        .await
        .map_err(|e| ApiError::internal(format!("reading the current revision: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths() {
        assert_eq!(crd_path(&["apis", GROUP, "v1", PLURAL]), Some(None::<&str>));
        assert_eq!(
            crd_path(&["apis", GROUP, "v1", PLURAL, "foos.example.com"]),
            Some(Some("foos.example.com"))
        );
        assert_eq!(
            crd_path(&["apis", GROUP, "v1", PLURAL, "foos.example.com", "status"]),
            Some(Some("foos.example.com"))
        );
        assert_eq!(crd_path(&["apis", GROUP, "v1"]), None);
        assert_eq!(crd_path(&["apis", "apps", "v1", PLURAL]), None);
        assert_eq!(info().unwrap().kind, "CustomResourceDefinition");
    }
}
