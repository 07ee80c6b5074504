//! Field selectors, after `k8s.io/apimachinery/pkg/fields`.
//!
//! Grammar: terms separated by unescaped `,` (AND); each term is `field=value`,
//! `field==value` or `field!=value`, the first operator in the term wins. Values escape
//! `\`, `,` and `=` with a backslash ([`escape_value`] / [`unescape_value`]). No
//! whitespace is trimmed. A field that is absent matches as the empty string.

use std::collections::BTreeMap;
use std::fmt;

use crate::labels::SelectorError;

/// The operator of one field requirement.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FieldOperator {
    /// `=` or `==`.
    Equals,
    /// `!=`.
    NotEquals,
}

/// One `field op value` term.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldRequirement {
    pub field: String,
    pub operator: FieldOperator,
    pub value: String,
}

impl FieldRequirement {
    fn matches(&self, get: &dyn Fn(&str) -> Option<String>) -> bool {
        let have = get(&self.field).unwrap_or_default();
        match self.operator {
            FieldOperator::Equals => have == self.value,
            FieldOperator::NotEquals => have != self.value,
        }
    }
}

impl fmt::Display for FieldRequirement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let op = match self.operator {
            FieldOperator::Equals => "=",
            FieldOperator::NotEquals => "!=",
        };
        write!(f, "{}{}{}", self.field, op, escape_value(&self.value))
    }
}

/// A field selector: the AND of its requirements (sorted as upstream sorts the terms).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FieldSelector {
    requirements: Vec<FieldRequirement>,
}

/// `fields.EscapeValue`: escapes `\`, `,` and `=`.
pub fn escape_value(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if matches!(c, '\\' | ',' | '=') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// `fields.UnescapeValue`, with upstream's error texts.
pub fn unescape_value(s: &str) -> Result<String, SelectorError> {
    if !s.contains(['\\', ',', '=']) {
        return Ok(s.to_string());
    }
    let mut out = String::with_capacity(s.len());
    let mut in_slash = false;
    for c in s.chars() {
        if in_slash {
            match c {
                '\\' | ',' | '=' => out.push(c),
                _ => {
                    return Err(SelectorError {
                        message: format!("invalid field selector: invalid escape sequence: \\{c}"),
                    });
                }
            }
            in_slash = false;
            continue;
        }
        match c {
            '\\' => in_slash = true,
            ',' | '=' => {
                // Upstream prints the rune with %v: its code point.
                return Err(SelectorError {
                    message: format!(
                        "invalid field selector: unescaped character in value: {}",
                        c as u32
                    ),
                });
            }
            _ => out.push(c),
        }
    }
    if in_slash {
        return Err(SelectorError {
            message: "invalid field selector: invalid escape sequence: \\".to_string(),
        });
    }
    Ok(out)
}

fn split_terms(s: &str) -> Vec<&str> {
    if s.is_empty() {
        return Vec::new();
    }
    let mut terms = Vec::new();
    let mut start = 0;
    let mut in_slash = false;
    for (i, c) in s.char_indices() {
        if in_slash {
            in_slash = false;
        } else if c == '\\' {
            in_slash = true;
        } else if c == ',' {
            terms.push(&s[start..i]);
            start = i + 1;
        }
    }
    terms.push(&s[start..]);
    terms
}

fn split_term(term: &str) -> Option<(&str, FieldOperator, &str)> {
    for (i, _) in term.char_indices() {
        let rest = &term[i..];
        for (op, kind) in [
            ("!=", FieldOperator::NotEquals),
            ("==", FieldOperator::Equals),
            ("=", FieldOperator::Equals),
        ] {
            if let Some(value) = rest.strip_prefix(op) {
                return Some((&term[..i], kind, value));
            }
        }
    }
    None
}

impl FieldSelector {
    /// The selector matching everything.
    pub fn everything() -> Self {
        FieldSelector::default()
    }

    /// `fields.ParseSelector`.
    pub fn parse(s: &str) -> Result<FieldSelector, SelectorError> {
        let mut parts = split_terms(s);
        parts.sort();
        let mut requirements = Vec::new();
        for part in parts {
            if part.is_empty() {
                continue;
            }
            let Some((lhs, op, rhs)) = split_term(part) else {
                return Err(SelectorError {
                    message: format!("invalid selector: '{s}'; can't understand '{part}'"),
                });
            };
            requirements.push(FieldRequirement {
                field: lhs.to_string(),
                operator: op,
                value: unescape_value(rhs)?,
            });
        }
        Ok(FieldSelector { requirements })
    }

    /// A selector of `field=value` terms.
    pub fn from_set(set: &BTreeMap<String, String>) -> Self {
        FieldSelector {
            requirements: set
                .iter()
                .map(|(k, v)| FieldRequirement {
                    field: k.clone(),
                    operator: FieldOperator::Equals,
                    value: v.clone(),
                })
                .collect(),
        }
    }

    /// The terms, so a caller can check the field names it supports.
    pub fn requirements(&self) -> &[FieldRequirement] {
        &self.requirements
    }

    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }

    /// Fails with upstream's `field label not supported: <name>` on the first term whose
    /// field is not in `supported`.
    pub fn check_supported(&self, supported: &[&str]) -> Result<(), SelectorError> {
        for r in &self.requirements {
            if !supported.contains(&r.field.as_str()) {
                return Err(field_label_not_supported(&r.field));
            }
        }
        Ok(())
    }

    /// `Selector.Transform`: rewrites each term (field label conversion); a term that
    /// becomes an empty field and value is dropped.
    pub fn transform<F>(&self, mut f: F) -> Result<FieldSelector, SelectorError>
    where
        F: FnMut(&str, &str) -> Result<(String, String), SelectorError>,
    {
        let mut requirements = Vec::new();
        for r in &self.requirements {
            let (field, value) = f(&r.field, &r.value)?;
            if field.is_empty() && value.is_empty() {
                continue;
            }
            requirements.push(FieldRequirement {
                field,
                operator: r.operator,
                value,
            });
        }
        Ok(FieldSelector { requirements })
    }

    /// Matches against a field getter (absent = empty string).
    pub fn matches(&self, get: &dyn Fn(&str) -> Option<String>) -> bool {
        self.requirements.iter().all(|r| r.matches(get))
    }

    /// Matches against a map of field values.
    pub fn matches_map(&self, fields: &BTreeMap<String, String>) -> bool {
        self.matches(&|k| fields.get(k).cloned())
    }

    /// `RequiresExactMatch`: the value an `=` term pins the field to.
    pub fn requires_exact_match(&self, field: &str) -> Option<&str> {
        self.requirements
            .iter()
            .find(|r| r.field == field && r.operator == FieldOperator::Equals)
            .map(|r| r.value.as_str())
    }
}

/// The error upstream's field label conversion returns for an unknown field.
pub fn field_label_not_supported(name: &str) -> SelectorError {
    SelectorError {
        message: format!("field label not supported: {name}"),
    }
}

impl fmt::Display for FieldSelector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, r) in self.requirements.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{r}")?;
        }
        Ok(())
    }
}

impl std::str::FromStr for FieldSelector {
    type Err = SelectorError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        FieldSelector::parse(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn parse_and_print() {
        // After upstream's TestSelectorParse.
        let cases = [
            ("", ""),
            ("a=b", "a=b"),
            ("a==b", "a=b"),
            ("a!=b", "a!=b"),
            ("b=c,a=b", "a=b,b=c"),
            ("x=a,y=b,z=c", "x=a,y=b,z=c"),
            ("x=", "x="),
            ("x=a\\,b", "x=a\\,b"),
            ("x=a\\=b", "x=a\\=b"),
            ("x=a\\\\b", "x=a\\\\b"),
            (
                "metadata.name=foo,spec.nodeName!=",
                "metadata.name=foo,spec.nodeName!=",
            ),
            ("a=b,", "a=b"),
            (",a=b", "a=b"),
            ("x =a", "x =a"),
        ];
        for (input, want) in cases {
            let s = FieldSelector::parse(input).unwrap_or_else(|e| panic!("{input}: {e}"));
            assert_eq!(s.to_string(), want, "{input}");
        }
    }

    #[test]
    fn parse_errors() {
        let cases = [
            ("a", "invalid selector: 'a'; can't understand 'a'"),
            ("a=b,c", "invalid selector: 'a=b,c'; can't understand 'c'"),
            (
                "x=a=b",
                "invalid field selector: unescaped character in value: 61",
            ),
            (
                "x=a\\b",
                "invalid field selector: invalid escape sequence: \\b",
            ),
            (
                "x=a\\",
                "invalid field selector: invalid escape sequence: \\",
            ),
        ];
        for (input, want) in cases {
            assert_eq!(
                FieldSelector::parse(input).unwrap_err().message,
                want,
                "{input}"
            );
        }
    }

    #[test]
    fn escaping_round_trips() {
        for (raw, escaped) in [
            ("", ""),
            ("a", "a"),
            ("=", "\\="),
            (",", "\\,"),
            ("\\", "\\\\"),
            ("\\=\\,\\", "\\\\\\=\\\\\\,\\\\"),
        ] {
            assert_eq!(escape_value(raw), escaped);
            assert_eq!(unescape_value(escaped).unwrap(), raw);
        }
    }

    #[test]
    fn matching() {
        let fields = map(&[
            ("metadata.name", "foo"),
            ("spec.nodeName", "n1"),
            ("x", "a,b"),
        ]);
        for (sel, want) in [
            ("", true),
            ("metadata.name=foo", true),
            ("metadata.name==foo", true),
            ("metadata.name=bar", false),
            ("metadata.name!=bar", true),
            ("metadata.name!=foo", false),
            ("metadata.name=foo,spec.nodeName=n1", true),
            ("metadata.name=foo,spec.nodeName=n2", false),
            ("status.phase=", true),
            ("status.phase!=", false),
            ("status.phase!=Running", true),
            ("x=a\\,b", true),
        ] {
            assert_eq!(
                FieldSelector::parse(sel).unwrap().matches_map(&fields),
                want,
                "{sel}"
            );
        }
        let s = FieldSelector::parse("spec.nodeName=n1").unwrap();
        assert!(s.matches(&|f| (f == "spec.nodeName").then(|| "n1".to_string())));
        assert_eq!(s.requires_exact_match("spec.nodeName"), Some("n1"));
        assert_eq!(
            FieldSelector::parse("a!=b")
                .unwrap()
                .requires_exact_match("a"),
            None
        );
    }

    #[test]
    fn unsupported_fields_and_transform() {
        let s = FieldSelector::parse("metadata.name=a,spec.bogus=b").unwrap();
        assert_eq!(
            s.check_supported(&["metadata.name", "metadata.namespace"])
                .unwrap_err()
                .to_string(),
            "field label not supported: spec.bogus"
        );
        assert!(s.check_supported(&["metadata.name", "spec.bogus"]).is_ok());
        let t = s
            .transform(|f, v| {
                if f == "spec.bogus" {
                    Ok((String::new(), String::new()))
                } else {
                    Ok((f.to_string(), v.to_uppercase()))
                }
            })
            .unwrap();
        assert_eq!(t.to_string(), "metadata.name=A");
        let err = s
            .transform(|f, _| Err(field_label_not_supported(f)))
            .unwrap_err();
        assert_eq!(err.message, "field label not supported: metadata.name");
    }
}
