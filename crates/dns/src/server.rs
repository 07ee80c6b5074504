//! The DNS wire side: a hickory-server [`RequestHandler`] that answers from the
//! shared [`DnsIndex`], and the UDP and TCP listeners.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use hickory_proto::op::{Edns, MessageType, Metadata, OpCode, ResponseCode};
use hickory_proto::rr::DNSClass;
use hickory_server::Server;
use hickory_server::net::runtime::Time;
use hickory_server::net::xfer::Protocol;
use hickory_server::server::{Request, RequestHandler, ResponseHandler, ResponseInfo};
use hickory_server::zone_handler::MessageResponseBuilder;
use parking_lot::RwLock;

use crate::index::DnsIndex;

/// How long an idle TCP connection is kept (CoreDNS: 10 s read timeout).
const TCP_TIMEOUT: Duration = Duration::from_secs(10);
/// Responses queued per TCP connection.
const TCP_RESPONSE_BUFFER: usize = 64;

/// Request counters by response code, for `/metrics`.
#[derive(Debug, Default)]
pub struct DnsMetrics {
    pub requests_udp: AtomicU64,
    pub requests_tcp: AtomicU64,
    pub noerror: AtomicU64,
    pub nxdomain: AtomicU64,
    pub servfail: AtomicU64,
    pub other: AtomicU64,
}

impl DnsMetrics {
    fn count(&self, tcp: bool, rcode: ResponseCode) {
        if tcp {
            &self.requests_tcp
        } else {
            &self.requests_udp
        }
        .fetch_add(1, Ordering::Relaxed);
        match rcode {
            ResponseCode::NoError => &self.noerror,
            ResponseCode::NXDomain => &self.nxdomain,
            ResponseCode::ServFail => &self.servfail,
            _ => &self.other,
        }
        .fetch_add(1, Ordering::Relaxed);
    }

    /// Prometheus text format, in CoreDNS's metric names.
    pub fn write(&self, out: &mut String) {
        use std::fmt::Write;
        let load = |c: &AtomicU64| c.load(Ordering::Relaxed);
        let _ = writeln!(
            out,
            "# HELP coredns_dns_requests_total Counter of DNS requests made per zone, protocol and family.\n# TYPE coredns_dns_requests_total counter"
        );
        let _ = writeln!(
            out,
            "coredns_dns_requests_total{{proto=\"udp\"}} {}",
            load(&self.requests_udp)
        );
        let _ = writeln!(
            out,
            "coredns_dns_requests_total{{proto=\"tcp\"}} {}",
            load(&self.requests_tcp)
        );
        let _ = writeln!(
            out,
            "# HELP coredns_dns_responses_total Counter of response status codes.\n# TYPE coredns_dns_responses_total counter"
        );
        for (rcode, c) in [
            ("NOERROR", &self.noerror),
            ("NXDOMAIN", &self.nxdomain),
            ("SERVFAIL", &self.servfail),
            ("OTHER", &self.other),
        ] {
            let _ = writeln!(
                out,
                "coredns_dns_responses_total{{rcode=\"{rcode}\"}} {}",
                load(c)
            );
        }
    }
}

/// The index as the server and the watch share it.
pub type SharedIndex = RwLock<DnsIndex>;

/// Answers every query from the index (read-locked for the lookup only).
#[derive(Debug, Clone)]
pub struct ClusterDnsHandler {
    pub index: Arc<SharedIndex>,
    pub metrics: Arc<DnsMetrics>,
    /// Until the caches are synced every query gets SERVFAIL (an empty index would
    /// otherwise answer an authoritative NXDOMAIN that resolvers cache).
    pub ready: Arc<AtomicBool>,
}

#[async_trait::async_trait]
impl RequestHandler for ClusterDnsHandler {
    async fn handle_request<R: ResponseHandler, T: Time>(
        &self,
        request: &Request,
        mut response_handle: R,
    ) -> ResponseInfo {
        let tcp = request.protocol() == Protocol::Tcp;
        let response_edns = request.edns.as_ref().map(|req| {
            let mut e = Edns::new();
            e.set_max_payload(req.max_payload().max(512));
            e.set_version(0);
            e
        });
        let builder = || {
            let mut b = MessageResponseBuilder::from_message_request(request);
            if let Some(e) = &response_edns {
                b.edns(e);
            }
            b
        };
        let error = |code: ResponseCode| {
            let meta = request.metadata;
            (builder().error_msg(&meta, code), code)
        };
        let (result, rcode) = if request.metadata.message_type != MessageType::Query {
            let (resp, code) = error(ResponseCode::FormErr);
            (response_handle.send_response(resp).await, code)
        } else if request.metadata.op_code != OpCode::Query {
            let (resp, code) = error(ResponseCode::NotImp);
            (response_handle.send_response(resp).await, code)
        } else if request.edns.as_ref().is_some_and(|e| e.version() > 0) {
            let (resp, code) = error(ResponseCode::BADVERS);
            (response_handle.send_response(resp).await, code)
        } else {
            match request.queries.queries() {
                [_] if !self.ready.load(Ordering::Acquire) => {
                    let (resp, code) = error(ResponseCode::ServFail);
                    (response_handle.send_response(resp).await, code)
                }
                [query] if query.query_class() == DNSClass::IN => {
                    let answer = self
                        .index
                        .read()
                        .lookup(query.original().name(), query.query_type());
                    let mut meta = Metadata::response_from_request(&request.metadata);
                    meta.authoritative = answer.authoritative;
                    meta.recursion_available = false;
                    meta.response_code = answer.rcode;
                    let resp = builder().build(
                        meta,
                        answer.answers.iter(),
                        answer.authorities.iter(),
                        std::iter::empty(),
                        answer.additionals.iter(),
                    );
                    (response_handle.send_response(resp).await, answer.rcode)
                }
                [_] => {
                    let (resp, code) = error(ResponseCode::Refused);
                    (response_handle.send_response(resp).await, code)
                }
                _ => {
                    let (resp, code) = error(ResponseCode::FormErr);
                    (response_handle.send_response(resp).await, code)
                }
            }
        };
        self.metrics.count(tcp, rcode);
        match result {
            Ok(info) => info,
            Err(e) => {
                tracing::debug!(error = %e, "sending a DNS response failed");
                let mut meta = Metadata::response_from_request(&request.metadata);
                meta.response_code = ResponseCode::ServFail;
                hickory_proto::op::Header {
                    metadata: meta,
                    counts: Default::default(),
                }
                .into()
            }
        }
    }
}

/// Errors starting the DNS listeners.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("binding {proto} {addr}: {source}")]
    Bind {
        proto: &'static str,
        addr: SocketAddr,
        source: std::io::Error,
    },
}

/// Binds UDP and TCP on every address and serves `handler` until the returned
/// server is shut down. Returns the server and the addresses actually bound (port 0
/// picks a free port, the same one for UDP and TCP of one address when possible).
pub async fn bind(
    handler: ClusterDnsHandler,
    addrs: &[SocketAddr],
) -> Result<(Server<ClusterDnsHandler>, Vec<SocketAddr>), ServeError> {
    let mut server = Server::new(handler);
    let mut bound = Vec::new();
    for addr in addrs {
        let (udp, tcp) = bind_pair(*addr).await?;
        bound.push(udp.local_addr().map_err(|source| ServeError::Bind {
            proto: "udp",
            addr: *addr,
            source,
        })?);
        server.register_socket(udp);
        server.register_listener(tcp, TCP_TIMEOUT, TCP_RESPONSE_BUFFER);
    }
    Ok((server, bound))
}

/// UDP and TCP sockets on the same address and port. With port 0, the port UDP got
/// is tried for TCP (a few attempts, since another process may hold it on TCP).
async fn bind_pair(
    addr: SocketAddr,
) -> Result<(tokio::net::UdpSocket, tokio::net::TcpListener), ServeError> {
    let attempts = if addr.port() == 0 { 20 } else { 1 };
    let mut last_err = None;
    for _ in 0..attempts {
        let udp = tokio::net::UdpSocket::bind(addr)
            .await
            .map_err(|source| ServeError::Bind {
                proto: "udp",
                addr,
                source,
            })?;
        let port = udp.local_addr().map(|a| a.port()).unwrap_or(addr.port());
        let tcp_addr = SocketAddr::new(addr.ip(), port);
        match tokio::net::TcpListener::bind(tcp_addr).await {
            Ok(tcp) => return Ok((udp, tcp)),
            Err(source) => {
                last_err = Some(ServeError::Bind {
                    proto: "tcp",
                    addr: tcp_addr,
                    source,
                })
            }
        }
    }
    Err(last_err.unwrap_or(ServeError::Bind {
        proto: "tcp",
        addr,
        source: std::io::Error::other("no attempt made"),
    }))
}
