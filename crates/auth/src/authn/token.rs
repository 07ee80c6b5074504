//! Static bearer tokens: upstream's `--token-auth-file` (`tokenfile.NewCSV`) behind
//! the `Authorization: Bearer` extractor (`bearertoken.Authenticator`).

use std::collections::HashMap;
use std::path::Path;

use http::header::AUTHORIZATION;

use super::{AuthError, AuthRequest, Authenticator};
use crate::user::UserInfo;

/// Authenticates `Authorization: Bearer <token>` against a fixed token table.
///
/// File format (CSV, Go `encoding/csv` rules, see the crate's csv module): every
/// record is `token,user,uid[,"group1,group2,..."]`, more columns are ignored, fewer
/// than three is an error, a record with an empty token is skipped, a later duplicate
/// token replaces an earlier one, and the groups column is split on `,` as is (an
/// empty fourth column yields one empty group name, as upstream).
#[derive(Clone, Default)]
pub struct TokenFileAuthenticator {
    tokens: HashMap<String, UserInfo>,
}

impl std::fmt::Debug for TokenFileAuthenticator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenFileAuthenticator")
            .field("tokens", &self.tokens.len())
            .finish()
    }
}

impl TokenFileAuthenticator {
    /// A table given directly.
    pub fn new(tokens: HashMap<String, UserInfo>) -> Self {
        TokenFileAuthenticator { tokens }
    }

    /// Reads a token file.
    pub fn from_csv_file(path: &Path) -> Result<Self, AuthError> {
        let content = std::fs::read(path)
            .map_err(|e| AuthError::Config(format!("token file '{}': {e}", path.display())))?;
        let content = String::from_utf8(content).map_err(|_| {
            AuthError::Config(format!(
                "token file '{}' is not valid UTF-8",
                path.display()
            ))
        })?;
        Self::parse(&content, &path.display().to_string())
    }

    /// Parses token file content.
    pub fn from_csv(content: &str) -> Result<Self, AuthError> {
        Self::parse(content, "<inline>")
    }

    fn parse(content: &str, name: &str) -> Result<Self, AuthError> {
        let records = crate::csv::parse(content)
            .map_err(|e| AuthError::Config(format!("token file '{name}': {e}")))?;
        let mut tokens = HashMap::new();
        for (_line, record) in records {
            if record.len() < 3 {
                return Err(AuthError::Config(format!(
                    "token file '{name}' must have at least 3 columns (token, user name, user uid), found {}",
                    record.len()
                )));
            }
            let mut fields = record.into_iter();
            let (Some(token), Some(user), Some(uid)) =
                (fields.next(), fields.next(), fields.next())
            else {
                continue;
            };
            if token.is_empty() {
                continue;
            }
            let groups = fields
                .next()
                .map(|g| g.split(',').map(str::to_string).collect())
                .unwrap_or_default();
            tokens.insert(
                token,
                UserInfo {
                    name: user,
                    uid,
                    groups,
                    extra: Default::default(),
                },
            );
        }
        Ok(TokenFileAuthenticator { tokens })
    }

    /// How many tokens the table holds.
    pub fn len(&self) -> usize {
        self.tokens.len()
    }

    /// Whether the table is empty.
    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }

    /// Looks a token up (upstream's `AuthenticateToken`).
    pub fn authenticate_token(&self, token: &str) -> Option<UserInfo> {
        self.tokens.get(token).cloned()
    }
}

/// What the `Authorization` header says about bearer tokens.
#[derive(Debug, PartialEq, Eq)]
pub enum Bearer<'a> {
    /// No bearer credential: no header, another scheme, or an empty token.
    None,
    Token(&'a str),
    /// A bearer token that is not UTF-8 (it can match no configured token).
    Invalid,
}

/// Upstream's extraction: the first `Authorization` value, trimmed; split on single
/// spaces; the scheme compared case-insensitively to `bearer`; the token is the second
/// part; an empty token (e.g. `Bearer  x` with two spaces) counts as no credential.
pub fn bearer_token(headers: &http::HeaderMap) -> Bearer<'_> {
    let Some(value) = headers.get(AUTHORIZATION) else {
        return Bearer::None;
    };
    let raw = value.as_bytes().trim_ascii();
    if raw.is_empty() {
        return Bearer::None;
    }
    let mut parts = raw.split(|&b| b == b' ');
    let scheme = parts.next().unwrap_or_default();
    let Some(token) = parts.next() else {
        return Bearer::None;
    };
    if !scheme.eq_ignore_ascii_case(b"bearer") || token.is_empty() {
        return Bearer::None;
    }
    match std::str::from_utf8(token) {
        Ok(t) => Bearer::Token(t),
        Err(_) => Bearer::Invalid,
    }
}

impl Authenticator for TokenFileAuthenticator {
    fn authenticate(&self, request: &AuthRequest<'_>) -> Result<Option<UserInfo>, AuthError> {
        match bearer_token(request.headers) {
            Bearer::None => Ok(None),
            Bearer::Invalid => Err(AuthError::InvalidBearerToken),
            Bearer::Token(token) => match self.authenticate_token(token) {
                Some(user) => Ok(Some(user)),
                None => Err(AuthError::InvalidBearerToken),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::{HeaderMap, HeaderValue};

    fn headers(auth: &[u8]) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(AUTHORIZATION, HeaderValue::from_bytes(auth).unwrap());
        h
    }

    #[test]
    fn parses_upstream_token_file_format() {
        let file = "\
token1,user1,uid1
token2,user2,uid2,\"group1,group2\"
token3,user3,uid3,group3,ignored
,emptytoken,uid9
token1,user1b,uid1b
\"tok,en\",\"us\"\"er\",uid4
";
        let a = TokenFileAuthenticator::from_csv(file).unwrap();
        assert_eq!(a.len(), 4);
        let u1 = a.authenticate_token("token1").unwrap();
        assert_eq!((u1.name.as_str(), u1.uid.as_str()), ("user1b", "uid1b"));
        assert!(u1.groups.is_empty());
        assert_eq!(
            a.authenticate_token("token2").unwrap().groups,
            vec!["group1", "group2"]
        );
        assert_eq!(
            a.authenticate_token("token3").unwrap().groups,
            vec!["group3"]
        );
        assert_eq!(a.authenticate_token("tok,en").unwrap().name, "us\"er");
        assert!(a.authenticate_token("").is_none());
        assert!(a.authenticate_token("emptytoken").is_none());
    }

    #[test]
    fn empty_group_column_is_one_empty_group_as_upstream() {
        let a = TokenFileAuthenticator::from_csv("t,u,i,").unwrap();
        assert_eq!(a.authenticate_token("t").unwrap().groups, vec![""]);
    }

    #[test]
    fn token_file_errors() {
        for bad in ["t,u", "# comment\nt,u,i", "t,u,i\nx", "t\"x,u,i", "\"t,u,i"] {
            assert!(TokenFileAuthenticator::from_csv(bad).is_err(), "{bad:?}");
        }
        assert!(TokenFileAuthenticator::from_csv("").unwrap().is_empty());
        assert!(
            TokenFileAuthenticator::from_csv_file(Path::new("/nonexistent/tokens.csv")).is_err()
        );
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("t.csv");
        std::fs::write(&p, "abc,admin,1,\"system:masters\"\r\n").unwrap();
        let a = TokenFileAuthenticator::from_csv_file(&p).unwrap();
        assert_eq!(
            a.authenticate_token("abc").unwrap().groups,
            vec!["system:masters"]
        );
        std::fs::write(&p, b"\xff,u,i\n").unwrap();
        assert!(TokenFileAuthenticator::from_csv_file(&p).is_err());
    }

    #[test]
    fn bearer_extraction_matches_upstream() {
        assert_eq!(bearer_token(&HeaderMap::new()), Bearer::None);
        assert_eq!(bearer_token(&headers(b"Bearer abc")), Bearer::Token("abc"));
        assert_eq!(bearer_token(&headers(b"bEaReR abc")), Bearer::Token("abc"));
        assert_eq!(
            bearer_token(&headers(b"  Bearer abc  ")),
            Bearer::Token("abc")
        );
        assert_eq!(
            bearer_token(&headers(b"Bearer abc extra")),
            Bearer::Token("abc")
        );
        assert_eq!(bearer_token(&headers(b"Bearer")), Bearer::None);
        assert_eq!(bearer_token(&headers(b"Bearer ")), Bearer::None);
        assert_eq!(bearer_token(&headers(b"Bearer  abc")), Bearer::None);
        assert_eq!(bearer_token(&headers(b"Basic abc")), Bearer::None);
        assert_eq!(bearer_token(&headers(b"")), Bearer::None);
        assert_eq!(bearer_token(&headers(b"Bearer \xffabc")), Bearer::Invalid);
    }

    #[test]
    fn authenticate_outcomes() {
        let a = TokenFileAuthenticator::from_csv("good,alice,1,dev").unwrap();
        let peer = [];
        let run = |h: &HeaderMap| {
            a.authenticate(&AuthRequest {
                headers: h,
                peer_certificates: &peer,
                path: "",
            })
        };
        assert_eq!(
            run(&headers(b"Bearer good")).unwrap().unwrap().name,
            "alice"
        );
        assert!(matches!(
            run(&headers(b"Bearer bad")),
            Err(AuthError::InvalidBearerToken)
        ));
        assert!(matches!(
            run(&headers(b"Bearer \xff")),
            Err(AuthError::InvalidBearerToken)
        ));
        assert!(run(&headers(b"Basic Zm9vOmJhcg==")).unwrap().is_none());
        assert!(run(&HeaderMap::new()).unwrap().is_none());
    }
}
