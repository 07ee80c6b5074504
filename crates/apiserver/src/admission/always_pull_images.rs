//! AlwaysPullImages (upstream `plugin/pkg/admission/alwayspullimages`), off by
//! default: every container of a new pod, or of an update that brings a new image,
//! pulls its image always, so a pod cannot use an image cached on its node that its
//! own credentials could not pull. Mutating (sets `imagePullPolicy: Always`) and
//! validating (a later mutation may not undo it).

use std::collections::HashSet;
use std::sync::Arc;

use async_trait::async_trait;
use ferrokube_apimachinery::errors::{ApiError, FieldError, FieldPath};
use serde_json::{Value, json};

use super::{Attributes, Operation, Plugin, PluginInit};

pub(crate) const NAME: &str = "AlwaysPullImages";

/// Upstream `pods.VisitContainersWithPath`'s lists.
const CONTAINER_LISTS: [&str; 3] = ["initContainers", "containers", "ephemeralContainers"];

pub(crate) struct AlwaysPullImages;

pub(crate) fn new(_init: &PluginInit<'_>) -> Result<Arc<dyn Plugin>, String> {
    Ok(Arc::new(AlwaysPullImages))
}

fn images(pod: &Value) -> HashSet<&str> {
    CONTAINER_LISTS
        .iter()
        .filter_map(|l| pod["spec"][*l].as_array())
        .flatten()
        .filter_map(|c| c["image"].as_str())
        .collect()
}

/// Upstream `isUpdateWithNoNewImages`: an update whose images the pod already had is
/// left alone.
fn brings_new_image(pod: &Value, old: Option<&Value>) -> bool {
    match old {
        None => true,
        Some(old) => {
            let had = images(old);
            images(pod).iter().any(|i| !had.contains(i))
        }
    }
}

#[async_trait]
impl Plugin for AlwaysPullImages {
    fn name(&self) -> &'static str {
        NAME
    }

    fn handles(&self, a: &Attributes) -> bool {
        a.is_pod_write(&[Operation::Create, Operation::Update])
    }

    async fn admit(
        &self,
        _a: &Attributes,
        pod: &mut Value,
        old: Option<&Value>,
    ) -> Result<(), ApiError> {
        if !brings_new_image(pod, old) {
            return Ok(());
        }
        for list in CONTAINER_LISTS {
            // `pointer_mut`, not indexing: an index would add `list: null` to the pod.
            if let Some(containers) = pod
                .pointer_mut(&format!("/spec/{list}"))
                .and_then(Value::as_array_mut)
            {
                for c in containers.iter_mut().filter(|c| c.is_object()) {
                    c["imagePullPolicy"] = json!("Always");
                }
            }
        }
        Ok(())
    }

    async fn validate(
        &self,
        a: &Attributes,
        pod: Option<&Value>,
        old: Option<&Value>,
    ) -> Result<(), ApiError> {
        let Some(pod) = pod.filter(|p| brings_new_image(p, old)) else {
            return Ok(());
        };
        for list in CONTAINER_LISTS {
            for (i, c) in pod["spec"][list]
                .as_array()
                .into_iter()
                .flatten()
                .enumerate()
            {
                let policy = c["imagePullPolicy"].as_str().unwrap_or("");
                if policy != "Always" {
                    let path = FieldPath::new("spec")
                        .child(list)
                        .index(i)
                        .child("imagePullPolicy");
                    let err = FieldError::not_supported(&path, policy, &["Always"]);
                    return Err(a.forbidden(err));
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_new_images_count_on_update() {
        let pod = |images: &[&str]| {
            let cs: Vec<Value> = images.iter().map(|i| json!({"image": i})).collect();
            json!({"spec": {"containers": cs}})
        };
        assert!(brings_new_image(&pod(&["a"]), None));
        assert!(!brings_new_image(&pod(&["a"]), Some(&pod(&["a", "b"]))));
        assert!(brings_new_image(&pod(&["a", "c"]), Some(&pod(&["a"]))));
    }

    #[tokio::test]
    async fn every_container_pulls_always_and_absent_lists_stay_absent() {
        let info = ferrokube_api::resources::lookup("", "v1", "pods").unwrap();
        let user = ferrokube_auth::UserInfo::new("alice", ["x"]);
        let a = Attributes::new(user, Operation::Create, info);
        let mut pod = json!({"spec": {"containers": [
            {"name": "c", "image": "x", "imagePullPolicy": "IfNotPresent"}]}});
        AlwaysPullImages.admit(&a, &mut pod, None).await.unwrap();
        assert_eq!(
            pod,
            json!({"spec": {"containers": [
                {"name": "c", "image": "x", "imagePullPolicy": "Always"}]}})
        );
    }
}
