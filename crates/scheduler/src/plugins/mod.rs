//! The in-tree plugins (`framework/plugins/*`), registered by upstream name.

use std::sync::Arc;

use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::framework::{FrameworkError, Handle, Plugin, Registry};

pub mod basic;
pub mod default_preemption;
pub mod inter_pod_affinity;
pub mod node_affinity;
pub mod node_resources;
pub mod pod_topology_spread;
pub mod volume;

#[cfg(test)]
pub(crate) mod testutil;

pub(crate) fn parse_args<T: DeserializeOwned + Default>(
    plugin: &str,
    args: Option<&Value>,
) -> Result<T, FrameworkError> {
    match args {
        None => Ok(T::default()),
        Some(v) => serde_json::from_value(v.clone())
            .map_err(|e| FrameworkError::InvalidArgs(plugin.to_string(), e.to_string())),
    }
}

fn arc<P: Plugin + 'static>(p: P) -> Result<Arc<dyn Plugin>, FrameworkError> {
    Ok(Arc::new(p))
}

/// Every in-tree plugin (`plugins.NewInTreeRegistry`).
pub fn default_registry() -> Registry {
    let mut r = Registry::new();
    r.register(basic::PRIORITY_SORT, |_, _| arc(basic::PrioritySort));
    r.register(basic::SCHEDULING_GATES, |_, _| arc(basic::SchedulingGates));
    r.register(basic::NODE_NAME, |_, _| arc(basic::NodeName));
    r.register(basic::NODE_UNSCHEDULABLE, |_, _| {
        arc(basic::NodeUnschedulable)
    });
    r.register(basic::NODE_PORTS, |_, _| arc(basic::NodePorts));
    r.register(basic::TAINT_TOLERATION, |_, _| arc(basic::TaintToleration));
    r.register(basic::IMAGE_LOCALITY, |_, _| arc(basic::ImageLocality));
    r.register(basic::DEFAULT_BINDER, |_, h: &Handle| {
        arc(basic::DefaultBinder {
            binder: h.binder.clone(),
        })
    });
    r.register(node_affinity::NAME, |a, _| {
        arc(node_affinity::NodeAffinity::new(parse_args(
            node_affinity::NAME,
            a,
        )?))
    });
    r.register(node_resources::FIT, |a, _| {
        arc(node_resources::Fit::new(parse_args(
            node_resources::FIT,
            a,
        )?)?)
    });
    r.register(node_resources::BALANCED, |a, _| {
        arc(node_resources::BalancedAllocation::new(parse_args(
            node_resources::BALANCED,
            a,
        )?))
    });
    r.register(pod_topology_spread::NAME, |a, h: &Handle| {
        arc(pod_topology_spread::PodTopologySpread::new(
            parse_args(pod_topology_spread::NAME, a)?,
            h.lister.clone(),
        )?)
    });
    r.register(inter_pod_affinity::NAME, |a, h: &Handle| {
        arc(inter_pod_affinity::InterPodAffinity::new(
            parse_args(inter_pod_affinity::NAME, a)?,
            h.lister.clone(),
        ))
    });
    r.register(default_preemption::NAME, |a, h: &Handle| {
        arc(default_preemption::DefaultPreemption::new(
            parse_args(default_preemption::NAME, a)?,
            h.lister.clone(),
        ))
    });
    r.register(volume::VOLUME_BINDING, |a, h: &Handle| {
        arc(volume::VolumeBinding::new(
            parse_args(volume::VOLUME_BINDING, a)?,
            h.lister.clone(),
            h.volume_binder.clone(),
        ))
    });
    r.register(volume::VOLUME_RESTRICTIONS, |_, h: &Handle| {
        arc(volume::VolumeRestrictions {
            lister: h.lister.clone(),
        })
    });
    r
}
