//! Field errors (`k8s.io/apimachinery/pkg/util/validation/field`) and API errors
//! (`k8s.io/apimachinery/pkg/api/errors`, rendered as a `metav1.Status`).
//!
//! Codes, reasons and message texts follow upstream byte for byte, because clients
//! (kubectl, client-go, kube-rs) print them and some match on them.

use std::fmt;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Status, StatusCause, StatusDetails};
use serde_json::Value;

// ---------------------------------------------------------------------------
// Field paths
// ---------------------------------------------------------------------------

/// A path to a field, printed as upstream's `field.Path`: `spec.containers[0].image`,
/// `metadata.labels[app]`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct FieldPath {
    rendered: String,
}

impl FieldPath {
    /// A root path with the given name (`FieldPath::new("metadata")`).
    pub fn new(root: &str) -> Self {
        FieldPath {
            rendered: root.to_string(),
        }
    }

    /// A path with several named segments (`FieldPath::from_parts(&["spec", "template"])`).
    pub fn from_parts(parts: &[&str]) -> Self {
        let mut p = FieldPath::default();
        for part in parts {
            p = p.child(part);
        }
        p
    }

    // Validation builds a path for every field it visits, error or not, so these are
    // on every write's path: each makes one allocation of the final size, without
    // the formatting machinery.

    /// The path of a named child field: `.name`.
    pub fn child(&self, name: &str) -> Self {
        let dot = !self.rendered.is_empty() && !name.is_empty();
        let mut rendered = String::with_capacity(self.rendered.len() + 1 + name.len());
        rendered.push_str(&self.rendered);
        if dot {
            rendered.push('.');
        }
        rendered.push_str(name);
        FieldPath { rendered }
    }

    /// The path of a list element: `[i]`.
    pub fn index(&self, i: usize) -> Self {
        let mut digits = itoa::Buffer::new();
        self.subscript(digits.format(i))
    }

    /// The path of a map entry: `[key]` (unquoted, as upstream prints it).
    pub fn key(&self, key: &str) -> Self {
        self.subscript(key)
    }

    fn subscript(&self, inner: &str) -> Self {
        let mut rendered = String::with_capacity(self.rendered.len() + inner.len() + 2);
        rendered.push_str(&self.rendered);
        rendered.push('[');
        rendered.push_str(inner);
        rendered.push(']');
        FieldPath { rendered }
    }

    /// The rendered path.
    pub fn as_str(&self) -> &str {
        &self.rendered
    }
}

impl fmt::Display for FieldPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.rendered)
    }
}

impl From<&FieldPath> for String {
    fn from(p: &FieldPath) -> String {
        p.rendered.clone()
    }
}

// ---------------------------------------------------------------------------
// Field errors
// ---------------------------------------------------------------------------

/// The type of a field error (`field.ErrorType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FieldErrorKind {
    NotFound,
    Required,
    Duplicate,
    Invalid,
    NotSupported,
    Forbidden,
    TooLong,
    TooMany,
    Internal,
    TypeInvalid,
}

impl FieldErrorKind {
    /// The wire name, used as `StatusCause.reason` (`FieldValueRequired`, ...).
    pub fn cause_type(self) -> &'static str {
        match self {
            FieldErrorKind::NotFound => "FieldValueNotFound",
            FieldErrorKind::Required => "FieldValueRequired",
            FieldErrorKind::Duplicate => "FieldValueDuplicate",
            FieldErrorKind::Invalid => "FieldValueInvalid",
            FieldErrorKind::NotSupported => "FieldValueNotSupported",
            FieldErrorKind::Forbidden => "FieldValueForbidden",
            FieldErrorKind::TooLong => "FieldValueTooLong",
            FieldErrorKind::TooMany => "FieldValueTooMany",
            FieldErrorKind::Internal => "InternalError",
            FieldErrorKind::TypeInvalid => "FieldValueTypeInvalid",
        }
    }

    /// The human text (`Required value`, `Invalid value`, ...).
    pub fn text(self) -> &'static str {
        match self {
            FieldErrorKind::NotFound => "Not found",
            FieldErrorKind::Required => "Required value",
            FieldErrorKind::Duplicate => "Duplicate value",
            FieldErrorKind::Invalid => "Invalid value",
            FieldErrorKind::NotSupported => "Unsupported value",
            FieldErrorKind::Forbidden => "Forbidden",
            FieldErrorKind::TooLong => "Too long",
            FieldErrorKind::TooMany => "Too many",
            FieldErrorKind::Internal => "Internal error",
            FieldErrorKind::TypeInvalid => "Invalid value",
        }
    }
}

impl fmt::Display for FieldErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.text())
    }
}

/// One validation error on one field (`field.Error`).
///
/// `value: None` means the value is omitted from the message (upstream's `omitValue`);
/// `Some(Value::Null)` prints as `"null"` like upstream's nil.
#[derive(Debug, Clone, PartialEq)]
pub struct FieldError {
    pub field: String,
    pub kind: FieldErrorKind,
    pub value: Option<Value>,
    pub detail: String,
}

impl FieldError {
    fn new(kind: FieldErrorKind, path: &FieldPath, value: Option<Value>, detail: String) -> Self {
        FieldError {
            field: path.to_string(),
            kind,
            value,
            detail,
        }
    }

    /// `field.Required`.
    pub fn required(path: &FieldPath, detail: impl Into<String>) -> Self {
        Self::new(
            FieldErrorKind::Required,
            path,
            Some(Value::String(String::new())),
            detail.into(),
        )
    }

    /// `field.Invalid`.
    pub fn invalid(path: &FieldPath, value: impl Into<Value>, detail: impl Into<String>) -> Self {
        Self::new(
            FieldErrorKind::Invalid,
            path,
            Some(value.into()),
            detail.into(),
        )
    }

    /// `field.Invalid` of a value upstream prints with Go's `%#v` (a struct such as
    /// `apiextensions.ValidationRule{Rule:"...", ...}`): `printed` is that text, shown
    /// as is, where a JSON value would be quoted or shown as JSON.
    pub fn invalid_printed(path: &FieldPath, printed: &str, detail: impl Into<String>) -> Self {
        // With no value, the body is the kind's text and the detail, so the printed
        // value leads the detail.
        let detail = detail.into();
        let detail = if detail.is_empty() {
            printed.to_string()
        } else {
            format!("{printed}: {detail}")
        };
        Self::new(FieldErrorKind::Invalid, path, None, detail)
    }

    /// `field.TypeInvalid`.
    pub fn type_invalid(
        path: &FieldPath,
        value: impl Into<Value>,
        detail: impl Into<String>,
    ) -> Self {
        Self::new(
            FieldErrorKind::TypeInvalid,
            path,
            Some(value.into()),
            detail.into(),
        )
    }

    /// `field.NotSupported`: detail lists the quoted valid values.
    pub fn not_supported<S: AsRef<str>>(
        path: &FieldPath,
        value: impl Into<Value>,
        valid: &[S],
    ) -> Self {
        let detail = if valid.is_empty() {
            String::new()
        } else {
            let quoted: Vec<String> = valid.iter().map(|v| go_quote(v.as_ref())).collect();
            format!("supported values: {}", quoted.join(", "))
        };
        Self::new(
            FieldErrorKind::NotSupported,
            path,
            Some(value.into()),
            detail,
        )
    }

    /// `field.Duplicate`.
    pub fn duplicate(path: &FieldPath, value: impl Into<Value>) -> Self {
        Self::new(
            FieldErrorKind::Duplicate,
            path,
            Some(value.into()),
            String::new(),
        )
    }

    /// `field.NotFound`.
    pub fn not_found(path: &FieldPath, value: impl Into<Value>) -> Self {
        Self::new(
            FieldErrorKind::NotFound,
            path,
            Some(value.into()),
            String::new(),
        )
    }

    /// `field.Forbidden`.
    pub fn forbidden(path: &FieldPath, detail: impl Into<String>) -> Self {
        Self::new(
            FieldErrorKind::Forbidden,
            path,
            Some(Value::String(String::new())),
            detail.into(),
        )
    }

    /// `field.TooLong`: `Too long: may not be more than N bytes` (`max < 0` in upstream
    /// is `None` here: `value is too long`).
    pub fn too_long(path: &FieldPath, max: Option<usize>) -> Self {
        let detail = match max {
            Some(m) => format!("may not be more than {m} bytes"),
            None => "value is too long".to_string(),
        };
        Self::new(
            FieldErrorKind::TooLong,
            path,
            Some(Value::String("<value omitted>".into())),
            detail,
        )
    }

    /// `field.TooMany`: `Too many: 5: must have at most 3 items`.
    pub fn too_many(path: &FieldPath, actual: Option<usize>, max: Option<usize>) -> Self {
        let detail = match max {
            Some(m) => format!("must have at most {m} items"),
            None => "has too many items".to_string(),
        };
        Self::new(
            FieldErrorKind::TooMany,
            path,
            actual.map(Value::from),
            detail,
        )
    }

    /// `field.InternalError`.
    pub fn internal(path: &FieldPath, err: impl fmt::Display) -> Self {
        Self::new(
            FieldErrorKind::Internal,
            path,
            Some(Value::Null),
            err.to_string(),
        )
    }

    /// The message without the field path (`ErrorBody`), used as `StatusCause.message`.
    pub fn body(&self) -> String {
        let mut s = match self.kind {
            FieldErrorKind::Required
            | FieldErrorKind::Forbidden
            | FieldErrorKind::TooLong
            | FieldErrorKind::Internal => self.kind.text().to_string(),
            _ => match &self.value {
                None => self.kind.text().to_string(),
                Some(v) => format!("{}: {}", self.kind.text(), go_format_value(v)),
            },
        };
        if !self.detail.is_empty() {
            s.push_str(": ");
            s.push_str(&self.detail);
        }
        s
    }
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.body())
    }
}

impl std::error::Error for FieldError {}

/// Upstream's `ErrorList.ToAggregate().Error()`: one message as is, several
/// deduplicated and joined as `[a, b]`; `None` for an empty list.
pub fn aggregate_message(errs: &[FieldError]) -> Option<String> {
    aggregate_texts(errs.iter().map(ToString::to_string))
}

/// Go's `utilerrors.NewAggregate(errs).Error()` over error texts: one text as is,
/// several deduplicated and joined as `[a, b]`; `None` when there are none.
pub fn aggregate_texts(texts: impl IntoIterator<Item = String>) -> Option<String> {
    let mut seen: Vec<String> = Vec::new();
    for t in texts {
        if !seen.contains(&t) {
            seen.push(t);
        }
    }
    match seen.len() {
        0 => None,
        1 => seen.pop(),
        _ => Some(format!("[{}]", seen.join(", "))),
    }
}

/// Go's `%v`/`%q` rendering of a bad value as upstream's `ErrorBody` does.
fn go_format_value(v: &Value) -> String {
    match v {
        Value::Null => go_quote("null"),
        Value::String(s) => go_quote(s),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        other => other.to_string(),
    }
}

/// Go's `unicode.IsPrint`, near enough: letters, marks, numbers, punctuation, symbols
/// and the ASCII space; control characters, other spaces and the common format (Cf)
/// characters are not printable.
pub fn go_is_print(c: char) -> bool {
    c == ' '
        || !(c.is_control()
            || c.is_whitespace()
            || matches!(c, '\u{ad}' | '\u{200b}'..='\u{200f}' | '\u{2028}'..='\u{202e}' | '\u{2060}'..='\u{2064}' | '\u{feff}'))
}

/// Go's `strconv.Quote` for the common cases (printable Unicode is kept).
pub fn go_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\u{b}' => out.push_str("\\v"),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                out.push_str(&format!("\\x{:02x}", c as u32));
            }
            // Go prints only graphic runes and the ASCII space literally.
            c if c.is_control() || (c.is_whitespace() && c != ' ') => {
                let n = c as u32;
                if n <= 0xffff {
                    out.push_str(&format!("\\u{n:04x}"));
                } else {
                    out.push_str(&format!("\\U{n:08x}"));
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

// ---------------------------------------------------------------------------
// API errors
// ---------------------------------------------------------------------------

/// `metav1.StatusReason` values.
pub mod reason {
    pub const UNKNOWN: &str = "";
    pub const UNAUTHORIZED: &str = "Unauthorized";
    pub const FORBIDDEN: &str = "Forbidden";
    pub const NOT_FOUND: &str = "NotFound";
    pub const ALREADY_EXISTS: &str = "AlreadyExists";
    pub const CONFLICT: &str = "Conflict";
    pub const GONE: &str = "Gone";
    pub const INVALID: &str = "Invalid";
    pub const SERVER_TIMEOUT: &str = "ServerTimeout";
    pub const STORE_READ_ERROR: &str = "StorageReadError";
    pub const TIMEOUT: &str = "Timeout";
    pub const TOO_MANY_REQUESTS: &str = "TooManyRequests";
    pub const BAD_REQUEST: &str = "BadRequest";
    pub const METHOD_NOT_ALLOWED: &str = "MethodNotAllowed";
    pub const NOT_ACCEPTABLE: &str = "NotAcceptable";
    pub const REQUEST_ENTITY_TOO_LARGE: &str = "RequestEntityTooLarge";
    pub const UNSUPPORTED_MEDIA_TYPE: &str = "UnsupportedMediaType";
    pub const INTERNAL_ERROR: &str = "InternalError";
    pub const EXPIRED: &str = "Expired";
    pub const SERVICE_UNAVAILABLE: &str = "ServiceUnavailable";
}

/// `metav1.CauseType` values that are not field error types.
pub mod cause {
    pub const RESOURCE_VERSION_TOO_LARGE: &str = "ResourceVersionTooLarge";
    pub const FIELD_MANAGER_CONFLICT: &str = "FieldManagerConflict";
    pub const UNEXPECTED_SERVER_RESPONSE: &str = "UnexpectedServerResponse";
}

/// An API error: what the apiserver answers as a `Status` with `status: Failure`.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{message}")]
pub struct ApiError {
    pub code: u16,
    pub reason: String,
    pub message: String,
    /// Boxed to keep `Result<_, ApiError>` small.
    pub details: Option<Box<StatusDetails>>,
}

/// `schema.GroupResource.String()`: `pods`, `deployments.apps`.
pub fn group_resource(group: &str, resource: &str) -> String {
    if group.is_empty() {
        resource.to_string()
    } else {
        format!("{resource}.{group}")
    }
}

fn details(group: &str, kind: &str, name: &str) -> Option<Box<StatusDetails>> {
    Some(Box::new(StatusDetails {
        group: non_empty(group),
        kind: non_empty(kind),
        name: non_empty(name),
        ..Default::default()
    }))
}

fn non_empty(s: &str) -> Option<String> {
    if s.is_empty() {
        None
    } else {
        Some(s.to_string())
    }
}

fn retry_details(retry_after_seconds: i32) -> Option<Box<StatusDetails>> {
    Some(Box::new(StatusDetails {
        retry_after_seconds: (retry_after_seconds != 0).then_some(retry_after_seconds),
        ..Default::default()
    }))
}

impl ApiError {
    fn plain(code: u16, reason: &str, message: String) -> Self {
        ApiError {
            code,
            reason: reason.to_string(),
            message,
            details: None,
        }
    }

    /// 404 NotFound: `pods "x" not found`.
    pub fn not_found(group: &str, resource: &str, name: &str) -> Self {
        ApiError {
            code: 404,
            reason: reason::NOT_FOUND.into(),
            message: format!(
                "{} {} not found",
                group_resource(group, resource),
                go_quote(name)
            ),
            details: details(group, resource, name),
        }
    }

    /// 409 AlreadyExists: `pods "x" already exists`.
    pub fn already_exists(group: &str, resource: &str, name: &str) -> Self {
        ApiError {
            code: 409,
            reason: reason::ALREADY_EXISTS.into(),
            message: format!(
                "{} {} already exists",
                group_resource(group, resource),
                go_quote(name)
            ),
            details: details(group, resource, name),
        }
    }

    /// 409 AlreadyExists for a generateName collision.
    pub fn generate_name_conflict(
        group: &str,
        resource: &str,
        name: &str,
        retry_after_seconds: i32,
    ) -> Self {
        let mut d = details(group, resource, name);
        if let Some(d) = d.as_mut() {
            d.retry_after_seconds = (retry_after_seconds != 0).then_some(retry_after_seconds);
        }
        ApiError {
            code: 409,
            reason: reason::ALREADY_EXISTS.into(),
            message: format!(
                "{} {} already exists, the server was not able to generate a unique name for the object",
                group_resource(group, resource),
                go_quote(name)
            ),
            details: d,
        }
    }

    /// The `err` text upstream's storage layer passes to [`ApiError::conflict`] on a
    /// stale resourceVersion.
    pub const OPTIMISTIC_LOCK_ERROR_MSG: &'static str = "the object has been modified; please apply your changes to the latest version and try again";

    /// 409 Conflict: `Operation cannot be fulfilled on pods "x": <err>`.
    pub fn conflict(group: &str, resource: &str, name: &str, err: impl fmt::Display) -> Self {
        ApiError {
            code: 409,
            reason: reason::CONFLICT.into(),
            message: format!(
                "Operation cannot be fulfilled on {} {}: {}",
                group_resource(group, resource),
                go_quote(name),
                err
            ),
            details: details(group, resource, name),
        }
    }

    /// 422 Invalid: `Pod "x" is invalid: [a, b]`, one cause per field error.
    pub fn invalid(group: &str, kind: &str, name: &str, errs: Vec<FieldError>) -> Self {
        let qualified_kind = if group.is_empty() {
            kind.to_string()
        } else {
            format!("{kind}.{group}")
        };
        let causes: Vec<StatusCause> = errs
            .iter()
            .map(|e| StatusCause {
                reason: Some(e.kind.cause_type().to_string()),
                message: Some(e.body()),
                field: Some(e.field.clone()),
            })
            .collect();
        let message = match aggregate_message(&errs) {
            None => format!("{} {} is invalid", qualified_kind, go_quote(name)),
            Some(agg) => format!("{} {} is invalid: {}", qualified_kind, go_quote(name), agg),
        };
        let mut d = details(group, kind, name).unwrap_or_default();
        d.causes = Some(causes);
        ApiError {
            code: 422,
            reason: reason::INVALID.into(),
            message,
            details: Some(d),
        }
    }

    /// 400 BadRequest with the message as given.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::plain(400, reason::BAD_REQUEST, message.into())
    }

    /// 401 Unauthorized (`not authorized` when the reason is empty).
    pub fn unauthorized(message: impl Into<String>) -> Self {
        let mut m = message.into();
        if m.is_empty() {
            m = "not authorized".into();
        }
        Self::plain(401, reason::UNAUTHORIZED, m)
    }

    /// 403 Forbidden: `pods "x" is forbidden: <err>` (or without name / resource).
    pub fn forbidden(group: &str, resource: &str, name: &str, err: impl fmt::Display) -> Self {
        let message = if group.is_empty() && resource.is_empty() {
            format!("forbidden: {err}")
        } else if name.is_empty() {
            format!("{} is forbidden: {}", group_resource(group, resource), err)
        } else {
            format!(
                "{} {} is forbidden: {}",
                group_resource(group, resource),
                go_quote(name),
                err
            )
        };
        ApiError {
            code: 403,
            reason: reason::FORBIDDEN.into(),
            message,
            details: details(group, resource, name),
        }
    }

    /// 405 MethodNotAllowed: `<action> is not supported on resources of kind "pods"`.
    pub fn method_not_supported(group: &str, resource: &str, action: &str) -> Self {
        ApiError {
            code: 405,
            reason: reason::METHOD_NOT_ALLOWED.into(),
            message: format!(
                "{} is not supported on resources of kind {}",
                action,
                go_quote(&group_resource(group, resource))
            ),
            details: details(group, resource, ""),
        }
    }

    /// 406 NotAcceptable (content negotiation failed).
    pub fn not_acceptable<S: AsRef<str>>(accepted: &[S]) -> Self {
        let list: Vec<&str> = accepted.iter().map(|s| s.as_ref()).collect();
        Self::plain(
            406,
            reason::NOT_ACCEPTABLE,
            format!(
                "only the following media types are accepted: {}",
                list.join(", ")
            ),
        )
    }

    /// 406 NotAcceptable for a conversion target (`as=Table`).
    pub fn not_acceptable_conversion<S: AsRef<str>>(target: &str, accepted: &[S]) -> Self {
        let list: Vec<&str> = accepted.iter().map(|s| s.as_ref()).collect();
        Self::plain(
            406,
            reason::NOT_ACCEPTABLE,
            format!(
                "only the following media types are accepted when converting to {}: {}",
                target,
                list.join(", ")
            ),
        )
    }

    /// 410 Gone (deprecated upstream in favour of [`ApiError::resource_expired`]).
    pub fn gone(message: impl Into<String>) -> Self {
        Self::plain(410, reason::GONE, message.into())
    }

    /// 410 Expired: a resourceVersion too old (`too old resource version: 1 (5)`).
    pub fn resource_expired(message: impl Into<String>) -> Self {
        Self::plain(410, reason::EXPIRED, message.into())
    }

    /// 413 RequestEntityTooLarge: `Request entity too large: <message>`.
    pub fn request_entity_too_large(message: impl fmt::Display) -> Self {
        Self::plain(
            413,
            reason::REQUEST_ENTITY_TOO_LARGE,
            format!("Request entity too large: {message}"),
        )
    }

    /// 400 for a body whose fields do not decode as `kind` (upstream's codec error
    /// `<kind> in version "<version>" cannot be handled as a <kind>: <why>`).
    pub fn undecodable(kind: &str, version: &str, why: impl fmt::Display) -> Self {
        Self::bad_request(format!(
            "{kind} in version \"{version}\" cannot be handled as a {kind}: {why}"
        ))
    }

    /// The `why` of an [`ApiError::undecodable`] error for `kind` in `version`; `None`
    /// for any other error.
    pub fn undecodable_why(&self, kind: &str, version: &str) -> Option<&str> {
        if self.code != 400 {
            return None;
        }
        self.message
            .strip_prefix(kind)?
            .strip_prefix(" in version \"")?
            .strip_prefix(version)?
            .strip_prefix("\" cannot be handled as a ")?
            .strip_prefix(kind)?
            .strip_prefix(": ")
    }

    /// Checks that the fields of `body` decode as `T` (named `kind` in `version` in the
    /// error): a field of the wrong type is upstream's 400, not a field left out. The
    /// body's `apiVersion` and `kind` are not compared here (a subresource takes its
    /// kind in more than one version, an Eviction as `policy/v1beta1` too).
    pub fn check_decodes_as<T: serde::de::DeserializeOwned>(
        body: &serde_json::Value,
        kind: &str,
        version: &str,
    ) -> Result<(), Self> {
        let mut fields = body.clone();
        if let Some(o) = fields.as_object_mut() {
            o.remove("apiVersion");
            o.remove("kind");
        }
        match T::deserialize(&fields) {
            Ok(_) => Ok(()),
            Err(_) => Err(Self::undecodable(
                kind,
                version,
                decode_failure::<T>(&fields, ""),
            )),
        }
    }

    /// 415 UnsupportedMediaType.
    pub fn unsupported_media_type<S: AsRef<str>>(accepted: &[S]) -> Self {
        let list: Vec<&str> = accepted.iter().map(|s| s.as_ref()).collect();
        Self::plain(
            415,
            reason::UNSUPPORTED_MEDIA_TYPE,
            format!(
                "the body of the request was in an unknown format - accepted media types include: {}",
                list.join(", ")
            ),
        )
    }

    /// 429 TooManyRequests with the message as given (`NewTooManyRequests`).
    pub fn too_many_requests(message: impl Into<String>, retry_after_seconds: i32) -> Self {
        ApiError {
            code: 429,
            reason: reason::TOO_MANY_REQUESTS.into(),
            message: message.into(),
            details: retry_details(retry_after_seconds),
        }
    }

    /// 429 `Too many requests: <message>` (`NewTooManyRequestsError`).
    pub fn too_many_requests_error(message: impl fmt::Display) -> Self {
        Self::plain(
            429,
            reason::TOO_MANY_REQUESTS,
            format!("Too many requests: {message}"),
        )
    }

    /// 500 InternalError: `Internal error occurred: <err>`.
    pub fn internal(err: impl fmt::Display) -> Self {
        let text = err.to_string();
        ApiError {
            code: 500,
            reason: reason::INTERNAL_ERROR.into(),
            message: format!("Internal error occurred: {text}"),
            details: Some(Box::new(StatusDetails {
                causes: Some(vec![StatusCause {
                    message: Some(text),
                    ..Default::default()
                }]),
                ..Default::default()
            })),
        }
    }

    /// 500 ServerTimeout: `The <op> operation against <resource> could not be completed...`.
    pub fn server_timeout(
        group: &str,
        resource: &str,
        operation: &str,
        retry_after_seconds: i32,
    ) -> Self {
        let mut d = details(group, resource, operation).unwrap_or_default();
        d.retry_after_seconds = (retry_after_seconds != 0).then_some(retry_after_seconds);
        ApiError {
            code: 500,
            reason: reason::SERVER_TIMEOUT.into(),
            message: format!(
                "The {} operation against {} could not be completed at this time, please try again.",
                operation,
                group_resource(group, resource)
            ),
            details: Some(d),
        }
    }

    /// 503 ServiceUnavailable.
    pub fn service_unavailable(message: impl Into<String>) -> Self {
        Self::plain(503, reason::SERVICE_UNAVAILABLE, message.into())
    }

    /// 504 Timeout: `Timeout: <message>`.
    pub fn timeout(message: impl fmt::Display, retry_after_seconds: i32) -> Self {
        ApiError {
            code: 504,
            reason: reason::TIMEOUT.into(),
            message: format!("Timeout: {message}"),
            details: retry_details(retry_after_seconds),
        }
    }

    /// 504 Timeout that client-go's reflector recognises as "too large resource
    /// version" (`storage.NewTooLargeResourceVersionError`).
    pub fn too_large_resource_version(
        minimum: u64,
        current: u64,
        retry_after_seconds: i32,
    ) -> Self {
        let mut e = Self::timeout(
            format!("Too large resource version: {minimum}, current: {current}"),
            retry_after_seconds,
        );
        let d = e.details.get_or_insert_with(Default::default);
        d.causes = Some(vec![StatusCause {
            reason: Some(cause::RESOURCE_VERSION_TOO_LARGE.into()),
            message: Some("Too large resource version".into()),
            field: None,
        }]);
        e
    }

    /// The causes, if any.
    pub fn causes(&self) -> &[StatusCause] {
        self.details
            .as_ref()
            .and_then(|d| d.causes.as_deref())
            .unwrap_or(&[])
    }

    /// The `Status` object the apiserver writes (kind Status, apiVersion v1, status
    /// Failure).
    pub fn to_status(&self) -> Status {
        Status {
            code: Some(i32::from(self.code)),
            details: self.details.as_deref().cloned(),
            message: Some(self.message.clone()),
            metadata: Default::default(),
            reason: (!self.reason.is_empty()).then(|| self.reason.clone()),
            status: Some("Failure".into()),
        }
    }

    /// An error from a `Status` a server returned.
    pub fn from_status(status: &Status) -> Self {
        ApiError {
            code: status
                .code
                .and_then(|c| u16::try_from(c).ok())
                .unwrap_or(500),
            reason: status.reason.clone().unwrap_or_default(),
            message: status.message.clone().unwrap_or_default(),
            details: status.details.clone().map(Box::new),
        }
    }

    pub fn is_not_found(&self) -> bool {
        self.reason == reason::NOT_FOUND
    }
    pub fn is_already_exists(&self) -> bool {
        self.reason == reason::ALREADY_EXISTS
    }
    pub fn is_conflict(&self) -> bool {
        self.reason == reason::CONFLICT
    }
    pub fn is_invalid(&self) -> bool {
        self.reason == reason::INVALID
    }
    /// `Gone` or `Expired`, as client-go's `IsResourceExpired`/`IsGone` accept both.
    pub fn is_expired(&self) -> bool {
        self.reason == reason::EXPIRED || self.reason == reason::GONE
    }
}

/// Why `body` does not decode as `T`, at the member where it fails
/// (`spec.containers[0].ports[0].containerPort: invalid type: string "80", expected
/// i32`), as upstream's decoder names the Go struct field it could not fill; `under`
/// is the path `body` sits at in the request (`""` at its root). Meant for the error
/// path: it decodes `body` once more to follow the path.
pub fn decode_failure<T: serde::de::DeserializeOwned>(body: &Value, under: &str) -> String {
    let Err(e) = serde_path_to_error::deserialize::<_, T>(body) else {
        return "the object does not fit its type".to_string();
    };
    let inner_path = e.path().to_string();
    let inner_path = if inner_path == "." { "" } else { &inner_path };
    let path = match (under, inner_path) {
        ("", p) => p.to_string(),
        (u, "") => u.to_string(),
        (u, p) if p.starts_with('[') => format!("{u}{p}"),
        (u, p) => format!("{u}.{p}"),
    };
    if path.is_empty() {
        e.into_inner().to_string()
    } else {
        format!("{path}: {}", e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decode_failures_name_the_member() {
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
        let meta = serde_json::json!({"name": "a", "ownerReferences": [{"uid": 5}]});
        assert_eq!(
            decode_failure::<ObjectMeta>(&meta, "metadata"),
            "metadata.ownerReferences[0].uid: invalid type: integer `5`, expected a string"
        );
        assert_eq!(
            decode_failure::<ObjectMeta>(&serde_json::json!("x"), "metadata"),
            "metadata: invalid type: string \"x\", expected ObjectMeta"
        );
        assert_eq!(
            decode_failure::<Vec<ObjectMeta>>(&serde_json::json!([{"labels": 1}]), ""),
            "[0].labels: invalid type: integer `1`, expected a map"
        );
    }

    #[test]
    fn go_quote_escapes_like_strconv() {
        assert_eq!(go_quote("a\tb\\c\u{1}é"), "\"a\\tb\\\\c\\x01é\"");
        assert_eq!(go_quote("\u{85}"), "\"\\u0085\"");
        assert_eq!(go_quote("a\u{a0}b c"), "\"a\\u00a0b c\"");
    }

    #[test]
    fn field_paths_render_like_upstream() {
        let cases = [
            (FieldPath::new("metadata").child("name"), "metadata.name"),
            (
                FieldPath::new("spec")
                    .child("containers")
                    .index(0)
                    .child("image"),
                "spec.containers[0].image",
            ),
            (
                FieldPath::new("metadata").child("labels").key("app"),
                "metadata.labels[app]",
            ),
            (
                FieldPath::from_parts(&["spec", "template"]),
                "spec.template",
            ),
            (FieldPath::new("items").index(12).child(""), "items[12]"),
            (FieldPath::default().child("spec"), "spec"),
            (FieldPath::default().child("root"), "root"),
        ];
        for (p, want) in cases {
            assert_eq!(p.to_string(), want);
        }
    }

    #[test]
    fn field_error_messages_match_upstream() {
        let name = FieldPath::new("metadata").child("name");
        let c0 = FieldPath::new("spec").child("containers").index(0);
        let cases = [
            (
                FieldError::required(&c0.child("name"), ""),
                "spec.containers[0].name: Required value",
            ),
            (
                FieldError::required(&name, "name or generateName is required"),
                "metadata.name: Required value: name or generateName is required",
            ),
            (
                FieldError::invalid(
                    &name,
                    "Foo",
                    "a lowercase RFC 1123 subdomain must consist of ...",
                ),
                "metadata.name: Invalid value: \"Foo\": a lowercase RFC 1123 subdomain must consist of ...",
            ),
            (
                FieldError::invalid(&name, 5, ""),
                "metadata.name: Invalid value: 5",
            ),
            (
                FieldError::invalid(&name, true, "x"),
                "metadata.name: Invalid value: true: x",
            ),
            (
                FieldError::invalid(&name, Value::Null, ""),
                "metadata.name: Invalid value: \"null\"",
            ),
            (
                FieldError::not_supported(
                    &c0.child("imagePullPolicy"),
                    "Sometimes",
                    &["Always", "IfNotPresent", "Never"],
                ),
                "spec.containers[0].imagePullPolicy: Unsupported value: \"Sometimes\": supported values: \"Always\", \"IfNotPresent\", \"Never\"",
            ),
            (
                FieldError::duplicate(&c0.child("name"), "a"),
                "spec.containers[0].name: Duplicate value: \"a\"",
            ),
            (
                FieldError::not_found(&name, "a"),
                "metadata.name: Not found: \"a\"",
            ),
            (
                FieldError::forbidden(&name, "may not be set"),
                "metadata.name: Forbidden: may not be set",
            ),
            (
                FieldError::too_long(&name, Some(63)),
                "metadata.name: Too long: may not be more than 63 bytes",
            ),
            (
                FieldError::too_long(&name, None),
                "metadata.name: Too long: value is too long",
            ),
            (
                FieldError::too_many(&c0, Some(5), Some(3)),
                "spec.containers[0]: Too many: 5: must have at most 3 items",
            ),
            (
                FieldError::too_many(&c0, None, None),
                "spec.containers[0]: Too many: has too many items",
            ),
            (
                FieldError::internal(&name, "boom"),
                "metadata.name: Internal error: boom",
            ),
            (
                FieldError::invalid(&name, "a\"b\n", ""),
                "metadata.name: Invalid value: \"a\\\"b\\n\"",
            ),
        ];
        for (e, want) in cases {
            assert_eq!(e.to_string(), want);
        }
    }

    #[test]
    fn aggregate_dedups_and_brackets() {
        let p = FieldPath::new("a");
        assert_eq!(aggregate_message(&[]), None);
        let one = FieldError::required(&p, "");
        assert_eq!(
            aggregate_message(std::slice::from_ref(&one)).unwrap(),
            "a: Required value"
        );
        assert_eq!(
            aggregate_message(&[one.clone(), one.clone()]).unwrap(),
            "a: Required value"
        );
        let two = FieldError::forbidden(&p, "no");
        assert_eq!(
            aggregate_message(&[one.clone(), two, one]).unwrap(),
            "[a: Required value, a: Forbidden: no]"
        );
    }

    #[test]
    fn api_error_constructors_match_upstream() {
        struct Case {
            err: ApiError,
            code: u16,
            reason: &'static str,
            message: &'static str,
        }
        let cases = [
            Case {
                err: ApiError::not_found("", "pods", "x"),
                code: 404,
                reason: "NotFound",
                message: "pods \"x\" not found",
            },
            Case {
                err: ApiError::not_found("apps", "deployments", "web"),
                code: 404,
                reason: "NotFound",
                message: "deployments.apps \"web\" not found",
            },
            Case {
                err: ApiError::already_exists("", "pods", "x"),
                code: 409,
                reason: "AlreadyExists",
                message: "pods \"x\" already exists",
            },
            Case {
                err: ApiError::conflict("", "pods", "x", ApiError::OPTIMISTIC_LOCK_ERROR_MSG),
                code: 409,
                reason: "Conflict",
                message: "Operation cannot be fulfilled on pods \"x\": the object has been modified; please apply your changes to the latest version and try again",
            },
            Case {
                err: ApiError::bad_request("bad"),
                code: 400,
                reason: "BadRequest",
                message: "bad",
            },
            Case {
                err: ApiError::unauthorized(""),
                code: 401,
                reason: "Unauthorized",
                message: "not authorized",
            },
            Case {
                err: ApiError::forbidden("", "pods", "x", "User \"u\" cannot get resource"),
                code: 403,
                reason: "Forbidden",
                message: "pods \"x\" is forbidden: User \"u\" cannot get resource",
            },
            Case {
                err: ApiError::forbidden("", "pods", "", "no"),
                code: 403,
                reason: "Forbidden",
                message: "pods is forbidden: no",
            },
            Case {
                err: ApiError::forbidden("", "", "", "no"),
                code: 403,
                reason: "Forbidden",
                message: "forbidden: no",
            },
            Case {
                err: ApiError::method_not_supported("", "pods", "deletecollection"),
                code: 405,
                reason: "MethodNotAllowed",
                message: "deletecollection is not supported on resources of kind \"pods\"",
            },
            Case {
                err: ApiError::not_acceptable(&["application/json", "application/yaml"]),
                code: 406,
                reason: "NotAcceptable",
                message: "only the following media types are accepted: application/json, application/yaml",
            },
            Case {
                err: ApiError::gone("gone"),
                code: 410,
                reason: "Gone",
                message: "gone",
            },
            Case {
                err: ApiError::resource_expired("too old resource version: 1 (5)"),
                code: 410,
                reason: "Expired",
                message: "too old resource version: 1 (5)",
            },
            Case {
                err: ApiError::request_entity_too_large("limit is 3145728"),
                code: 413,
                reason: "RequestEntityTooLarge",
                message: "Request entity too large: limit is 3145728",
            },
            Case {
                err: ApiError::unsupported_media_type(&[
                    "application/json-patch+json",
                    "application/merge-patch+json",
                ]),
                code: 415,
                reason: "UnsupportedMediaType",
                message: "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json",
            },
            Case {
                err: ApiError::too_many_requests("slow down", 1),
                code: 429,
                reason: "TooManyRequests",
                message: "slow down",
            },
            Case {
                err: ApiError::too_many_requests_error("please try again later"),
                code: 429,
                reason: "TooManyRequests",
                message: "Too many requests: please try again later",
            },
            Case {
                err: ApiError::internal("boom"),
                code: 500,
                reason: "InternalError",
                message: "Internal error occurred: boom",
            },
            Case {
                err: ApiError::server_timeout("", "pods", "create", 2),
                code: 500,
                reason: "ServerTimeout",
                message: "The create operation against pods could not be completed at this time, please try again.",
            },
            Case {
                err: ApiError::service_unavailable("down"),
                code: 503,
                reason: "ServiceUnavailable",
                message: "down",
            },
            Case {
                err: ApiError::timeout("slow", 1),
                code: 504,
                reason: "Timeout",
                message: "Timeout: slow",
            },
            Case {
                err: ApiError::too_large_resource_version(10, 5, 1),
                code: 504,
                reason: "Timeout",
                message: "Timeout: Too large resource version: 10, current: 5",
            },
        ];
        for c in cases {
            assert_eq!(c.err.code, c.code, "{}", c.message);
            assert_eq!(c.err.reason, c.reason, "{}", c.message);
            assert_eq!(c.err.message, c.message);
            assert_eq!(c.err.to_string(), c.message);
        }
    }

    #[test]
    fn invalid_carries_causes_and_aggregate_message() {
        let p = FieldPath::new("metadata").child("name");
        let err = ApiError::invalid(
            "",
            "Pod",
            "Foo",
            vec![
                FieldError::invalid(&p, "Foo", "bad"),
                FieldError::required(&FieldPath::new("spec").child("containers"), ""),
            ],
        );
        assert_eq!(err.code, 422);
        assert_eq!(err.reason, "Invalid");
        assert_eq!(
            err.message,
            "Pod \"Foo\" is invalid: [metadata.name: Invalid value: \"Foo\": bad, spec.containers: Required value]"
        );
        let causes = err.causes();
        assert_eq!(causes.len(), 2);
        assert_eq!(causes[0].reason.as_deref(), Some("FieldValueInvalid"));
        assert_eq!(
            causes[0].message.as_deref(),
            Some("Invalid value: \"Foo\": bad")
        );
        assert_eq!(causes[0].field.as_deref(), Some("metadata.name"));
        assert_eq!(causes[1].reason.as_deref(), Some("FieldValueRequired"));

        let grouped = ApiError::invalid("apps", "Deployment", "d", vec![]);
        assert_eq!(grouped.message, "Deployment.apps \"d\" is invalid");
        let d = grouped.details.unwrap();
        assert_eq!(d.group.as_deref(), Some("apps"));
        assert_eq!(d.kind.as_deref(), Some("Deployment"));
    }

    #[test]
    fn to_status_serializes_as_upstream_status() {
        let status = ApiError::not_found("", "pods", "x").to_status();
        let v = serde_json::to_value(&status).unwrap();
        assert_eq!(
            v,
            serde_json::json!({
                "kind": "Status",
                "apiVersion": "v1",
                "metadata": {},
                "status": "Failure",
                "message": "pods \"x\" not found",
                "reason": "NotFound",
                "details": {"name": "x", "kind": "pods"},
                "code": 404
            })
        );
        let back = ApiError::from_status(&status);
        assert!(back.is_not_found());
        assert_eq!(back, ApiError::not_found("", "pods", "x"));

        let tl = ApiError::too_large_resource_version(3, 2, 1).to_status();
        let v = serde_json::to_value(&tl).unwrap();
        assert_eq!(v["details"]["retryAfterSeconds"], 1);
        assert_eq!(
            v["details"]["causes"][0]["reason"],
            "ResourceVersionTooLarge"
        );
    }
}
