//! A YAML body's flow nesting, measured before libyaml reads it.
//!
//! libyaml's scanner (unsafe-libyaml, under serde_yaml_ng) walks the simple-key slot of
//! every open flow collection (`[`, `{`) for each token it reads, so a body that opens n
//! of them costs n² steps; and serde_yaml_ng reads the whole document before its
//! recursion limit refuses the 129th level. 80,000 `[` took 12 s of a core (release
//! build), a 3 MiB body would take hours, and the thread it runs on serves other
//! requests. Upstream's YAML reader bounds the same nesting (go-yaml's "exceeded max
//! depth").
//!
//! [`check`] follows libyaml's tokenizer just far enough to know which `[` and `{` open
//! a flow collection (not those inside a quoted, block or plain scalar, a comment or a
//! tag) and stops at the first nested deeper than serde_yaml_ng would read, with the
//! error serde_yaml_ng gives there. A body it passes costs libyaml at most 129 steps a
//! token. It follows libyaml's rules (indentation, simple keys, line breaks, escapes)
//! rather than approximating them: a scanner that took a `[` for text where libyaml
//! takes it for a flow start would let the quadratic case through. The tests compare
//! it with libyaml's own tokens.

use std::fmt;

/// serde_yaml_ng's recursion limit: collections nested this deep are read.
const MAX_FLOW_DEPTH: usize = 128;

/// Where a flow collection opened past [`MAX_FLOW_DEPTH`] starts; displayed as
/// serde_yaml_ng shows its recursion error there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TooDeep {
    line: usize,
    column: usize,
}

impl fmt::Display for TooDeep {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "recursion limit exceeded at line {} column {}",
            self.line + 1,
            self.column + 1
        )
    }
}

/// A YAML body refused: nested too deeply to be read, or not read.
#[derive(Debug)]
pub(crate) enum YamlError {
    TooDeep(TooDeep),
    Decode(serde_yaml_ng::Error),
}

impl fmt::Display for YamlError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            YamlError::TooDeep(e) => e.fmt(f),
            YamlError::Decode(e) => e.fmt(f),
        }
    }
}

impl From<serde_yaml_ng::Error> for YamlError {
    fn from(e: serde_yaml_ng::Error) -> Self {
        YamlError::Decode(e)
    }
}

impl From<TooDeep> for YamlError {
    fn from(e: TooDeep) -> Self {
        YamlError::TooDeep(e)
    }
}

/// `serde_yaml_ng::from_slice` for a body from a client: refused unread when its flow
/// collections nest deeper than serde_yaml_ng reads.
pub(crate) fn from_slice<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, YamlError> {
    check(body)?;
    Ok(serde_yaml_ng::from_slice(body)?)
}

/// Refuses a body whose flow collections nest deeper than [`MAX_FLOW_DEPTH`], at the
/// first that does, as libyaml would tokenize it. Linear in the body.
pub(crate) fn check(body: &[u8]) -> Result<(), TooDeep> {
    scan(body, &mut |depth, mark: Mark| {
        if depth > MAX_FLOW_DEPTH {
            Err(TooDeep {
                line: mark.line,
                column: mark.column,
            })
        } else {
            Ok(())
        }
    })
}

/// Tokenizes `body` as libyaml reads it, calling `on_flow_start` with the depth and
/// position of every flow collection opened; its error ends the scan.
fn scan<E>(
    body: &[u8],
    on_flow_start: &mut impl FnMut(usize, Mark) -> Result<(), E>,
) -> Result<(), E> {
    // libyaml's reader takes a leading byte-order mark for the encoding (UTF-16 when it
    // says so) and leaves it out of the text it scans.
    let utf16 = match body {
        [0xFF, 0xFE, rest @ ..] => utf16_units(rest, u16::from_le_bytes),
        [0xFE, 0xFF, rest @ ..] => utf16_units(rest, u16::from_be_bytes),
        _ => {
            let text = body.strip_prefix(&[0xEF, 0xBB, 0xBF]).unwrap_or(body);
            return Scanner::new(text).run(on_flow_start);
        }
    };
    let text: String = char::decode_utf16(utf16)
        .map(|c| c.unwrap_or(char::REPLACEMENT_CHARACTER))
        .collect();
    Scanner::new(text.as_bytes()).run(on_flow_start)
}

fn utf16_units(bytes: &[u8], unit: fn([u8; 2]) -> u16) -> Vec<u16> {
    bytes
        .chunks_exact(2)
        .map(|pair| unit([pair[0], pair[1]]))
        .collect()
}

/// A position as unsafe-libyaml counts it: `index` in bytes, `column` in characters,
/// both from 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Mark {
    index: usize,
    line: usize,
    column: usize,
}

/// The part of libyaml's scanner state that decides where tokens start: the flow
/// level, the block indentation stack, whether a simple key may start here, and the
/// block level's pending simple key (a key opens a block mapping at its column when
/// its `:` comes). Simple keys inside flow collections never move the indentation, so
/// only the block level's is kept.
struct Scanner<'a> {
    text: &'a [u8],
    pos: usize,
    line: usize,
    column: usize,
    flow_level: usize,
    indent: isize,
    indents: Vec<isize>,
    simple_key_allowed: bool,
    block_key: Option<Mark>,
}

impl<'a> Scanner<'a> {
    fn new(text: &'a [u8]) -> Self {
        Scanner {
            text,
            pos: 0,
            line: 0,
            column: 0,
            flow_level: 0,
            indent: -1,
            indents: Vec::new(),
            simple_key_allowed: true,
            block_key: None,
        }
    }

    fn mark(&self) -> Mark {
        Mark {
            index: self.pos,
            line: self.line,
            column: self.column,
        }
    }

    fn at(&self, offset: usize) -> Option<u8> {
        self.text.get(self.pos + offset).copied()
    }

    fn is(&self, offset: usize, byte: u8) -> bool {
        self.at(offset) == Some(byte)
    }

    fn is_end(&self, offset: usize) -> bool {
        self.pos + offset >= self.text.len()
    }

    /// A line break at `offset` bytes ahead: CR, LF, NEL, LS or PS (libyaml's
    /// `IS_BREAK`).
    fn is_break(&self, offset: usize) -> bool {
        match self.at(offset) {
            Some(b'\r' | b'\n') => true,
            Some(0xC2) => self.is(offset + 1, 0x85),
            Some(0xE2) => {
                self.is(offset + 1, 0x80) && matches!(self.at(offset + 2), Some(0xA8 | 0xA9))
            }
            _ => false,
        }
    }

    fn is_blank(&self, offset: usize) -> bool {
        matches!(self.at(offset), Some(b' ' | b'\t'))
    }

    fn is_blankz(&self, offset: usize) -> bool {
        self.is_end(offset) || self.is_blank(offset) || self.is_break(offset)
    }

    /// Steps over one character (libyaml's `SKIP`).
    fn skip(&mut self) {
        let width = match self.at(0) {
            None => return,
            Some(b) if b < 0x80 => 1,
            Some(b) if b >= 0xF0 => 4,
            Some(b) if b >= 0xE0 => 3,
            Some(b) if b >= 0xC0 => 2,
            // Not a character's first byte: libyaml's reader refuses the body there.
            Some(_) => 1,
        };
        self.pos = (self.pos + width).min(self.text.len());
        self.column += 1;
    }

    /// Steps over a line break, CR LF as one (libyaml's `SKIP_LINE`).
    fn skip_line(&mut self) {
        if self.is(0, b'\r') && self.is(1, b'\n') {
            self.pos += 2;
        } else if self.is_break(0) {
            self.skip();
        } else {
            return;
        }
        self.column = 0;
        self.line += 1;
    }

    fn skip_to_break(&mut self) {
        while !self.is_end(0) && !self.is_break(0) {
            self.skip();
        }
    }

    fn is_document_indicator(&self) -> bool {
        self.column == 0
            && (self.text[self.pos..].starts_with(b"---")
                || self.text[self.pos..].starts_with(b"..."))
            && self.is_blankz(3)
    }

    fn run<E>(
        &mut self,
        on_flow_start: &mut impl FnMut(usize, Mark) -> Result<(), E>,
    ) -> Result<(), E> {
        loop {
            self.scan_to_next_token();
            if self.is_end(0) {
                return Ok(());
            }
            self.unroll_indent(self.column as isize);
            let c = self.text[self.pos];
            let blankz_next = self.is_blankz(1);
            let in_flow = self.flow_level > 0;
            match c {
                b'%' if self.column == 0 => {
                    self.unroll_indent(-1);
                    self.remove_simple_key();
                    self.simple_key_allowed = false;
                    self.skip_to_break();
                }
                b'-' | b'.' if self.is_document_indicator() => {
                    self.unroll_indent(-1);
                    self.remove_simple_key();
                    self.simple_key_allowed = false;
                    for _ in 0..3 {
                        self.skip();
                    }
                }
                b'[' | b'{' => {
                    self.save_simple_key();
                    self.flow_level += 1;
                    on_flow_start(self.flow_level, self.mark())?;
                    self.simple_key_allowed = true;
                    self.skip();
                }
                b']' | b'}' => {
                    self.remove_simple_key();
                    self.flow_level = self.flow_level.saturating_sub(1);
                    self.simple_key_allowed = false;
                    self.skip();
                }
                b',' => {
                    self.remove_simple_key();
                    self.simple_key_allowed = true;
                    self.skip();
                }
                b'-' if blankz_next => {
                    self.roll_indent(self.column as isize);
                    self.remove_simple_key();
                    self.simple_key_allowed = true;
                    self.skip();
                }
                b'?' if in_flow || blankz_next => {
                    self.roll_indent(self.column as isize);
                    self.remove_simple_key();
                    self.simple_key_allowed = !in_flow;
                    self.skip();
                }
                b':' if in_flow || blankz_next => {
                    self.fetch_value();
                    self.skip();
                }
                b'*' | b'&' => {
                    self.save_simple_key();
                    self.simple_key_allowed = false;
                    self.skip();
                    while matches!(self.at(0), Some(b) if b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
                    {
                        self.skip();
                    }
                }
                b'!' => {
                    self.save_simple_key();
                    self.simple_key_allowed = false;
                    self.scan_tag();
                }
                b'|' | b'>' if !in_flow => {
                    self.remove_simple_key();
                    self.simple_key_allowed = true;
                    self.scan_block_scalar();
                }
                b'\'' | b'"' => {
                    self.save_simple_key();
                    self.simple_key_allowed = false;
                    self.scan_flow_scalar(c == b'\'');
                }
                _ if self.starts_plain_scalar(c) => {
                    self.save_simple_key();
                    self.simple_key_allowed = false;
                    self.scan_plain_scalar();
                }
                // A character no token starts with: libyaml stops here with an error.
                _ => self.skip(),
            }
        }
    }

    /// libyaml's condition for a plain scalar at a token's start.
    fn starts_plain_scalar(&self, c: u8) -> bool {
        let indicator = self.is_blankz(0) || b"-?:,[]{}#&*!|>'\"%@`".contains(&c);
        !indicator
            || (c == b'-' && !self.is_blank(1))
            || (self.flow_level == 0 && (c == b'?' || c == b':') && !self.is_blankz(1))
    }

    fn scan_to_next_token(&mut self) {
        loop {
            if self.column == 0 && self.text[self.pos..].starts_with(&[0xEF, 0xBB, 0xBF]) {
                self.skip();
            }
            while self.is(0, b' ')
                || ((self.flow_level > 0 || !self.simple_key_allowed) && self.is(0, b'\t'))
            {
                self.skip();
            }
            if self.is(0, b'#') {
                self.skip_to_break();
            }
            if !self.is_break(0) {
                return;
            }
            self.skip_line();
            if self.flow_level == 0 {
                self.simple_key_allowed = true;
            }
        }
    }

    fn roll_indent(&mut self, column: isize) {
        if self.flow_level == 0 && self.indent < column {
            self.indents.push(self.indent);
            self.indent = column;
        }
    }

    fn unroll_indent(&mut self, column: isize) {
        if self.flow_level > 0 {
            return;
        }
        while self.indent > column {
            self.indent = self.indents.pop().unwrap_or(-1);
        }
    }

    /// A simple key may start here. Only the block level's is kept.
    fn save_simple_key(&mut self) {
        if self.flow_level == 0 && self.simple_key_allowed {
            self.block_key = Some(self.mark());
        }
    }

    fn remove_simple_key(&mut self) {
        if self.flow_level == 0 {
            self.block_key = None;
        }
    }

    /// libyaml drops a simple key once the scan leaves its line or goes 1,024 bytes
    /// past it.
    fn live_block_key(&self) -> Option<Mark> {
        self.block_key
            .filter(|key| key.line == self.line && key.index + 1024 >= self.pos)
    }

    fn fetch_value(&mut self) {
        if self.flow_level > 0 {
            self.simple_key_allowed = false;
        } else if let Some(key) = self.live_block_key() {
            self.roll_indent(key.column as isize);
            self.block_key = None;
            self.simple_key_allowed = false;
        } else {
            self.roll_indent(self.column as isize);
            self.simple_key_allowed = true;
        }
    }

    /// `!<verbatim>`, or a handle and suffix: URI characters up to the first other one.
    fn scan_tag(&mut self) {
        let verbatim = self.is(1, b'<');
        self.skip();
        if verbatim {
            self.skip();
        }
        while let Some(b) = self.at(0) {
            let uri = b.is_ascii_alphanumeric()
                || b";/?:@&=+$.%!~*'()_-".contains(&b)
                || (verbatim && b",[]".contains(&b));
            if !uri {
                break;
            }
            self.skip();
        }
        if verbatim && self.is(0, b'>') {
            self.skip();
        }
    }

    fn scan_block_scalar(&mut self) {
        self.skip();
        let mut increment = 0;
        let digit = |b: Option<u8>| {
            b.filter(|b| (b'1'..=b'9').contains(b))
                .map(|b| (b - b'0') as isize)
        };
        if matches!(self.at(0), Some(b'+' | b'-')) {
            self.skip();
            if let Some(d) = digit(self.at(0)) {
                increment = d;
                self.skip();
            }
        } else if let Some(d) = digit(self.at(0)) {
            increment = d;
            self.skip();
            if matches!(self.at(0), Some(b'+' | b'-')) {
                self.skip();
            }
        }
        while self.is_blank(0) {
            self.skip();
        }
        if self.is(0, b'#') {
            self.skip_to_break();
        }
        // Anything else before the line break is an error to libyaml; the scan goes on
        // as it would after the break.
        self.skip_to_break();
        self.skip_line();
        let mut indent = if increment == 0 {
            0
        } else if self.indent >= 0 {
            self.indent + increment
        } else {
            increment
        };
        self.scan_block_scalar_breaks(&mut indent);
        while self.column as isize == indent && !self.is_end(0) {
            self.skip_to_break();
            self.skip_line();
            self.scan_block_scalar_breaks(&mut indent);
        }
    }

    /// Empty lines and the indentation of the next; the first content line's
    /// indentation fixes the scalar's when no indicator did.
    fn scan_block_scalar_breaks(&mut self, indent: &mut isize) {
        let mut max_indent = 0;
        loop {
            while (*indent == 0 || (self.column as isize) < *indent) && self.is(0, b' ') {
                self.skip();
            }
            max_indent = max_indent.max(self.column as isize);
            if !self.is_break(0) {
                break;
            }
            self.skip_line();
        }
        if *indent == 0 {
            *indent = max_indent.max(self.indent + 1).max(1);
        }
    }

    fn scan_flow_scalar(&mut self, single: bool) {
        let quote = if single { b'\'' } else { b'"' };
        self.skip();
        loop {
            if self.is_document_indicator() || self.is_end(0) {
                return;
            }
            while !self.is_blankz(0) {
                if single && self.is(0, b'\'') && self.is(1, b'\'') {
                    self.skip();
                    self.skip();
                } else if self.is(0, quote) {
                    break;
                } else if !single && self.is(0, b'\\') && self.is_break(1) {
                    self.skip();
                    self.skip_line();
                    break;
                } else if !single && self.is(0, b'\\') {
                    let hex_digits = match self.at(1) {
                        Some(b'x') => 2,
                        Some(b'u') => 4,
                        Some(b'U') => 8,
                        _ => 0,
                    };
                    self.skip();
                    self.skip();
                    for _ in 0..hex_digits {
                        if !matches!(self.at(0), Some(b) if b.is_ascii_hexdigit()) {
                            break;
                        }
                        self.skip();
                    }
                } else {
                    self.skip();
                }
            }
            if self.is(0, quote) {
                self.skip();
                return;
            }
            self.skip_blanks_and_breaks();
        }
    }

    /// Steps over blanks and line breaks; whether it crossed a line break.
    fn skip_blanks_and_breaks(&mut self) -> bool {
        let mut crossed = false;
        while self.is_blank(0) || self.is_break(0) {
            if self.is_blank(0) {
                self.skip();
            } else {
                self.skip_line();
                crossed = true;
            }
        }
        crossed
    }

    fn scan_plain_scalar(&mut self) {
        let indent = self.indent + 1;
        let mut leading_blanks = false;
        let in_flow = self.flow_level > 0;
        loop {
            if self.is_document_indicator() || self.is(0, b'#') {
                break;
            }
            while !self.is_blankz(0) {
                let c = self.text[self.pos];
                if in_flow
                    && c == b':'
                    && matches!(self.at(1), Some(b',' | b'?' | b'[' | b']' | b'{' | b'}'))
                {
                    // libyaml's "found unexpected ':'": it stops here.
                    return;
                }
                if (c == b':' && self.is_blankz(1)) || (in_flow && b",[]{}".contains(&c)) {
                    break;
                }
                leading_blanks = false;
                self.skip();
            }
            if !(self.is_blank(0) || self.is_break(0)) {
                break;
            }
            if self.skip_blanks_and_breaks() {
                leading_blanks = true;
            }
            if !in_flow && (self.column as isize) < indent {
                break;
            }
        }
        if leading_blanks {
            self.simple_key_allowed = true;
        }
    }
}

#[cfg(test)]
mod tests;
