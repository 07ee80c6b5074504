//! Leader election on Leases against the real in-process apiserver, with short
//! durations (lease 2 s, renew deadline 1 s, retry 200 ms).

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use ferrokube_client::Error;
use ferrokube_client::leaderelection::{LeaderElectionConfig, LeaderElector, LeaseLock};
use ferrokube_testing::TestApiServer;
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, PostParams};
use tokio_util::sync::CancellationToken;

fn elector(client: &kube::Client, id: &str, release: bool) -> Arc<LeaderElector> {
    Arc::new(
        LeaderElector::new(
            LeaseLock::new(client.clone(), "kube-system", "test-lock", id),
            LeaderElectionConfig {
                lease_duration: Duration::from_secs(2),
                renew_deadline: Duration::from_secs(1),
                retry_period: Duration::from_millis(200),
                release_on_cancel: release,
                name: "test".into(),
            },
        )
        .unwrap(),
    )
}

/// Work that counts how many holders run at once and records the peak.
fn work(
    running: Arc<AtomicU32>,
    peak: Arc<AtomicU32>,
) -> impl FnOnce(CancellationToken) -> futures::future::BoxFuture<'static, ()> {
    move |stop: CancellationToken| {
        Box::pin(async move {
            struct Guard(Arc<AtomicU32>);
            impl Drop for Guard {
                fn drop(&mut self) {
                    self.0.fetch_sub(1, Ordering::SeqCst);
                }
            }
            let now = running.fetch_add(1, Ordering::SeqCst) + 1;
            peak.fetch_max(now, Ordering::SeqCst);
            let _g = Guard(running);
            stop.cancelled().await;
        })
    }
}

async fn lease(client: &kube::Client) -> Lease {
    Api::<Lease>::namespaced(client.clone(), "kube-system")
        .get("test-lock")
        .await
        .unwrap()
}

fn holder(l: &Lease) -> String {
    l.spec
        .as_ref()
        .and_then(|s| s.holder_identity.clone())
        .unwrap_or_default()
}

async fn wait_for(what: &str, limit: Duration, mut cond: impl FnMut() -> bool) -> Duration {
    let t = Instant::now();
    while t.elapsed() < limit {
        if cond() {
            return t.elapsed();
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("timed out after {limit:?} waiting for {what}");
}

#[tokio::test]
async fn two_contenders_leader_killed_then_graceful_release() {
    let srv = TestApiServer::start().await.unwrap();
    let c = srv.client.clone();
    let running = Arc::new(AtomicU32::new(0));
    let peak = Arc::new(AtomicU32::new(0));

    let a = elector(&c, "a", false);
    let b = elector(&c, "b", true);
    let a_task = tokio::spawn(a.clone().run(
        CancellationToken::new(),
        work(running.clone(), peak.clone()),
    ));
    wait_for("a to lead", Duration::from_secs(5), || a.is_leader()).await;
    let b_cancel = CancellationToken::new();
    let b_task = tokio::spawn(
        b.clone()
            .run(b_cancel.clone(), work(running.clone(), peak.clone())),
    );
    let mut b_leader = b.watch_leader();
    tokio::time::timeout(Duration::from_secs(5), b_leader.wait_for(|l| l == "a"))
        .await
        .unwrap()
        .unwrap();

    let l = lease(&c).await;
    let spec = l.spec.clone().unwrap();
    assert_eq!(holder(&l), "a");
    assert_eq!(spec.lease_duration_seconds, Some(2));
    assert_eq!(spec.lease_transitions, Some(0));
    let acquired = spec.acquire_time.clone().unwrap();
    let renewed = spec.renew_time.clone().unwrap();

    // a keeps renewing; b stays a follower well past the lease duration.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert!(a.is_leader() && !b.is_leader());
    assert_eq!(b.get_leader(), "a");
    let l = lease(&c).await;
    let spec = l.spec.clone().unwrap();
    assert_eq!(
        spec.acquire_time,
        Some(acquired.clone()),
        "renewals keep acquireTime"
    );
    assert!(spec.renew_time.unwrap().0 > renewed.0, "renewTime advances");
    assert_eq!(running.load(Ordering::SeqCst), 1);

    // Kill a: its task is aborted, the lease is no longer renewed (not released).
    let killed = Instant::now();
    a_task.abort();
    let _ = a_task.await;
    assert_eq!(holder(&lease(&c).await), "a");
    let took = wait_for("b to take over", Duration::from_secs(8), || b.is_leader()).await;
    // Not before the lease (2 s since b last saw it change) can have expired.
    assert!(
        killed.elapsed() >= Duration::from_millis(1500),
        "took over after {took:?}"
    );
    let l = lease(&c).await;
    let spec = l.spec.clone().unwrap();
    assert_eq!(holder(&l), "b");
    assert_eq!(spec.lease_transitions, Some(1));
    assert!(spec.acquire_time.unwrap().0 > acquired.0);
    wait_for("b's work to start", Duration::from_secs(2), || {
        running.load(Ordering::SeqCst) == 1
    })
    .await;
    assert_eq!(peak.load(Ordering::SeqCst), 1, "never two leaders working");

    // Graceful shutdown of b releases the lease: a newcomer need not wait 2 s.
    b_cancel.cancel();
    tokio::time::timeout(Duration::from_secs(5), b_task)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(running.load(Ordering::SeqCst), 0, "work stopped");
    let l = lease(&c).await;
    let spec = l.spec.clone().unwrap();
    assert_eq!(holder(&l), "");
    assert_eq!(spec.lease_duration_seconds, Some(1));
    assert_eq!(spec.lease_transitions, Some(1));

    let c2 = elector(&c, "c", true);
    let c_cancel = CancellationToken::new();
    let t = Instant::now();
    let c_task = tokio::spawn(
        c2.clone()
            .run(c_cancel.clone(), work(running.clone(), peak.clone())),
    );
    wait_for("c to lead", Duration::from_secs(5), || c2.is_leader()).await;
    assert!(
        t.elapsed() < Duration::from_millis(1500),
        "{:?}",
        t.elapsed()
    );
    assert_eq!(lease(&c).await.spec.unwrap().lease_transitions, Some(2));
    c_cancel.cancel();
    tokio::time::timeout(Duration::from_secs(5), c_task)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    srv.stop().await;
}

#[tokio::test]
async fn losing_the_lease_stops_work_and_reports_lost() {
    let srv = TestApiServer::start().await.unwrap();
    let c = srv.client.clone();
    let a = elector(&c, "a", true);
    let stopped = CancellationToken::new();
    let stopped2 = stopped.clone();
    let a_task = tokio::spawn(a.clone().run(CancellationToken::new(), move |lead| {
        Box::pin(async move {
            // Dropped (aborted) or cancelled: either way the work ends.
            let _guard = stopped2.drop_guard();
            lead.cancelled().await;
            std::future::pending::<()>().await;
        }) as futures::future::BoxFuture<'static, ()>
    }));
    wait_for("a to lead", Duration::from_secs(5), || a.is_leader()).await;

    // Another party takes the lease behind a's back (a fresh renewTime, long
    // duration): a's optimistic renewal conflicts (409), and the lease it then reads
    // is held by someone else and valid, so it cannot renew before its deadline.
    let leases: Api<Lease> = Api::namespaced(c.clone(), "kube-system");
    let mut l = leases.get("test-lock").await.unwrap();
    let spec = l.spec.as_mut().unwrap();
    spec.holder_identity = Some("intruder".into());
    spec.lease_duration_seconds = Some(60);
    spec.renew_time = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(
        k8s_openapi::jiff::Timestamp::now(),
    ));
    leases
        .replace("test-lock", &PostParams::default(), &l)
        .await
        .unwrap();
    let t = Instant::now();
    let res = tokio::time::timeout(Duration::from_secs(5), a_task)
        .await
        .unwrap()
        .unwrap();
    assert!(matches!(res, Err(Error::LeaderElectionLost(_))), "{res:?}");
    assert!(stopped.is_cancelled(), "work was stopped (aborted)");
    // Within retry + renew deadline (+ slack).
    assert!(
        t.elapsed() < Duration::from_millis(2500),
        "{:?}",
        t.elapsed()
    );
    assert!(!a.is_leader());
    assert_eq!(a.get_leader(), "intruder");
    // Not released: it was not ours any more.
    assert_eq!(holder(&lease(&c).await), "intruder");

    // A stale write (old resourceVersion) is refused: optimistic concurrency.
    let stale = l.clone();
    leases
        .replace("test-lock", &PostParams::default(), &stale)
        .await
        .unwrap_err();
    srv.stop().await;
}

/// The value `family` reports for the elector named `name`.
fn leader_metric(family: &str, name: &str) -> Option<String> {
    let mut page = String::new();
    ferrokube_client::leaderelection::write_leader_election_metrics(&mut page);
    let prefix = format!("{family}{{name=\"{name}\"}} ");
    page.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .map(str::to_owned)
}

fn master_status(name: &str) -> Option<String> {
    leader_metric("leader_election_master_status", name)
}

#[tokio::test]
async fn a_leader_whose_lease_changed_renews_through_the_slow_path_and_counts_it() {
    let srv = TestApiServer::start().await.unwrap();
    let e = Arc::new(
        LeaderElector::new(
            LeaseLock::new(srv.client.clone(), "kube-system", "slow-lock", "s"),
            LeaderElectionConfig {
                lease_duration: Duration::from_secs(2),
                renew_deadline: Duration::from_secs(1),
                retry_period: Duration::from_millis(200),
                release_on_cancel: true,
                name: "slowpath-test".into(),
            },
        )
        .unwrap(),
    );
    assert!(e.try_acquire_or_renew().await, "acquired");
    assert!(e.try_acquire_or_renew().await, "renewed optimistically");
    assert_eq!(
        leader_metric("leader_election_slowpath_total", "slowpath-test"),
        None
    );
    // Someone else writes the lease (a label): the leader's optimistic update
    // conflicts, and it renews after reading the lease again.
    let leases: Api<Lease> = Api::namespaced(srv.client.clone(), "kube-system");
    let mut l = leases.get("slow-lock").await.unwrap();
    l.metadata
        .labels
        .get_or_insert_with(Default::default)
        .insert("touched".into(), "yes".into());
    leases
        .replace("slow-lock", &PostParams::default(), &l)
        .await
        .unwrap();
    assert!(
        e.try_acquire_or_renew().await,
        "renewed through the slow path"
    );
    assert!(e.is_leader());
    assert_eq!(
        leader_metric("leader_election_slowpath_total", "slowpath-test").as_deref(),
        Some("1")
    );
    srv.stop().await;
}

#[tokio::test]
async fn master_status_follows_leadership() {
    let srv = TestApiServer::start().await.unwrap();
    let e = Arc::new(
        LeaderElector::new(
            LeaseLock::new(srv.client.clone(), "kube-system", "metrics-lock", "m"),
            LeaderElectionConfig {
                lease_duration: Duration::from_secs(2),
                renew_deadline: Duration::from_secs(1),
                retry_period: Duration::from_millis(200),
                release_on_cancel: true,
                name: "metrics-test".into(),
            },
        )
        .unwrap(),
    );
    assert_eq!(master_status("metrics-test"), None, "nothing before it led");
    let cancel = CancellationToken::new();
    let task = tokio::spawn(e.clone().run(cancel.clone(), |stop: CancellationToken| {
        Box::pin(async move { stop.cancelled().await }) as futures::future::BoxFuture<'static, ()>
    }));
    wait_for("the elector to lead", Duration::from_secs(5), || {
        e.is_leader()
    })
    .await;
    assert_eq!(master_status("metrics-test").as_deref(), Some("1"));
    cancel.cancel();
    tokio::time::timeout(Duration::from_secs(5), task)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(
        master_status("metrics-test").as_deref(),
        Some("0"),
        "released"
    );
}
