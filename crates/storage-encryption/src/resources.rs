//! Which rule covers a stored key: upstream's group/resource matching (exact, then
//! `*.<group>`, then `*.*`) over Ferrokube's key layout.

use std::sync::Arc;

use ferrokube_api::resources::RESOURCES;

use crate::providers::{Chain, Provider};

/// Where every resource is stored.
const ROOT: &str = "/registry/";

/// A `resources` entry of the configuration.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct GroupResource {
    pub group: String,
    pub resource: String,
}

impl GroupResource {
    /// Upstream's `schema.ParseGroupResource`: the resource up to the first dot, the
    /// group after it, so `secrets` and `secrets.` are both core.
    pub(crate) fn parse(s: &str) -> GroupResource {
        let (resource, group) = s.split_once('.').unwrap_or((s, ""));
        GroupResource {
            group: group.to_string(),
            resource: resource.to_string(),
        }
    }

    fn new(group: &str, resource: &str) -> GroupResource {
        GroupResource {
            group: group.to_string(),
            resource: resource.to_string(),
        }
    }

    fn is(&self, group: &str, resource: &str) -> bool {
        self.group == group && self.resource == resource
    }

    /// As upstream's messages spell it (`*.` for every core resource).
    pub(crate) fn describe(&self) -> String {
        match (self.group.as_str(), self.resource.as_str()) {
            ("", "*") => "*.".to_string(),
            ("", r) => r.to_string(),
            (g, r) => format!("{r}.{g}"),
        }
    }
}

/// The configured chains by group/resource.
#[derive(Debug)]
pub(crate) struct Rules {
    rules: Vec<(GroupResource, Arc<Chain>)>,
}

impl Rules {
    /// The rules of `entries` (each: its resources and its providers, in config order).
    /// A resource named in several entries gets the providers of all of them in order,
    /// as upstream; one named after a `*.<group>` or `*.*` that covers it is refused,
    /// since the earlier wildcard would hide it.
    pub(crate) fn build(
        entries: Vec<(Vec<GroupResource>, Vec<Arc<Provider>>)>,
    ) -> Result<Rules, String> {
        let mut lists: Vec<(GroupResource, Vec<Arc<Provider>>)> = Vec::new();
        for (resources, providers) in entries {
            for gr in resources {
                let masking = [
                    GroupResource::new(&gr.group, "*"),
                    GroupResource::new("*", "*"),
                ];
                for mask in masking {
                    if lists.iter().any(|(g, _)| *g == mask) {
                        return Err(format!(
                            "resource {:?} is masked by earlier rule {:?}",
                            gr.describe(),
                            mask.describe()
                        ));
                    }
                }
                match lists.iter_mut().find(|(g, _)| *g == gr) {
                    Some((_, list)) => list.extend(providers.iter().cloned()),
                    None => lists.push((gr, providers.clone())),
                }
            }
        }
        Ok(Rules {
            rules: lists
                .into_iter()
                .map(|(gr, providers)| (gr, Arc::new(Chain::new(providers))))
                .collect(),
        })
    }

    fn find(&self, group: &str, resource: &str) -> Option<&Arc<Chain>> {
        self.rules
            .iter()
            .find(|(gr, _)| gr.is(group, resource))
            .map(|(_, chain)| chain)
    }

    /// Upstream's `transformerFromOverrides`: the resource's own rule, else its group's
    /// `*.<group>`, else `*.*`.
    pub(crate) fn lookup(&self, group: &str, resource: &str) -> Option<&Arc<Chain>> {
        self.find(group, resource)
            .or_else(|| self.find(group, "*"))
            .or_else(|| self.find("*", "*"))
    }
}

/// Maps a stored key to its resource's chain.
#[derive(Debug)]
pub(crate) struct Resolver {
    /// Every built-in storage prefix (with its trailing slash) and its chain, if any.
    builtin: Vec<(String, Option<Arc<Chain>>)>,
    rules: Rules,
}

impl Resolver {
    pub(crate) fn new(rules: Rules) -> Resolver {
        let mut builtin: Vec<(String, Option<Arc<Chain>>)> = Vec::new();
        for r in RESOURCES {
            let prefix = format!("{}/", r.storage_prefix);
            // Events are served in core and in events.k8s.io from one storage; upstream
            // stores both as core `events` (and refuses `*.events.k8s.io`), so the
            // first entry, core's, decides.
            if builtin.iter().any(|(p, _)| *p == prefix) {
                continue;
            }
            builtin.push((prefix, rules.lookup(r.group, r.plural).cloned()));
        }
        Resolver { builtin, rules }
    }

    /// The chain of the resource stored at `key`; `None` for keys of no configured
    /// resource and for keys of no resource at all (allocator ranges, leases of the
    /// apiserver endpoints), which upstream cannot encrypt either.
    pub(crate) fn resolve(&self, key: &str) -> Option<&Arc<Chain>> {
        let rest = key.strip_prefix(ROOT)?;
        if let Some((_, chain)) = self
            .builtin
            .iter()
            .find(|(p, _)| key.starts_with(p.as_str()))
        {
            return chain.as_ref();
        }
        // Custom resources live at `/registry/<group>/<plural>/...`. Their groups always
        // contain a dot (CRD validation requires one); the only built-in prefixes with a
        // dotted segment were matched above, so other dotless segments are not resources.
        let (group, rest) = rest.split_once('/')?;
        let (resource, _) = rest.split_once('/')?;
        if !group.contains('.') {
            return None;
        }
        self.rules.lookup(group, resource)
    }
}
