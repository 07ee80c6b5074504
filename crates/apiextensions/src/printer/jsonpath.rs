//! A port of client-go's `util/jsonpath` (parser and evaluator) over
//! `serde_json::Value`, as the custom resource table convertor uses it: missing keys
//! are allowed (they yield no result), every other evaluation error fails the whole
//! template.
//!
//! Supported: text around `{...}` actions, `$`/`@`, `.field` (with `\` escapes), `..`
//! recursive descent, `*` wildcards, `[n]`, `[a:b:c]` slices with negative indices,
//! `['key']`, unions `[a,b]`, filters `[?(@.x == "y")]` with `== != < > <= >=` and
//! existence `[?(@.x)]`, string/number/bool literals. `range`/`end` parse but fail at
//! evaluation.

use std::borrow::Cow;

use serde_json::Value;

#[derive(Clone, Copy, Debug, PartialEq)]
struct Param {
    value: i64,
    known: bool,
    derived: bool,
}

#[derive(Clone, Debug, PartialEq)]
enum Node {
    List(Vec<Node>),
    Text(String),
    Field(String),
    Wildcard,
    Recursive,
    Array([Param; 3]),
    Union(Vec<Vec<Node>>),
    Filter {
        left: Vec<Node>,
        right: Vec<Node>,
        op: String,
    },
    Int(i64),
    Float(f64),
    Bool(bool),
    Identifier(String),
}

/// A parsed template (client-go's `jsonpath.JSONPath` with `AllowMissingKeys(true)`).
#[derive(Clone, Debug, PartialEq)]
pub struct JsonPath {
    root: Vec<Node>,
}

type Val<'a> = Cow<'a, Value>;

impl JsonPath {
    /// Parses a template such as `{.spec.replicas}`; the error is the parser's message.
    pub fn parse(text: &str) -> Result<JsonPath, String> {
        let mut p = Parser {
            input: text.chars().collect(),
            pos: 0,
            start: 0,
            width: 0,
        };
        let mut root = Vec::new();
        p.parse_text(&mut root)?;
        Ok(JsonPath { root })
    }

    /// `FindResults`: one list of values per top-level node (text or action).
    pub fn find_results<'a>(&self, data: &'a Value) -> Result<Vec<Vec<Val<'a>>>, String> {
        let mut out = Vec::with_capacity(self.root.len());
        for node in &self.root {
            out.push(walk(vec![Cow::Borrowed(data)], node)?);
        }
        Ok(out)
    }
}

// ---------------------------------------------------------------------------
// Parser
// ---------------------------------------------------------------------------

const EOF: char = '\u{0}';

struct Parser {
    input: Vec<char>,
    pos: usize,
    start: usize,
    width: usize,
}

fn is_terminator(r: char) -> bool {
    matches!(
        r,
        ' ' | '\t' | '\r' | '\n' | EOF | '.' | ',' | '[' | ']' | '$' | '@' | '{' | '}'
    )
}

fn is_alphanumeric(r: char) -> bool {
    r == '_' || r.is_alphabetic() || r.is_numeric()
}

impl Parser {
    fn at_eof(&self) -> bool {
        self.pos >= self.input.len()
    }

    fn next(&mut self) -> char {
        if self.at_eof() {
            // Width 0: a following backup() stays put, as upstream's.
            self.width = 0;
            return EOF;
        }
        let c = self.input[self.pos];
        self.pos += 1;
        self.width = 1;
        c
    }

    fn backup(&mut self) {
        self.pos -= self.width;
    }

    fn peek(&mut self) -> char {
        if self.at_eof() {
            EOF
        } else {
            self.input[self.pos]
        }
    }

    fn starts_with(&self, prefix: &str) -> bool {
        (self.pos..)
            .zip(prefix.chars())
            .all(|(i, c)| self.input.get(i) == Some(&c))
    }

    fn consume(&mut self) -> String {
        let end = self.pos.min(self.input.len());
        let s: String = self.input[self.start.min(end)..end].iter().collect();
        self.start = self.pos;
        s
    }

    fn parse_text(&mut self, root: &mut Vec<Node>) -> Result<(), String> {
        loop {
            if self.starts_with("{") {
                if self.pos > self.start {
                    let t = self.consume();
                    root.push(Node::Text(t));
                }
                self.pos += 1;
                self.consume();
                let mut list = Vec::new();
                self.parse_inside_action(&mut list)?;
                root.push(Node::List(list));
                continue;
            }
            if self.at_eof() {
                break;
            }
            self.pos += 1;
        }
        if self.pos > self.start {
            let t = self.consume();
            root.push(Node::Text(t));
        }
        Ok(())
    }

    /// Parses up to and including the closing `}`.
    fn parse_inside_action(&mut self, cur: &mut Vec<Node>) -> Result<(), String> {
        loop {
            if self.starts_with("}") {
                self.pos += 1;
                self.consume();
                return Ok(());
            }
            if self.starts_with("[?(") {
                self.parse_filter(cur)?;
                continue;
            }
            if self.starts_with("..") {
                if matches!(cur.last(), Some(Node::Recursive)) {
                    return Err("invalid multiple recursive descent".into());
                }
                self.pos += 2;
                self.consume();
                cur.push(Node::Recursive);
                if is_alphanumeric(self.peek()) {
                    self.parse_field(cur);
                }
                continue;
            }
            let r = self.next();
            match r {
                EOF | '\r' | '\n' => return Err("unclosed action".into()),
                ' ' | '@' | '$' => {
                    self.consume();
                }
                '[' => self.parse_array(cur)?,
                '"' | '\'' => self.parse_quote(cur, r)?,
                '.' => self.parse_field(cur),
                '+' | '-' => {
                    self.backup();
                    self.parse_number(cur)?;
                }
                c if c.is_numeric() => {
                    self.backup();
                    self.parse_number(cur)?;
                }
                c if is_alphanumeric(c) => {
                    self.backup();
                    self.parse_identifier(cur);
                }
                c => {
                    return Err(format!(
                        "unrecognized character in action: U+{:04X} '{c}'",
                        c as u32
                    ));
                }
            }
        }
    }

    fn parse_identifier(&mut self, cur: &mut Vec<Node>) {
        loop {
            let r = self.next();
            if is_terminator(r) {
                self.backup();
                break;
            }
        }
        let value = self.consume();
        match value.as_str() {
            "true" => cur.push(Node::Bool(true)),
            "false" => cur.push(Node::Bool(false)),
            _ => cur.push(Node::Identifier(value)),
        }
    }

    fn parse_number(&mut self, cur: &mut Vec<Node>) -> Result<(), String> {
        if matches!(self.peek(), '+' | '-') {
            self.next();
        }
        while !self.at_eof()
            && (self.input[self.pos] == '.' || self.input[self.pos].is_ascii_digit())
        {
            self.pos += 1;
        }
        let value = self.consume();
        if let Ok(i) = value.parse::<i64>() {
            cur.push(Node::Int(i));
        } else if let Ok(f) = value.parse::<f64>()
            && value.chars().any(|c| c.is_ascii_digit())
        {
            cur.push(Node::Float(f));
        } else {
            return Err(format!("cannot parse number {value}"));
        }
        Ok(())
    }

    fn parse_array(&mut self, cur: &mut Vec<Node>) -> Result<(), String> {
        loop {
            match self.next() {
                EOF | '\n' => return Err("unterminated array".into()),
                ']' => break,
                _ => {}
            }
        }
        let raw = self.consume();
        let mut text: String = raw.chars().skip(1).take(raw.chars().count() - 2).collect();
        if text == "*" {
            text = ":".into();
        }
        let parts: Vec<&str> = text.split(',').collect();
        if parts.len() > 1 {
            let mut union = Vec::new();
            for part in parts {
                union.push(parse_action(&format!("[{}]", part.trim_matches(' ')))?);
            }
            cur.push(Node::Union(union));
            return Ok(());
        }
        if text.len() >= 2
            && text.starts_with('\'')
            && text.ends_with('\'')
            && !text[1..text.len() - 1].contains('\'')
        {
            let nodes = parse_action(&format!(".{}", &text[1..text.len() - 1]))?;
            cur.extend(nodes);
            return Ok(());
        }
        let Some(groups) = slice_groups(&text) else {
            return Err(format!("invalid array index {text}"));
        };
        let mut params = [Param {
            value: 0,
            known: false,
            derived: false,
        }; 3];
        for i in 0..3 {
            let g = groups[i];
            if !g.is_empty() {
                let g = if i > 0 { &g[1..] } else { g };
                if i > 0 && g.is_empty() {
                    params[i].known = false;
                } else {
                    params[i].known = true;
                    params[i].value = g
                        .parse()
                        .map_err(|_| format!("array index {g} is not a number"))?;
                }
            } else if i == 1 {
                params[i] = Param {
                    value: params[0].value + 1,
                    known: true,
                    derived: true,
                };
            }
        }
        cur.push(Node::Array(params));
        Ok(())
    }

    fn parse_filter(&mut self, cur: &mut Vec<Node>) -> Result<(), String> {
        self.pos += 3;
        self.consume();
        let (mut begin, mut end) = (false, false);
        let mut pair = EOF;
        loop {
            let r = self.next();
            match r {
                EOF | '\n' => return Err("unterminated filter".into()),
                '"' | '\'' => {
                    if !begin {
                        begin = true;
                        pair = r;
                        continue;
                    }
                    if self.input[self.pos - 2] != '\\' && r == pair {
                        end = true;
                    }
                }
                ')' if begin == end => break,
                _ => {}
            }
        }
        if self.next() != ']' {
            return Err("unclosed array expect ]".into());
        }
        let raw = self.consume();
        let n = raw.chars().count();
        let text: String = raw.chars().take(n - 2).collect();
        match split_comparison(&text) {
            None => cur.push(Node::Filter {
                left: parse_action(&text)?,
                right: Vec::new(),
                op: "exists".into(),
            }),
            Some((l, op, r)) => cur.push(Node::Filter {
                left: parse_action(l)?,
                right: parse_action(r)?,
                op: op.to_string(),
            }),
        }
        Ok(())
    }

    fn parse_quote(&mut self, cur: &mut Vec<Node>, end: char) -> Result<(), String> {
        loop {
            let r = self.next();
            if r == EOF || r == '\n' {
                return Err("unterminated quoted string".into());
            }
            if r == end && self.input[self.pos - 2] != '\\' {
                break;
            }
        }
        let value = self.consume();
        let s = unquote(&value).ok_or_else(|| format!("unquote string {value} error"))?;
        cur.push(Node::Text(s));
        Ok(())
    }

    fn parse_field(&mut self, cur: &mut Vec<Node>) {
        self.consume();
        loop {
            let r = self.next();
            if r == '\\' {
                self.next();
            } else if is_terminator(r) {
                self.backup();
                break;
            }
        }
        let value = self.consume();
        if value == "*" {
            cur.push(Node::Wildcard);
        } else {
            cur.push(Node::Field(value.replace('\\', "")));
        }
    }
}

/// `parseAction`: the nodes of `{text}`.
fn parse_action(text: &str) -> Result<Vec<Node>, String> {
    let p = JsonPath::parse(&format!("{{{text}}}"))?;
    match p.root.into_iter().next() {
        Some(Node::List(nodes)) => Ok(nodes),
        _ => Err(format!("invalid action {text}")),
    }
}

/// `^(-?[\d]*)(:-?[\d]*)?(:-?[\d]*)?$`: the three groups (empty when absent).
fn slice_groups(text: &str) -> Option<[&str; 3]> {
    let b = text.as_bytes();
    let mut i = 0;
    let mut groups = [""; 3];
    for (g, group) in groups.iter_mut().enumerate() {
        let start = i;
        if g > 0 {
            if i >= b.len() || b[i] != b':' {
                break;
            }
            i += 1;
        }
        if i < b.len() && b[i] == b'-' {
            i += 1;
        }
        while i < b.len() && b[i].is_ascii_digit() {
            i += 1;
        }
        *group = &text[start..i];
    }
    (i == b.len()).then_some(groups)
}

/// `^([^!<>=]+)([!<>=]+)(.+?)$`.
fn split_comparison(text: &str) -> Option<(&str, &str, &str)> {
    let is_op = |c: char| matches!(c, '!' | '<' | '>' | '=');
    let op_start = text.find(is_op)?;
    if op_start == 0 {
        return None;
    }
    let after = &text[op_start..];
    let mut op_end = op_start + after.find(|c: char| !is_op(c)).unwrap_or(after.len());
    if op_end == text.len() {
        // The lazy third group needs one character: give it the operator's last.
        if op_end - op_start < 2 {
            return None;
        }
        op_end -= 1;
    }
    let rest = &text[op_end..];
    if rest.contains('\n') {
        return None;
    }
    Some((&text[..op_start], &text[op_start..op_end], rest))
}

/// `UnquoteExtend`: a single- or double-quoted string with Go escapes.
fn unquote(s: &str) -> Option<String> {
    let chars: Vec<char> = s.chars().collect();
    if chars.len() < 2 || chars[0] != chars[chars.len() - 1] || !matches!(chars[0], '"' | '\'') {
        return None;
    }
    let quote = chars[0];
    let body = &chars[1..chars.len() - 1];
    let mut out = String::new();
    let mut i = 0;
    while i < body.len() {
        let c = body[i];
        if c == quote {
            return None;
        }
        if c != '\\' {
            out.push(c);
            i += 1;
            continue;
        }
        let e = *body.get(i + 1)?;
        i += 2;
        match e {
            'a' => out.push('\u{7}'),
            'b' => out.push('\u{8}'),
            'f' => out.push('\u{c}'),
            'n' => out.push('\n'),
            'r' => out.push('\r'),
            't' => out.push('\t'),
            'v' => out.push('\u{b}'),
            '\\' => out.push('\\'),
            '\'' | '"' if e == quote => out.push(e),
            'x' | 'u' | 'U' => {
                let n = match e {
                    'x' => 2,
                    'u' => 4,
                    _ => 8,
                };
                let hex: String = body.get(i..i + n)?.iter().collect();
                out.push(char::from_u32(u32::from_str_radix(&hex, 16).ok()?)?);
                i += n;
            }
            _ => return None,
        }
    }
    Some(out)
}

// ---------------------------------------------------------------------------
// Evaluation
// ---------------------------------------------------------------------------

fn walk<'a>(input: Vec<Val<'a>>, node: &Node) -> Result<Vec<Val<'a>>, String> {
    match node {
        Node::List(nodes) => eval_list(input, nodes),
        Node::Text(t) => Ok(vec![Cow::Owned(Value::String(t.clone()))]),
        Node::Field(name) => Ok(eval_field(input, name)),
        Node::Array(params) => eval_array(input, *params),
        Node::Filter { left, right, op } => eval_filter(input, left, right, op),
        Node::Int(i) => Ok(input.iter().map(|_| Cow::Owned(Value::from(*i))).collect()),
        Node::Float(f) => Ok(input.iter().map(|_| Cow::Owned(Value::from(*f))).collect()),
        Node::Bool(b) => Ok(input.iter().map(|_| Cow::Owned(Value::Bool(*b))).collect()),
        Node::Wildcard => Ok(input.iter().flat_map(children).collect()),
        Node::Recursive => Ok(eval_recursive(input)),
        Node::Union(lists) => {
            let mut out = Vec::new();
            for list in lists {
                out.extend(eval_list(input.clone(), list)?);
            }
            Ok(out)
        }
        Node::Identifier(name) => Err(format!("unsupported identifier {name}")),
    }
}

fn eval_list<'a>(input: Vec<Val<'a>>, nodes: &[Node]) -> Result<Vec<Val<'a>>, String> {
    let mut cur = input;
    for node in nodes {
        cur = walk(cur, node)?;
    }
    Ok(cur)
}

fn child<'a>(v: &Val<'a>, f: impl Fn(&Value) -> Option<&Value>) -> Option<Val<'a>> {
    match v {
        Cow::Borrowed(b) => f(b).map(Cow::Borrowed),
        Cow::Owned(o) => f(o).cloned().map(Cow::Owned),
    }
}

/// The elements of an array, the values of an object (in key order), the bytes of a
/// string; nothing for scalars and null.
fn children<'a>(v: &Val<'a>) -> Vec<Val<'a>> {
    match v {
        Cow::Borrowed(Value::Object(m)) => m.values().map(Cow::Borrowed).collect(),
        Cow::Borrowed(Value::Array(a)) => a.iter().map(Cow::Borrowed).collect(),
        Cow::Owned(Value::Object(m)) => m.values().cloned().map(Cow::Owned).collect(),
        Cow::Owned(Value::Array(a)) => a.iter().cloned().map(Cow::Owned).collect(),
        v => match v.as_ref() {
            Value::String(s) => s.bytes().map(|b| Cow::Owned(Value::from(b))).collect(),
            _ => Vec::new(),
        },
    }
}

fn eval_field<'a>(input: Vec<Val<'a>>, name: &str) -> Vec<Val<'a>> {
    input
        .iter()
        .filter_map(|v| child(v, |v| v.as_object()?.get(name)))
        .collect()
}

fn eval_array<'a>(input: Vec<Val<'a>>, node: [Param; 3]) -> Result<Vec<Val<'a>>, String> {
    let mut result = Vec::new();
    for v in &input {
        if v.is_null() {
            continue;
        }
        let Some(arr) = v.as_array() else {
            return Err(format!("{} is not array or slice", go_type_name(v)));
        };
        let len = arr.len() as i64;
        let mut p = node;
        if !p[0].known {
            p[0].value = 0;
        }
        if p[0].value < 0 {
            p[0].value += len;
        }
        if !p[1].known {
            p[1].value = len;
        }
        if p[1].value < 0 || (p[1].value == 0 && p[1].derived) {
            p[1].value += len;
        }
        if p[1].value == p[0].value {
            return Ok(result);
        }
        if p[0].value >= len || p[0].value < 0 {
            return Err(format!(
                "array index out of bounds: index {}, length {len}",
                p[0].value
            ));
        }
        if p[1].value > len || p[1].value < 0 {
            return Err(format!(
                "array index out of bounds: index {}, length {len}",
                p[1].value - 1
            ));
        }
        if p[0].value > p[1].value {
            return Err(format!(
                "starting index {} is greater than ending index {}",
                p[0].value, p[1].value
            ));
        }
        let step = if p[2].known {
            if p[2].value <= 0 {
                return Err("step must be > 0".into());
            }
            p[2].value as usize
        } else {
            1
        };
        let (from, to) = (p[0].value as usize, p[1].value as usize);
        for i in (from..to).step_by(step) {
            result.push(child(v, |v| v.as_array()?.get(i)).expect("index in bounds"));
        }
    }
    Ok(result)
}

fn eval_recursive(input: Vec<Val<'_>>) -> Vec<Val<'_>> {
    let mut result = Vec::new();
    for v in input {
        if v.is_null() {
            continue;
        }
        let kids = children(&v);
        if !kids.is_empty() {
            result.push(v);
            result.extend(eval_recursive(kids));
        }
    }
    result
}

fn eval_filter<'a>(
    input: Vec<Val<'a>>,
    left: &[Node],
    right: &[Node],
    op: &str,
) -> Result<Vec<Val<'a>>, String> {
    let mut results = Vec::new();
    for v in &input {
        let Some(arr) = v.as_array() else {
            return Err(format!(
                "{} is not array or slice and cannot be filtered",
                v.as_ref()
            ));
        };
        for i in 0..arr.len() {
            let elem = child(v, |v| v.as_array()?.get(i)).expect("index in bounds");
            let lefts = eval_list(vec![elem.clone()], left);
            if op == "exists" {
                if lefts.is_ok_and(|l| !l.is_empty()) {
                    results.push(elem);
                }
                continue;
            }
            let lefts = lefts?;
            match lefts.len() {
                0 => continue,
                1 => {}
                _ => return Err("can only compare one element at a time".into()),
            }
            let rights = eval_list(vec![elem.clone()], right)?;
            match rights.len() {
                0 => continue,
                1 => {}
                _ => return Err("can only compare one element at a time".into()),
            }
            if compare(&lefts[0], &rights[0], op)? {
                results.push(elem);
            }
        }
    }
    Ok(results)
}

/// A comparable Go basic kind.
#[derive(PartialEq, PartialOrd)]
enum Basic<'a> {
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(&'a str),
}

fn basic(v: &Value) -> Result<Basic<'_>, String> {
    match v {
        Value::Bool(b) => Ok(Basic::Bool(*b)),
        Value::Number(n) => match n.as_i64() {
            Some(i) => Ok(Basic::Int(i)),
            None => Ok(Basic::Float(n.as_f64().unwrap_or(f64::NAN))),
        },
        Value::String(s) => Ok(Basic::Str(s)),
        _ => Err("invalid type for comparison".into()),
    }
}

/// The forked `text/template` comparisons: same kinds only; `<` on bools fails.
fn compare(l: &Value, r: &Value, op: &str) -> Result<bool, String> {
    let (a, b) = (basic(l)?, basic(r)?);
    if std::mem::discriminant(&a) != std::mem::discriminant(&b) {
        return Err("incompatible types for comparison".into());
    }
    let less = || -> Result<bool, String> {
        if matches!(a, Basic::Bool(_)) {
            return Err("invalid type for comparison".into());
        }
        Ok(a < b)
    };
    match op {
        "==" => Ok(a == b),
        "!=" => Ok(a != b),
        "<" => less(),
        "<=" => Ok(less()? || a == b),
        ">" => Ok(!(less()? || a == b)),
        ">=" => Ok(!less()?),
        _ => Err(format!("unrecognized filter operator {op}")),
    }
}

fn go_type_name(v: &Value) -> &'static str {
    match v {
        Value::Bool(_) => "bool",
        Value::Number(n) if n.is_f64() => "float64",
        Value::Number(_) => "int64",
        Value::String(_) => "string",
        Value::Object(_) => "map[string]interface {}",
        Value::Array(_) => "[]interface {}",
        Value::Null => "<nil>",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn first(path: &str, data: &Value) -> Option<Value> {
        let p = JsonPath::parse(path).ok()?;
        let r = p.find_results(data).ok()?;
        r.first()?.first().map(|v| v.clone().into_owned())
    }

    fn all(path: &str, data: &Value) -> Vec<Value> {
        let p = JsonPath::parse(path).unwrap();
        p.find_results(data)
            .unwrap()
            .into_iter()
            .flatten()
            .map(Cow::into_owned)
            .collect()
    }

    #[test]
    fn parses_and_evaluates_upstream_forms() {
        let d = json!({
            "a": {"b": [1, 2, 3], "c": "x"},
            "items": [
                {"type": "Ready", "status": "True", "n": 1},
                {"type": "Other", "status": "False", "n": 3}
            ],
            "k.d": "dotted"
        });
        assert_eq!(first("{.a.c}", &d), Some(json!("x")));
        assert_eq!(first("{$.a.b[1]}", &d), Some(json!(2)));
        assert_eq!(first("{.a.b[-1]}", &d), Some(json!(3)));
        assert_eq!(all("{.a.b[0:2]}", &d), vec![json!(1), json!(2)]);
        assert_eq!(all("{.a.b[::2]}", &d), vec![json!(1), json!(3)]);
        assert_eq!(all("{.a.b[*]}", &d), vec![json!(1), json!(2), json!(3)]);
        assert_eq!(all("{.a.b[0,2]}", &d), vec![json!(1), json!(3)]);
        assert_eq!(
            all(r#"{.items[?(@.type=="Ready")].status}"#, &d),
            vec![json!("True")]
        );
        assert_eq!(
            all(r#"{.items[?(@.type!='Ready')].status}"#, &d),
            vec![json!("False")]
        );
        assert_eq!(all("{.items[?(@.n>1)].type}", &d), vec![json!("Other")]);
        assert_eq!(all("{.items[?(@.n)].type}", &d).len(), 2);
        assert_eq!(
            all("{.items[*].type}", &d),
            vec![json!("Ready"), json!("Other")]
        );
        assert_eq!(all("{..c}", &d), vec![json!("x")]);
        assert_eq!(first(r"{.k\.d}", &d), Some(json!("dotted")));
        assert_eq!(first("{.a['c']}", &d), Some(json!("x")));
        assert_eq!(first("{.missing.deeper}", &d), None);
        assert_eq!(
            all("x{.a.c}y", &d),
            vec![json!("x"), json!("x"), json!("y")]
        );
        // Errors fail the whole evaluation.
        assert!(
            JsonPath::parse("{.a.b[5]}")
                .unwrap()
                .find_results(&d)
                .is_err()
        );
        assert!(
            JsonPath::parse("{.a[0]}")
                .unwrap()
                .find_results(&d)
                .is_err()
        );
        // Comparing an int with a float is an error upstream.
        assert!(
            JsonPath::parse("{.items[?(@.n==1.0)]}")
                .unwrap()
                .find_results(&d)
                .is_err()
        );
        // Parse errors.
        for bad in ["{.a", "{.a[}", "{.a[x]}", "{{.a}}", "{.a[?(@.x]}"] {
            assert!(JsonPath::parse(bad).is_err(), "{bad}");
        }
    }
}
