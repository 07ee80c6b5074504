//! API Priority and Fairness end to end: the bootstrap configuration at start, the
//! `X-Kubernetes-PF-*` response headers naming the schema and level a request was
//! classified into, a level with one seat that queues one request and refuses the next
//! with 429 (each step counted in the `apiserver_flowcontrol_*` metrics and shown by
//! the `/debug/api_priority_and_fairness/dump_*` tables, writes watched by ten
//! watches estimated at a final seat), and the FlowSchemas' `Dangling` condition.

use std::time::Duration;

use ferrokube_testing::{TestApiServer, WebhookServer};
use serde_json::{Value, json};

use crate::support::hold;

const FS: &str = "/apis/flowcontrol.apiserver.k8s.io/v1/flowschemas";
const PL: &str = "/apis/flowcontrol.apiserver.k8s.io/v1/prioritylevelconfigurations";
/// How long the webhook holds each create of the slow user.
const HOLD: Duration = Duration::from_secs(2);

async fn send(client: &kube::Client, method: &str, path: &str, body: Value) -> (u16, Value) {
    let (code, _, v) = TestApiServer::send_json(client, method, path, &body)
        .await
        .unwrap();
    (code, v)
}

async fn get(client: &kube::Client, path: &str) -> Value {
    let (code, v) = send(client, "GET", path, Value::Null).await;
    assert_eq!(code, 200, "GET {path}: {v}");
    v
}

/// A FlowSchema that sends every resource request of `user` to `level`, a flow per user.
fn schema_for_user(name: &str, level: &str, user: &str) -> Value {
    json!({"apiVersion": "flowcontrol.apiserver.k8s.io/v1", "kind": "FlowSchema",
        "metadata": {"name": name},
        "spec": {"matchingPrecedence": 100, "priorityLevelConfiguration": {"name": level},
            "distinguisherMethod": {"type": "ByUser"},
            "rules": [{"subjects": [{"kind": "User", "user": {"name": user}}],
                "resourceRules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"],
                    "namespaces": ["*"], "clusterScope": true}]}]}})
}

/// POSTs `body` to `path` as `client`, which must create it.
async fn create(client: &kube::Client, path: &str, body: Value) {
    let (code, v) = send(client, "POST", path, body).await;
    assert_eq!(code, 201, "POST {path}: {v}");
}

/// The status, the flow-control headers and the body of a configmap create by `client`.
async fn create_configmap(client: &kube::Client, name: &str) -> (u16, Option<String>, Value) {
    let body = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "labels": {"hold": "yes"}}});
    let (code, headers, bytes) = TestApiServer::raw(
        client,
        "POST",
        "/api/v1/namespaces/default/configmaps",
        &[("content-type", "application/json")],
        serde_json::to_vec(&body).unwrap(),
    )
    .await
    .unwrap();
    let level = headers
        .get("X-Kubernetes-PF-PriorityLevel-UID")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    (
        code,
        level,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

#[tokio::test]
async fn requests_are_classified_queued_and_refused_by_their_priority_level() {
    // Two seats for the whole server, so that a level of one share has one seat
    // (ceil(2 * 1 / 246)); the admin's requests are exempt.
    let srv = TestApiServer::start_with(|o| {
        o.max_requests_inflight = 1;
        o.max_mutating_requests_inflight = 1;
    })
    .await
    .unwrap();
    let admin = srv.client.clone();

    // Upstream's bootstrap configuration is there at start.
    for name in [
        "exempt",
        "catch-all",
        "global-default",
        "system-nodes",
        "probes",
    ] {
        get(&admin, &format!("{FS}/{name}")).await;
    }
    for name in [
        "exempt",
        "catch-all",
        "global-default",
        "workload-low",
        "system",
    ] {
        get(&admin, &format!("{PL}/{name}")).await;
    }
    // The admin (system:masters) is exempt, and the response says so.
    let exempt_fs = get(&admin, &format!("{FS}/exempt")).await["metadata"]["uid"].clone();
    let exempt_pl = get(&admin, &format!("{PL}/exempt")).await["metadata"]["uid"].clone();
    let (_, headers, _) = TestApiServer::raw(&admin, "GET", "/api/v1/namespaces", &[], vec![])
        .await
        .unwrap();
    assert_eq!(
        headers["X-Kubernetes-PF-FlowSchema-UID"].to_str().unwrap(),
        exempt_fs.as_str().unwrap()
    );
    assert_eq!(
        headers["X-Kubernetes-PF-PriorityLevel-UID"]
            .to_str()
            .unwrap(),
        exempt_pl.as_str().unwrap()
    );

    // A level with a single seat (neither lent nor borrowed) and a single queue of
    // one, for one user.
    let (code, level) = send(
        &admin,
        "POST",
        PL,
        json!({"apiVersion": "flowcontrol.apiserver.k8s.io/v1", "kind": "PriorityLevelConfiguration",
            "metadata": {"name": "fk-one-seat"},
            "spec": {"type": "Limited", "limited": {"nominalConcurrencyShares": 1,
                "lendablePercent": 0, "borrowingLimitPercent": 0,
                "limitResponse": {"type": "Queue",
                    "queuing": {"queues": 1, "handSize": 1, "queueLengthLimit": 1}}}}}),
    )
    .await;
    assert_eq!(code, 201, "{level}");
    let level_uid = level["metadata"]["uid"].as_str().unwrap().to_owned();
    create(
        &admin,
        FS,
        schema_for_user("fk-slow-user", "fk-one-seat", "slow-user"),
    )
    .await;
    let (code, v) = send(
        &admin,
        "POST",
        FS,
        json!({"apiVersion": "flowcontrol.apiserver.k8s.io/v1", "kind": "FlowSchema",
            "metadata": {"name": "fk-dangling"},
            "spec": {"matchingPrecedence": 200, "priorityLevelConfiguration": {"name": "fk-missing"},
                "rules": [{"subjects": [{"kind": "User", "user": {"name": "nobody"}}],
                    "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}]}]}}),
    )
    .await;
    assert_eq!(code, 201, "{v}");

    // The Dangling conditions: found for one, not for the other.
    let dangling = |fs: Value| {
        fs["status"]["conditions"]
            .as_array()
            .and_then(|c| c.iter().find(|c| c["type"] == "Dangling").cloned())
    };
    let mut conditions = (None, None);
    for _ in 0..100 {
        conditions = (
            dangling(get(&admin, &format!("{FS}/fk-slow-user")).await),
            dangling(get(&admin, &format!("{FS}/fk-dangling")).await),
        );
        if conditions.0.is_some() && conditions.1.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (found, missing) = (conditions.0.unwrap(), conditions.1.unwrap());
    assert_eq!(
        (&found["status"], &found["reason"]),
        (&json!("False"), &json!("Found"))
    );
    assert_eq!(
        (&missing["status"], &missing["reason"]),
        (&json!("True"), &json!("NotFound"))
    );
    assert_eq!(
        missing["message"],
        "This FlowSchema references the PriorityLevelConfiguration object named \"fk-missing\" but there is no such object"
    );

    // The slow user's creates wait on a webhook, each holding the level's only seat.
    let hooks = WebhookServer::start(|_path: String, review: Value| async move {
        tokio::time::sleep(HOLD).await;
        json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "response": {"uid": review["request"]["uid"], "allowed": true}})
    })
    .await
    .unwrap();
    hold::hold_labelled_configmap_creates(&admin, &hooks, "slow-user").await;
    // Ten watches of the namespace's configmaps: each create will keep a seat for 5 ms
    // of their events after it ends (upstream's work estimate of a write).
    let configmaps: kube::Api<k8s_openapi::api::core::v1::ConfigMap> =
        kube::Api::namespaced(admin.clone(), "default");
    let mut watches = Vec::new();
    for _ in 0..10 {
        watches.push(
            configmaps
                .watch(&kube::api::WatchParams::default().timeout(60), "0")
                .await
                .unwrap(),
        );
    }
    // A client (and connection) per request, so that nothing on the client's side
    // orders them, and without kube-rs's retries of a 429.
    let mut clients = Vec::new();
    for _ in 0..3 {
        let mut config = srv
            .config_as("slow-user", &["system:authenticated"])
            .await
            .unwrap();
        config.default_retry = false;
        clients.push(kube::Client::try_from(config).unwrap());
    }
    // Three at once: one runs, one waits in the queue, the third finds it full.
    let started = std::time::Instant::now();
    let creates: Vec<_> = clients
        .iter()
        .zip(["held-1", "held-2", "held-3"])
        .map(|(client, name)| {
            let client = client.clone();
            tokio::spawn(async move { create_configmap(&client, name).await })
        })
        .collect();
    // While the first holds the seat and the second waits, the dumps show both.
    let mut levels = Vec::new();
    let deadline = started + HOLD;
    while std::time::Instant::now() < deadline {
        levels = dump(&admin, "dump_priority_levels").await;
        // One waiting, one refused.
        if row(&levels, "fk-one-seat").is_some_and(|r| r[4] == "1" && r[7] == "1") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let requests = dump(&admin, "dump_requests?includeRequestDetails=1").await;
    let one_seat = row(&levels, "fk-one-seat").expect("the level is dumped");
    // Waiting, executing, dispatched, rejected, timed out, cancelled.
    assert_eq!(one_seat[4..], ["1", "1", "1", "1", "0", "0"], "{levels:?}");
    assert_eq!(one_seat[1..4], ["1", "false", "false"], "{levels:?}");
    let slow: Vec<&Vec<String>> = requests.iter().filter(|r| r[0] == "fk-one-seat").collect();
    assert_eq!(slow.len(), 2, "{requests:?}");
    for r in &slow {
        assert_eq!(r[1], "fk-slow-user");
        // One seat, and one more for the watches' events, 5 ms.
        assert_eq!(r[6..9], ["1", "1", "5ms"], "{r:?}");
        // A single queue: no distinguisher, as upstream computes it for more only.
        assert_eq!(r[4], "");
        assert_eq!(
            r[10..],
            [
                "slow-user",
                "create",
                "/api/v1/namespaces/default/configmaps",
                "default",
                "",
                "v1",
                "configmaps",
                ""
            ]
        );
    }
    // Both came through queue 0: the first executing, the second waiting first in it.
    assert!(slow.iter().any(|r| r[2..4] == ["0", "-1"]), "{slow:?}");
    assert!(
        slow.iter()
            .any(|r| r[2..4] == ["0", "0"] && r[9] == "0001-01-01T00:00:00Z"),
        "{slow:?}"
    );
    // The dump itself runs, exempt, in no queue.
    assert!(
        requests
            .iter()
            .any(|r| r[..4] == ["exempt", "exempt", "-1", "-1"]),
        "{requests:?}"
    );
    let queues = dump(&admin, "dump_queues").await;
    assert_eq!(
        row(&queues, "fk-one-seat").map(|r| &r[..5]),
        Some(&["fk-one-seat", "0", "1", "1", "1"].map(String::from)[..]),
        "{queues:?}"
    );
    let mut results = Vec::new();
    for create in creates {
        results.push(create.await.unwrap());
    }
    let elapsed = started.elapsed();
    let mut codes: Vec<u16> = results.iter().map(|r| r.0).collect();
    codes.sort_unstable();
    assert_eq!(codes, [201, 201, 429], "{results:?}");
    for (code, level, body) in &results {
        assert_eq!(level.as_deref(), Some(level_uid.as_str()), "{code} {body}");
        if *code == 429 {
            assert_eq!(body["reason"], "TooManyRequests", "{body}");
            assert_eq!(
                body["message"],
                "Too many requests, please try again later."
            );
        }
    }
    // The queued create ran after the first, not beside it.
    assert!(
        elapsed >= HOLD * 2,
        "two creates of one seat took {elapsed:?}"
    );

    // The metrics counted each step for the schema and the level, once the last
    // create's final seat is given back (5 ms after it ended).
    let labels = r#"flow_schema="fk-slow-user",priority_level="fk-one-seat""#;
    let seats = format!("apiserver_flowcontrol_current_executing_seats{{{labels}}}");
    let mut page = metrics(&admin).await;
    for _ in 0..50 {
        if sample(&page, &seats) == Some(0.0) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        page = metrics(&admin).await;
    }
    let value = |series: &str| sample(&page, series);
    assert_eq!(
        value(&format!(
            "apiserver_flowcontrol_rejected_requests_total{{{labels},reason=\"queue-full\"}}"
        )),
        Some(1.0)
    );
    assert_eq!(
        value(&format!(
            "apiserver_flowcontrol_dispatched_requests_total{{{labels}}}"
        )),
        Some(2.0)
    );
    for gauge in [
        "current_executing_requests",
        "current_executing_seats",
        "current_inqueue_requests",
        "current_inqueue_seats",
    ] {
        assert_eq!(
            value(&format!("apiserver_flowcontrol_{gauge}{{{labels}}}")),
            Some(0.0),
            "{gauge}"
        );
    }
    let wait = |execute: &str, sample: &str| {
        value(&format!(
            "apiserver_flowcontrol_request_wait_duration_seconds_{sample}{{execute=\"{execute}\",{labels}}}"
        ))
    };
    assert_eq!(wait("true", "count"), Some(2.0));
    assert_eq!(wait("false", "count"), Some(1.0));
    // The queued create waited for the first to finish.
    assert!(
        wait("true", "sum").is_some_and(|s| s >= HOLD.as_secs_f64() * 0.9),
        "{:?}",
        wait("true", "sum")
    );
    assert_eq!(
        value(&format!(
            "apiserver_flowcontrol_request_execution_seconds_count{{{labels},type=\"regular\"}}"
        )),
        Some(2.0)
    );
    assert_eq!(
        value(&format!(
            "apiserver_flowcontrol_request_queue_length_after_enqueue_count{{{labels}}}"
        )),
        Some(2.0)
    );
    // Each of the three creates was estimated from the ten watches (the refused one
    // too: the estimate comes first).
    assert_eq!(
        value(&format!(
            "apiserver_flowcontrol_watch_count_samples_sum{{{labels}}}"
        )),
        Some(30.0)
    );
    assert_eq!(
        value(&format!(
            "apiserver_flowcontrol_work_estimated_seats_count{{{labels}}}"
        )),
        Some(3.0)
    );
    // One share of 246: one seat, which it neither lends nor borrows beyond.
    let limit = |name: &str| {
        value(&format!(
            "apiserver_flowcontrol_{name}{{priority_level=\"fk-one-seat\"}}"
        ))
    };
    for name in [
        "nominal_limit_seats",
        "lower_limit_seats",
        "current_limit_seats",
        "upper_limit_seats",
    ] {
        assert_eq!(limit(name), Some(1.0), "{name}");
    }
    // The admin's requests are exempt, and counted as dispatched there.
    assert!(
        value(r#"apiserver_flowcontrol_dispatched_requests_total{flow_schema="exempt",priority_level="exempt"}"#)
            .is_some_and(|n| n >= 1.0)
    );
    assert!(page.contains("# TYPE apiserver_flowcontrol_request_wait_duration_seconds histogram"));
    assert!(page.contains(&format!(
        "apiserver_flowcontrol_request_wait_duration_seconds_bucket{{execute=\"true\",{labels},le=\"15\"}}"
    )));
}

#[tokio::test]
async fn the_dumps_are_for_those_allowed_to_read_them() {
    let srv = TestApiServer::start().await.unwrap();
    let (code, headers, bytes) = TestApiServer::raw(
        &srv.client,
        "GET",
        "/debug/api_priority_and_fairness/dump_priority_levels",
        &[],
        vec![],
    )
    .await
    .unwrap();
    assert_eq!(code, 200);
    assert_eq!(headers["content-type"], "text/plain; charset=utf-8");
    let table = String::from_utf8(bytes.to_vec()).unwrap();
    let mut lines = table.lines();
    assert_eq!(
        lines.next().map(str::trim_end),
        Some(
            "PriorityLevelName, ActiveQueues, IsIdle, IsQuiescing, WaitingRequests, ExecutingRequests, DispatchedRequests, RejectedRequests, TimedoutRequests, CancelledRequests"
        )
    );
    // Every level, by name, the bootstrap ones among them.
    let names: Vec<&str> = lines.filter_map(|l| l.split(',').next()).collect();
    let mut sorted = names.clone();
    sorted.sort_unstable();
    assert_eq!(names, sorted);
    for level in [
        "catch-all",
        "exempt",
        "global-default",
        "system",
        "workload-low",
    ] {
        assert!(names.contains(&level), "{table}");
    }
    // A user no role grants /debug is refused, as upstream's non-resource URL.
    let nobody = srv
        .client_as("nobody", &["system:authenticated"])
        .await
        .unwrap();
    for path in [
        "/debug/api_priority_and_fairness/dump_priority_levels",
        "/debug/api_priority_and_fairness/dump_requests",
    ] {
        let (code, _, _) = TestApiServer::raw(&nobody, "GET", path, &[], vec![])
            .await
            .unwrap();
        assert_eq!(code, 403, "{path}");
    }
    // Other paths under it are not served.
    let (code, _, _) = TestApiServer::raw(
        &srv.client,
        "GET",
        "/debug/api_priority_and_fairness/dump_other",
        &[],
        vec![],
    )
    .await
    .unwrap();
    assert_eq!(code, 404);
}

#[tokio::test]
async fn without_priority_and_fairness_nothing_is_dumped_or_counted() {
    let srv = TestApiServer::start_with(|o| o.enable_priority_and_fairness = false)
        .await
        .unwrap();
    let (code, _, _) = TestApiServer::raw(
        &srv.client,
        "GET",
        "/debug/api_priority_and_fairness/dump_queues",
        &[],
        vec![],
    )
    .await
    .unwrap();
    assert_eq!(code, 404);
    assert!(
        !metrics(&srv.client)
            .await
            .contains("apiserver_flowcontrol_")
    );
}

/// A dump table, each row cut into its trimmed columns.
async fn dump(client: &kube::Client, which: &str) -> Vec<Vec<String>> {
    let path = format!("/debug/api_priority_and_fairness/{which}");
    let (code, _, bytes) = TestApiServer::raw(client, "GET", &path, &[], vec![])
        .await
        .unwrap();
    assert_eq!(code, 200, "{path}");
    String::from_utf8_lossy(&bytes)
        .lines()
        .map(|l| {
            l.split(", ")
                .map(|c| c.trim().trim_end_matches(',').to_owned())
                .collect()
        })
        .collect()
}

/// The row of a dump whose first column is `level`.
fn row<'a>(table: &'a [Vec<String>], level: &str) -> Option<&'a Vec<String>> {
    table.iter().find(|r| r[0] == level)
}

async fn metrics(client: &kube::Client) -> String {
    let (code, _, bytes) = TestApiServer::raw(client, "GET", "/metrics", &[], vec![])
        .await
        .unwrap();
    assert_eq!(code, 200);
    String::from_utf8_lossy(&bytes).into_owned()
}

/// The value of the sample `series` (its name and labels, as written) on `page`.
fn sample(page: &str, series: &str) -> Option<f64> {
    page.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .and_then(|v| v.parse().ok())
}

/// A collection LIST takes a seat for every 100 objects of its resource, counted from
/// the watch cache of a built-in resource and of a custom one alike (upstream's
/// `listWorkEstimator` over its per-resource object counts).
#[tokio::test]
async fn lists_take_a_seat_per_hundred_objects_of_built_in_and_custom_resources() {
    let srv = TestApiServer::start().await.unwrap();
    let admin = srv.client.clone();
    // A level that rejects rather than queues may give a request its ten seats.
    create(
        &admin,
        PL,
        json!({"apiVersion": "flowcontrol.apiserver.k8s.io/v1", "kind": "PriorityLevelConfiguration",
            "metadata": {"name": "fk-lister"},
            "spec": {"type": "Limited", "limited": {"nominalConcurrencyShares": 100,
                "limitResponse": {"type": "Reject"}}}}),
    )
    .await;
    create(
        &admin,
        FS,
        schema_for_user("fk-lister", "fk-lister", "lister"),
    )
    .await;
    create(
        &admin,
        "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": "fk-lister"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "lister"}]}),
    )
    .await;

    let crd = "things.seats.example.com";
    create(
        &admin,
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
        json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": crd},
            "spec": {"group": "seats.example.com", "scope": "Namespaced",
                "names": {"plural": "things", "kind": "Thing"},
                "versions": [{"name": "v1", "served": true, "storage": true,
                    "schema": {"openAPIV3Schema": {"type": "object",
                        "x-kubernetes-preserve-unknown-fields": true}}}]}}),
    )
    .await;
    assert!(
        ferrokube_testing::eventually(|| ferrokube_testing::crd_established(&admin, crd)).await,
        "never established"
    );
    // 250 configmaps (with the few the server makes: 3 seats) and 150 things (2 seats).
    for i in 0..250 {
        create(
            &admin,
            "/api/v1/namespaces/default/configmaps",
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": format!("cm-{i}")}}),
        )
        .await;
    }
    for i in 0..150 {
        create(
            &admin,
            "/apis/seats.example.com/v1/namespaces/default/things",
            json!({"apiVersion": "seats.example.com/v1", "kind": "Thing", "metadata": {"name": format!("t-{i}")}}),
        )
        .await;
    }

    let lister = kube::Client::try_from(
        srv.config_as("lister", &["system:authenticated"])
            .await
            .unwrap(),
    )
    .unwrap();
    let labels = r#"flow_schema="fk-lister",priority_level="fk-lister""#;
    let estimated = |page: &str, sample_name: &str| {
        sample(
            page,
            &format!("apiserver_flowcontrol_work_estimated_seats_{sample_name}{{{labels}}}"),
        )
    };
    let things = get(
        &lister,
        "/apis/seats.example.com/v1/namespaces/default/things",
    )
    .await;
    assert_eq!(things["items"].as_array().map(Vec::len), Some(150));
    let page = metrics(&admin).await;
    assert_eq!(estimated(&page, "count"), Some(1.0));
    assert_eq!(estimated(&page, "sum"), Some(2.0), "150 things: two seats");

    let configmaps = get(&lister, "/api/v1/namespaces/default/configmaps").await;
    assert!(
        configmaps["items"]
            .as_array()
            .is_some_and(|i| i.len() >= 250)
    );
    // A page from storage reads twice the page: 200 objects, two seats.
    let rv = configmaps["metadata"]["resourceVersion"].as_str().unwrap();
    let paged = get(
        &lister,
        &format!(
            "/api/v1/namespaces/default/configmaps?limit=100&resourceVersion={rv}&resourceVersionMatch=Exact"
        ),
    )
    .await;
    assert_eq!(paged["items"].as_array().map(Vec::len), Some(100));
    // One object, one seat.
    get(&lister, "/api/v1/namespaces/default/configmaps/cm-0").await;
    let page = metrics(&admin).await;
    assert_eq!(estimated(&page, "count"), Some(4.0));
    assert_eq!(estimated(&page, "sum"), Some(2.0 + 3.0 + 2.0 + 1.0));
    srv.stop().await;
}
