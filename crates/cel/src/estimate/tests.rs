//! Upstream's `TestCostEstimation` (apiextensions-apiserver
//! `pkg/apiserver/schema/cel/compilation_test.go`, v1.33): each rule's estimated cost
//! on a schema without bounds and on the same schema with them.

use serde_json::{Value, json};

use super::{RuleScope, STATIC_ESTIMATED_COST_LIMIT, cost_error_message};

fn cost(schema: &Value, rule: &str) -> u64 {
    let program = crate::compile(rule, &["self", "oldSelf"]).expect("the rule compiles");
    RuleScope::new(schema, false).max_cost(&program)
}

/// `type` and `format` of upstream's `parseRuleType`.
fn scalar(kind: &str) -> Value {
    match kind {
        "duration" | "date" | "date-time" => json!({"type": "string", "format": kind}),
        "int-or-string" => json!({"x-kubernetes-int-or-string": true}),
        t => json!({"type": t}),
    }
}

fn with(mut schema: Value, key: &str, max: Option<i64>) -> Value {
    if let Some(max) = max {
        schema[key] = json!(max);
    }
    schema
}

fn array(kind: &str) -> impl Fn(Option<i64>) -> Value {
    let items = scalar(kind);
    move |max| with(json!({"type": "array", "items": items}), "maxItems", max)
}

fn array_of_arrays(kind: &str) -> impl Fn(Option<i64>) -> Value {
    let kind = kind.to_string();
    move |max| {
        with(
            json!({"type": "array", "items": {"type": "array", "items": {"type": kind}}}),
            "maxItems",
            max,
        )
    }
}

fn required_and_optional() -> Value {
    json!({
        "type": "object",
        "properties": {"required": {"type": "string"}, "optional": {"type": "string"}},
        "required": ["required"],
    })
}

fn object_array(max: Option<i64>) -> Value {
    with(
        json!({"type": "array", "items": required_and_optional()}),
        "maxItems",
        max,
    )
}

fn map_array(kind: &str) -> impl Fn(Option<i64>) -> Value {
    let kind = kind.to_string();
    move |max| {
        with(
            json!({"type": "array", "items": {"type": "object", "additionalProperties": {"type": kind}}}),
            "maxItems",
            max,
        )
    }
}

fn map_of(values: Value) -> impl Fn(Option<i64>) -> Value {
    move |max| {
        with(
            json!({"type": "object", "additionalProperties": values}),
            "maxProperties",
            max,
        )
    }
}

fn string(max: Option<i64>) -> Value {
    with(json!({"type": "string"}), "maxLength", max)
}

fn bytes(max: Option<i64>) -> Value {
    with(
        json!({"type": "string", "format": "byte"}),
        "maxLength",
        max,
    )
}

fn nested_spec(max: Option<i64>) -> Value {
    with(
        json!({"type": "object", "additionalProperties": string(max)}),
        "maxProperties",
        max,
    )
}

fn nested_root(all_bounded: bool) -> impl Fn(Option<i64>) -> Value {
    move |max| {
        let inner = if all_bounded {
            with(required_and_optional(), "maxProperties", max)
        } else {
            required_and_optional()
        };
        let items = with(
            json!({"type": "object", "additionalProperties": inner}),
            "maxProperties",
            max,
        );
        let list = json!({"type": "array", "items": items});
        if all_bounded {
            with(list, "maxItems", max)
        } else {
            list
        }
    }
}

/// Checks a rule as upstream's `schemaChecker` does: the cost without bounds and with
/// them (0 expects nothing; `None` expects more than the per-rule limit).
fn check(
    name: &str,
    schema: impl Fn(Option<i64>) -> Value,
    rule: &str,
    calc: Option<u64>,
    max: i64,
    set: Option<u64>,
) {
    for (bound, expected) in [(None, calc), (Some(max), set)] {
        let got = cost(&schema(bound), rule);
        match expected {
            Some(0) => {}
            Some(want) => assert_eq!(got, want, "{name} (bound {bound:?}): {rule}"),
            None => assert!(
                got >= STATIC_ESTIMATED_COST_LIMIT,
                "{name} (bound {bound:?}): {rule} costs only {got}"
            ),
        }
    }
}

#[test]
fn costs_are_upstreams() {
    check(
        "number array with all",
        array("number"),
        "self.all(x, true)",
        Some(4718591),
        10,
        Some(32),
    );
    check(
        "string array with all",
        array("string"),
        "self.all(x, true)",
        Some(3145727),
        20,
        Some(62),
    );
    check(
        "boolean array with all",
        array("boolean"),
        "self.all(x, true)",
        Some(1887437),
        5,
        Some(17),
    );
    check(
        "array of number arrays with all",
        array_of_arrays("number"),
        "self.all(x, true)",
        Some(3145727),
        100,
        Some(302),
    );
    check(
        "array of objects with all",
        object_array,
        "self.all(x, true)",
        Some(555128),
        50,
        Some(152),
    );
    check(
        "map of numbers with all",
        map_of(scalar("number")),
        "self.all(x, true)",
        Some(1348169),
        10,
        Some(32),
    );
    check(
        "map of numbers with has",
        map_of(scalar("number")),
        "has(self.x)",
        Some(0),
        100,
        Some(0),
    );
    check(
        "map of strings with all",
        map_of(scalar("string")),
        "self.all(x, true)",
        Some(1179647),
        3,
        Some(11),
    );
    check(
        "map of booleans with all",
        map_of(scalar("boolean")),
        "self.all(x, true)",
        Some(943718),
        100,
        Some(302),
    );
    check(
        "string with contains",
        string,
        "self.contains('test')",
        Some(314574),
        10,
        Some(5),
    );
    check(
        "string with startsWith",
        string,
        "self.startsWith('test')",
        Some(2),
        15,
        Some(2),
    );
    check(
        "string with endsWith",
        string,
        "self.endsWith('test')",
        Some(2),
        30,
        Some(2),
    );
    check(
        "concat string",
        string,
        r#"size(self + "hello") > size("hello")"#,
        Some(314578),
        4,
        Some(7),
    );
    check(
        "index of array with numbers",
        array("number"),
        "self[1] == 0.0",
        Some(2),
        5000,
        Some(2),
    );
    check(
        "index of array with strings",
        array("string"),
        "self[1] == self[1]",
        Some(314577),
        8,
        Some(314577),
    );
    check(
        "O(n^2) loop with numbers",
        array("number"),
        "self.all(x, self.all(y, true))",
        None,
        10,
        Some(352),
    );
    check(
        "O(n^3) loop with numbers",
        array("number"),
        "self.all(x, self.all(y, self.all(z, true)))",
        None,
        10,
        Some(3552),
    );
    check(
        "regex matches simple",
        string,
        r#"self.matches("x")"#,
        Some(314574),
        50,
        Some(22),
    );
    check(
        "regex matches empty string",
        string,
        r#""".matches("(((((((((())))))))))[0-9]")"#,
        Some(7),
        10,
        Some(7),
    );
    check(
        "regex matches empty regex",
        string,
        r#"self.matches("")"#,
        Some(1),
        100,
        Some(1),
    );
    check(
        "map of strings with value length",
        nested_spec,
        "self.all(x, x.contains(self[x]))",
        Some(2752507),
        10,
        Some(72),
    );
    check(
        "set array maxLength to zero",
        array("number"),
        "self[3] == 0.0",
        Some(2),
        0,
        Some(2),
    );
    check(
        "set map maxLength to zero",
        map_of(scalar("number")),
        r#"self["x"] == 0.0"#,
        Some(2),
        0,
        Some(2),
    );
    check(
        "set string maxLength to zero",
        string,
        r#"self == "x""#,
        Some(2),
        0,
        Some(1),
    );
    check(
        "set bytes maxLength to zero",
        bytes,
        r#"self == b"x""#,
        Some(2),
        0,
        Some(1),
    );
    check(
        "set maxLength greater than estimated maxLength",
        array("number"),
        "self.all(x, x == 0.0)",
        Some(6291454),
        3 * 1024 * 2048,
        Some(25165826),
    );
    check(
        "nested types with root rule with all supporting maxLength",
        nested_root(true),
        r#"self.all(x, x["y"].required == "z")"#,
        Some(7340027),
        10,
        Some(72),
    );
    check(
        "nested types with root rule with one supporting maxLength",
        nested_root(false),
        r#"self.all(x, x["y"].required == "z")"#,
        Some(7340027),
        10,
        Some(7340027),
    );
    check(
        "int-or-string array with all",
        array("int-or-string"),
        "self.all(x, true)",
        Some(4718591),
        10,
        Some(32),
    );
    check(
        "index of array with int-or-strings",
        array("int-or-string"),
        "self[0] == 5",
        Some(3),
        10,
        Some(3),
    );
    check(
        "index of array with booleans",
        array("boolean"),
        "self[0] == false",
        Some(2),
        25,
        Some(2),
    );
    check(
        "index of array of objects",
        object_array,
        "self[0] == null",
        Some(2),
        422,
        Some(2),
    );
    check(
        "index of array of array of numbers",
        array_of_arrays("number"),
        "self[0][0] == -1.0",
        Some(3),
        51,
        Some(3),
    );
    check(
        "array of number maps with all",
        map_array("number"),
        "self.all(x, x.y == 25.2)",
        Some(6291452),
        12,
        Some(74),
    );
    check(
        "index of array of number maps",
        map_array("number"),
        "self[0].x > 2.0",
        Some(4),
        3000,
        Some(4),
    );
    check(
        "duration array with all",
        array("duration"),
        "self.all(x, true)",
        Some(2359295),
        5,
        Some(17),
    );
    check(
        "index of duration array",
        array("duration"),
        "self[0].getHours() == 2",
        Some(4),
        525,
        Some(4),
    );
    check(
        "date array with all",
        array("date"),
        "self.all(x, true)",
        Some(725936),
        15,
        Some(47),
    );
    check(
        "index of date array",
        array("date"),
        "self[2].getDayOfMonth() == 13",
        Some(4),
        42,
        Some(4),
    );
    check(
        "date-time array with all",
        array("date-time"),
        "self.all(x, true)",
        Some(428963),
        25,
        Some(77),
    );
    check(
        "index of date-time array",
        array("date-time"),
        "self[2].getMinutes() == 45",
        Some(4),
        99,
        Some(4),
    );
    check(
        "map of int-or-strings with all",
        map_of(scalar("int-or-string")),
        "self.all(x, true)",
        Some(1348169),
        15,
        Some(47),
    );
    check(
        "map of objects with all",
        map_of(required_and_optional()),
        "self.all(x, true)",
        Some(428963),
        20,
        Some(62),
    );
    check(
        "map of number maps with all",
        map_of(json!({"type": "object", "additionalProperties": {"type": "number"}})),
        "self.all(x, true)",
        Some(1179647),
        10,
        Some(32),
    );
    check(
        "map of number arrays with all",
        map_of(json!({"type": "array", "items": {"type": "number"}})),
        "self.all(x, true)",
        Some(1179647),
        25,
        Some(77),
    );
    check(
        "map of durations with all",
        map_of(scalar("duration")),
        "self.all(x, true)",
        Some(1048577),
        5,
        Some(17),
    );
    check(
        "map of dates with all",
        map_of(scalar("date")),
        "self.all(x, true)",
        Some(524288),
        10,
        Some(32),
    );
    check(
        "map of date-times with all",
        map_of(scalar("date-time")),
        "self.all(x, true)",
        Some(349526),
        25,
        Some(77),
    );
    check(
        "extended library regex find",
        string,
        "self.find('[0-9]+') == ''",
        Some(629147),
        10,
        Some(11),
    );
    check(
        "check cost of size call",
        map_of(scalar("integer")),
        "oldSelf.size() == self.size()",
        Some(5),
        10,
        Some(5),
    );
    check(
        "check cost of timestamp comparison",
        map_of(scalar("date-time")),
        r#"self["a"] == self["b"]"#,
        Some(8),
        7,
        Some(8),
    );
    check(
        "check cost of duration comparison",
        map_of(scalar("duration")),
        r#"self["c"] == self["d"]"#,
        Some(8),
        42,
        Some(8),
    );
}

#[test]
fn library_costs_are_upstreams() {
    let strings = |max: Option<i64>| {
        with(
            json!({"type": "array", "items": string(max)}),
            "maxItems",
            max,
        )
    };
    check(
        "extended library join",
        strings,
        "self.join(' ') == 'aa bb'",
        Some(329853068905),
        10,
        Some(43),
    );
    check(
        "extended library isSorted",
        strings,
        "self.isSorted() == true",
        Some(329854432052),
        10,
        Some(52),
    );
    let replace = |max: Option<i64>| {
        json!({"type": "object", "properties": {
            "str": string(max),
            "before": string(Some(2)),
            "after": string(Some(4)),
        }})
    };
    check(
        "extended library replace",
        replace,
        "self.str.replace(self.before, self.after) == 'does not matter'",
        Some(629154),
        4,
        Some(12),
    );
    let split = |max: Option<i64>| json!({"type": "object", "properties": {"str": string(max), "separator": string(max)}});
    check(
        "extended library split",
        split,
        "self.str.split(self.separator) == []",
        Some(629160),
        10,
        Some(22),
    );
    check(
        "extended library lowerAscii",
        string,
        "self.lowerAscii() == 'lower!'",
        Some(314575),
        10,
        Some(6),
    );
    let enumerated = |max: Option<i64>| {
        with(
            json!({"type": "string", "enum": ["A", "B", "C", "LongValue"]}),
            "maxLength",
            max,
        )
    };
    check(
        "enums with maxLength equals to the longest possible value",
        enumerated,
        "self.contains('A')",
        Some(2),
        1000,
        Some(401),
    );
    let int_or_string = |max: Option<i64>| {
        with(
            json!({"x-kubernetes-int-or-string": true}),
            "maxLength",
            max,
        )
    };
    // v1.33 reads an int-or-string as long as a request whatever its maxLength.
    check(
        "IntOrString type with quantity rule",
        int_or_string,
        "isQuantity(self)",
        Some(314574),
        20,
        Some(314574),
    );
}

#[test]
fn what_the_inference_does_not_type_is_read_cheaply() {
    // A result whose type is not in the table counts as a scalar (upstream knows it is
    // an int); read as of unknown size, the comparison would cost 2^64.
    let schema = json!({"type": "object", "properties": {"a": {"type": "integer"}}});
    assert_eq!(
        cost(&schema, "math.bitOr(self.a, 1) == math.bitOr(self.a, 2)"),
        7
    );
}

#[test]
fn the_root_of_a_resource_has_its_metadata() {
    let program = crate::compile("self.metadata.name.contains('x')", &["self"]).unwrap();
    let root = json!({"type": "object", "properties": {"metadata": {"type": "object"}}});
    // name is a plain string as long as a request: 314573 for the traversal, 3 for the
    // selections.
    assert_eq!(RuleScope::new(&root, true).max_cost(&program), 314576);
    // Not a resource's root: `metadata` declares no `name` (upstream refuses to compile
    // the rule), and the unknown field counts as a scalar.
    assert_eq!(RuleScope::new(&root, false).max_cost(&program), 4);
    // An embedded resource is one.
    let mut embedded = root.clone();
    embedded["x-kubernetes-embedded-resource"] = json!(true);
    assert_eq!(RuleScope::new(&embedded, false).max_cost(&program), 314576);
}

#[test]
fn cardinality_is_how_often_the_node_fits_in_a_request() {
    assert_eq!(
        RuleScope::new(&json!({"type": "string"}), false).max_cardinality(),
        1048576
    );
    assert_eq!(
        RuleScope::new(&json!({"type": "integer"}), false).max_cardinality(),
        1572864
    );
    assert_eq!(
        RuleScope::new(&required_and_optional(), false).max_cardinality(),
        185042
    );
}

#[test]
fn cost_messages_are_upstreams() {
    assert_eq!(
        cost_error_message("estimated rule cost", 12_000_000, 10_000_000),
        "estimated rule cost exceeds budget by factor of 1.200000x (try simplifying the rule, or adding maxItems, maxProperties, and maxLength where arrays, maps, and strings are declared)"
    );
    assert!(cost_error_message("c", 25_000_000, 10_000_000).contains("factor of 2.5x"));
    assert!(cost_error_message("c", u64::MAX, 10_000_000).contains("factor of more than 100x"));
}
