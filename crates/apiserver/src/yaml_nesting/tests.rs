use super::*;

fn flow_starts(text: &str) -> Vec<Mark> {
    let mut marks = Vec::new();
    scan(text.as_bytes(), &mut |_, mark| {
        marks.push(mark);
        Ok::<(), ()>(())
    })
    .unwrap();
    marks
}

fn depth(text: &str) -> usize {
    let mut deepest = 0;
    scan(text.as_bytes(), &mut |depth, _| {
        deepest = deepest.max(depth);
        Ok::<(), ()>(())
    })
    .unwrap();
    deepest
}

#[test]
fn refuses_where_serde_yaml_ng_would_and_no_sooner() {
    let nested = |n: usize| format!("{}{}\n", "[".repeat(n), "]".repeat(n));
    assert!(check(nested(128).as_bytes()).is_ok());
    serde_yaml_ng::from_str::<serde_json::Value>(&nested(128)).unwrap();
    let theirs = serde_yaml_ng::from_str::<serde_json::Value>(&nested(129))
        .unwrap_err()
        .to_string();
    let ours = check(nested(129).as_bytes()).unwrap_err().to_string();
    assert_eq!(ours, theirs);
    assert_eq!(ours, "recursion limit exceeded at line 1 column 129");
    // Found on a later line, and in maps as in sequences.
    let body = format!("a: 1\nb:\n  c: {}\n", "{d: ".repeat(200));
    assert_eq!(
        check(body.as_bytes()).unwrap_err().to_string(),
        format!(
            "recursion limit exceeded at line 3 column {}",
            5 + 4 * 128 + 1
        )
    );
    // A body of nothing but brackets is refused after 129 of them, not read to its end.
    let huge = "[".repeat(3 << 20);
    assert!(from_slice::<serde_json::Value>(huge.as_bytes()).is_err());
}

#[test]
fn brackets_that_open_nothing_are_not_counted() {
    let many = "[".repeat(300);
    for text in [
        format!("a: '{many}'\n"),
        format!("a: \"{many}\"\n"),
        format!("a: \"\\\"{many}\"\n"),
        format!("a: 'it''s {many}'\n"),
        format!("a: x{many}\n"),
        format!("a: x\n  {many}\n"),
        format!("- x {many}\n"),
        format!("a: 1 # {many}\n"),
        format!("# {many}\n"),
        format!("a: |\n  {many}\n  {many}\nb: 1\n"),
        format!("a: >-\n\n   {many}\n"),
        format!("- |2\n    {many}\n"),
        format!("a: x#y {many}\n"),
        format!("a: !<tag:{many}> x\n"),
        format!("[a, '{many}', \"{many}\", b # {many}\n]\n"),
    ] {
        assert!(depth(&text) <= 1, "{text}");
        assert!(check(text.as_bytes()).is_ok(), "{text}");
    }
}

#[test]
fn brackets_that_open_flows_are_counted_wherever_they_hide() {
    let many = "[".repeat(200);
    for text in [
        // A plain scalar ends where its continuation would be less indented.
        format!("a: x\n{many}\n"),
        format!("a:\n  b: x\n {many}\n"),
        // A quote inside a plain scalar is text, not the start of a quoted one.
        format!("a: it's\n{many}\n"),
        format!("a: x \"\n{many}\n"),
        // A block scalar ends at the first line less indented than its content.
        format!("a: |\n  x\n{many}\n"),
        format!("a:\n  b: |\n    x\n  c: {many}\n"),
        // An indentation indicator fixes the content's column.
        format!("a:\n  b: |1\n    x\n  {many}\n"),
        // Line breaks that are not LF.
        format!("a: x\r{many}\n"),
        format!("a: x\u{2028}{many}\n"),
        format!("a: 'x'\u{85}b: {many}\n"),
        // A tag ends at a character no URI has.
        format!("a: !t {many}\n"),
        format!("a: !t\t{many}\n"),
        format!("---\n{many}\n"),
        format!("\u{feff}{many}\n"),
    ] {
        assert!(depth(&text) >= 200, "{text:?}: {}", depth(&text));
        assert!(check(text.as_bytes()).is_err(), "{text:?}");
    }
}

#[test]
fn utf16_bodies_are_read_as_libyaml_reads_them() {
    let text = format!("a: {}\n", "[".repeat(200));
    let le: Vec<u8> = [0xFF, 0xFE]
        .into_iter()
        .chain(text.encode_utf16().flat_map(u16::to_le_bytes))
        .collect();
    let be: Vec<u8> = [0xFE, 0xFF]
        .into_iter()
        .chain(text.encode_utf16().flat_map(u16::to_be_bytes))
        .collect();
    assert!(check(&le).is_err());
    assert!(check(&be).is_err());
    assert!(serde_yaml_ng::from_slice::<serde_json::Value>(&le).is_err());
}

/// libyaml's own tokens, through unsafe-libyaml's C-style API: the positions of the
/// flow collections it opens before its first error or the end.
fn libyaml_flow_starts(text: &str) -> (Vec<Mark>, bool) {
    use std::mem::MaybeUninit;
    let mut marks = Vec::new();
    let mut completed = false;
    let mut parser = MaybeUninit::<unsafe_libyaml::yaml_parser_t>::uninit();
    #[allow(unsafe_code)]
    // SAFETY: the parser is initialised before any other call and deleted once after
    // the last; the input outlives it (it is borrowed for the whole function); every
    // token `yaml_parser_scan` fills (on success or failure it zeroes or fills it
    // first) is read only through its plain fields and deleted exactly once.
    unsafe {
        let parser = parser.as_mut_ptr();
        assert!(unsafe_libyaml::yaml_parser_initialize(parser).ok);
        unsafe_libyaml::yaml_parser_set_input_string(parser, text.as_ptr(), text.len() as u64);
        loop {
            let mut token = MaybeUninit::<unsafe_libyaml::yaml_token_t>::uninit();
            let token = token.as_mut_ptr();
            if unsafe_libyaml::yaml_parser_scan(parser, token).fail {
                unsafe_libyaml::yaml_token_delete(token);
                break;
            }
            let kind = (*token).type_;
            let start = (*token).start_mark;
            unsafe_libyaml::yaml_token_delete(token);
            match kind {
                unsafe_libyaml::YAML_FLOW_SEQUENCE_START_TOKEN
                | unsafe_libyaml::YAML_FLOW_MAPPING_START_TOKEN => marks.push(Mark {
                    index: start.index as usize,
                    line: start.line as usize,
                    column: start.column as usize,
                }),
                unsafe_libyaml::YAML_STREAM_END_TOKEN => {
                    completed = true;
                    break;
                }
                // A token of type 0 is what a scan after an error gives.
                unsafe_libyaml::YAML_NO_TOKEN => break,
                _ => {}
            }
        }
        unsafe_libyaml::yaml_parser_delete(parser);
    }
    (marks, completed)
}

/// Random documents of lines at random indentation, from the pieces libyaml's
/// tokenizer turns on (the first set) and from well-formed pieces that reach deeper
/// into documents before an error ends libyaml's scan (the second). Every flow
/// collection libyaml opens, this scanner must see at the same place (else the
/// quadratic case could hide from it), and on a document libyaml reads to its end it
/// must see no other.
#[test]
fn agrees_with_libyaml_on_where_flows_open() {
    const EDGES: &[&str] = &[
        "[",
        "]",
        "{",
        "}",
        ",",
        ":",
        ": ",
        "? ",
        "?",
        "- ",
        "-",
        "#",
        " #c",
        "'",
        "''",
        "\"",
        "\\",
        "\\\"",
        "\\x4",
        "\\u00e9",
        "|",
        ">",
        "|2",
        ">-",
        "|+1",
        "&a ",
        "*a",
        "!t ",
        "!<x,[y]> ",
        "!!str ",
        "!",
        "%YAML 1.2\n",
        "---",
        "...",
        "--- ",
        "\n",
        "\n ",
        "\n  ",
        "\n   ",
        "\n    ",
        " ",
        "  ",
        "\t",
        "a",
        "key",
        "x y",
        "\r\n",
        "\r",
        "\u{85}",
        "\u{2028}",
        "é",
        "\u{feff}",
        "@",
        "`",
        "%",
        ":x",
        "-x",
        "?x",
        "#[",
        "a[b",
        "a{b",
    ];
    const WELL_FORMED: &[&str] = &[
        "a: ",
        "b: ",
        "- ",
        "? ",
        ": ",
        "[",
        "]",
        "{",
        "}",
        ", ",
        "'x'",
        "'[{'",
        "\"x\"",
        "\"[\\\"\"",
        "|\n",
        "|2\n",
        ">-\n",
        "x y",
        "x[",
        "x{",
        "x'",
        "x\"",
        " #[",
        "&a ",
        "*a ",
        "!t ",
        "!t[",
        "[a: b]",
        "{a: [b, c]}",
        "---\n",
        "\r\n",
        "\u{2028}",
        "\t",
        "é",
        "z",
        "x #c",
        "''",
        ":x",
    ];
    let mut state = 0x9e37_79b9_7f4a_7c15_u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    for pieces in [EDGES, WELL_FORMED] {
        let (mut compared, mut complete) = (0, 0);
        for _ in 0..100_000 {
            let mut text = String::new();
            for _ in 0..1 + next() % 8 {
                text.push_str(&" ".repeat((next() % 7) as usize));
                for _ in 0..1 + next() % 8 {
                    text.push_str(pieces[(next() % pieces.len() as u64) as usize]);
                }
                text.push('\n');
            }
            let (theirs, completed) = libyaml_flow_starts(&text);
            let ours = flow_starts(&text);
            assert!(
                ours.len() >= theirs.len() && ours[..theirs.len()] == theirs[..],
                "{text:?}: libyaml opens flows at {theirs:?}, the scanner at {ours:?}"
            );
            if completed {
                assert_eq!(ours, theirs, "{text:?}");
                complete += 1;
            }
            compared += theirs.len();
        }
        // The generator reaches both outcomes and many flows.
        assert!(complete > 10_000, "{complete}");
        assert!(compared > 5_000, "{compared}");
    }
}
