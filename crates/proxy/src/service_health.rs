//! Upstream's service health servers (`pkg/proxy/healthcheck/service_health.go`): for
//! each LoadBalancer Service with `externalTrafficPolicy: Local`, an HTTP server on its
//! `healthCheckNodePort` that answers 200 while this node has a ready endpoint of the
//! Service and the proxy is healthy, 503 otherwise, so that an external load balancer
//! sends the Service's traffic only to nodes that can keep it local. [`reply`] is the
//! answer; [`ServiceHealthServers`] opens and closes the listeners as Services come
//! and go.

use std::collections::{BTreeMap, HashMap};
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use ferrokube_client::serving::{PlainReply, PlainRespondWithHeaders, serve_plain_with_headers};
use parking_lot::Mutex;
use tokio_util::sync::CancellationToken;

/// A Service a health check port answers for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServedService {
    pub namespace: String,
    pub name: String,
    /// Ready endpoints on this node, counted per Service port.
    pub local_endpoints: usize,
}

/// What to serve: per health check node port, its Service, on these addresses.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct HealthPlan {
    pub listen: Vec<IpAddr>,
    pub services: BTreeMap<u16, ServedService>,
}

/// Upstream's answer, whatever the path: the endpoint count as the load balancer's
/// weight and upstream's JSON (tab-indented, as its dedented template).
pub fn reply(service: Option<&ServedService>, proxy_healthy: bool) -> PlainReply {
    let Some(svc) = service else {
        // A request racing the listener's close.
        return PlainReply {
            code: 503,
            content_type: "text/plain",
            headers: Vec::new(),
            body: String::new(),
        };
    };
    let code = if svc.local_endpoints != 0 && proxy_healthy {
        200
    } else {
        503
    };
    let quoted = |s: &str| serde_json::Value::from(s).to_string();
    PlainReply {
        code,
        content_type: "application/json",
        headers: vec![(
            "x-load-balancing-endpoint-weight",
            svc.local_endpoints.to_string(),
        )],
        body: format!(
            "{{\n\t\"service\": {{\n\t\t\"namespace\": {},\n\t\t\"name\": {}\n\t}},\n\t\"localEndpoints\": {},\n\t\"serviceProxyHealthy\": {}\n}}",
            quoted(&svc.namespace),
            quoted(&svc.name),
            svc.local_endpoints,
            proxy_healthy
        ),
    }
}

/// A port that could not be served, and why.
#[derive(Debug)]
pub struct ListenFailure {
    pub service: ServedService,
    pub port: u16,
    pub error: std::io::Error,
}

/// The listeners of the health check node ports.
pub struct ServiceHealthServers {
    served: Arc<Mutex<BTreeMap<u16, ServedService>>>,
    listeners: HashMap<u16, CancellationToken>,
    proxy_healthy: Arc<dyn Fn() -> bool + Send + Sync>,
}

impl ServiceHealthServers {
    /// `proxy_healthy` is asked at each request (upstream's `serviceProxyHealthy`).
    pub fn new(proxy_healthy: Arc<dyn Fn() -> bool + Send + Sync>) -> Self {
        ServiceHealthServers {
            served: Arc::default(),
            listeners: HashMap::new(),
            proxy_healthy,
        }
    }

    /// Serves `plan`: what every port answers changes at once; ports of Services gone
    /// are closed, new ones opened. Those that could not be opened are returned (and
    /// tried again at the next sync).
    pub async fn sync(&mut self, plan: HealthPlan) -> Vec<ListenFailure> {
        *self.served.lock() = plan.services.clone();
        self.listeners.retain(|port, cancel| {
            let keep = plan.services.contains_key(port);
            if !keep {
                cancel.cancel();
            }
            keep
        });
        let mut failures = Vec::new();
        for (port, service) in &plan.services {
            if self.listeners.contains_key(port) {
                continue;
            }
            let cancel = CancellationToken::new();
            let mut failed = None;
            for ip in &plan.listen {
                let served = self.served.clone();
                let healthy = self.proxy_healthy.clone();
                let port = *port;
                let respond: PlainRespondWithHeaders =
                    Arc::new(move |_path: &str| reply(served.lock().get(&port), healthy()));
                let addr = SocketAddr::new(*ip, port);
                if let Err(error) = serve_plain_with_headers(addr, respond, cancel.clone()).await {
                    failed = Some(error);
                    break;
                }
            }
            match failed {
                None => {
                    self.listeners.insert(*port, cancel);
                }
                Some(error) => {
                    cancel.cancel();
                    failures.push(ListenFailure {
                        service: service.clone(),
                        port: *port,
                        error,
                    });
                }
            }
        }
        failures
    }

    /// The ports open now.
    pub fn ports(&self) -> Vec<u16> {
        let mut ports: Vec<u16> = self.listeners.keys().copied().collect();
        ports.sort_unstable();
        ports
    }

    /// Closes every listener.
    pub fn stop(&mut self) {
        for (_, cancel) in self.listeners.drain() {
            cancel.cancel();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn web(local_endpoints: usize) -> ServedService {
        ServedService {
            namespace: "prod".into(),
            name: "web".into(),
            local_endpoints,
        }
    }

    #[test]
    fn the_answer_is_upstreams() {
        let ok = reply(Some(&web(2)), true);
        assert_eq!(ok.code, 200);
        assert_eq!(ok.content_type, "application/json");
        assert_eq!(
            ok.headers,
            [("x-load-balancing-endpoint-weight", "2".to_string())]
        );
        assert_eq!(
            ok.body,
            "{\n\t\"service\": {\n\t\t\"namespace\": \"prod\",\n\t\t\"name\": \"web\"\n\t},\n\t\"localEndpoints\": 2,\n\t\"serviceProxyHealthy\": true\n}"
        );
        let v: serde_json::Value = serde_json::from_str(&ok.body).unwrap();
        assert_eq!(v["service"]["name"], "web");
        // No local endpoint, or an unhealthy proxy: 503 with the same body shape.
        assert_eq!(reply(Some(&web(0)), true).code, 503);
        let sick = reply(Some(&web(1)), false);
        assert_eq!(sick.code, 503);
        assert!(sick.body.contains("\"serviceProxyHealthy\": false"));
    }

    async fn get(port: u16) -> (u16, String) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .unwrap();
        s.write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
            .await
            .unwrap();
        let mut out = String::new();
        tokio::time::timeout(
            std::time::Duration::from_secs(5),
            s.read_to_string(&mut out),
        )
        .await
        .unwrap()
        .unwrap();
        let code = out[9..12].parse().unwrap();
        (code, out)
    }

    fn free_port() -> u16 {
        std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port()
    }

    #[tokio::test]
    async fn ports_open_answer_the_current_count_and_close_with_their_service() {
        let mut servers = ServiceHealthServers::new(Arc::new(|| true));
        let port = free_port();
        let plan = |n| HealthPlan {
            listen: vec![IpAddr::from([127, 0, 0, 1])],
            services: BTreeMap::from([(port, web(n))]),
        };
        assert!(servers.sync(plan(0)).await.is_empty());
        assert_eq!(servers.ports(), [port]);
        let (code, text) = get(port).await;
        assert_eq!(code, 503, "{text}");
        assert!(
            text.contains("x-load-balancing-endpoint-weight: 0"),
            "{text}"
        );
        // An endpoint became ready here: the same listener answers 200.
        assert!(servers.sync(plan(1)).await.is_empty());
        let (code, text) = get(port).await;
        assert_eq!(code, 200, "{text}");
        assert!(text.contains("\"localEndpoints\": 1"), "{text}");
        // A port taken by someone else is reported, not fatal.
        let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let taken_port = taken.local_addr().unwrap().port();
        let mut both = plan(1);
        both.services.insert(taken_port, web(1));
        let failures = servers.sync(both).await;
        assert_eq!(failures.len(), 1);
        assert_eq!(failures[0].port, taken_port);
        // The Service is gone: its port closes.
        assert!(servers.sync(HealthPlan::default()).await.is_empty());
        assert!(servers.ports().is_empty());
        let mut closed = false;
        for _ in 0..50 {
            if tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .is_err()
            {
                closed = true;
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        assert!(closed, "port {port} still open");
    }
}
