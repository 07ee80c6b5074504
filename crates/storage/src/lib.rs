//! The storage contract of Ferrokube: versioned, watchable keys and bytes.
//!
//! Layer: the bottom of the server side. Only `registry` (and, through it, the
//! apiserver) uses this crate; backends (`storage-sqlite`, `storage-etcd`) implement
//! [`Storage`]. It knows no resource types: keys are strings, values are bytes.
//! It must not depend on any other Ferrokube crate, and does no IO of its own.
//!
//! # Semantics (etcd's, which the Kubernetes apiserver relies on)
//! * One global revision per store, strictly increasing: every successful write
//!   (create, update, delete) gets the next revision. A fresh, empty store is at
//!   revision 1 (as etcd is), so the first write gets revision 2 and "0" is free to
//!   mean "no revision" / "from now".
//! * Each key carries the revision of its creation and of its last modification.
//! * History older than the last [`Storage::compact`] revision may be gone: reads at
//!   and watches from such revisions fail with [`StorageError::Expired`].
//! * A watch from revision `R` delivers every event with revision `> R` for keys under
//!   its prefix, in revision order, or ends with an error. `R == 0` means "from now".
//!
//! The backend-independent conformance suite lives in [`conformance`] (feature
//! `conformance`); every backend runs it with [`storage_conformance_tests!`].

use std::fmt;

use async_trait::async_trait;
use bytes::Bytes;
use futures::stream::BoxStream;

mod continue_token;
pub use continue_token::ContinueToken;

#[cfg(feature = "conformance")]
pub mod conformance;

/// A store revision. Always positive for a real write; 0 means "none" / "from now".
pub type Revision = i64;

/// A key with its current value and revisions.
#[derive(Clone, PartialEq, Eq)]
pub struct KeyValue {
    pub key: String,
    pub value: Bytes,
    /// Revision at which this key was (last) created.
    pub create_revision: Revision,
    /// Revision of the write that produced this value.
    pub mod_revision: Revision,
}

impl fmt::Debug for KeyValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyValue")
            .field("key", &self.key)
            .field("value", &String::from_utf8_lossy(&self.value))
            .field("create_revision", &self.create_revision)
            .field("mod_revision", &self.mod_revision)
            .finish()
    }
}

/// Conditions a write must meet against the current stored value; failing one is a
/// [`StorageError::Conflict`], never retried.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Preconditions {
    /// The key's current `mod_revision` must equal this.
    pub revision: Option<Revision>,
    /// The stored object's `metadata.uid` must equal this (see [`value_uid`]).
    pub uid: Option<String>,
}

impl Preconditions {
    pub fn revision(revision: Revision) -> Self {
        Preconditions {
            revision: Some(revision),
            uid: None,
        }
    }

    /// Checks these preconditions against the current value of a key.
    pub fn check(&self, current: &KeyValue) -> Result<(), StorageError> {
        if let Some(want) = self.revision
            && current.mod_revision != want
        {
            return Err(StorageError::Conflict {
                key: current.key.clone(),
                message: format!(
                    "precondition failed: revision is {}, expected {want}",
                    current.mod_revision
                ),
            });
        }
        if let Some(want) = &self.uid {
            let have = value_uid(&current.value);
            if have.as_deref() != Some(want.as_str()) {
                return Err(StorageError::Conflict {
                    key: current.key.clone(),
                    message: format!(
                        "precondition failed: UID in precondition: {want}, UID in object meta: {}",
                        have.unwrap_or_default()
                    ),
                });
            }
        }
        Ok(())
    }
}

/// The `metadata.uid` of a stored value, when the value is a JSON object with one.
///
/// Storage knows no resource types, but every Kubernetes object has object metadata;
/// the uid precondition is the one place the contract looks inside a value.
pub fn value_uid(value: &[u8]) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct Meta {
        uid: Option<String>,
    }
    #[derive(serde::Deserialize)]
    struct Object {
        metadata: Option<Meta>,
    }
    serde_json::from_slice::<Object>(value).ok()?.metadata?.uid
}

/// Which revision a list reads at.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum RevisionMatch {
    /// The newest data (a consistent read).
    #[default]
    Latest,
    /// Exactly this revision; [`StorageError::Expired`] when compacted away,
    /// [`StorageError::FutureRevision`] when not reached yet.
    Exact(Revision),
    /// Any revision at least this new; the backend serves the newest.
    NotOlderThan(Revision),
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ListOptions {
    pub revision: RevisionMatch,
    /// At most this many items; 0 means no limit.
    pub limit: usize,
    /// A token from an earlier page of the same list; it fixes the revision, so
    /// `revision` is ignored when a token is given.
    pub continue_token: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListResult {
    /// Items in key order.
    pub items: Vec<KeyValue>,
    /// The revision the list was read at.
    pub revision: Revision,
    /// Present when more items follow; pass it back to get the next page.
    pub continue_token: Option<String>,
    /// How many items follow this page (0 when there is no next page).
    pub remaining: u64,
}

/// What an update function decided, given the current value of a key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Update {
    /// Store this new value.
    Write(Bytes),
    /// Leave the key as it is (a no-op update does not bump the revision).
    Keep,
}

/// The error an update function aborts with; handed back as [`StorageError::Aborted`].
pub type AbortError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// The update function of [`Storage::guaranteed_update`]. It gets the current value
/// (`None` when the key does not exist; writing then creates it) and may run several
/// times when concurrent writers race, so it must not have side effects.
pub type UpdateFn<'a> = dyn FnMut(Option<&KeyValue>) -> Result<Update, AbortError> + Send + 'a;

/// A deleted key: its last value and the revision of the delete.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Deleted {
    pub previous: KeyValue,
    pub revision: Revision,
}

/// One change seen by a watch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WatchEvent {
    /// A key was created.
    Added(KeyValue),
    /// A key's value was replaced.
    Modified {
        current: KeyValue,
        previous: KeyValue,
    },
    /// A key was removed at `revision`.
    Deleted {
        previous: KeyValue,
        revision: Revision,
    },
    /// No event under the prefix up to this revision (a bookmark); backends may send it
    /// when idle so watchers can advance their revision.
    Progress(Revision),
}

impl WatchEvent {
    pub fn revision(&self) -> Revision {
        match self {
            WatchEvent::Added(kv) => kv.mod_revision,
            WatchEvent::Modified { current, .. } => current.mod_revision,
            WatchEvent::Deleted { revision, .. } => *revision,
            WatchEvent::Progress(revision) => *revision,
        }
    }

    pub fn key(&self) -> Option<&str> {
        match self {
            WatchEvent::Added(kv) => Some(&kv.key),
            WatchEvent::Modified { current, .. } => Some(&current.key),
            WatchEvent::Deleted { previous, .. } => Some(&previous.key),
            WatchEvent::Progress(_) => None,
        }
    }
}

/// A watch: events in revision order. An `Err` item is the last one: the watch is
/// over (compacted, backend gone, or the watcher fell behind) and the caller re-lists
/// or re-watches from the last revision it saw.
pub type WatchStream = BoxStream<'static, Result<WatchEvent, StorageError>>;

/// Figures for metrics and benchmarks.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StorageStats {
    /// Bytes the backend uses on disk (database file(s), or etcd's db size).
    pub size_bytes: u64,
    /// Live keys.
    pub keys: u64,
    pub current_revision: Revision,
    pub compacted_revision: Revision,
}

#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    #[error("key {key:?} not found")]
    NotFound { key: String },
    #[error("key {key:?} already exists")]
    AlreadyExists { key: String },
    #[error("conflict on key {key:?}: {message}")]
    Conflict { key: String, message: String },
    #[error("revision {requested} has been compacted (oldest retained is {compacted})")]
    Expired {
        requested: Revision,
        compacted: Revision,
    },
    #[error("revision {requested} is newer than the current revision {current}")]
    FutureRevision {
        requested: Revision,
        current: Revision,
    },
    #[error("invalid request: {0}")]
    InvalidArgument(String),
    #[error("update aborted: {0}")]
    Aborted(AbortError),
    /// The backend cannot serve now (down, overloaded, a watcher fell behind);
    /// retrying later may succeed.
    #[error("storage unavailable: {0}")]
    Unavailable(String),
    #[error("internal storage error: {0}")]
    Internal(String),
}

impl StorageError {
    pub fn is_not_found(&self) -> bool {
        matches!(self, StorageError::NotFound { .. })
    }
    pub fn is_conflict(&self) -> bool {
        matches!(self, StorageError::Conflict { .. })
    }
    pub fn is_expired(&self) -> bool {
        matches!(self, StorageError::Expired { .. })
    }
}

pub type Result<T, E = StorageError> = std::result::Result<T, E>;

/// A versioned, watchable key-value store. See the crate docs for the semantics;
/// the conformance suite is the executable form of this contract.
#[async_trait]
pub trait Storage: Send + Sync + 'static {
    /// Creates `key`; [`StorageError::AlreadyExists`] when present. Returns the new
    /// revision.
    async fn create(&self, key: &str, value: Bytes) -> Result<Revision>;

    /// The value of `key` now, or at `revision` (a retained, not future, revision).
    async fn get(&self, key: &str, revision: Option<Revision>) -> Result<KeyValue>;

    /// Keys starting with `prefix`, in key order, paginated.
    async fn list(&self, prefix: &str, options: &ListOptions) -> Result<ListResult>;

    /// Read-modify-write with retry: reads the current value, checks
    /// `preconditions` (failure: [`StorageError::Conflict`]; on a missing key with
    /// preconditions: [`StorageError::NotFound`]), calls `update`, and writes the
    /// result only if nobody wrote the key in between; otherwise it starts over.
    /// Returns the stored value after the update (unchanged on [`Update::Keep`]).
    async fn guaranteed_update(
        &self,
        key: &str,
        preconditions: &Preconditions,
        update: &mut UpdateFn<'_>,
    ) -> Result<KeyValue>;

    /// Replaces `key`'s value only if its `mod_revision` is `expected_revision`;
    /// [`StorageError::Conflict`] otherwise, [`StorageError::NotFound`] if absent.
    async fn compare_and_swap(
        &self,
        key: &str,
        expected_revision: Revision,
        value: Bytes,
    ) -> Result<KeyValue>;

    /// Removes `key` if it meets `preconditions`; returns its last value.
    async fn delete(&self, key: &str, preconditions: &Preconditions) -> Result<Deleted>;

    /// Events for keys under `prefix` with revision `> from_revision` (0: from now).
    /// A compacted `from_revision` gives [`StorageError::Expired`] at once.
    async fn watch(&self, prefix: &str, from_revision: Revision) -> Result<WatchStream>;

    /// Drops history older than `revision`. Compacting at or below the current
    /// compacted revision is a no-op; above the current revision is an error.
    async fn compact(&self, revision: Revision) -> Result<()>;

    /// The newest revision of the store.
    async fn current_revision(&self) -> Result<Revision>;

    /// True when every revision [`Storage::current_revision`] can report is the
    /// revision of an event a watch of the store's keys receives (no other writer, no
    /// bookkeeping writes), so a watch cache that has applied `current_revision()` is
    /// current and may serve consistent reads (upstream's ConsistentListFromCache,
    /// which needs etcd's progress requests otherwise). Default: false.
    fn watch_sees_every_revision(&self) -> bool {
        false
    }

    async fn stats(&self) -> Result<StorageStats>;

    /// What kind of store this is, for operators and for the API's own reports:
    /// [`Backend::Etcd3`] is listed as `etcd-0` in `componentstatuses`, as upstream does.
    fn backend(&self) -> Backend;
}

/// The kinds of store behind [`Storage`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// The embedded SQLite store.
    Sqlite,
    /// An etcd v3 cluster.
    Etcd3,
}
