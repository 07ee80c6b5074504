//! Tests across modules: profiles built from configuration, the queue's movement
//! rules, and whole scheduling cycles (placement, failure messages, preemption).

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use serde_json::json;

use crate::cache::Snapshot;
use crate::config::{ExtensionPoint, KubeSchedulerConfiguration};
use crate::framework::*;
use crate::plugins::default_registry;
use crate::plugins::testutil::{node, pod, requests, snapshot};
use crate::queue::{BackoffConfig, FakeClock, QueueLocation, SchedulingQueue, backoff_duration};
use crate::schedule_one::{Algorithm, ScheduleError, num_feasible_nodes_to_find};
use crate::types::PodInfo;

fn default_fw() -> Arc<Framework> {
    fw_with(
        Handle::default(),
        &KubeSchedulerConfiguration::default_config(),
    )
}

fn fw_with(h: Handle, c: &KubeSchedulerConfiguration) -> Arc<Framework> {
    Arc::new(Framework::new(&default_registry(), &c.profiles[0], h).unwrap())
}

#[test]
fn default_profile_matches_upstream() {
    let fw = default_fw();
    assert_eq!(
        fw.plugin_names(ExtensionPoint::QueueSort),
        vec!["PrioritySort"]
    );
    assert_eq!(
        fw.plugin_names(ExtensionPoint::PreEnqueue),
        vec!["SchedulingGates"]
    );
    assert_eq!(
        fw.plugin_names(ExtensionPoint::Filter),
        vec![
            "NodeUnschedulable",
            "NodeName",
            "TaintToleration",
            "NodeAffinity",
            "NodePorts",
            "NodeResourcesFit",
            "VolumeRestrictions",
            "VolumeBinding",
            "PodTopologySpread",
            "InterPodAffinity"
        ]
    );
    assert_eq!(
        fw.score_weights(),
        vec![
            ("TaintToleration", 3),
            ("NodeAffinity", 2),
            ("NodeResourcesFit", 1),
            ("PodTopologySpread", 2),
            ("InterPodAffinity", 2),
            ("NodeResourcesBalancedAllocation", 1),
            ("ImageLocality", 1)
        ]
    );
    assert_eq!(
        fw.plugin_names(ExtensionPoint::PostFilter),
        vec!["DefaultPreemption"]
    );
    assert_eq!(fw.plugin_names(ExtensionPoint::Bind), vec!["DefaultBinder"]);
}

#[test]
fn profile_overrides() {
    let c = KubeSchedulerConfiguration::from_yaml(
        r#"
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: custom
  plugins:
    score:
      enabled:
      - name: ImageLocality
        weight: 7
      disabled:
      - name: NodeResourcesBalancedAllocation
    filter:
      disabled:
      - name: "*"
"#,
    )
    .unwrap();
    let fw = fw_with(Handle::default(), &c);
    assert_eq!(fw.profile_name, "custom");
    assert!(fw.plugin_names(ExtensionPoint::Filter).is_empty());
    let w = fw.score_weights();
    assert_eq!(w[0], ("ImageLocality", 7), "overrides come first");
    assert!(
        !w.iter()
            .any(|(n, _)| *n == "NodeResourcesBalancedAllocation")
    );
    let bad = KubeSchedulerConfiguration::from_yaml(
        "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\nprofiles:\n- plugins:\n    multiPoint:\n      enabled:\n      - name: NoSuchPlugin\n",
    )
    .unwrap();
    assert_eq!(
        Framework::new(&default_registry(), &bad.profiles[0], Handle::default()).unwrap_err(),
        FrameworkError::UnknownPlugin("NoSuchPlugin".into())
    );
}

#[test]
fn feasible_nodes_to_find() {
    for (pct, all, want) in [
        (0, 50, 50),
        (0, 100, 50 * 100 / 100),
        (0, 1000, 420),
        (0, 5000, 500),
        (0, 6000, 300),
        (0, 10000, 500),
        (30, 1000, 300),
        (100, 1000, 1000),
        (1, 1000, 100),
    ] {
        let got = num_feasible_nodes_to_find(pct, all);
        let want = if all >= 100 { want.max(100) } else { want };
        assert_eq!(got, want, "pct {pct} all {all}");
    }
}

// ---- Queue -----------------------------------------------------------------------

fn queue(clock: Arc<FakeClock>) -> SchedulingQueue {
    SchedulingQueue::new(&[default_fw()], BackoffConfig::default(), clock)
}

fn key(p: &Pod) -> String {
    crate::types::pod_key(p)
}

#[test]
fn backoff_doubles_to_max() {
    let c = BackoffConfig::default();
    let got: Vec<u64> = (1..=6).map(|a| backoff_duration(c, a).as_secs()).collect();
    assert_eq!(got, vec![1, 2, 4, 8, 10, 10]);
}

#[test]
fn pops_by_priority_then_age() {
    let clock = Arc::new(FakeClock::new());
    let q = queue(clock.clone());
    q.add(pod("low", json!({"spec": {"priority": 1}})));
    clock.step(Duration::from_millis(1));
    q.add(pod("high", json!({"spec": {"priority": 100}})));
    clock.step(Duration::from_millis(1));
    q.add(pod("low2", json!({"spec": {"priority": 1}})));
    let order: Vec<String> = std::iter::from_fn(|| q.try_pop())
        .map(|p| p.pod_info.key())
        .collect();
    assert_eq!(order, vec!["default/high", "default/low", "default/low2"]);
}

fn fail(q: &SchedulingQueue, plugin: &str) -> String {
    let mut p = q.try_pop().expect("a pod");
    let cycle = q.scheduling_cycle();
    p.unschedulable_plugins.insert(plugin.into());
    let k = p.pod_info.key();
    q.add_unschedulable_if_not_present(p, cycle);
    k
}

#[test]
fn unschedulable_pod_moves_on_relevant_node_add_only() {
    let clock = Arc::new(FakeClock::new());
    let q = queue(clock.clone());
    let p = pod("big", requests("8", "1Gi"));
    q.add(p.clone());
    let k = fail(&q, "NodeResourcesFit");
    assert_eq!(q.location(&k), QueueLocation::Unschedulable);
    // A node too small for the pod does not help (queueing hint: Skip).
    let small = node("small", json!({}));
    q.move_all_to_active_or_backoff(EVENT_NODE_ADD, EventObject::None, EventObject::Node(&small));
    assert_eq!(q.location(&k), QueueLocation::Unschedulable);
    // An unrelated event does not either.
    q.move_all_to_active_or_backoff(
        ClusterEvent::new(EventResource::PersistentVolume, ActionType::Add, "PVAdd"),
        EventObject::None,
        EventObject::None,
    );
    assert_eq!(q.location(&k), QueueLocation::Unschedulable);
    // A big enough node does; the pod is still backing off (1 s after 1 attempt).
    let big = node(
        "big",
        json!({"status": {"allocatable": {"cpu": "16", "memory": "64Gi", "pods": "110"}}}),
    );
    q.move_all_to_active_or_backoff(EVENT_NODE_ADD, EventObject::None, EventObject::Node(&big));
    assert_eq!(q.location(&k), QueueLocation::Backoff);
    q.flush_backoff_completed();
    assert_eq!(q.location(&k), QueueLocation::Backoff);
    clock.step(Duration::from_secs(1));
    q.flush_backoff_completed();
    assert_eq!(q.location(&k), QueueLocation::Active);
}

#[test]
fn pod_delete_frees_host_ports() {
    let clock = Arc::new(FakeClock::new());
    let q = queue(clock.clone());
    let ported = |name: &str, port: i32| {
        pod(
            name,
            json!({"spec": {"containers": [{"name": "c", "ports": [{"containerPort": 80, "hostPort": port}]}]}}),
        )
    };
    q.add(ported("p", 8080));
    let k = fail(&q, "NodePorts");
    clock.step(Duration::from_secs(60));
    let other = ported("other", 9090);
    q.move_all_to_active_or_backoff(
        EVENT_ASSIGNED_POD_DELETE,
        EventObject::Pod(&other),
        EventObject::None,
    );
    assert_eq!(q.location(&k), QueueLocation::Unschedulable);
    let holder = ported("holder", 8080);
    q.move_all_to_active_or_backoff(
        EVENT_ASSIGNED_POD_DELETE,
        EventObject::Pod(&holder),
        EventObject::None,
    );
    assert_eq!(
        q.location(&k),
        QueueLocation::Active,
        "backoff already expired"
    );
}

#[test]
fn move_request_during_cycle_sends_pod_to_backoff() {
    let clock = Arc::new(FakeClock::new());
    let q = queue(clock.clone());
    q.add(pod("p", json!({})));
    let mut p = q.try_pop().unwrap();
    let cycle = q.scheduling_cycle();
    // An event arrives while the pod is being scheduled.
    q.move_all_to_active_or_backoff(EVENT_NODE_ADD, EventObject::None, EventObject::None);
    p.unschedulable_plugins.insert("NodeAffinity".into());
    let k = p.pod_info.key();
    q.add_unschedulable_if_not_present(p, cycle);
    assert_eq!(q.location(&k), QueueLocation::Backoff);
}

#[test]
fn leftover_unschedulable_pods_flush_after_five_minutes() {
    let clock = Arc::new(FakeClock::new());
    let q = queue(clock.clone());
    q.add(pod("p", json!({})));
    let k = fail(&q, "NodeAffinity");
    clock.step(Duration::from_secs(299));
    q.flush_unschedulable_left_over();
    assert_eq!(q.location(&k), QueueLocation::Unschedulable);
    clock.step(Duration::from_secs(2));
    q.flush_unschedulable_left_over();
    assert_eq!(q.location(&k), QueueLocation::Active);
}

#[test]
fn scheduling_gates_hold_pods_until_lifted() {
    let clock = Arc::new(FakeClock::new());
    let q = queue(clock);
    let gated = pod(
        "g",
        json!({"spec": {"schedulingGates": [{"name": "example.com/wait"}]}}),
    );
    q.add(gated.clone());
    let k = key(&gated);
    assert_eq!(q.location(&k), QueueLocation::Gated);
    assert_eq!(q.pending().gated, 1);
    q.move_all_to_active_or_backoff(EVENT_NODE_ADD, EventObject::None, EventObject::None);
    assert_eq!(
        q.location(&k),
        QueueLocation::Gated,
        "events do not release gated pods"
    );
    let mut lifted = (*gated).clone();
    lifted.spec.as_mut().unwrap().scheduling_gates = None;
    q.update(Arc::new(lifted));
    assert_eq!(q.location(&k), QueueLocation::Active);
    q.delete(&gated);
    assert_eq!(q.location(&k), QueueLocation::Absent);
}

// ---- Whole cycles ----------------------------------------------------------------

fn schedule(fw: &Framework, p: &Arc<Pod>, snap: &Snapshot) -> Result<String, ScheduleError> {
    let mut alg = Algorithm::default();
    let mut state = CycleState::new();
    alg.schedule_pod(fw, &mut state, &PodInfo::new(p.clone()), snap, &NoNominator)
        .map(|r| r.suggested_host)
}

#[test]
fn places_pods_by_filters_and_scores() {
    let fw = default_fw();
    let snap = snapshot(vec![
        (
            node("busy", json!({})),
            vec![pod("a", requests("3", "1Gi"))],
        ),
        (node("idle", json!({})), vec![]),
        (
            node(
                "tainted",
                json!({"spec": {"taints": [{"key": "k", "effect": "NoSchedule"}]}}),
            ),
            vec![],
        ),
    ]);
    for _ in 0..20 {
        assert_eq!(
            schedule(&fw, &pod("p", requests("500m", "1Gi")), &snap).unwrap(),
            "idle"
        );
    }
    let pinned = pod(
        "n",
        json!({"spec": {"nodeSelector": {"kubernetes.io/hostname": "busy"}}}),
    );
    assert_eq!(schedule(&fw, &pinned, &snap).unwrap(), "busy");
}

#[test]
fn ties_are_broken_at_random() {
    let fw = default_fw();
    let snap = snapshot(
        (0..4)
            .map(|i| (node(&format!("n{i}"), json!({})), vec![]))
            .collect(),
    );
    let picked: std::collections::HashSet<String> = (0..200)
        .map(|_| schedule(&fw, &pod("p", json!({})), &snap).unwrap())
        .collect();
    assert!(picked.len() > 1, "{picked:?}");
}

#[test]
fn unschedulable_message_is_upstreams() {
    let fw = default_fw();
    let snap = snapshot(vec![
        (
            node(
                "cp",
                json!({"spec": {"taints": [{"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}]}}),
            ),
            vec![],
        ),
        (node("w1", json!({})), vec![]),
        (node("w2", json!({})), vec![]),
    ]);
    let err = schedule(&fw, &pod("p", requests("5", "1Gi")), &snap).unwrap_err();
    let ScheduleError::Fit(fe) = &err else {
        panic!("{err}")
    };
    assert_eq!(
        err.to_string(),
        "0/3 nodes are available: 1 node(s) had untolerated taint {node-role.kubernetes.io/control-plane: }, 2 Insufficient cpu."
    );
    let plugins = &fe.diagnosis.unschedulable_plugins;
    assert!(plugins.contains("TaintToleration") && plugins.contains("NodeResourcesFit"));
}

struct Pdbs(Vec<Arc<PodDisruptionBudget>>);
impl ClusterLister for Pdbs {
    fn pdbs(&self, _: &str) -> Vec<Arc<PodDisruptionBudget>> {
        self.0.clone()
    }
}

fn preempt(
    fw: &Framework,
    p: &Arc<Pod>,
    snap: &Snapshot,
) -> (Option<PostFilterResult>, crate::Status) {
    let mut alg = Algorithm::default();
    let mut state = CycleState::new();
    let pi = Arc::new(PodInfo::new(p.clone()));
    let err = alg
        .schedule_pod(fw, &mut state, &pi, snap, &NoNominator)
        .expect_err("does not fit");
    let ScheduleError::Fit(fe) = err else {
        panic!("not a fit error")
    };
    let ctx = PostFilterContext {
        fw,
        state: &state,
        pod: &pi,
        snapshot: snap,
        statuses: &fe.diagnosis.node_to_status,
        nominator: &NoNominator,
    };
    fw.run_post_filter(&ctx)
}

fn victim_names(r: &PostFilterResult) -> Vec<String> {
    let mut v: Vec<String> = r
        .victims
        .iter()
        .map(|p| p.metadata.name.clone().unwrap())
        .collect();
    v.sort();
    v
}

fn prio_pod(name: &str, prio: i32, cpu: &str, labels: serde_json::Value) -> Arc<Pod> {
    pod(
        name,
        json!({"metadata": {"labels": labels}, "spec": {"priority": prio, "containers": [
            {"name": "c", "resources": {"requests": {"cpu": cpu}}}]}}),
    )
}

#[test]
fn preemption_picks_lowest_priority_victims() {
    let fw = default_fw();
    let snap = snapshot(vec![
        // n1: two mid-priority pods; n2: one low-priority pod taking most cpu.
        (
            node("n1", json!({})),
            vec![
                prio_pod("m1", 50, "2", json!({})),
                prio_pod("m2", 50, "2", json!({})),
            ],
        ),
        (
            node("n2", json!({})),
            vec![
                prio_pod("l1", 10, "3", json!({})),
                prio_pod("h1", 1000, "1", json!({})),
            ],
        ),
    ]);
    let (r, s) = preempt(&fw, &prio_pod("p", 100, "3", json!({})), &snap);
    assert!(s.is_success(), "{s}");
    let r = r.unwrap();
    assert_eq!(r.nominated_node_name.as_deref(), Some("n2"));
    assert_eq!(victim_names(&r), vec!["l1"]);

    // Minimal victims: only one of n1's pods needs to go when n2 is out of reach.
    let snap = snapshot(vec![(
        node("n1", json!({})),
        vec![
            prio_pod("a", 10, "1", json!({})),
            prio_pod("b", 20, "1", json!({})),
            prio_pod("c", 30, "2", json!({})),
        ],
    )]);
    let (r, _) = preempt(&fw, &prio_pod("p", 100, "1", json!({})), &snap);
    assert_eq!(
        victim_names(&r.unwrap()),
        vec!["a"],
        "the lowest priority pod goes first"
    );
}

#[test]
fn preemption_honours_pdbs_and_policy() {
    let pdb: PodDisruptionBudget = serde_json::from_value(json!({
        "metadata": {"name": "guard", "namespace": "default"},
        "spec": {"selector": {"matchLabels": {"app": "guarded"}}},
        "status": {"disruptionsAllowed": 0, "currentHealthy": 1, "desiredHealthy": 1, "expectedPods": 1}
    }))
    .unwrap();
    let h = Handle {
        lister: Arc::new(Pdbs(vec![Arc::new(pdb)])),
        ..Handle::default()
    };
    let fw = fw_with(h, &KubeSchedulerConfiguration::default_config());
    let snap = snapshot(vec![
        (
            node("n1", json!({})),
            vec![prio_pod("g", 10, "3", json!({"app": "guarded"}))],
        ),
        (
            node("n2", json!({})),
            vec![prio_pod("f", 10, "3", json!({"app": "free"}))],
        ),
    ]);
    let (r, _) = preempt(&fw, &prio_pod("p", 100, "2", json!({})), &snap);
    let r = r.unwrap();
    assert_eq!(
        r.nominated_node_name.as_deref(),
        Some("n2"),
        "the node without PDB violations wins"
    );
    assert_eq!(victim_names(&r), vec!["f"]);

    let never = pod(
        "never",
        json!({"spec": {"priority": 100, "preemptionPolicy": "Never", "containers": [
            {"name": "c", "resources": {"requests": {"cpu": "2"}}}]}}),
    );
    let (r, s) = preempt(&fw, &never, &snap);
    assert!(r.is_none());
    assert_eq!(
        s.message(),
        "preemption: not eligible due to preemptionPolicy=Never."
    );
}

#[test]
fn preemption_message_without_victims() {
    let fw = default_fw();
    let snap = snapshot(vec![
        (
            node(
                "cp",
                json!({"spec": {"taints": [{"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}]}}),
            ),
            vec![],
        ),
        (
            node("w1", json!({})),
            vec![prio_pod("x", 500, "3", json!({}))],
        ),
        (
            node("w2", json!({})),
            vec![prio_pod("y", 500, "3", json!({}))],
        ),
    ]);
    let (r, s) = preempt(&fw, &prio_pod("p", 100, "2", json!({})), &snap);
    assert!(r.unwrap().nominated_node_name.is_none());
    assert_eq!(
        s.message(),
        "preemption: 0/3 nodes are available: 1 Preemption is not helpful for scheduling, 2 No preemption victims found for incoming pod"
    );
}

// ---- The node search ---------------------------------------------------------------

/// `n` nodes; those whose index satisfies `tainted` carry a NoSchedule taint.
fn tainted_snapshot(n: usize, tainted: impl Fn(usize) -> bool) -> Snapshot {
    snapshot(
        (0..n)
            .map(|i| {
                let spec = if tainted(i) {
                    json!({"spec": {"taints": [{"key": "k", "effect": "NoSchedule"}]}})
                } else {
                    json!({})
                };
                (node(&format!("n{i:05}"), spec), vec![])
            })
            .collect(),
    )
}

/// One `findNodesThatFitPod`: (feasible names, failed names, where the next search starts).
fn search(
    alg: &mut Algorithm,
    snap: &Snapshot,
    nominator: &dyn Nominator,
) -> (Vec<String>, Vec<String>, usize) {
    let fw = default_fw();
    let mut state = CycleState::new();
    let p = PodInfo::new(pod("p", requests("100m", "100Mi")));
    let (feasible, d) = alg
        .find_nodes_that_fit(&fw, &mut state, &p, snap, nominator)
        .unwrap();
    let feasible = feasible.iter().map(|n| n.name().to_string()).collect();
    let failed = d.node_to_status.map.keys().cloned().collect();
    (feasible, failed, alg.next_start_node_index)
}

#[test]
fn node_search_stops_at_the_wanted_count_and_resumes_after_it() {
    // 300 nodes, every other one tainted: the adaptive percentage wants 144 nodes.
    let snap = tainted_snapshot(300, |i| i % 2 == 1);
    let want = num_feasible_nodes_to_find(0, 300);
    assert_eq!(want, 144);
    let mut alg = Algorithm::default();
    let (feasible, failed, next) = search(&mut alg, &snap, &NoNominator);
    assert_eq!(feasible.len(), want);
    let distinct: std::collections::HashSet<_> = feasible.iter().collect();
    assert_eq!(distinct.len(), want);
    assert!(failed.iter().all(|n| !feasible.contains(n)));
    // The search stops at the last feasible node it needs: what it processed is
    // where the next cycle starts.
    assert_eq!(next, feasible.len() + failed.len());
    assert!((want * 2 - 1..=want * 2 + 1).contains(&next), "{next}");
    // The next search wraps around the list and starts where this one stopped.
    let (again, failed2, next2) = search(&mut alg, &snap, &NoNominator);
    assert_eq!(again.len(), want);
    assert!(again.iter().any(|n| !feasible.contains(n)));
    assert_eq!(next2, (next + again.len() + failed2.len()) % 300);
}

#[test]
fn node_search_visits_every_node_when_few_fit() {
    // Only three nodes fit: the search runs over all 300 and finds exactly those.
    let snap = tainted_snapshot(300, |i| ![7, 150, 299].contains(&i));
    let mut alg = Algorithm {
        next_start_node_index: 100,
        percentage_of_nodes_to_score: 0,
    };
    let (mut feasible, failed, next) = search(&mut alg, &snap, &NoNominator);
    feasible.sort();
    assert_eq!(feasible, ["n00007", "n00150", "n00299"]);
    assert_eq!(failed.len(), 297);
    assert_eq!(next, 100);
}

#[test]
fn node_search_over_many_nodes_runs_in_parallel_rounds_with_the_same_result() {
    // 100% of 2,400 nodes: rounds big enough for the thread pool.
    let n = 2400;
    assert!(n / 2 >= crate::schedule_one::PARALLEL_FILTER_MIN_NODES);
    let snap = tainted_snapshot(n, |i| i % 2 == 0);
    let mut alg = Algorithm {
        next_start_node_index: 5,
        percentage_of_nodes_to_score: 100,
    };
    let (feasible, failed, next) = search(&mut alg, &snap, &NoNominator);
    assert_eq!(feasible.len(), n / 2);
    assert_eq!(failed.len(), n / 2);
    assert_eq!(next, 5);
    let distinct: std::collections::HashSet<_> = feasible.iter().collect();
    assert_eq!(distinct.len(), n / 2);
}

/// A nominator that counts its per-node lookups.
struct CountingNominator {
    nominated: Vec<(String, Arc<PodInfo>)>,
    lookups: std::sync::atomic::AtomicUsize,
}

impl Nominator for CountingNominator {
    fn nominated_pods_for_node(&self, node: &str) -> Vec<Arc<PodInfo>> {
        self.lookups
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.nominated
            .iter()
            .filter(|(n, _)| n == node)
            .map(|(_, p)| p.clone())
            .collect()
    }
    fn has_nominated_pods(&self) -> bool {
        !self.nominated.is_empty()
    }
}

#[test]
fn filters_skip_nominator_lookups_only_when_nothing_is_nominated() {
    let snap = tainted_snapshot(4, |_| false);
    let none = CountingNominator {
        nominated: vec![],
        lookups: Default::default(),
    };
    let mut alg = Algorithm::default();
    let (feasible, _, _) = search(&mut alg, &snap, &none);
    assert_eq!(feasible.len(), 4);
    assert_eq!(none.lookups.load(std::sync::atomic::Ordering::Relaxed), 0);
    // A preemptor nominated to n00001 that takes all of its CPU keeps others off it.
    let hog = Arc::new(PodInfo::new(pod(
        "hog",
        json!({"spec": {"priority": 10, "containers": [{"name": "c", "image": "busybox",
            "resources": {"requests": {"cpu": "4"}}}]}}),
    )));
    let some = CountingNominator {
        nominated: vec![("n00001".into(), hog)],
        lookups: Default::default(),
    };
    let (feasible, failed, _) = search(&mut alg, &snap, &some);
    assert_eq!(feasible.len(), 3);
    assert_eq!(failed, ["n00001"]);
    assert_eq!(some.lookups.load(std::sync::atomic::Ordering::Relaxed), 4);
}

// ---- Scoring ---------------------------------------------------------------------

/// `n` nodes in three zones, with different loads, some with a PreferNoSchedule taint
/// and some with a label the test pod prefers.
fn varied_snapshot(n: usize) -> Snapshot {
    snapshot(
        (0..n)
            .map(|i| {
                let mut over = json!({"metadata": {"labels": {
                    "topology.kubernetes.io/zone": format!("z{}", i % 3)}}});
                if i % 4 == 1 {
                    over["spec"] = json!({"taints": [{"key": "k", "effect": "PreferNoSchedule"}]});
                }
                if i % 5 == 2 {
                    over["metadata"]["labels"]["disk"] = "ssd".into();
                }
                let pods = (0..i % 6)
                    .map(|j| {
                        pod(
                            &format!("p-{i}-{j}"),
                            requests(&format!("{}m", 100 + 150 * j), &format!("{}Mi", 64 << j)),
                        )
                    })
                    .collect();
                (node(&format!("n{i:05}"), over), pods)
            })
            .collect(),
    )
}

/// Every score plugin on its own (PreScore, Score, NormalizeScore), times its weight,
/// summed per node: what `RunScorePlugins` must add up to.
fn reference_totals(fw: &Framework, p: &Arc<Pod>, snap: &Snapshot) -> Vec<(String, i64)> {
    let mut totals = std::collections::BTreeMap::<String, i64>::new();
    for (name, weight) in fw.score_weights() {
        let plugin = fw.plugin(name).unwrap();
        for (node, v) in crate::plugins::testutil::score_all(plugin.as_ref(), p, snap) {
            *totals.entry(node).or_default() += v * weight;
        }
    }
    totals.into_iter().collect()
}

fn framework_totals(fw: &Framework, p: &Arc<Pod>, snap: &Snapshot) -> Vec<(String, i64)> {
    let mut state = CycleState::new();
    let info = PodInfo::new(p.clone());
    let nodes = &snap.node_info_list;
    assert!(
        fw.run_pre_score(&mut state, &info, nodes, snap)
            .is_success()
    );
    let mut v: Vec<(String, i64)> = fw
        .run_score(&state, &info, nodes)
        .unwrap()
        .into_iter()
        .map(|s| (s.name, s.score))
        .collect();
    v.sort();
    v
}

#[test]
fn scores_are_the_weighted_sum_of_normalized_plugin_scores() {
    let fw = default_fw();
    let p = pod(
        "p",
        json!({"spec": {
            "containers": [{"name": "c", "image": "busybox",
                "resources": {"requests": {"cpu": "300m", "memory": "256Mi"}}}],
            "affinity": {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 7, "preference": {"matchExpressions": [
                    {"key": "disk", "operator": "In", "values": ["ssd"]}]}}]}}}}),
    );
    // Below and above the size where nodes are scored in parallel.
    for n in [12, crate::framework::PARALLEL_SCORE_MIN_NODES + 100] {
        let snap = varied_snapshot(n);
        let got = framework_totals(&fw, &p, &snap);
        assert_eq!(got, reference_totals(&fw, &p, &snap), "{n} nodes");
        // The scores differ between nodes (loads, taints, affinity all count).
        let distinct: std::collections::HashSet<i64> = got.iter().map(|s| s.1).collect();
        assert!(distinct.len() > 3, "{n} nodes: {distinct:?}");
    }
}

#[test]
fn cycle_state_replaces_reads_and_clones_by_key() {
    let mut st = CycleState::new();
    st.write("a", 1usize);
    st.write("b", String::from("x"));
    st.write("a", 2usize);
    assert_eq!(st.read::<usize>("a"), Some(&2));
    assert_eq!(st.read::<String>("a"), None, "wrong type");
    assert_eq!(st.read::<usize>("missing"), None);
    *st.read_mut::<String>("b").unwrap() = "y".into();
    assert!(st.skip_filter_plugins.insert("NodeAffinity"));
    assert!(!st.skip_filter_plugins.insert("NodeAffinity"));
    let copy = st.clone();
    st.write("a", 3usize);
    assert_eq!(copy.read::<usize>("a"), Some(&2));
    assert_eq!(copy.read::<String>("b").map(String::as_str), Some("y"));
    assert!(copy.skip_filter_plugins.contains("NodeAffinity"));
    assert!(!copy.skip_filter_plugins.contains("NodePorts"));
    assert_eq!(copy.skip_filter_plugins.len(), 1);
}
