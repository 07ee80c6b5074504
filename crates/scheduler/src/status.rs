//! Plugin results (`framework.Status`) and the unschedulable message (`FitError`).

use std::collections::BTreeMap;
use std::fmt;

/// `framework.Code`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Code {
    Success,
    Error,
    Unschedulable,
    UnschedulableAndUnresolvable,
    Wait,
    Skip,
    Pending,
}

impl Code {
    /// Upstream's names, as printed in logs and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            Code::Success => "Success",
            Code::Error => "Error",
            Code::Unschedulable => "Unschedulable",
            Code::UnschedulableAndUnresolvable => "UnschedulableAndUnresolvable",
            Code::Wait => "Wait",
            Code::Skip => "Skip",
            Code::Pending => "Pending",
        }
    }
}

/// The result of running a plugin: a code, reasons, and the plugin that failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Status {
    pub code: Code,
    pub reasons: Vec<String>,
    pub plugin: String,
}

impl Default for Status {
    fn default() -> Self {
        Status::success()
    }
}

impl Status {
    pub fn new(code: Code, reason: impl Into<String>) -> Status {
        let r: String = reason.into();
        Status {
            code,
            reasons: if r.is_empty() { vec![] } else { vec![r] },
            plugin: String::new(),
        }
    }
    pub fn success() -> Status {
        Status {
            code: Code::Success,
            reasons: vec![],
            plugin: String::new(),
        }
    }
    pub fn skip() -> Status {
        Status::new(Code::Skip, "")
    }
    pub fn error(msg: impl Into<String>) -> Status {
        Status::new(Code::Error, msg)
    }
    pub fn unschedulable(reason: impl Into<String>) -> Status {
        Status::new(Code::Unschedulable, reason)
    }
    pub fn unresolvable(reason: impl Into<String>) -> Status {
        Status::new(Code::UnschedulableAndUnresolvable, reason)
    }
    pub fn with_reasons(code: Code, reasons: Vec<String>) -> Status {
        Status {
            code,
            reasons,
            plugin: String::new(),
        }
    }
    pub fn with_plugin(mut self, plugin: &str) -> Status {
        if self.plugin.is_empty() {
            self.plugin = plugin.to_string();
        }
        self
    }
    pub fn is_success(&self) -> bool {
        self.code == Code::Success
    }
    pub fn is_skip(&self) -> bool {
        self.code == Code::Skip
    }
    pub fn is_rejected(&self) -> bool {
        matches!(
            self.code,
            Code::Unschedulable | Code::UnschedulableAndUnresolvable | Code::Pending
        )
    }
    pub fn is_wait(&self) -> bool {
        self.code == Code::Wait
    }
    pub fn is_error(&self) -> bool {
        self.code == Code::Error
    }
    /// The reasons joined with ", " (`Status.Message`).
    pub fn message(&self) -> String {
        self.reasons.join(", ")
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code.as_str(), self.message())
    }
}

/// Per-node filter statuses of one scheduling attempt (`NodeToStatus`).
#[derive(Debug, Clone, Default)]
pub struct NodeToStatus {
    pub map: BTreeMap<String, Status>,
    /// The status of every node absent from `map` (after a PreFilter rejection or a
    /// PreFilterResult that excluded nodes).
    pub absent: Option<Status>,
}

impl NodeToStatus {
    pub fn get(&self, node: &str) -> Option<&Status> {
        self.map.get(node).or(self.absent.as_ref())
    }
}

/// Why a pod fit no node (`framework.Diagnosis`).
#[derive(Debug, Clone, Default)]
pub struct Diagnosis {
    pub node_to_status: NodeToStatus,
    pub unschedulable_plugins: std::collections::HashSet<String>,
    pub pending_plugins: std::collections::HashSet<String>,
    pub pre_filter_msg: String,
    pub post_filter_msg: String,
}

/// `framework.FitError`.
#[derive(Debug, Clone)]
pub struct FitError {
    pub num_all_nodes: usize,
    pub diagnosis: Diagnosis,
}

/// "N reason" strings counted over the statuses, sorted (`sortReasonsHistogram`).
pub fn reasons_histogram<'a>(statuses: impl Iterator<Item = &'a Status>) -> Vec<String> {
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for s in statuses {
        for r in &s.reasons {
            *counts.entry(r.as_str()).or_default() += 1;
        }
    }
    let mut out: Vec<String> = counts
        .into_iter()
        .map(|(r, n)| format!("{n} {r}"))
        .collect();
    out.sort();
    out
}

impl fmt::Display for FitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "0/{} nodes are available:", self.num_all_nodes)?;
        if !self.diagnosis.pre_filter_msg.is_empty() {
            write!(f, " {}.", self.diagnosis.pre_filter_msg)?;
        } else {
            let reasons = reasons_histogram(self.diagnosis.node_to_status.map.values());
            write!(f, " {}.", reasons.join(", "))?;
        }
        if !self.diagnosis.post_filter_msg.is_empty() {
            write!(f, " {}.", self.diagnosis.post_filter_msg)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fit_error_message_matches_upstream_format() {
        let mut d = Diagnosis::default();
        d.node_to_status.map.insert(
            "cp".into(),
            Status::unresolvable(
                "node(s) had untolerated taint {node-role.kubernetes.io/control-plane: }",
            ),
        );
        d.node_to_status
            .map
            .insert("w1".into(), Status::unschedulable("Insufficient cpu"));
        d.node_to_status
            .map
            .insert("w2".into(), Status::unschedulable("Insufficient cpu"));
        d.post_filter_msg =
            "preemption: 0/3 nodes are available: 3 No preemption victims found for incoming pod"
                .into();
        let e = FitError {
            num_all_nodes: 3,
            diagnosis: d,
        };
        assert_eq!(
            e.to_string(),
            "0/3 nodes are available: 1 node(s) had untolerated taint {node-role.kubernetes.io/control-plane: }, 2 Insufficient cpu. preemption: 0/3 nodes are available: 3 No preemption victims found for incoming pod."
        );
        let pre = FitError {
            num_all_nodes: 2,
            diagnosis: Diagnosis {
                pre_filter_msg: "pod has unbound immediate PersistentVolumeClaims".into(),
                ..Default::default()
            },
        };
        assert_eq!(
            pre.to_string(),
            "0/2 nodes are available: pod has unbound immediate PersistentVolumeClaims."
        );
    }
}
