//! The parser limits cel-go applies before an expression is compiled: its size in code
//! points, and how deep its syntax tree can grow; and one of this parser's own, on
//! nested runs of unary operators ([`MAX_UNARY_RUN_NESTING`]), which it takes
//! exponential time over.
//!
//! The depth limit is what keeps a hostile expression from taking the apiserver down:
//! the `cel` crate's parser, our checks and the interpreter all recurse over the tree,
//! and a chain of operators (`1 + 1 + ... + 1`, `a.b.c...`, `x[0][0]...`) builds one
//! level per operator. The crate only bounds the nesting of brackets, so a few thousand
//! `+` overflowed a thread's stack, which aborts the process (a stack overflow is not a
//! panic that can be caught). cel-go refuses such a chain while parsing ("max recursion
//! depth exceeded" past 250 levels); the same bound is estimated here from the tokens,
//! before the crate's parser sees the source.

use crate::CompileError;

/// cel-go's `expressionSizeCodePointLimit` default.
pub(crate) const MAX_EXPRESSION_CODE_POINTS: usize = 100_000;

/// cel-go's `maxRecursionDepth` default.
pub(crate) const MAX_RECURSION_DEPTH: usize = 250;

/// The deepest nesting of brackets the `cel` crate's parser takes (cel-go's own limit
/// is [`MAX_RECURSION_DEPTH`]; the crate refuses deeper ones with a message of its
/// internals).
pub(crate) const MAX_NESTING: usize = 96;

/// The most bracket levels that may each hold a run of unary operators (`--x`, `!!x`,
/// `- -x`). The `cel` crate's parser (ANTLR's adaptive prediction on the grammar's
/// `'-'+` and `'!'+` loops) takes twice as long for each such level: 20 levels, a
/// 300-character expression, took 1.2 s of a core, 24 levels 20 s, 40 levels would take
/// days. cel-go parses them at once; no expression a person writes nests such runs
/// this deep, and 8 levels cost the parser under a millisecond.
pub(crate) const MAX_UNARY_RUN_NESTING: usize = 8;

/// Refuses, in cel-go's words, an expression longer than cel-go parses or whose tree
/// would be deeper than its recursion limit.
pub(crate) fn check(source: &str) -> Result<(), CompileError> {
    let size = source.chars().count();
    if size > MAX_EXPRESSION_CODE_POINTS {
        return Err(CompileError(format!(
            "compilation failed: ERROR: <input>:-1:0: expression code point size exceeds limit: size: {size}, limit {MAX_EXPRESSION_CODE_POINTS}"
        )));
    }
    let bound = depth_bound(source);
    if bound.nesting > MAX_NESTING {
        return Err(CompileError(format!(
            "compilation failed: ERROR: <input>:-1:0: expression recursion limit exceeded: {MAX_NESTING}"
        )));
    }
    if bound.depth > MAX_RECURSION_DEPTH {
        return Err(CompileError(
            "compilation failed: ERROR: <input>:-1:0: max recursion depth exceeded".into(),
        ));
    }
    if bound.unary_run_nesting > MAX_UNARY_RUN_NESTING {
        return Err(CompileError(format!(
            "compilation failed: ERROR: <input>:-1:0: runs of unary operators (such as '--' or '!!') nested in more than {MAX_UNARY_RUN_NESTING} levels of brackets"
        )));
    }
    Ok(())
}

/// How deep an expression's brackets nest, an upper bound of its tree's depth, and how
/// many nested bracket levels hold a run of unary operators ([`MAX_UNARY_RUN_NESTING`]).
#[derive(Debug, PartialEq, Eq)]
struct Bound {
    nesting: usize,
    depth: usize,
    unary_run_nesting: usize,
}

/// An upper bound of the syntax tree's depth, from the tokens: each bracket opens a
/// level, and each operator of a chain (arithmetic, comparison, `in`, `!`, `.`, an
/// index, `?`) deepens its level by one, since such chains nest to one side. `&&`,
/// `||` and `,` start a new chain at their level: cel-go balances logical chains,
/// and list items and call arguments are siblings. Strings and comments are skipped.
fn depth_bound(source: &str) -> Bound {
    let bytes = source.as_bytes();
    // The operators counted on each open level, outermost first.
    let mut levels: Vec<usize> = vec![0];
    let mut depth = 0;
    let mut deepest = 0;
    let mut nesting = 0;
    // Whether each open level holds a run of unary operators, and how many do.
    let mut has_run: Vec<bool> = vec![false];
    let mut run_levels = 0;
    let mut deepest_runs = 0;
    // The unary operators in a row so far, and the last byte that was not blank.
    let mut run = 0;
    let mut last = None;
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        let comment = b == b'/' && bytes.get(i + 1) == Some(&b'/');
        // A byte no token starts with (a control character, a lone non-ASCII byte) is a
        // lexer error the parser reads past, as it reads past blanks: `-\0-` is a run.
        if !b.is_ascii_whitespace() && !comment && starts_token(b) {
            let unary_operator = matches!(b, b'-' | b'!') && bytes.get(i + 1) != Some(&b'=');
            run = match (unary_operator, run) {
                (false, _) => 0,
                (true, 0) if last.is_some_and(ends_operand) => 0,
                (true, n) => n + 1,
            };
            if run == 2 && has_run.last() == Some(&false) {
                if let Some(flag) = has_run.last_mut() {
                    *flag = true;
                }
                run_levels += 1;
                deepest_runs = deepest_runs.max(run_levels);
            }
            last = Some(b);
        }
        match b {
            b'"' | b'\'' => {
                // A quote that starts no valid string is a lexer error the parser
                // reads past: what follows it is code, and counted as such.
                match string_end(bytes, i, raw_prefix(bytes, i)) {
                    Some(end) => i = end,
                    None => i += 1,
                }
                continue;
            }
            b'/' if bytes.get(i + 1) == Some(&b'/') => {
                while i < bytes.len() && bytes[i] != b'\n' {
                    i += 1;
                }
                continue;
            }
            b'(' | b'[' | b'{' => {
                if b == b'[' && follows_operand(bytes, i) {
                    deepen(&mut levels, &mut depth);
                }
                levels.push(0);
                has_run.push(false);
                depth += 1;
                nesting = nesting.max(levels.len() - 1);
            }
            b')' | b']' | b'}' if levels.len() > 1 => {
                let chain = levels.pop().unwrap_or(0);
                depth -= chain + 1;
                if has_run.pop() == Some(true) {
                    run_levels -= 1;
                }
            }
            b',' => reset(&mut levels, &mut depth),
            b'&' | b'|' if bytes.get(i + 1) == Some(&b) => {
                reset(&mut levels, &mut depth);
                i += 1;
            }
            // Not the point of a decimal number.
            b'.' if !(i > 0
                && bytes[i - 1].is_ascii_digit()
                && bytes.get(i + 1).is_some_and(u8::is_ascii_digit)) =>
            {
                deepen(&mut levels, &mut depth);
            }
            b'+' | b'-' | b'*' | b'/' | b'%' | b'!' | b'<' | b'>' | b'=' | b'?' => {
                deepen(&mut levels, &mut depth);
                // A two-character operator (`==`, `!=`, `<=`, `>=`) is one.
                if bytes.get(i + 1) == Some(&b'=') {
                    i += 1;
                }
            }
            b'i' if bytes.get(i + 1) == Some(&b'n')
                && !continues_identifier(bytes, i)
                && !bytes
                    .get(i + 2)
                    .is_some_and(|&c| c == b'_' || c.is_ascii_alphanumeric()) =>
            {
                deepen(&mut levels, &mut depth);
                i += 1;
            }
            _ => {}
        }
        deepest = deepest.max(depth);
        i += 1;
    }
    Bound {
        nesting,
        depth: deepest,
        unary_run_nesting: deepest_runs,
    }
}

/// Whether `b` can begin a token of CEL's grammar (an identifier, a number, a string,
/// an escaped identifier or an operator); the lexer skips any other byte.
fn starts_token(b: u8) -> bool {
    b == b'_' || b.is_ascii_alphanumeric() || b"\"'`+-*/%!<>=?:.,()[]{}&|".contains(&b)
}

/// Whether a token ending with `b` is an operand, after which `-` is a subtraction.
fn ends_operand(b: u8) -> bool {
    b == b'_' || b.is_ascii_alphanumeric() || b")]}\"'".contains(&b)
}

/// One more operator in the innermost level's chain.
fn deepen(levels: &mut [usize], depth: &mut usize) {
    if let Some(chain) = levels.last_mut() {
        *chain += 1;
    }
    *depth += 1;
}

/// Ends the chain of the innermost level.
fn reset(levels: &mut [usize], depth: &mut usize) {
    if let Some(chain) = levels.last_mut() {
        *depth -= *chain;
        *chain = 0;
    }
}

/// Whether what comes before `i` ends an operand, which makes a `[` at `i` an index
/// rather than a list.
fn follows_operand(bytes: &[u8], i: usize) -> bool {
    bytes[..i]
        .iter()
        .rev()
        .find(|c| !c.is_ascii_whitespace())
        .is_some_and(|&c| ends_operand(c))
}

/// Whether the byte at `i` is inside an identifier (or a number) begun before it.
fn continues_identifier(bytes: &[u8], i: usize) -> bool {
    i > 0 && (bytes[i - 1] == b'_' || bytes[i - 1].is_ascii_alphanumeric())
}

/// Whether the quote at `quote` opens a raw string: an `r` or `R` right before it that
/// begins a token (`r'..'`, `br'..'`; in `xr'..'` and `rb'..'` the letters are an
/// identifier and the string is not raw), as the grammar's `RAW` and `BYTES` rules read.
fn raw_prefix(bytes: &[u8], quote: usize) -> bool {
    if quote == 0 || !matches!(bytes[quote - 1], b'r' | b'R') {
        return false;
    }
    let mut start = quote - 1;
    if start > 0 && matches!(bytes[start - 1], b'b' | b'B') {
        start -= 1;
    }
    !continues_identifier(bytes, start)
}

/// The index after the string literal whose opening quote is at `start`, exactly as the
/// grammar's `STRING` rule matches one: single-quoted strings end at the line, escapes
/// outside raw strings are only the grammar's (`\n`, `\x41`, `\u0041`, `\101`, ...). `None`
/// when no string starts there; an unfinished triple quote is the empty string `''`
/// and a third quote, as the lexer's longest match takes it.
fn string_end(bytes: &[u8], start: usize, raw: bool) -> Option<usize> {
    let quote = bytes[start];
    let triple = bytes.get(start + 1) == Some(&quote) && bytes.get(start + 2) == Some(&quote);
    if triple {
        if let Some(end) = string_body_end(bytes, start + 3, quote, true, raw) {
            return Some(end);
        }
        return Some(start + 2);
    }
    string_body_end(bytes, start + 1, quote, false, raw)
}

fn string_body_end(
    bytes: &[u8],
    mut i: usize,
    quote: u8,
    triple: bool,
    raw: bool,
) -> Option<usize> {
    while i < bytes.len() {
        match bytes[i] {
            b'\\' if !raw => i += escape_len(&bytes[i..])?,
            b'\n' | b'\r' if !triple => return None,
            c if c == quote => {
                if !triple {
                    return Some(i + 1);
                }
                if bytes.get(i + 1) == Some(&quote) && bytes.get(i + 2) == Some(&quote) {
                    return Some(i + 3);
                }
                i += 1;
            }
            _ => i += 1,
        }
    }
    None
}

/// The length of the escape sequence `rest` starts with (at its backslash), `None` when
/// the grammar has no such escape.
fn escape_len(rest: &[u8]) -> Option<usize> {
    let digits = |n: usize, ok: fn(&u8) -> bool| {
        (rest.len() > 1 + n && rest[2..2 + n].iter().all(ok)).then_some(2 + n)
    };
    match rest.get(1)? {
        b'a' | b'b' | b'f' | b'n' | b'r' | b't' | b'v' | b'"' | b'\'' | b'\\' | b'?' | b'`' => {
            Some(2)
        }
        b'x' | b'X' => digits(2, u8::is_ascii_hexdigit),
        b'u' => digits(4, u8::is_ascii_hexdigit),
        b'U' => digits(8, u8::is_ascii_hexdigit),
        b'0'..=b'3' => digits(2, |c| (b'0'..=b'7').contains(c)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn depth_follows_chains_and_brackets() {
        assert_eq!(depth_bound("true").depth, 0);
        assert_eq!(depth_bound("1 + 2 + 3").depth, 2);
        assert_eq!(depth_bound("a.b.c").depth, 2);
        assert_eq!(
            depth_bound("x[0][1]").depth,
            3,
            "two indexes, and the bracket's level"
        );
        assert_eq!(depth_bound("[[1]]").depth, 2, "lists are not indexes");
        assert_eq!(depth_bound("(1 + (2 + 3))").depth, 4);
        assert_eq!(depth_bound("a == 1 && b == 2 && c == 3").depth, 1);
        assert_eq!(depth_bound("[1 + 1, 2 + 2, 3 + 3]").depth, 2);
        assert_eq!(
            depth_bound("1.5 + 2.25").depth,
            1,
            "decimal points are not selects"
        );
        assert_eq!(depth_bound("'a.b.c' + \"(((\" + '''x\\'''y'''").depth, 2);
        assert_eq!(
            depth_bound("r'\\' + 1").depth,
            1,
            "a raw string ends at its quote"
        );
        assert_eq!(
            depth_bound("xr'\\' + 1 + '").depth,
            0,
            "xr is a name, so the string is not raw"
        );
        assert_eq!(depth_bound("'\\x41\\u0041\\101\\n' + 1").depth, 1);
        // What the lexer does not take for a string is code.
        assert_eq!(depth_bound("'\\q + 1 + 1'").depth, 2, "no such escape");
        assert_eq!(
            depth_bound("'a\n + 1 + 1'").depth,
            2,
            "a line ends a quoted string"
        );
        assert_eq!(depth_bound("' + 1 + 1").depth, 2, "unterminated");
        assert_eq!(
            depth_bound("''' + 1").depth,
            1,
            "an empty string, then a quote"
        );
        assert_eq!(depth_bound("x in y").depth, 1);
        assert_eq!(
            depth_bound("index + input").depth,
            1,
            "identifiers starting with 'in'"
        );
        assert_eq!(depth_bound("a // . . . .\n + b").depth, 1);
        assert_eq!(depth_bound("a ? b : c ? d : e").depth, 2);
        assert_eq!(depth_bound("a <= b").depth, 1);
    }

    #[test]
    fn long_chains_are_refused_in_cel_gos_words() {
        let chain = vec!["1"; 300].join(" + ");
        assert_eq!(
            check(&chain).unwrap_err().0,
            "compilation failed: ERROR: <input>:-1:0: max recursion depth exceeded"
        );
        assert!(check(&vec!["1"; 200].join(" + ")).is_ok());
        let ands = vec!["a + b == c"; 2000].join(" && ");
        assert!(check(&ands).is_ok(), "logical chains are balanced");
        let nested = format!("{}1{}", "(".repeat(97), ")".repeat(97));
        assert_eq!(
            check(&nested).unwrap_err().0,
            "compilation failed: ERROR: <input>:-1:0: expression recursion limit exceeded: 96"
        );
        let nested = format!("{}1{}", "[".repeat(96), "]".repeat(96));
        assert!(check(&nested).is_ok());
        let nested = |open: &str, close: &str, levels: usize| {
            format!("{}1{}", open.repeat(levels), close.repeat(levels))
        };
        let refused = "compilation failed: ERROR: <input>:-1:0: runs of unary operators (such as '--' or '!!') nested in more than 8 levels of brackets";
        for (open, close) in [
            ("(--", ")"),
            ("[!!", "]"),
            ("f(1, - -", ")"),
            ("(a ? --", " : 1)"),
        ] {
            assert!(check(&nested(open, close, 8)).is_ok(), "{open}");
            assert_eq!(
                check(&nested(open, close, 9)).unwrap_err().0,
                refused,
                "{open}"
            );
        }
        // Bytes the lexer skips do not break a run (fuzzing found `-\0-` nested 9
        // deep, which the parser took seconds over), nor do non-ASCII ones.
        for gap in ["\0", "\u{14}", "\u{b}", "é"] {
            let open = format!("(-{gap}-");
            assert_eq!(
                check(&nested(&open, ")", 9)).unwrap_err().0,
                refused,
                "{gap:?}"
            );
        }
        // A subtraction is no run, nor are runs side by side or one unary operator.
        assert!(check(&nested("(a - -", ")", 40)).is_ok());
        assert!(check(&nested("(a--", ")", 40)).is_ok());
        assert!(check(&nested("(-", ")", 40)).is_ok());
        assert!(check(&nested("(a != -", ")", 40)).is_ok());
        assert!(check(&nested("('--' + ", ")", 40)).is_ok(), "in strings");
        assert!(check(&vec!["(--1 > 0)"; 500].join(" && ")).is_ok());
        let big = "a".repeat(MAX_EXPRESSION_CODE_POINTS + 1);
        assert_eq!(
            check(&big).unwrap_err().0,
            "compilation failed: ERROR: <input>:-1:0: expression code point size exceeds limit: size: 100001, limit 100000"
        );
    }
}
