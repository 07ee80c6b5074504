//! A reader with the semantics of Go's `encoding/csv` `Reader` at its defaults
//! (comma `,`, no comment character, `LazyQuotes = false`, `TrimLeadingSpace = false`)
//! and `FieldsPerRecord = -1`, which is how upstream reads `--token-auth-file`:
//!
//! * records end at `\n`; `\r\n` counts as `\n`; empty lines are skipped;
//! * a field starting with `"` is quoted: `""` inside is one `"`, it may span lines,
//!   and its closing quote must be followed by `,` or the end of the line;
//! * a `"` inside an unquoted field is an error (`bare " in non-quoted-field`);
//! * `#` has no special meaning (no comments), leading spaces are kept.

/// A parse error, with Go's wording and the 1-based line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CsvError {
    pub line: usize,
    pub message: &'static str,
}

impl std::fmt::Display for CsvError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "parse error on line {}: {}", self.line, self.message)
    }
}

const BARE_QUOTE: &str = "bare \" in non-quoted-field";
const QUOTE: &str = "extraneous or missing \" in quoted-field";

/// A record and the line it started on.
pub type Record = (usize, Vec<String>);

/// Parses the whole input into records.
pub fn parse(input: &str) -> Result<Vec<Record>, CsvError> {
    // Go normalizes "\r\n" to "\n" at every line end and drops a lone '\r' at EOF.
    let mut text = input.replace("\r\n", "\n");
    if text.ends_with('\r') {
        text.pop();
    }
    let s = text.as_str();
    let b = s.as_bytes();
    let len = b.len();

    let mut records = Vec::new();
    let mut pos = 0;
    let mut line = 1;
    while pos < len {
        if b[pos] == b'\n' {
            pos += 1;
            line += 1;
            continue;
        }
        let record_line = line;
        let mut fields = Vec::new();
        'fields: loop {
            if pos < len && b[pos] == b'"' {
                pos += 1;
                let mut value = String::new();
                let mut chunk_start = pos;
                loop {
                    if pos >= len {
                        return Err(CsvError {
                            line,
                            message: QUOTE,
                        });
                    }
                    match b[pos] {
                        b'"' => {
                            value.push_str(&s[chunk_start..pos]);
                            match b.get(pos + 1) {
                                Some(b'"') => {
                                    value.push('"');
                                    pos += 2;
                                    chunk_start = pos;
                                }
                                Some(b',') => {
                                    pos += 2;
                                    fields.push(value);
                                    continue 'fields;
                                }
                                Some(b'\n') | None => {
                                    pos += 1;
                                    fields.push(value);
                                    break 'fields;
                                }
                                Some(_) => {
                                    return Err(CsvError {
                                        line,
                                        message: QUOTE,
                                    });
                                }
                            }
                        }
                        b'\n' => {
                            line += 1;
                            pos += 1;
                        }
                        _ => pos += 1,
                    }
                }
            }
            let start = pos;
            while pos < len && b[pos] != b',' && b[pos] != b'\n' {
                pos += 1;
            }
            let field = &s[start..pos];
            if field.contains('"') {
                return Err(CsvError {
                    line,
                    message: BARE_QUOTE,
                });
            }
            fields.push(field.to_string());
            if pos < len && b[pos] == b',' {
                pos += 1;
                continue;
            }
            break;
        }
        if pos < len && b[pos] == b'\n' {
            pos += 1;
            line += 1;
        }
        records.push((record_line, fields));
    }
    Ok(records)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows(input: &str) -> Vec<Vec<String>> {
        parse(input).unwrap().into_iter().map(|(_, r)| r).collect()
    }

    #[test]
    fn go_encoding_csv_cases() {
        assert_eq!(rows("a,b,c\n"), vec![vec!["a", "b", "c"]]);
        assert_eq!(rows("a,b,c"), vec![vec!["a", "b", "c"]]);
        assert_eq!(rows("a,b\r\nc,d\r\n"), vec![vec!["a", "b"], vec!["c", "d"]]);
        assert_eq!(rows("\n\na\n\n\nb\n"), vec![vec!["a"], vec!["b"]]);
        assert_eq!(rows("a,\n"), vec![vec!["a", ""]]);
        assert_eq!(rows(",,\n"), vec![vec!["", "", ""]]);
        assert_eq!(rows(" a , b "), vec![vec![" a ", " b "]]);
        assert_eq!(rows("#x,y"), vec![vec!["#x", "y"]]);
        assert_eq!(rows("\"a,b\",c"), vec![vec!["a,b", "c"]]);
        assert_eq!(rows("\"a\"\"b\",c"), vec![vec!["a\"b", "c"]]);
        assert_eq!(rows("\"\""), vec![vec![""]]);
        assert_eq!(rows("\"a\","), vec![vec!["a", ""]]);
        assert_eq!(
            rows("\"multi\nline\",x\ny"),
            vec![vec!["multi\nline", "x"], vec!["y"]]
        );
        assert_eq!(rows("\"multi\r\nline\""), vec![vec!["multi\nline"]]);
        assert_eq!(rows("a\r"), vec![vec!["a"]]);
        assert_eq!(rows("a\rb"), vec![vec!["a\rb"]]);
        assert_eq!(rows("é,ü\n"), vec![vec!["é", "ü"]]);
        assert!(rows("").is_empty());
    }

    #[test]
    fn go_encoding_csv_errors_and_lines() {
        assert_eq!(parse("a\"b,c").unwrap_err().message, BARE_QUOTE);
        assert_eq!(parse("ok\na,b\"").unwrap_err().line, 2);
        assert_eq!(parse("\"a\"b").unwrap_err().message, QUOTE);
        assert_eq!(parse("\"abc").unwrap_err().message, QUOTE);
        assert_eq!(parse("x\n\"a\nb").unwrap_err().line, 3);
        assert_eq!(parse(" \"a\"").unwrap_err().message, BARE_QUOTE);
        let recs = parse("\n\na\n\"b\nc\",d\ne").unwrap();
        let lines: Vec<usize> = recs.iter().map(|(l, _)| *l).collect();
        assert_eq!(lines, vec![3, 4, 6]);
    }
}
