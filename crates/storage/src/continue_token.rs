//! List continue tokens, in the apiserver's wire format so they can go to clients as is:
//! unpadded URL-safe base64 (upstream's `RawURLEncoding`, nothing a query string must
//! escape) of `{"v":"meta.k8s.io/v1","rv":<revision>,"start":"<key suffix>"}` where
//! `start` is the first key of the next page relative to the listed prefix.

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use serde::{Deserialize, Serialize};

use crate::{Revision, StorageError};

const TOKEN_VERSION: &str = "meta.k8s.io/v1";

/// Where the next page of a list starts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ContinueToken {
    /// The revision the whole list is read at.
    pub revision: Revision,
    /// The first key of the next page (inclusive), a full key.
    pub start_key: String,
}

/// Members a token lacks read as their zero values, as Go's `json.Unmarshal` leaves them.
#[derive(Serialize, Deserialize, Default)]
#[serde(default)]
struct Wire {
    v: String,
    rv: Revision,
    start: String,
}

impl ContinueToken {
    pub fn encode(&self, prefix: &str) -> String {
        let start = self
            .start_key
            .strip_prefix(prefix)
            .unwrap_or(&self.start_key);
        let wire = Wire {
            v: TOKEN_VERSION.to_string(),
            rv: self.revision,
            start: start.to_string(),
        };
        URL_SAFE_NO_PAD.encode(serde_json::to_vec(&wire).expect("token serializes"))
    }

    /// Parses a token for a list of `prefix`. A token that is malformed, from another
    /// version, or that tries to leave the prefix is [`StorageError::InvalidArgument`],
    /// with upstream's `DecodeContinue` messages. Padded standard base64, which earlier
    /// Ferrokube servers issued, is read too, so a list paged across an upgrade goes on.
    pub fn decode(token: &str, prefix: &str) -> Result<ContinueToken, StorageError> {
        const NOT_VALID: &str = "continue key is not valid";
        let invalid = |why: String| StorageError::InvalidArgument(why);
        let bytes = URL_SAFE_NO_PAD
            .decode(token)
            .or_else(|e| STANDARD.decode(token).map_err(|_| e))
            .map_err(|e| invalid(format!("{NOT_VALID}: {e}")))?;
        let wire: Wire =
            serde_json::from_slice(&bytes).map_err(|e| invalid(format!("{NOT_VALID}: {e}")))?;
        if wire.v != TOKEN_VERSION {
            return Err(invalid(format!(
                "{NOT_VALID}: server does not recognize this encoded version {}",
                wire.v
            )));
        }
        if wire.rv <= 0 {
            return Err(invalid(format!(
                "{NOT_VALID}: incorrect encoded start resourceVersion (version {TOKEN_VERSION})"
            )));
        }
        if wire.start.is_empty() {
            return Err(invalid(format!(
                "{NOT_VALID}: encoded start key empty (version {TOKEN_VERSION})"
            )));
        }
        if wire
            .start
            .split('/')
            .skip(1)
            .any(|part| part == ".." || part == "." || part.is_empty())
            || matches!(wire.start.split('/').next(), Some(".." | "."))
        {
            return Err(invalid(format!("{NOT_VALID}: {}", wire.start)));
        }
        Ok(ContinueToken {
            revision: wire.rv,
            start_key: format!("{prefix}{}", wire.start),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_relative_to_prefix() {
        let token = ContinueToken {
            revision: 42,
            start_key: "/registry/pods/ns/b".into(),
        };
        let encoded = token.encode("/registry/pods/");
        let wire: serde_json::Value =
            serde_json::from_slice(&STANDARD.decode(&encoded).unwrap()).unwrap();
        assert_eq!(wire["start"], "ns/b");
        assert_eq!(wire["rv"], 42);
        assert_eq!(
            ContinueToken::decode(&encoded, "/registry/pods/").unwrap(),
            token
        );
    }

    #[test]
    fn tokens_need_no_escaping_and_old_padded_ones_still_read() {
        let token = ContinueToken {
            revision: 7,
            start_key: "/registry/configmaps/ns/a?b".into(),
        };
        let encoded = token.encode("/registry/configmaps/");
        assert!(
            encoded
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_'),
            "{encoded}"
        );
        let padded = STANDARD.encode(r#"{"v":"meta.k8s.io/v1","rv":7,"start":"ns/a?b"}"#);
        assert_eq!(
            ContinueToken::decode(&padded, "/registry/configmaps/").unwrap(),
            token
        );
    }

    #[test]
    fn rejects_garbage_and_escapes_with_upstreams_messages() {
        let message = |token: &str| match ContinueToken::decode(token, "/p/") {
            Err(StorageError::InvalidArgument(m)) => m,
            other => panic!("{token}: {other:?}"),
        };
        let wire = |json: &str| URL_SAFE_NO_PAD.encode(json);
        for bad in ["", "!!!", "e30", "e30="] {
            assert!(
                message(bad).starts_with("continue key is not valid"),
                "{bad}"
            );
        }
        assert_eq!(
            message(&wire(r#"{"v":"x","rv":1,"start":"a"}"#)),
            "continue key is not valid: server does not recognize this encoded version x"
        );
        assert_eq!(
            message(&wire(r#"{"v":"meta.k8s.io/v1","rv":0,"start":"a"}"#)),
            "continue key is not valid: incorrect encoded start resourceVersion (version meta.k8s.io/v1)"
        );
        assert_eq!(
            message(&wire(r#"{"v":"meta.k8s.io/v1","rv":1,"start":""}"#)),
            "continue key is not valid: encoded start key empty (version meta.k8s.io/v1)"
        );
        for escape in ["../secrets/x", "ns/../../x", "./x"] {
            let token = wire(&format!(
                r#"{{"v":"meta.k8s.io/v1","rv":1,"start":"{escape}"}}"#
            ));
            assert_eq!(
                message(&token),
                format!("continue key is not valid: {escape}")
            );
        }
    }
}
