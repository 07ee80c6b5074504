//! Storage errors to API errors, in one place.

use ferrokube_api::resources::ResourceInfo;
use ferrokube_apimachinery::errors::ApiError;
use ferrokube_storage::StorageError;

/// An [`ApiError`] carried through a storage update function
/// ([`StorageError::Aborted`]) and recovered by [`from_storage`].
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct Abort(pub ApiError);

pub fn abort(e: ApiError) -> ferrokube_storage::AbortError {
    Box::new(Abort(e))
}

/// The message upstream gives for a stale resourceVersion.
pub const CONFLICT_MESSAGE: &str =
    "the object has been modified; please apply your changes to the latest version and try again";

/// The message upstream gives for an expired continue token.
pub const EXPIRED_CONTINUE: &str = "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue token in this response to retrieve the remainder of the results. Continuing with the provided token results in an inconsistent list - objects that were created, modified, or deleted between the time the first chunk was returned and now may show up in the list.";

/// Maps a storage error for `info`/`name` to the API error upstream answers with.
pub fn from_storage(info: &ResourceInfo, name: &str, err: StorageError) -> ApiError {
    match err {
        StorageError::NotFound { .. } => ApiError::not_found(info.group, info.plural, name),
        StorageError::AlreadyExists { .. } => {
            ApiError::already_exists(info.group, info.plural, name)
        }
        StorageError::Conflict { message, .. } => {
            let msg = if message.contains("UID in precondition") {
                message
                    .trim_start_matches("precondition failed: ")
                    .to_string()
            } else {
                CONFLICT_MESSAGE.to_string()
            };
            ApiError::conflict(info.group, info.plural, name, msg)
        }
        StorageError::Expired { requested, .. } => {
            ApiError::gone(format!("too old resource version: {requested}"))
        }
        StorageError::FutureRevision { requested, current } => {
            ApiError::too_large_resource_version(
                u64::try_from(requested).unwrap_or(0),
                u64::try_from(current).unwrap_or(0),
                1,
            )
        }
        StorageError::InvalidArgument(m) => ApiError::bad_request(m),
        StorageError::Aborted(e) => match e.downcast::<Abort>() {
            Ok(a) => a.0,
            Err(e) => ApiError::internal(e),
        },
        StorageError::Unavailable(m) => ApiError::service_unavailable(m),
        StorageError::Internal(m) => ApiError::internal(m),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferrokube_api::resources::lookup;

    #[test]
    fn maps_errors() {
        let pods = lookup("", "v1", "pods").unwrap();
        let e = from_storage(pods, "a", StorageError::NotFound { key: "k".into() });
        assert_eq!((e.code, e.message.as_str()), (404, "pods \"a\" not found"));
        let e = from_storage(
            pods,
            "a",
            StorageError::Conflict {
                key: "k".into(),
                message: "precondition failed: revision is 3, expected 2".into(),
            },
        );
        assert_eq!(e.code, 409);
        assert!(e.message.contains("the object has been modified"));
        let e = from_storage(
            pods,
            "a",
            StorageError::Aborted(abort(ApiError::bad_request("x"))),
        );
        assert_eq!((e.code, e.message.as_str()), (400, "x"));
    }
}
