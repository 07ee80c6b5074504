//! Upstream's allocation manager (`pkg/kubelet/allocation`): what each pod's resizable
//! containers are allocated, by pod UID. A pod is allocated its spec's resources when
//! the kubelet first syncs it; a resize (its spec changed since) is allocated only once
//! the caller's decision admits it.
//!
//! The allocations are checkpointed under the kubelet's root dir ([`ALLOCATIONS_FILE`],
//! upstream's `allocated_pods_state`) on every change and read back at start, so that a
//! restarted kubelet keeps a resize that did not fit pending instead of allocating the
//! spec. The file is JSON of upstream's `allocationEntries` (pod UID -> container ->
//! resources) without upstream's checksum wrapper (a hash of Go's printing of its own
//! object), hence its own name. A file that cannot be read is logged and left out, as
//! upstream starts without a corrupt checkpoint.
//!
//! Layer: kubelet internals; no CRI or API calls here.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use k8s_openapi::api::core::v1::Pod;

use crate::resize::{Allocation, Decision, spec_allocation};
use crate::sandbox::uid;

/// The allocations' checkpoint, under the kubelet's root dir.
pub const ALLOCATIONS_FILE: &str = "ferrokube_allocated_pods_state";

/// Every pod's allocation, by pod UID.
pub type Allocations = HashMap<String, Allocation>;

/// The checkpoint's JSON: `A` is [`Allocations`] read, a reference to them written.
#[derive(serde::Serialize, serde::Deserialize)]
struct Checkpoint<A> {
    #[serde(rename = "allocationEntries")]
    allocation_entries: A,
}

/// The allocations checkpointed at `path`: none when there is no file; an unreadable or
/// corrupt file is an error.
pub fn load(path: &Path) -> std::io::Result<Allocations> {
    let data = match std::fs::read(path) {
        Ok(data) => data,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Allocations::new()),
        Err(e) => return Err(e),
    };
    let checkpoint: Checkpoint<Allocations> = serde_json::from_slice(&data)
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))?;
    Ok(checkpoint.allocation_entries)
}

/// Writes `allocations` to `path` whole: to a temporary file first, synced, then renamed
/// over it, so that a crash leaves the old checkpoint or the new one.
pub fn save(path: &Path, allocations: &Allocations) -> std::io::Result<()> {
    let data = serde_json::to_vec(&Checkpoint {
        allocation_entries: allocations,
    })?;
    let tmp = path.with_extension("tmp");
    {
        use std::io::Write;
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(&data)?;
        f.sync_all()?;
    }
    std::fs::rename(&tmp, path)
}

/// The allocations, checkpointed to a file once [`AllocationManager::checkpointed_at`]
/// names one.
#[derive(Debug, Default)]
pub struct AllocationManager {
    allocations: Mutex<Allocations>,
    file: Option<PathBuf>,
}

impl AllocationManager {
    /// Checkpoints to `file` from now on, taking back the allocations it holds.
    pub fn checkpointed_at(&mut self, file: PathBuf) {
        match load(&file) {
            Ok(saved) => {
                if let Ok(mut all) = self.allocations.lock() {
                    all.extend(saved);
                }
            }
            Err(e) => tracing::warn!(
                path = %file.display(), error = %e,
                "reading the pod allocations checkpoint; starting without it"
            ),
        }
        self.file = Some(file);
    }

    /// What `pod` is allocated, if it has been.
    pub fn get(&self, pod_uid: &str) -> Option<Allocation> {
        self.allocations.lock().ok()?.get(pod_uid).cloned()
    }

    /// Allocates `pod` what its spec asks for, unless it holds another allocation and
    /// `decide` (given the pod as the spec has it) does not admit the change; then the
    /// allocation stays and the pending reason and message are returned.
    pub fn allocate(
        &self,
        pod: &Pod,
        decide: impl FnOnce(&Pod) -> Decision,
    ) -> Option<(&'static str, String)> {
        let wanted = spec_allocation(pod);
        // Not locked while `decide` runs: it reads the other pods' allocations.
        if let Some(current) = self.get(uid(pod))
            && current != wanted
            && let Decision::Pending { reason, message } = decide(pod)
        {
            return Some((reason, message));
        }
        self.change(|all| {
            if all.get(uid(pod)) == Some(&wanted) {
                return false;
            }
            all.insert(uid(pod).to_owned(), wanted);
            true
        });
        None
    }

    /// Forgets a pod's allocation (it is gone from the node).
    pub fn forget(&self, pod_uid: &str) {
        self.change(|all| all.remove(pod_uid).is_some());
    }

    /// Forgets the allocations of pods `keep` does not name (upstream
    /// `RemoveOrphanedPods`): those deleted while the kubelet was down.
    pub fn retain(&self, keep: impl Fn(&str) -> bool) {
        self.change(|all| {
            let before = all.len();
            all.retain(|pod_uid, _| keep(pod_uid));
            all.len() != before
        });
    }

    /// Runs `edit` on the allocations and checkpoints them when it says it changed
    /// them; a failed write is logged, and the next change writes them all again.
    fn change(&self, edit: impl FnOnce(&mut Allocations) -> bool) {
        let Ok(mut all) = self.allocations.lock() else {
            return;
        };
        if edit(&mut all)
            && let Some(path) = &self.file
            && let Err(e) = save(path, &all)
        {
            tracing::warn!(path = %path.display(), error = %e, "writing the pod allocations checkpoint");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(cpu: &str) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "p", "uid": "pod-uid"},
            "spec": {"containers": [{"name": "app", "image": "i",
                "resources": {"requests": {"cpu": cpu}}}]},
        }))
        .unwrap()
    }

    fn cpu_of(a: &Allocation) -> String {
        a["app"].requests.as_ref().unwrap()["cpu"].0.clone()
    }

    fn pending() -> Decision {
        Decision::Pending {
            reason: "Infeasible",
            message: "no room".into(),
        }
    }

    #[test]
    fn checkpoint_round_trips_and_refuses_a_corrupt_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(ALLOCATIONS_FILE);
        assert!(load(&path).unwrap().is_empty(), "no file: none");
        let all = Allocations::from([("pod-uid".to_string(), spec_allocation(&pod("250m")))]);
        save(&path, &all).unwrap();
        assert_eq!(load(&path).unwrap(), all);
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(
            text.starts_with(r#"{"allocationEntries":{"pod-uid":{"app":"#),
            "{text}"
        );
        std::fs::write(&path, "{not json").unwrap();
        assert_eq!(
            load(&path).unwrap_err().kind(),
            std::io::ErrorKind::InvalidData
        );
    }

    #[test]
    fn a_pending_resize_stays_pending_across_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join(ALLOCATIONS_FILE);
        let mut before = AllocationManager::default();
        before.checkpointed_at(file.clone());
        // First sync: the spec, whatever the decision would say.
        assert_eq!(before.allocate(&pod("250m"), |_| pending()), None);
        // A resize that does not fit waits, and the old allocation stays.
        let (reason, _) = before.allocate(&pod("4"), |_| pending()).unwrap();
        assert_eq!(reason, "Infeasible");
        assert_eq!(cpu_of(&before.get("pod-uid").unwrap()), "250m");

        // A new kubelet reads the checkpoint: the resize is still pending, not taken
        // as the pod's first allocation.
        let mut after = AllocationManager::default();
        after.checkpointed_at(file.clone());
        assert_eq!(cpu_of(&after.get("pod-uid").unwrap()), "250m");
        assert!(after.allocate(&pod("4"), |_| pending()).is_some());
        // Admitted, it is allocated and checkpointed.
        assert_eq!(after.allocate(&pod("4"), |_| Decision::Admit), None);
        assert_eq!(cpu_of(&load(&file).unwrap()["pod-uid"]), "4");

        // Pods gone while the kubelet was down are forgotten, in the file too.
        after.retain(|uid| uid != "pod-uid");
        assert!(after.get("pod-uid").is_none());
        assert!(load(&file).unwrap().is_empty());
    }
}
