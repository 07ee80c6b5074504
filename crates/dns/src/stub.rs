//! A minimal stub resolver for tests, benchmarks and probes: one question to one
//! server over UDP or TCP, with a deadline. Not a general resolver (no retries over
//! servers, no search list, no caching).

use std::net::SocketAddr;
use std::time::Duration;

use hickory_proto::op::{Message, MessageType, OpCode, Query};
use hickory_proto::rr::{Name, RecordType};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Errors of one exchange.
#[derive(Debug, thiserror::Error)]
pub enum StubError {
    #[error("io: {0}")]
    Io(#[from] std::io::Error),
    #[error("dns: {0}")]
    Proto(#[from] hickory_proto::ProtoError),
    #[error("decoding the response: {0}")]
    Decode(String),
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    #[error("response id {got} does not match query id {want}")]
    IdMismatch { want: u16, got: u16 },
}

/// A query message for `name`/`qtype` with recursion desired (as a stub sends it).
pub fn query_message(id: u16, name: &str, qtype: RecordType) -> Result<Message, StubError> {
    let mut msg = Message::new(id, MessageType::Query, OpCode::Query);
    msg.metadata.recursion_desired = true;
    msg.add_query(Query::query(Name::from_ascii(name)?, qtype));
    Ok(msg)
}

fn decode(buf: &[u8], want: u16) -> Result<Message, StubError> {
    let msg = Message::from_vec(buf).map_err(|e| StubError::Decode(e.to_string()))?;
    if msg.metadata.id != want {
        return Err(StubError::IdMismatch {
            want,
            got: msg.metadata.id,
        });
    }
    Ok(msg)
}

/// One question over UDP.
pub async fn query_udp(
    server: SocketAddr,
    name: &str,
    qtype: RecordType,
    timeout: Duration,
) -> Result<Message, StubError> {
    let id = rand_id();
    let bytes = query_message(id, name, qtype)?.to_vec()?;
    let bind: SocketAddr = if server.is_ipv4() {
        "0.0.0.0:0".parse().expect("valid address")
    } else {
        "[::]:0".parse().expect("valid address")
    };
    let sock = tokio::net::UdpSocket::bind(bind).await?;
    sock.connect(server).await?;
    let exchange = async {
        sock.send(&bytes).await?;
        let mut buf = vec![0u8; 65535];
        let n = sock.recv(&mut buf).await?;
        decode(&buf[..n], id)
    };
    tokio::time::timeout(timeout, exchange)
        .await
        .map_err(|_| StubError::Timeout(timeout))?
}

/// One question over TCP (two-byte length framing, RFC 1035 4.2.2).
pub async fn query_tcp(
    server: SocketAddr,
    name: &str,
    qtype: RecordType,
    timeout: Duration,
) -> Result<Message, StubError> {
    let id = rand_id();
    let bytes = query_message(id, name, qtype)?.to_vec()?;
    let exchange = async {
        let mut stream = tokio::net::TcpStream::connect(server).await?;
        let len =
            u16::try_from(bytes.len()).map_err(|_| StubError::Decode("query too long".into()))?;
        let mut framed = len.to_be_bytes().to_vec();
        framed.extend_from_slice(&bytes);
        stream.write_all(&framed).await?;
        let mut len = [0u8; 2];
        stream.read_exact(&mut len).await?;
        let mut buf = vec![0u8; usize::from(u16::from_be_bytes(len))];
        stream.read_exact(&mut buf).await?;
        decode(&buf, id)
    };
    tokio::time::timeout(timeout, exchange)
        .await
        .map_err(|_| StubError::Timeout(timeout))?
}

/// A query id that differs between calls (not cryptographic: tests and probes only).
fn rand_id() -> u16 {
    use std::sync::atomic::{AtomicU16, Ordering};
    static NEXT: AtomicU16 = AtomicU16::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    NEXT.fetch_add(1, Ordering::Relaxed) ^ (nanos as u16)
}
