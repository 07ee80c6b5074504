//! List continue tokens, in the apiserver's wire format so they can go to clients as is:
//! base64 of `{"v":"meta.k8s.io/v1","rv":<revision>,"start":"<key suffix>"}` where
//! `start` is the first key of the next page relative to the listed prefix.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
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

#[derive(Serialize, Deserialize)]
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
        STANDARD.encode(serde_json::to_vec(&wire).expect("token serializes"))
    }

    /// Parses a token for a list of `prefix`. A token that is malformed, from another
    /// version, or that tries to leave the prefix is [`StorageError::InvalidArgument`].
    pub fn decode(token: &str, prefix: &str) -> Result<ContinueToken, StorageError> {
        let invalid = |why: &str| StorageError::InvalidArgument(format!("continue token: {why}"));
        let bytes = STANDARD.decode(token).map_err(|_| invalid("not base64"))?;
        let wire: Wire = serde_json::from_slice(&bytes).map_err(|_| invalid("not a token"))?;
        if wire.v != TOKEN_VERSION {
            return Err(invalid("unsupported version"));
        }
        if wire.rv <= 0 {
            return Err(invalid("bad revision"));
        }
        if wire.start.is_empty() || wire.start.split('/').any(|part| part == "..") {
            return Err(invalid("bad start key"));
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
    fn rejects_garbage_and_escapes() {
        for bad in [
            "",
            "!!!",
            "e30=",
            &STANDARD.encode(r#"{"v":"x","rv":1,"start":"a"}"#),
        ] {
            assert!(matches!(
                ContinueToken::decode(bad, "/p/"),
                Err(StorageError::InvalidArgument(_))
            ));
        }
        let escape = STANDARD.encode(r#"{"v":"meta.k8s.io/v1","rv":1,"start":"../secrets/x"}"#);
        assert!(ContinueToken::decode(&escape, "/p/").is_err());
    }
}
