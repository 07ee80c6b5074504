//! Label selectors, after `k8s.io/apimachinery/pkg/labels`.
//!
//! Grammar (upstream's lexer and parser, including its error texts):
//!
//! ```text
//! selector    := requirement ( ',' requirement )*       (empty string = everything)
//! requirement := ['!'] KEY
//!              | KEY ( '=' | '==' | '!=' ) VALUE?
//!              | KEY ( 'in' | 'notin' ) '(' VALUE ( ',' VALUE )* ')'
//!              | KEY ( '>' | '<' ) INTEGER
//! ```
//!
//! Whitespace (space, tab, CR, LF) separates tokens and is otherwise ignored. Keys must
//! be qualified names, values valid label values (at most 63 characters).

use std::collections::BTreeMap;
use std::fmt;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

use crate::errors::{FieldError, FieldPath, aggregate_message};
use crate::validation::{is_qualified_name, is_valid_label_value};

/// A selector that failed to parse or validate; the message is upstream's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct SelectorError {
    pub message: String,
}

impl SelectorError {
    fn new(message: impl Into<String>) -> Self {
        SelectorError {
            message: message.into(),
        }
    }
}

/// A requirement operator (`selection.Operator`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Operator {
    Equals,
    DoubleEquals,
    NotEquals,
    In,
    NotIn,
    Exists,
    DoesNotExist,
    GreaterThan,
    LessThan,
}

impl Operator {
    /// Upstream's string form (`=`, `==`, `!=`, `in`, `notin`, `exists`, `!`, `gt`, `lt`).
    pub fn as_str(self) -> &'static str {
        match self {
            Operator::Equals => "=",
            Operator::DoubleEquals => "==",
            Operator::NotEquals => "!=",
            Operator::In => "in",
            Operator::NotIn => "notin",
            Operator::Exists => "exists",
            Operator::DoesNotExist => "!",
            Operator::GreaterThan => "gt",
            Operator::LessThan => "lt",
        }
    }
}

/// One requirement of a selector.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Requirement {
    key: String,
    operator: Operator,
    values: Vec<String>,
}

fn qualified_key_error(key: &str, path: Option<&FieldPath>) -> Option<FieldError> {
    let errs = is_qualified_name(key);
    if errs.is_empty() {
        return None;
    }
    Some(field_error_at(path, key, errs.join("; ")))
}

/// A field error at `path`, printing `<nil>` for a missing path like upstream.
fn field_error_at(path: Option<&FieldPath>, value: &str, detail: String) -> FieldError {
    let nil = FieldPath::new("<nil>");
    FieldError::invalid(path.unwrap_or(&nil), value, detail)
}

impl Requirement {
    /// `labels.NewRequirement`: validates key, operator arity and values.
    pub fn new(key: &str, operator: Operator, values: Vec<String>) -> Result<Self, SelectorError> {
        let mut errs = Vec::new();
        if let Some(e) = qualified_key_error(key, Some(&FieldPath::new("key"))) {
            errs.push(e);
        }
        let value_path = FieldPath::new("values");
        let json_values = serde_json::to_value(&values).unwrap_or_default();
        match operator {
            Operator::In | Operator::NotIn => {
                if values.is_empty() {
                    errs.push(FieldError::invalid(
                        &value_path,
                        json_values,
                        "for 'in', 'notin' operators, values set can't be empty",
                    ));
                }
            }
            Operator::Equals | Operator::DoubleEquals | Operator::NotEquals => {
                if values.len() != 1 {
                    errs.push(FieldError::invalid(
                        &value_path,
                        json_values,
                        "exact-match compatibility requires one single value",
                    ));
                }
            }
            Operator::Exists | Operator::DoesNotExist => {
                if !values.is_empty() {
                    errs.push(FieldError::invalid(
                        &value_path,
                        json_values,
                        "values set must be empty for exists and does not exist",
                    ));
                }
            }
            Operator::GreaterThan | Operator::LessThan => {
                if values.len() != 1 {
                    errs.push(FieldError::invalid(
                        &value_path,
                        json_values,
                        "for 'Gt', 'Lt' operators, exactly one value is required",
                    ));
                }
                for (i, v) in values.iter().enumerate() {
                    if v.parse::<i64>().is_err() {
                        errs.push(FieldError::invalid(
                            &value_path.index(i),
                            v.as_str(),
                            "for 'Gt', 'Lt' operators, the value must be an integer",
                        ));
                    }
                }
            }
        }
        for (i, v) in values.iter().enumerate() {
            let msgs = is_valid_label_value(v);
            if !msgs.is_empty() {
                errs.push(FieldError::invalid(
                    &value_path.index(i).key(key),
                    v.as_str(),
                    msgs.join("; "),
                ));
            }
        }
        match aggregate_message(&errs) {
            Some(m) => Err(SelectorError::new(m)),
            None => Ok(Requirement {
                key: key.to_string(),
                operator,
                values,
            }),
        }
    }

    pub fn key(&self) -> &str {
        &self.key
    }

    pub fn operator(&self) -> Operator {
        self.operator
    }

    pub fn values(&self) -> &[String] {
        &self.values
    }

    /// Whether the label set satisfies this requirement.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        let got = labels.get(&self.key);
        match self.operator {
            Operator::In | Operator::Equals | Operator::DoubleEquals => {
                got.is_some_and(|v| self.values.contains(v))
            }
            Operator::NotIn | Operator::NotEquals => got.is_none_or(|v| !self.values.contains(v)),
            Operator::Exists => got.is_some(),
            Operator::DoesNotExist => got.is_none(),
            Operator::GreaterThan | Operator::LessThan => {
                let Some(Ok(have)) = got.map(|v| v.parse::<i64>()) else {
                    return false;
                };
                let [want] = self.values.as_slice() else {
                    return false;
                };
                let Ok(want) = want.parse::<i64>() else {
                    return false;
                };
                if self.operator == Operator::GreaterThan {
                    have > want
                } else {
                    have < want
                }
            }
        }
    }
}

impl fmt::Display for Requirement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.operator == Operator::DoesNotExist {
            f.write_str("!")?;
        }
        f.write_str(&self.key)?;
        let op = match self.operator {
            Operator::Equals => "=",
            Operator::DoubleEquals => "==",
            Operator::NotEquals => "!=",
            Operator::In => " in ",
            Operator::NotIn => " notin ",
            Operator::GreaterThan => ">",
            Operator::LessThan => "<",
            Operator::Exists | Operator::DoesNotExist => return Ok(()),
        };
        f.write_str(op)?;
        let paren = matches!(self.operator, Operator::In | Operator::NotIn);
        if paren {
            f.write_str("(")?;
        }
        let mut sorted = self.values.clone();
        sorted.sort();
        f.write_str(&sorted.join(","))?;
        if paren {
            f.write_str(")")?;
        }
        Ok(())
    }
}

/// A label selector: the AND of its requirements, sorted by key.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Selector {
    requirements: Vec<Requirement>,
    nothing: bool,
}

impl Selector {
    /// The selector that matches every label set (`labels.Everything()`).
    pub fn everything() -> Self {
        Selector::default()
    }

    /// The selector that matches nothing (`labels.Nothing()`): what a nil
    /// `*metav1.LabelSelector` converts to.
    pub fn nothing() -> Self {
        Selector {
            requirements: Vec::new(),
            nothing: true,
        }
    }

    /// A selector requiring every `key=value` of the set (`SelectorFromSet`), unvalidated.
    pub fn from_set(set: &BTreeMap<String, String>) -> Self {
        Selector {
            requirements: set
                .iter()
                .map(|(k, v)| Requirement {
                    key: k.clone(),
                    operator: Operator::Equals,
                    values: vec![v.clone()],
                })
                .collect(),
            nothing: false,
        }
    }

    /// Parses upstream's selector syntax (`labels.Parse`).
    pub fn parse(s: &str) -> Result<Selector, SelectorError> {
        let tokens = lex(s)?;
        let mut p = Parser { tokens, pos: 0 };
        let mut requirements = p.parse()?;
        requirements.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(Selector {
            requirements,
            nothing: false,
        })
    }

    /// `metav1.LabelSelectorAsSelector` for a present selector: `matchLabels` become `=`
    /// requirements, `matchExpressions` `In`/`NotIn`/`Exists`/`DoesNotExist`. An empty
    /// selector (`{}`) matches everything. A *missing* selector (nil in Go) matches
    /// nothing upstream: use [`Selector::from_optional_label_selector`] for that case.
    pub fn from_label_selector(ls: &LabelSelector) -> Result<Selector, SelectorError> {
        let mut requirements = Vec::new();
        for (k, v) in ls.match_labels.iter().flatten() {
            requirements.push(Requirement::new(k, Operator::Equals, vec![v.clone()])?);
        }
        for expr in ls.match_expressions.iter().flatten() {
            let op = match expr.operator.as_str() {
                "In" => Operator::In,
                "NotIn" => Operator::NotIn,
                "Exists" => Operator::Exists,
                "DoesNotExist" => Operator::DoesNotExist,
                other => {
                    return Err(SelectorError::new(format!(
                        "{} is not a valid label selector operator",
                        crate::errors::go_quote(other)
                    )));
                }
            };
            requirements.push(Requirement::new(
                &expr.key,
                op,
                expr.values.clone().unwrap_or_default(),
            )?);
        }
        requirements.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(Selector {
            requirements,
            nothing: false,
        })
    }

    /// `None` (a nil selector) matches nothing, as upstream's `LabelSelectorAsSelector`.
    pub fn from_optional_label_selector(
        ls: Option<&LabelSelector>,
    ) -> Result<Selector, SelectorError> {
        match ls {
            None => Ok(Selector::nothing()),
            Some(ls) => Selector::from_label_selector(ls),
        }
    }

    /// Adds requirements (kept sorted by key).
    pub fn with_requirement(mut self, r: Requirement) -> Self {
        self.requirements.push(r);
        self.requirements.sort_by(|a, b| a.key.cmp(&b.key));
        self
    }

    /// Whether the label set satisfies every requirement.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        !self.nothing && self.requirements.iter().all(|r| r.matches(labels))
    }

    /// True for the everything selector (no requirements); false for nothing.
    pub fn is_empty(&self) -> bool {
        !self.nothing && self.requirements.is_empty()
    }

    /// True for [`Selector::nothing`].
    pub fn is_nothing(&self) -> bool {
        self.nothing
    }

    pub fn requirements(&self) -> &[Requirement] {
        &self.requirements
    }

    /// The value a label must have when the selector pins it exactly
    /// (`RequiresExactMatch`): `=`, `==`, or `in` with one value.
    pub fn requires_exact_match(&self, label: &str) -> Option<&str> {
        let r = self.requirements.iter().find(|r| r.key == label)?;
        match (r.operator, r.values.as_slice()) {
            (Operator::Equals | Operator::DoubleEquals | Operator::In, [v]) => Some(v),
            _ => None,
        }
    }
}

impl fmt::Display for Selector {
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

impl std::str::FromStr for Selector {
    type Err = SelectorError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Selector::parse(s)
    }
}

// ---------------------------------------------------------------------------
// Lexer and parser (mirrors upstream's token-level behaviour and messages)
// ---------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tok {
    EndOfString,
    ClosedPar,
    Comma,
    DoesNotExist,
    DoubleEquals,
    Equals,
    GreaterThan,
    Identifier,
    In,
    LessThan,
    NotEquals,
    NotIn,
    OpenPar,
}

fn keyword(s: &str) -> Option<Tok> {
    Some(match s {
        ")" => Tok::ClosedPar,
        "," => Tok::Comma,
        "!" => Tok::DoesNotExist,
        "==" => Tok::DoubleEquals,
        "=" => Tok::Equals,
        ">" => Tok::GreaterThan,
        "in" => Tok::In,
        "<" => Tok::LessThan,
        "!=" => Tok::NotEquals,
        "notin" => Tok::NotIn,
        "(" => Tok::OpenPar,
        _ => return None,
    })
}

fn is_whitespace(c: u8) -> bool {
    matches!(c, b' ' | b'\t' | b'\r' | b'\n')
}

fn is_special(c: u8) -> bool {
    matches!(c, b'=' | b'!' | b'(' | b')' | b',' | b'>' | b'<')
}

fn lex(s: &str) -> Result<Vec<(Tok, String)>, SelectorError> {
    // Upstream reads bytes and treats a NUL byte as the end of the input.
    let b = s.as_bytes();
    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    let b = &b[..end];
    let mut pos = 0;
    let mut out = Vec::new();
    loop {
        while pos < b.len() && is_whitespace(b[pos]) {
            pos += 1;
        }
        if pos >= b.len() {
            out.push((Tok::EndOfString, String::new()));
            return Ok(out);
        }
        if is_special(b[pos]) {
            // Longest run of special symbols that still forms a token.
            let start = pos;
            let mut last: Option<(Tok, usize)> = None;
            while pos < b.len() && is_special(b[pos]) {
                let candidate = &s[start..=pos];
                if let Some(t) = keyword(candidate) {
                    last = Some((t, pos + 1));
                } else if last.is_some() {
                    break;
                }
                pos += 1;
            }
            match last {
                Some((t, e)) => {
                    out.push((t, s[start..e].to_string()));
                    pos = e;
                }
                None => {
                    return Err(SelectorError::new(format!(
                        "error expected: keyword found '{}'",
                        &s[start..pos]
                    )));
                }
            }
        } else {
            let start = pos;
            while pos < b.len() && !is_special(b[pos]) && !is_whitespace(b[pos]) {
                pos += 1;
            }
            let lit = &s[start..pos];
            out.push((keyword(lit).unwrap_or(Tok::Identifier), lit.to_string()));
        }
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Ctx {
    KeyAndOperator,
    Values,
}

struct Parser {
    tokens: Vec<(Tok, String)>,
    pos: usize,
}

const BINARY_OPERATORS: &str = "in, notin, =, ==, !=, gt, lt";

impl Parser {
    fn map(tok: Tok, ctx: Ctx) -> Tok {
        if ctx == Ctx::Values && matches!(tok, Tok::In | Tok::NotIn) {
            Tok::Identifier
        } else {
            tok
        }
    }

    fn lookahead(&self, ctx: Ctx) -> (Tok, String) {
        let (t, l) = &self.tokens[self.pos.min(self.tokens.len() - 1)];
        (Self::map(*t, ctx), l.clone())
    }

    fn consume(&mut self, ctx: Ctx) -> (Tok, String) {
        let r = self.lookahead(ctx);
        if self.pos < self.tokens.len() - 1 {
            self.pos += 1;
        }
        r
    }

    fn parse(&mut self) -> Result<Vec<Requirement>, SelectorError> {
        let mut reqs = Vec::new();
        loop {
            let (tok, lit) = self.lookahead(Ctx::Values);
            match tok {
                Tok::Identifier | Tok::DoesNotExist => {
                    let r = self.parse_requirement().map_err(|e| {
                        SelectorError::new(format!("unable to parse requirement: {e}"))
                    })?;
                    reqs.push(r);
                    let (t, l) = self.consume(Ctx::Values);
                    match t {
                        Tok::EndOfString => return Ok(reqs),
                        Tok::Comma => {
                            let (t2, l2) = self.lookahead(Ctx::Values);
                            if t2 != Tok::Identifier && t2 != Tok::DoesNotExist {
                                return Err(SelectorError::new(format!(
                                    "found '{l2}', expected: identifier after ','"
                                )));
                            }
                        }
                        _ => {
                            return Err(SelectorError::new(format!(
                                "found '{l}', expected: ',' or 'end of string'"
                            )));
                        }
                    }
                }
                Tok::EndOfString => return Ok(reqs),
                _ => {
                    return Err(SelectorError::new(format!(
                        "found '{lit}', expected: !, identifier, or 'end of string'"
                    )));
                }
            }
        }
    }

    fn parse_requirement(&mut self) -> Result<Requirement, SelectorError> {
        let (key, op) = self.parse_key_and_infer_operator()?;
        if let Some(op @ (Operator::Exists | Operator::DoesNotExist)) = op {
            return Requirement::new(&key, op, Vec::new());
        }
        let op = self.parse_operator()?;
        let values = match op {
            Operator::In | Operator::NotIn => self.parse_values()?,
            _ => self.parse_exact_value()?,
        };
        Requirement::new(&key, op, values)
    }

    fn parse_key_and_infer_operator(
        &mut self,
    ) -> Result<(String, Option<Operator>), SelectorError> {
        let mut op = None;
        let (mut tok, mut lit) = self.consume(Ctx::Values);
        if tok == Tok::DoesNotExist {
            op = Some(Operator::DoesNotExist);
            (tok, lit) = self.consume(Ctx::Values);
        }
        if tok != Tok::Identifier {
            return Err(SelectorError::new(format!(
                "found '{lit}', expected: identifier"
            )));
        }
        if let Some(e) = qualified_key_error(&lit, None) {
            return Err(SelectorError::new(e.to_string()));
        }
        let (t, _) = self.lookahead(Ctx::Values);
        if (t == Tok::EndOfString || t == Tok::Comma) && op != Some(Operator::DoesNotExist) {
            op = Some(Operator::Exists);
        }
        Ok((lit, op))
    }

    fn parse_operator(&mut self) -> Result<Operator, SelectorError> {
        let (tok, lit) = self.consume(Ctx::KeyAndOperator);
        Ok(match tok {
            Tok::In => Operator::In,
            Tok::Equals => Operator::Equals,
            Tok::DoubleEquals => Operator::DoubleEquals,
            Tok::GreaterThan => Operator::GreaterThan,
            Tok::LessThan => Operator::LessThan,
            Tok::NotIn => Operator::NotIn,
            Tok::NotEquals => Operator::NotEquals,
            _ => {
                return Err(SelectorError::new(format!(
                    "found '{lit}', expected: {BINARY_OPERATORS}"
                )));
            }
        })
    }

    fn parse_values(&mut self) -> Result<Vec<String>, SelectorError> {
        let (tok, lit) = self.consume(Ctx::Values);
        if tok != Tok::OpenPar {
            return Err(SelectorError::new(format!("found '{lit}' expected: '('")));
        }
        let (tok, lit) = self.lookahead(Ctx::Values);
        match tok {
            Tok::Identifier | Tok::Comma => {
                let s = self.parse_identifiers_list()?;
                let (t, _) = self.consume(Ctx::Values);
                if t != Tok::ClosedPar {
                    return Err(SelectorError::new(format!("found '{lit}', expected: ')'")));
                }
                Ok(s)
            }
            Tok::ClosedPar => {
                self.consume(Ctx::Values);
                Ok(vec![String::new()])
            }
            _ => Err(SelectorError::new(format!(
                "found '{lit}', expected: ',', ')' or identifier"
            ))),
        }
    }

    fn parse_identifiers_list(&mut self) -> Result<Vec<String>, SelectorError> {
        let mut set: Vec<String> = Vec::new();
        let insert = |set: &mut Vec<String>, v: String| {
            if !set.contains(&v) {
                set.push(v);
            }
        };
        loop {
            let (tok, lit) = self.consume(Ctx::Values);
            match tok {
                Tok::Identifier => {
                    insert(&mut set, lit);
                    let (t2, l2) = self.lookahead(Ctx::Values);
                    match t2 {
                        Tok::Comma => continue,
                        Tok::ClosedPar => break,
                        _ => {
                            return Err(SelectorError::new(format!(
                                "found '{l2}', expected: ',' or ')'"
                            )));
                        }
                    }
                }
                Tok::Comma => {
                    if set.is_empty() {
                        insert(&mut set, String::new());
                    }
                    let (t2, _) = self.lookahead(Ctx::Values);
                    if t2 == Tok::ClosedPar {
                        insert(&mut set, String::new());
                        break;
                    }
                    if t2 == Tok::Comma {
                        self.consume(Ctx::Values);
                        insert(&mut set, String::new());
                    }
                }
                _ => {
                    return Err(SelectorError::new(format!(
                        "found '{lit}', expected: ',', or identifier"
                    )));
                }
            }
        }
        set.sort();
        Ok(set)
    }

    fn parse_exact_value(&mut self) -> Result<Vec<String>, SelectorError> {
        let (tok, _) = self.lookahead(Ctx::Values);
        if tok == Tok::EndOfString || tok == Tok::Comma {
            return Ok(vec![String::new()]);
        }
        let (tok, lit) = self.consume(Ctx::Values);
        if tok == Tok::Identifier {
            Ok(vec![lit])
        } else {
            Err(SelectorError::new(format!(
                "found '{lit}', expected: identifier"
            )))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;

    fn set(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn parse_valid_selectors() {
        // From upstream's TestSelectorParse.
        for s in [
            "",
            "x=a",
            "x=a,y=b,z=c",
            "x = a, y=b ,z  = c",
            "color=green",
            "color_1=green",
            "color-1=green",
            "color.1=green",
            "x!=a",
            "x=",
            "x= ",
            "x=,z= ",
            "x= ,z= ",
            "!x",
            "x>1",
            "x>1,z<5",
            "x in (a,b)",
            "x notin (a)",
            "x in (,)",
            "x in ()",
            "x in (a, ,b)",
            "x in(a)",
            "x,y",
            "example.com/x",
            "x==a",
        ] {
            if let Err(e) = Selector::parse(s) {
                panic!("{s:?}: {e}");
            }
        }
        for s in [
            "x=a||y=b",
            "x==a==b",
            "!x=a",
            "x<a",
            "x>1.1",
            "x in (a",
            "x in a",
            "x notin ( a ,, )extra",
            "x=a,",
            ",x=a",
            "x=(a)",
            "x=a b",
            "x in (a) y",
            "x!a",
            "Foo!",
            "x=a,,y=b",
            "x&&y",
            "x=a/b",
            &format!("x={}", "a".repeat(64)),
        ] {
            assert!(Selector::parse(s).is_err(), "{s:?} should fail");
        }
    }

    #[test]
    fn canonical_strings() {
        // From upstream's TestSelectorParse / TestLexerParser.
        let cases = [
            ("", ""),
            ("x=a,y=b,z=c", "x=a,y=b,z=c"),
            ("z=c,x=a,y=b", "x=a,y=b,z=c"),
            ("x = a, y=b ,z  = c", "x=a,y=b,z=c"),
            ("x=", "x="),
            ("x= ", "x="),
            ("x=,z= ", "x=,z="),
            ("x!=a", "x!=a"),
            ("!x", "!x"),
            ("x>1", "x>1"),
            ("x>1,z<5", "x>1,z<5"),
            ("x in (b,a)", "x in (a,b)"),
            ("x notin (b, a, b)", "x notin (a,b)"),
            ("x in (,)", "x in ()"),
            ("x in ()", "x in ()"),
            ("x in (a,,b)", "x in (,a,b)"),
            ("x==a", "x==a"),
            ("y,x", "x,y"),
            ("x\t=\na", "x=a"),
        ];
        for (input, want) in cases {
            assert_eq!(
                Selector::parse(input).unwrap().to_string(),
                want,
                "{input:?}"
            );
        }
    }

    #[test]
    fn error_messages_match_upstream() {
        let cases = [
            ("x=a b", "found 'b', expected: ',' or 'end of string'"),
            ("x=a,", "found '', expected: identifier after ','"),
            (
                "=a",
                "found '=', expected: !, identifier, or 'end of string'",
            ),
            (
                "x in a",
                "unable to parse requirement: found 'a' expected: '('",
            ),
            (
                "x (a)",
                "unable to parse requirement: found '(', expected: in, notin, =, ==, !=, gt, lt",
            ),
            (
                "x in (a b)",
                "unable to parse requirement: found 'b', expected: ',' or ')'",
            ),
            (
                "!!x",
                "unable to parse requirement: found '!', expected: identifier",
            ),
            (
                "x>a",
                "unable to parse requirement: values[0]: Invalid value: \"a\": for 'Gt', 'Lt' operators, the value must be an integer",
            ),
            (
                "x=a%",
                "unable to parse requirement: values[0][x]: Invalid value: \"a%\": a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')",
            ),
            (
                "-x",
                "unable to parse requirement: <nil>: Invalid value: \"-x\": name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')",
            ),
        ];
        for (input, want) in cases {
            assert_eq!(
                Selector::parse(input).unwrap_err().message,
                want,
                "{input:?}"
            );
        }
    }

    #[test]
    fn matching() {
        // From upstream's TestSelectorMatches / TestSetMatches.
        let labels = set(&[("x", "y"), ("z", "w"), ("n", "5")]);
        let yes = [
            "",
            "x=y",
            "x=y,z=w",
            "x!=z",
            "z=w",
            "x in (y,z)",
            "q notin (a)",
            "x notin (z)",
            "x",
            "!q",
            "n>4",
            "n<6",
            "n in (5)",
            "x==y",
            "q!=a",
        ]
        .map(|s| s.to_string());
        for s in &yes {
            assert!(
                Selector::parse(s).unwrap().matches(&labels),
                "{s:?} should match"
            );
        }
        for s in [
            "x=z",
            "x=y,z=z",
            "x!=y",
            "x notin (y)",
            "q",
            "!x",
            "n>5",
            "n<5",
            "q>1",
            "x>1",
            "q in (a)",
            "q=",
            "x in (a,b)",
        ] {
            assert!(
                !Selector::parse(s).unwrap().matches(&labels),
                "{s:?} should not match"
            );
        }
        let empty_value = set(&[("q", "")]);
        assert!(Selector::parse("q=").unwrap().matches(&empty_value));
        assert!(Selector::parse("q in (,a)").unwrap().matches(&empty_value));
    }

    #[test]
    fn everything_and_nothing() {
        let l = set(&[("a", "b")]);
        assert!(Selector::everything().matches(&l));
        assert!(Selector::everything().is_empty());
        assert!(Selector::parse("").unwrap().is_empty());
        assert!(!Selector::nothing().matches(&l));
        assert!(!Selector::nothing().matches(&BTreeMap::new()));
        assert!(!Selector::nothing().is_empty());
        assert_eq!(Selector::nothing().to_string(), "");
    }

    #[test]
    fn requires_exact_match() {
        let s = Selector::parse("a=1,b in (2),c in (3,4),d!=5,e==6").unwrap();
        assert_eq!(s.requires_exact_match("a"), Some("1"));
        assert_eq!(s.requires_exact_match("b"), Some("2"));
        assert_eq!(s.requires_exact_match("c"), None);
        assert_eq!(s.requires_exact_match("d"), None);
        assert_eq!(s.requires_exact_match("e"), Some("6"));
        assert_eq!(s.requires_exact_match("z"), None);
    }

    #[test]
    fn requirement_constructor_validates() {
        assert!(Requirement::new("x", Operator::In, vec![]).is_err());
        assert!(Requirement::new("x", Operator::Equals, vec!["a".into(), "b".into()]).is_err());
        assert!(Requirement::new("x", Operator::Exists, vec!["a".into()]).is_err());
        assert!(Requirement::new("x", Operator::GreaterThan, vec!["a".into()]).is_err());
        assert!(Requirement::new("x/y/z", Operator::Exists, vec![]).is_err());
        assert_eq!(
            Requirement::new("x", Operator::In, vec![])
                .unwrap_err()
                .message,
            "values: Invalid value: []: for 'in', 'notin' operators, values set can't be empty"
        );
        let r = Requirement::new("x", Operator::NotIn, vec!["b".into(), "a".into()]).unwrap();
        assert_eq!(r.to_string(), "x notin (a,b)");
    }

    #[test]
    fn from_label_selector() {
        let ls = LabelSelector {
            match_labels: Some(BTreeMap::from([("app".to_string(), "web".to_string())])),
            match_expressions: Some(vec![
                LabelSelectorRequirement {
                    key: "tier".into(),
                    operator: "In".into(),
                    values: Some(vec!["fe".into(), "be".into()]),
                },
                LabelSelectorRequirement {
                    key: "env".into(),
                    operator: "NotIn".into(),
                    values: Some(vec!["prod".into()]),
                },
                LabelSelectorRequirement {
                    key: "track".into(),
                    operator: "Exists".into(),
                    values: None,
                },
                LabelSelectorRequirement {
                    key: "legacy".into(),
                    operator: "DoesNotExist".into(),
                    values: None,
                },
            ]),
        };
        let s = Selector::from_label_selector(&ls).unwrap();
        assert_eq!(
            s.to_string(),
            "app=web,env notin (prod),!legacy,tier in (be,fe),track"
        );
        assert!(s.matches(&set(&[("app", "web"), ("tier", "fe"), ("track", "x")])));
        assert!(!s.matches(&set(&[("app", "web"), ("tier", "fe")])));
        assert!(!s.matches(&set(&[
            ("app", "web"),
            ("tier", "fe"),
            ("track", "x"),
            ("legacy", "1")
        ])));
        assert!(!s.matches(&set(&[
            ("app", "web"),
            ("tier", "fe"),
            ("track", "x"),
            ("env", "prod")
        ])));

        // Empty selector: everything; missing selector: nothing.
        let empty = Selector::from_label_selector(&LabelSelector::default()).unwrap();
        assert!(empty.is_empty() && empty.matches(&set(&[("a", "b")])));
        assert!(
            !Selector::from_optional_label_selector(None)
                .unwrap()
                .matches(&set(&[]))
        );

        let bad_op = LabelSelector {
            match_expressions: Some(vec![LabelSelectorRequirement {
                key: "a".into(),
                operator: "Gt".into(),
                values: Some(vec!["1".into()]),
            }]),
            ..Default::default()
        };
        assert_eq!(
            Selector::from_label_selector(&bad_op).unwrap_err().message,
            "\"Gt\" is not a valid label selector operator"
        );
        let in_without_values = LabelSelector {
            match_expressions: Some(vec![LabelSelectorRequirement {
                key: "a".into(),
                operator: "In".into(),
                values: None,
            }]),
            ..Default::default()
        };
        assert!(Selector::from_label_selector(&in_without_values).is_err());
    }
}
