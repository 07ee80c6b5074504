//! The store runs a request's admission where upstream's generic store does:
//! mutation before validation on create and on the patched object of an update
//! (re-run when the write loses a race), validation on the final object, and the
//! delete check on the stored object.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use async_trait::async_trait;
use ferrokube_apimachinery::errors::ApiError;
use ferrokube_registry::{
    Admission, Admit, DeleteOptions, Part, PatchType, Registry, RegistryConfig, UpdateInput,
    WriteOptions,
};
use ferrokube_storage_sqlite::{SqliteOptions, SqliteStorage};
use serde_json::{Value, json};

async fn registry(dir: &tempfile::TempDir) -> Registry {
    let storage =
        SqliteStorage::open(&dir.path().join("db.sqlite"), SqliteOptions::default()).unwrap();
    Registry::new(Arc::new(storage), RegistryConfig::default())
        .await
        .unwrap()
}

/// Labels every written object with the operation and the count of mutations so
/// far; refuses objects labelled `deny` and deletes of objects labelled `keep`.
#[derive(Default)]
struct Labeller {
    mutations: AtomicUsize,
    /// A write to the same object made during the first mutation (a lost race).
    interfere: Option<Arc<ferrokube_registry::Store>>,
}

#[async_trait]
impl Admission for Labeller {
    async fn mutate(&self, new: &mut Value, old: Option<&Value>) -> Result<(), ApiError> {
        let n = self.mutations.fetch_add(1, Ordering::SeqCst) + 1;
        let op = if old.is_some() { "update" } else { "create" };
        new["metadata"]["labels"]["op"] = json!(op);
        new["metadata"]["labels"]["mutations"] = json!(n.to_string());
        if n == 1
            && let Some(store) = &self.interfere
        {
            store
                .update(
                    Some("default"),
                    "a",
                    UpdateInput::Patch(PatchType::Merge, json!({"data": {"other": "write"}})),
                    Part::Main,
                    &WriteOptions::default(),
                )
                .await?;
        }
        Ok(())
    }

    async fn validate(&self, new: &mut Value, _old: Option<&Value>) -> Result<(), ApiError> {
        // Validation sees the object the strategy prepared (uid set on create).
        assert!(new["metadata"]["uid"].is_string());
        if new["metadata"]["labels"]["deny"].is_string() {
            return Err(ApiError::forbidden("", "configmaps", "a", "denied"));
        }
        Ok(())
    }

    async fn validate_delete(&self, current: &Value) -> Result<(), ApiError> {
        if current["metadata"]["labels"]["keep"].is_string() {
            return Err(ApiError::forbidden("", "configmaps", "a", "kept"));
        }
        Ok(())
    }
}

fn with(admission: Labeller) -> WriteOptions {
    WriteOptions {
        admit: Some(Admit(Arc::new(admission))),
        ..WriteOptions::default()
    }
}

#[tokio::test]
async fn admission_mutates_then_validates_creates_patches_and_deletes() {
    let dir = tempfile::tempdir().unwrap();
    let reg = registry(&dir).await;
    let cm = reg.store("", "v1", "configmaps").unwrap().clone();

    let w = cm
        .create(
            Some("default"),
            json!({"metadata": {"name": "a"}, "data": {"k": "v"}}),
            &with(Labeller::default()),
        )
        .await
        .unwrap();
    assert_eq!(w.object["metadata"]["labels"]["op"], "create");

    // The mutation sees the patched object and its result is what is stored.
    let w = cm
        .update(
            Some("default"),
            "a",
            UpdateInput::Patch(PatchType::Merge, json!({"data": {"k": "w"}})),
            Part::Main,
            &with(Labeller::default()),
        )
        .await
        .unwrap();
    assert_eq!(w.object["metadata"]["labels"]["op"], "update");
    assert_eq!(w.object["data"]["k"], "w");

    // A write that lands between admission and the store's write: the update starts
    // over on the new object and admits it again.
    let w = cm
        .update(
            Some("default"),
            "a",
            UpdateInput::Patch(PatchType::Merge, json!({"data": {"k": "x"}})),
            Part::Main,
            &with(Labeller {
                interfere: Some(cm.clone()),
                ..Labeller::default()
            }),
        )
        .await
        .unwrap();
    assert_eq!(w.object["metadata"]["labels"]["mutations"], "2");
    assert_eq!(w.object["data"]["other"], "write");
    assert_eq!(w.object["data"]["k"], "x");

    // Validation refuses; nothing is written.
    let e = cm
        .update(
            Some("default"),
            "a",
            UpdateInput::Patch(
                PatchType::Merge,
                json!({"metadata": {"labels": {"deny": "1"}}}),
            ),
            Part::Main,
            &with(Labeller::default()),
        )
        .await
        .unwrap_err();
    assert_eq!(e.code, 403);
    let stored = cm.get(Some("default"), "a").await.unwrap();
    assert!(stored["metadata"]["labels"]["deny"].is_null());
    let e = cm
        .create(
            Some("default"),
            json!({"metadata": {"name": "b", "labels": {"deny": "1"}}}),
            &with(Labeller::default()),
        )
        .await
        .unwrap_err();
    assert_eq!(e.code, 403);
    assert_eq!(cm.get(Some("default"), "b").await.unwrap_err().code, 404);

    // Deletes are checked against the stored object.
    cm.update(
        Some("default"),
        "a",
        UpdateInput::Patch(
            PatchType::Merge,
            json!({"metadata": {"labels": {"keep": "1"}}}),
        ),
        Part::Main,
        &WriteOptions::default(),
    )
    .await
    .unwrap();
    let delete = DeleteOptions {
        admit: Some(Admit(Arc::new(Labeller::default()))),
        ..DeleteOptions::default()
    };
    let e = cm.delete(Some("default"), "a", &delete).await.unwrap_err();
    assert_eq!(e.message, "configmaps \"a\" is forbidden: kept");
    cm.get(Some("default"), "a").await.unwrap();
    cm.update(
        Some("default"),
        "a",
        UpdateInput::Patch(
            PatchType::Merge,
            json!({"metadata": {"labels": {"keep": null}}}),
        ),
        Part::Main,
        &WriteOptions::default(),
    )
    .await
    .unwrap();
    assert!(cm.delete(Some("default"), "a", &delete).await.unwrap().gone);
}
