//! client-go's `SharedInformerFactory`: one informer per resource type (and
//! namespace) per factory, started together, synced together, stopped together.

use std::any::{Any, TypeId};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use k8s_openapi::NamespaceResourceScope;
use kube::{Api, Client, Resource};
use parking_lot::Mutex;

use super::{InformerConfig, InformerResource, SharedIndexInformer};
use crate::{Error, Result};

/// The type-erased side of an informer the factory drives.
trait Managed: Send + Sync {
    fn start(&self) -> bool;
    fn has_synced(&self) -> bool;
    fn description(&self) -> String;
    fn wait_for_sync(&self, timeout: Duration) -> BoxFuture<'_, bool>;
    fn stop(&self) -> BoxFuture<'_, ()>;
    fn as_any(&self) -> &dyn Any;
}

impl<K: InformerResource> Managed for SharedIndexInformer<K> {
    fn start(&self) -> bool {
        SharedIndexInformer::start(self)
    }
    fn has_synced(&self) -> bool {
        SharedIndexInformer::has_synced(self)
    }
    fn description(&self) -> String {
        SharedIndexInformer::description(self).to_string()
    }
    fn wait_for_sync(&self, timeout: Duration) -> BoxFuture<'_, bool> {
        Box::pin(SharedIndexInformer::wait_for_sync(self, timeout))
    }
    fn stop(&self) -> BoxFuture<'_, ()> {
        Box::pin(SharedIndexInformer::stop(self))
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

type Key = (TypeId, Option<String>);

struct State {
    informers: HashMap<Key, Arc<dyn Managed>>,
    /// Informers requested after `start` are started at once.
    started: bool,
    shut_down: bool,
}

/// Hands every consumer of a process the same informer per resource type and
/// namespace, so each is listed and watched once. Cheap to clone.
#[derive(Clone)]
pub struct SharedInformerFactory {
    client: Client,
    config: InformerConfig,
    state: Arc<Mutex<State>>,
}

impl std::fmt::Debug for SharedInformerFactory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let st = self.state.lock();
        let mut names: Vec<String> = st.informers.values().map(|i| i.description()).collect();
        names.sort();
        f.debug_struct("SharedInformerFactory")
            .field("informers", &names)
            .field("started", &st.started)
            .finish()
    }
}

impl SharedInformerFactory {
    /// A factory with the default [`InformerConfig`].
    pub fn new(client: Client) -> Self {
        Self::with_config(client, InformerConfig::default())
    }

    /// A factory whose informers all use `config` (selectors, list mode, resync).
    pub fn with_config(client: Client, config: InformerConfig) -> Self {
        SharedInformerFactory {
            client,
            config,
            state: Arc::new(Mutex::new(State {
                informers: HashMap::new(),
                started: false,
                shut_down: false,
            })),
        }
    }

    pub fn client(&self) -> &Client {
        &self.client
    }

    /// The informer of `K` across all namespaces (or of a cluster-scoped `K`).
    pub fn informer<K: InformerResource>(&self) -> SharedIndexInformer<K> {
        self.get_or_create::<K>(None, || Api::all(self.client.clone()))
    }

    /// The informer of the namespaced `K` in `namespace` only.
    pub fn namespaced_informer<K>(&self, namespace: &str) -> SharedIndexInformer<K>
    where
        K: InformerResource + Resource<Scope = NamespaceResourceScope>,
    {
        self.get_or_create::<K>(Some(namespace.to_string()), || {
            Api::namespaced(self.client.clone(), namespace)
        })
    }

    fn get_or_create<K: InformerResource>(
        &self,
        namespace: Option<String>,
        api: impl FnOnce() -> Api<K>,
    ) -> SharedIndexInformer<K> {
        let mut st = self.state.lock();
        let key = (TypeId::of::<K>(), namespace);
        if let Some(existing) = st.informers.get(&key)
            && let Some(inf) = existing.as_any().downcast_ref::<SharedIndexInformer<K>>()
        {
            return inf.clone();
        }
        let inf = SharedIndexInformer::new(api(), self.config.clone());
        if st.started && !st.shut_down {
            inf.start();
        }
        st.informers.insert(key, Arc::new(inf.clone()));
        inf
    }

    /// Starts every informer requested so far (and, from now on, each one as it is
    /// requested). Must be called within a tokio runtime.
    pub fn start(&self) {
        let mut st = self.state.lock();
        if st.shut_down {
            return;
        }
        st.started = true;
        for inf in st.informers.values() {
            inf.start();
        }
    }

    /// How many informers this factory holds.
    pub fn len(&self) -> usize {
        self.state.lock().informers.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Each informer's description and whether it has synced.
    pub fn sync_status(&self) -> BTreeMap<String, bool> {
        self.state
            .lock()
            .informers
            .values()
            .map(|i| (i.description(), i.has_synced()))
            .collect()
    }

    /// Waits until every started informer has synced (upstream's
    /// `WaitForCacheSync`); on timeout, names those that have not.
    pub async fn wait_for_cache_sync(&self, timeout: Duration) -> Result<()> {
        let informers: Vec<Arc<dyn Managed>> =
            self.state.lock().informers.values().cloned().collect();
        let deadline = tokio::time::Instant::now() + timeout;
        let mut missing = Vec::new();
        for inf in informers {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            if !inf.wait_for_sync(left).await {
                missing.push(inf.description());
            }
        }
        if missing.is_empty() {
            Ok(())
        } else {
            missing.sort();
            Err(Error::CacheSyncTimeout(missing))
        }
    }

    /// Stops every informer and waits for their tasks (upstream's `Shutdown`).
    pub async fn shutdown(&self) {
        let informers: Vec<Arc<dyn Managed>> = {
            let mut st = self.state.lock();
            st.shut_down = true;
            st.informers.values().cloned().collect()
        };
        for inf in informers {
            inf.stop().await;
        }
    }
}
