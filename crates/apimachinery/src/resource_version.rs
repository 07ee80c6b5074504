//! resourceVersion parsing and list/watch option validation, after upstream's
//! `APIObjectVersioner.ParseResourceVersion`, `storage.ValidateListOptions` and
//! `metainternalversion/validation.ValidateListOptions`.
//!
//! Everything here works on strings the apiserver already pulled out of the query;
//! nothing here knows about URLs.

use crate::errors::{ApiError, FieldError, FieldPath};

/// A boolean query parameter as upstream decodes one (`runtime`'s
/// `Convert_Slice_string_To_bool`): `false` (any case) and `0` are false, every other
/// value, the empty one included, is true. Clients send `true`, `1` or, as the Python
/// client does, `True`.
pub fn query_bool(value: &str) -> bool {
    !(value == "0" || value.eq_ignore_ascii_case("false"))
}

/// `resourceVersionMatch`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ResourceVersionMatch {
    NotOlderThan,
    Exact,
}

impl ResourceVersionMatch {
    pub const NOT_OLDER_THAN: &'static str = "NotOlderThan";
    pub const EXACT: &'static str = "Exact";

    /// Parses the query value; `""` is `Ok(None)` (legacy semantics).
    pub fn parse(s: &str) -> Result<Option<Self>, FieldError> {
        match s {
            "" => Ok(None),
            Self::NOT_OLDER_THAN => Ok(Some(Self::NotOlderThan)),
            Self::EXACT => Ok(Some(Self::Exact)),
            other => Err(FieldError::not_supported(
                &FieldPath::new("resourceVersionMatch"),
                other,
                &[Self::EXACT, Self::NOT_OLDER_THAN, ""],
            )),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::NotOlderThan => Self::NOT_OLDER_THAN,
            Self::Exact => Self::EXACT,
        }
    }
}

/// Parses a resourceVersion (`""` and `"0"` are 0, as upstream). The error is the
/// field error upstream's versioner returns: `resourceVersion: Invalid value: "abc":
/// strconv.ParseUint: parsing "abc": invalid syntax`.
pub fn parse_resource_version(s: &str) -> Result<i64, FieldError> {
    if s.is_empty() || s == "0" {
        return Ok(0);
    }
    let invalid = |why: &str| {
        FieldError::invalid(
            &FieldPath::new("resourceVersion"),
            s,
            format!(
                "strconv.ParseUint: parsing {}: {why}",
                crate::errors::go_quote(s)
            ),
        )
    };
    // Go's ParseUint accepts only ASCII digits (no sign, no spaces).
    if !s.bytes().all(|b| b.is_ascii_digit()) {
        return Err(invalid("invalid syntax"));
    }
    match s.parse::<u64>() {
        Ok(v) => i64::try_from(v).map_err(|_| invalid("value out of range")),
        Err(_) => Err(invalid("value out of range")),
    }
}

/// The 400 an invalid resourceVersion on get or list earns upstream:
/// `invalid resource version: resourceVersion: Invalid value: ...`.
pub fn parse_resource_version_for_read(s: &str) -> Result<i64, ApiError> {
    parse_resource_version(s)
        .map_err(|e| ApiError::bad_request(format!("invalid resource version: {e}")))
}

/// The strings of a list or watch request that constrain resource versions.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ListOptionsInput<'a> {
    pub watch: bool,
    pub resource_version: &'a str,
    pub resource_version_match: &'a str,
    pub continue_token: &'a str,
    /// `sendInitialEvents`, if the query had it.
    pub send_initial_events: Option<bool>,
    /// Whether the WatchList feature is enabled (sendInitialEvents on watch).
    pub watch_list_enabled: bool,
}

/// What a valid list request asks of storage.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListResourceVersion {
    /// The parsed resourceVersion; `None` when absent (a consistent, most-recent read).
    pub resource_version: Option<i64>,
    pub r#match: Option<ResourceVersionMatch>,
}

impl ListResourceVersion {
    /// The revision storage must read at exactly (upstream's `withRev`): `Exact`, or the
    /// legacy paginated read at a given non-zero resourceVersion.
    pub fn exact_revision(&self, limit: i64) -> Option<i64> {
        let rv = self.resource_version?;
        match self.r#match {
            Some(ResourceVersionMatch::Exact) => Some(rv),
            None if limit > 0 && rv > 0 => Some(rv),
            _ => None,
        }
    }
}

/// `metainternalversion/validation.ValidateListOptions`: field errors for the
/// resourceVersionMatch / sendInitialEvents combinations (upstream returns these as a
/// 422 Invalid on kind `ListOptions`).
pub fn validate_list_options(o: &ListOptionsInput<'_>) -> Vec<FieldError> {
    let rvm = FieldPath::new("resourceVersionMatch");
    let mut errs = Vec::new();
    let m = o.resource_version_match;
    if o.watch {
        if o.send_initial_events.is_some() {
            if m != ResourceVersionMatch::NOT_OLDER_THAN {
                errs.push(FieldError::forbidden(
                    &rvm,
                    "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan",
                ));
            }
            if !o.watch_list_enabled {
                errs.push(FieldError::forbidden(
                    &FieldPath::new("sendInitialEvents"),
                    "sendInitialEvents is forbidden for watch unless the WatchList feature gate is enabled",
                ));
            }
        }
        if !m.is_empty() {
            if o.send_initial_events.is_none() {
                errs.push(FieldError::forbidden(
                    &rvm,
                    "resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided",
                ));
            }
            if m != ResourceVersionMatch::NOT_OLDER_THAN {
                errs.push(FieldError::not_supported(
                    &rvm,
                    m,
                    &[ResourceVersionMatch::NOT_OLDER_THAN],
                ));
            }
            if !o.continue_token.is_empty() {
                errs.push(FieldError::forbidden(
                    &rvm,
                    "resourceVersionMatch is forbidden when continue is provided",
                ));
            }
        }
        return errs;
    }
    if !m.is_empty() {
        if o.resource_version.is_empty() {
            errs.push(FieldError::forbidden(
                &rvm,
                "resourceVersionMatch is forbidden unless resourceVersion is provided",
            ));
        }
        if !o.continue_token.is_empty() {
            errs.push(FieldError::forbidden(
                &rvm,
                "resourceVersionMatch is forbidden when continue is provided",
            ));
        }
        if m != ResourceVersionMatch::EXACT && m != ResourceVersionMatch::NOT_OLDER_THAN {
            errs.push(FieldError::not_supported(
                &rvm,
                m,
                &[
                    ResourceVersionMatch::EXACT,
                    ResourceVersionMatch::NOT_OLDER_THAN,
                    "",
                ],
            ));
        }
        if m == ResourceVersionMatch::EXACT && o.resource_version == "0" {
            errs.push(FieldError::forbidden(
                &rvm,
                "resourceVersionMatch \"exact\" is forbidden for resourceVersion \"0\"",
            ));
        }
    }
    if o.send_initial_events.is_some() {
        errs.push(FieldError::forbidden(
            &FieldPath::new("sendInitialEvents"),
            "sendInitialEvents is forbidden for list",
        ));
    }
    errs
}

/// The whole pipeline for a list (not watch) request, in upstream's order: option
/// validation (422 on `ListOptions`), then `continue` with a resourceVersion other
/// than `""`/`"0"` (400), then resourceVersion parsing (400).
pub fn check_list_options(o: &ListOptionsInput<'_>) -> Result<ListResourceVersion, ApiError> {
    let errs = validate_list_options(o);
    if !errs.is_empty() {
        return Err(ApiError::invalid("meta.k8s.io", "ListOptions", "", errs));
    }
    if !o.continue_token.is_empty() && !o.resource_version.is_empty() && o.resource_version != "0" {
        return Err(ApiError::bad_request(
            "specifying resource version is not allowed when using continue",
        ));
    }
    let rv = if o.resource_version.is_empty() {
        None
    } else {
        Some(parse_resource_version_for_read(o.resource_version)?)
    };
    let r#match = ResourceVersionMatch::parse(o.resource_version_match)
        .map_err(|e| ApiError::bad_request(e.to_string()))?;
    Ok(ListResourceVersion {
        resource_version: rv,
        r#match,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_versions() {
        assert_eq!(parse_resource_version("").unwrap(), 0);
        assert_eq!(parse_resource_version("0").unwrap(), 0);
        assert_eq!(parse_resource_version("42").unwrap(), 42);
        assert_eq!(
            parse_resource_version("9223372036854775807").unwrap(),
            i64::MAX
        );
        let cases = [
            (
                "abc",
                "resourceVersion: Invalid value: \"abc\": strconv.ParseUint: parsing \"abc\": invalid syntax",
            ),
            (
                "-1",
                "resourceVersion: Invalid value: \"-1\": strconv.ParseUint: parsing \"-1\": invalid syntax",
            ),
            (
                "+1",
                "resourceVersion: Invalid value: \"+1\": strconv.ParseUint: parsing \"+1\": invalid syntax",
            ),
            (
                " 1",
                "resourceVersion: Invalid value: \" 1\": strconv.ParseUint: parsing \" 1\": invalid syntax",
            ),
            (
                "99999999999999999999",
                "resourceVersion: Invalid value: \"99999999999999999999\": strconv.ParseUint: parsing \"99999999999999999999\": value out of range",
            ),
        ];
        for (input, want) in cases {
            assert_eq!(parse_resource_version(input).unwrap_err().to_string(), want);
        }
        let e = parse_resource_version_for_read("x").unwrap_err();
        assert_eq!(e.code, 400);
        assert_eq!(
            e.message,
            "invalid resource version: resourceVersion: Invalid value: \"x\": strconv.ParseUint: parsing \"x\": invalid syntax"
        );
    }

    #[test]
    fn match_parsing() {
        assert_eq!(ResourceVersionMatch::parse("").unwrap(), None);
        assert_eq!(
            ResourceVersionMatch::parse("Exact").unwrap(),
            Some(ResourceVersionMatch::Exact)
        );
        assert_eq!(
            ResourceVersionMatch::parse("NotOlderThan").unwrap(),
            Some(ResourceVersionMatch::NotOlderThan)
        );
        assert!(ResourceVersionMatch::parse("exact").is_err());
    }

    fn msgs(o: ListOptionsInput<'_>) -> Vec<String> {
        validate_list_options(&o)
            .iter()
            .map(|e| e.to_string())
            .collect()
    }

    #[test]
    fn list_option_validation() {
        // After upstream's TestValidateListOptions.
        let base = ListOptionsInput::default();
        assert!(msgs(base).is_empty());
        assert!(
            msgs(ListOptionsInput {
                resource_version: "1",
                resource_version_match: "Exact",
                ..base
            })
            .is_empty()
        );
        assert!(
            msgs(ListOptionsInput {
                resource_version: "0",
                resource_version_match: "NotOlderThan",
                ..base
            })
            .is_empty()
        );
        assert_eq!(
            msgs(ListOptionsInput {
                resource_version_match: "Exact",
                ..base
            }),
            vec![
                "resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden unless resourceVersion is provided"
            ]
        );
        assert_eq!(
            msgs(ListOptionsInput {
                resource_version: "1",
                resource_version_match: "Exact",
                continue_token: "c",
                ..base
            }),
            vec![
                "resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden when continue is provided"
            ]
        );
        assert_eq!(
            msgs(ListOptionsInput {
                resource_version: "1",
                resource_version_match: "Bogus",
                ..base
            }),
            vec![
                "resourceVersionMatch: Unsupported value: \"Bogus\": supported values: \"Exact\", \"NotOlderThan\", \"\""
            ]
        );
        assert_eq!(
            msgs(ListOptionsInput {
                resource_version: "0",
                resource_version_match: "Exact",
                ..base
            }),
            vec![
                "resourceVersionMatch: Forbidden: resourceVersionMatch \"exact\" is forbidden for resourceVersion \"0\""
            ]
        );
        assert_eq!(
            msgs(ListOptionsInput {
                send_initial_events: Some(true),
                ..base
            }),
            vec!["sendInitialEvents: Forbidden: sendInitialEvents is forbidden for list"]
        );
    }

    #[test]
    fn watch_option_validation() {
        let w = ListOptionsInput {
            watch: true,
            ..Default::default()
        };
        assert!(msgs(w).is_empty());
        assert!(
            msgs(ListOptionsInput {
                send_initial_events: Some(true),
                resource_version_match: "NotOlderThan",
                watch_list_enabled: true,
                ..w
            })
            .is_empty()
        );
        assert_eq!(
            msgs(ListOptionsInput {
                send_initial_events: Some(true),
                ..w
            }),
            vec![
                "resourceVersionMatch: Forbidden: sendInitialEvents requires setting resourceVersionMatch to NotOlderThan",
                "sendInitialEvents: Forbidden: sendInitialEvents is forbidden for watch unless the WatchList feature gate is enabled",
            ]
        );
        assert_eq!(
            msgs(ListOptionsInput {
                resource_version_match: "Exact",
                ..w
            }),
            vec![
                "resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided",
                "resourceVersionMatch: Unsupported value: \"Exact\": supported values: \"NotOlderThan\"",
            ]
        );
    }

    #[test]
    fn list_pipeline() {
        let base = ListOptionsInput::default();
        let ok = check_list_options(&ListOptionsInput {
            resource_version: "7",
            resource_version_match: "Exact",
            ..base
        })
        .unwrap();
        assert_eq!(
            ok,
            ListResourceVersion {
                resource_version: Some(7),
                r#match: Some(ResourceVersionMatch::Exact)
            }
        );
        assert_eq!(ok.exact_revision(0), Some(7));
        let legacy = check_list_options(&ListOptionsInput {
            resource_version: "7",
            ..base
        })
        .unwrap();
        assert_eq!(legacy.exact_revision(0), None);
        assert_eq!(legacy.exact_revision(10), Some(7));
        let consistent = check_list_options(&base).unwrap();
        assert_eq!(consistent.resource_version, None);
        assert_eq!(consistent.exact_revision(10), None);

        let e = check_list_options(&ListOptionsInput {
            resource_version: "0",
            resource_version_match: "Exact",
            ..base
        })
        .unwrap_err();
        assert_eq!(e.code, 422);
        assert_eq!(
            e.message,
            "ListOptions.meta.k8s.io \"\" is invalid: resourceVersionMatch: Forbidden: resourceVersionMatch \"exact\" is forbidden for resourceVersion \"0\""
        );
        let e = check_list_options(&ListOptionsInput {
            resource_version: "5",
            continue_token: "abc",
            ..base
        })
        .unwrap_err();
        assert_eq!(
            (e.code, e.message.as_str()),
            (
                400,
                "specifying resource version is not allowed when using continue"
            )
        );
        assert!(
            check_list_options(&ListOptionsInput {
                resource_version: "0",
                continue_token: "abc",
                ..base
            })
            .is_ok()
        );
        let e = check_list_options(&ListOptionsInput {
            resource_version: "x",
            ..base
        })
        .unwrap_err();
        assert_eq!(e.code, 400);
    }
}
