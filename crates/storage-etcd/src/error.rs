//! Mapping etcd client errors onto [`StorageError`]. The decision is a pure function of
//! the gRPC code and message ([`classify`]), so it is tested without a server.

use ferrokube_storage::{Revision, StorageError};

/// What an etcd error means for the storage contract.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// "mvcc: required revision has been compacted"
    Compacted,
    /// "mvcc: required revision is a future revision"
    FutureRevision,
    /// Transport trouble, no leader, timeouts, overload: retrying may succeed.
    Unavailable,
    /// The request itself is bad (too large, too many operations, ...).
    InvalidArgument,
    Internal,
}

/// gRPC status codes (stable numbers of the gRPC spec).
mod code {
    pub const CANCELLED: i32 = 1;
    pub const UNKNOWN: i32 = 2;
    pub const INVALID_ARGUMENT: i32 = 3;
    pub const DEADLINE_EXCEEDED: i32 = 4;
    pub const RESOURCE_EXHAUSTED: i32 = 8;
    pub const FAILED_PRECONDITION: i32 = 9;
    pub const ABORTED: i32 = 10;
    pub const OUT_OF_RANGE: i32 = 11;
    pub const INTERNAL: i32 = 13;
    pub const UNAVAILABLE: i32 = 14;
}

const COMPACTED: &str = "required revision has been compacted";
const FUTURE: &str = "required revision is a future revision";

/// Classifies a gRPC status from etcd. `transport` tells whether the status was made
/// by the client from a transport failure rather than sent by etcd.
pub(crate) fn classify(grpc_code: i32, message: &str, transport: bool) -> Kind {
    if message.contains(COMPACTED) {
        return Kind::Compacted;
    }
    if message.contains(FUTURE) {
        return Kind::FutureRevision;
    }
    // Over etcd's request size limit (or gRPC's message limit): retrying cannot help.
    if message.contains("request is too large") || message.contains("larger than max") {
        return Kind::InvalidArgument;
    }
    if transport {
        return Kind::Unavailable;
    }
    match grpc_code {
        code::CANCELLED
        | code::UNKNOWN
        | code::DEADLINE_EXCEEDED
        | code::RESOURCE_EXHAUSTED
        | code::ABORTED
        | code::UNAVAILABLE => Kind::Unavailable,
        code::INVALID_ARGUMENT | code::FAILED_PRECONDITION | code::OUT_OF_RANGE => {
            Kind::InvalidArgument
        }
        // Broken HTTP/2 connections surface as INTERNAL from the client library.
        code::INTERNAL
            if ["h2 protocol", "connection", "transport", "broken pipe"]
                .iter()
                .any(|needle| message.contains(needle)) =>
        {
            Kind::Unavailable
        }
        _ => Kind::Internal,
    }
}

/// Classifies any error of the etcd client.
pub(crate) fn kind_of(err: &etcd_client::Error) -> Kind {
    use etcd_client::Error as E;
    match err {
        E::GRpcStatus(status) => {
            let transport = std::error::Error::source(status).is_some();
            classify(status.code() as i32, status.message(), transport)
        }
        E::TransportError(_) | E::IoError(_) | E::WatchError(_) | E::EndpointError(_) => {
            Kind::Unavailable
        }
        E::InvalidArgs(_) | E::InvalidUri(_) | E::Utf8Error(_) | E::InvalidMetadataValue(_) => {
            Kind::InvalidArgument
        }
        _ => Kind::Internal,
    }
}

/// Context for turning an etcd error into a [`StorageError`]: the revision asked for
/// and what this store knows of compacted and current revisions.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Context {
    pub requested: Revision,
    pub compacted: Revision,
    pub current: Revision,
}

pub(crate) fn to_storage_error(err: &etcd_client::Error, ctx: Context) -> StorageError {
    from_kind(kind_of(err), &err.to_string(), ctx)
}

fn from_kind(kind: Kind, message: &str, ctx: Context) -> StorageError {
    match kind {
        Kind::Compacted => StorageError::Expired {
            requested: ctx.requested,
            compacted: ctx.compacted,
        },
        Kind::FutureRevision => StorageError::FutureRevision {
            requested: ctx.requested,
            current: ctx.current,
        },
        Kind::Unavailable => StorageError::Unavailable(format!("etcd: {message}")),
        Kind::InvalidArgument => StorageError::InvalidArgument(format!("etcd: {message}")),
        Kind::Internal => StorageError::Internal(format!("etcd: {message}")),
    }
}

/// The common case: an error with no revision in play.
pub(crate) fn plain(err: etcd_client::Error) -> StorageError {
    to_storage_error(&err, Context::default())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn etcd_messages_map_to_contract_errors() {
        let cases = [
            (
                code::OUT_OF_RANGE,
                "etcdserver: mvcc: required revision has been compacted",
                Kind::Compacted,
            ),
            (
                code::OUT_OF_RANGE,
                "etcdserver: mvcc: required revision is a future revision",
                Kind::FutureRevision,
            ),
            (
                code::UNAVAILABLE,
                "etcdserver: leader changed",
                Kind::Unavailable,
            ),
            (code::UNAVAILABLE, "tcp connect error", Kind::Unavailable),
            (
                code::DEADLINE_EXCEEDED,
                "timeout expired",
                Kind::Unavailable,
            ),
            (
                code::RESOURCE_EXHAUSTED,
                "etcdserver: too many requests",
                Kind::Unavailable,
            ),
            (code::UNKNOWN, "transport error", Kind::Unavailable),
            (
                code::INTERNAL,
                "h2 protocol error: broken",
                Kind::Unavailable,
            ),
            (
                code::INVALID_ARGUMENT,
                "etcdserver: request is too large",
                Kind::InvalidArgument,
            ),
            (
                code::RESOURCE_EXHAUSTED,
                "grpc: received message larger than max (4194343 vs. 2097152)",
                Kind::InvalidArgument,
            ),
            (code::INTERNAL, "etcdserver: corrupt", Kind::Internal),
            (7, "etcdserver: permission denied", Kind::Internal),
        ];
        for (grpc_code, message, want) in cases {
            assert_eq!(classify(grpc_code, message, false), want, "{message}");
        }
        assert_eq!(classify(code::INTERNAL, "odd", true), Kind::Unavailable);
    }

    #[test]
    fn client_errors_map_by_variant() {
        let err = etcd_client::Error::WatchError("closed".into());
        assert!(matches!(plain(err), StorageError::Unavailable(_)));
        let err = etcd_client::Error::InvalidArgs("bad".into());
        assert!(matches!(plain(err), StorageError::InvalidArgument(_)));
        let err = etcd_client::Error::Internal("huh".into());
        assert!(matches!(plain(err), StorageError::Internal(_)));
    }

    #[test]
    fn revision_errors_carry_the_revisions() {
        let ctx = Context {
            requested: 3,
            compacted: 5,
            current: 9,
        };
        assert!(matches!(
            from_kind(Kind::Compacted, "", ctx),
            StorageError::Expired {
                requested: 3,
                compacted: 5
            }
        ));
        assert!(matches!(
            from_kind(Kind::FutureRevision, "", ctx),
            StorageError::FutureRevision {
                requested: 3,
                current: 9
            }
        ));
    }
}
