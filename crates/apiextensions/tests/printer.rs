//! Printer columns of custom resources (upstream's tableconvertor behaviour).

use ferrokube_apiextensions::printer::PrinterColumns;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceColumnDefinition;
use k8s_openapi::jiff::Timestamp;
use serde_json::{Value, json};

fn col(name: &str, ty: &str, path: &str) -> CustomResourceColumnDefinition {
    CustomResourceColumnDefinition {
        name: name.into(),
        type_: ty.into(),
        json_path: path.into(),
        ..Default::default()
    }
}

fn now() -> Timestamp {
    "2024-05-01T12:00:00Z".parse().unwrap()
}

#[test]
fn default_is_name_and_age() {
    let p = PrinterColumns::new(None);
    let defs = p.column_definitions();
    assert_eq!(defs.len(), 2);
    assert_eq!(defs[0]["name"], "Name");
    assert_eq!(defs[0]["type"], "string");
    assert_eq!(defs[0]["format"], "name");
    assert!(
        defs[0]["description"]
            .as_str()
            .unwrap()
            .starts_with("Name must be unique")
    );
    assert_eq!(defs[1]["name"], "Age");
    assert_eq!(defs[1]["type"], "date");
    assert_eq!(defs[1]["priority"], 0);
    assert!(
        defs[1]["description"]
            .as_str()
            .unwrap()
            .starts_with("CreationTimestamp")
    );
    let obj = json!({"metadata": {"name": "x", "creationTimestamp": "2024-05-01T11:55:00Z"}});
    assert_eq!(p.cells(&obj, now()), vec![json!("x"), json!("5m")]);
    let obj = json!({"metadata": {"name": "x", "creationTimestamp": "2024-04-28T09:00:00Z"}});
    assert_eq!(p.cells(&obj, now())[1], json!("3d3h"));
    // Empty list behaves as None.
    assert_eq!(PrinterColumns::new(Some(&[])).column_definitions(), defs);
}

#[test]
fn custom_columns() {
    let mut described = col("Replicas", "integer", ".spec.replicas");
    described.description = Some("the count".into());
    described.priority = Some(1);
    described.format = Some("int32".into());
    let cols = vec![
        described,
        col(
            "Ready",
            "string",
            r#".status.conditions[?(@.type=="Ready")].status"#,
        ),
        col("Hosts", "string", ".spec.servers[*].hosts"),
        col("First", "string", ".spec.servers[0].hosts[0]"),
        col("Ratio", "number", ".spec.ratio"),
        col("On", "boolean", ".spec.on"),
        col("Missing", "string", ".spec.nothing"),
        col("WrongType", "integer", ".spec.on"),
        col("Count", "string", ".spec.replicas"),
        col("Nul", "string", ".spec.nul"),
        col("Out", "string", ".spec.servers[9]"),
    ];
    let p = PrinterColumns::new(Some(&cols));
    assert!(p.error().is_none());
    let defs = p.column_definitions();
    assert_eq!(defs.len(), 12);
    assert_eq!(
        defs[1],
        json!({"name": "Replicas", "type": "integer", "format": "int32", "description": "the count", "priority": 1})
    );
    assert_eq!(
        defs[2]["description"],
        r#"Custom resource definition column (in JSONPath format): .status.conditions[?(@.type=="Ready")].status"#
    );
    let obj = json!({
        "metadata": {"name": "blah"},
        "spec": {
            "replicas": 3,
            "ratio": 2,
            "on": true,
            "nul": null,
            "servers": [{"hosts": ["foo"]}, {"hosts": ["bar", "baz"]}]
        },
        "status": {"conditions": [
            {"type": "Progressing", "status": "False"},
            {"type": "Ready", "status": "True"}
        ]}
    });
    let cells = p.cells(&obj, now());
    assert_eq!(
        cells,
        vec![
            json!("blah"),
            json!(3),
            json!("True"),
            json!(r#"["foo"]"#), // upstream shows only the first [*] match
            json!("foo"),
            json!(2),
            json!(true),
            Value::Null,
            Value::Null,
            json!("3"),
            json!("<no value>"),
            Value::Null,
        ]
    );
    // Missing everything: name empty, every cell null.
    let cells = p.cells(&json!({}), now());
    assert_eq!(cells[0], json!(""));
    assert!(cells[1..].iter().all(Value::is_null));
}

#[test]
fn invalid_path_ends_the_columns() {
    let cols = vec![
        col("A", "string", ".a"),
        col("B", "string", ".b[x]"),
        col("C", "string", ".c"),
    ];
    let p = PrinterColumns::new(Some(&cols));
    assert_eq!(p.column_definitions().len(), 2);
    assert_eq!(p.error(), Some(r#"unrecognized column definition ".b[x]""#));
    assert_eq!(
        p.cells(&json!({"a": "x"}), now()),
        vec![json!(""), json!("x")]
    );
}

#[test]
fn date_columns() {
    let p = PrinterColumns::new(Some(&[col("Seen", "date", ".status.seen")]));
    let cell = |v: Value| p.cells(&json!({"status": {"seen": v}}), now())[1].clone();
    assert_eq!(cell(json!("2024-05-01T11:59:30Z")), json!("30s"));
    assert_eq!(cell(json!("2024-05-01T04:00:00Z")), json!("8h"));
    assert_eq!(cell(json!("not a time")), json!("<invalid>"));
    assert_eq!(cell(json!("2024-05-02T12:00:00Z")), json!("<invalid>"));
    assert_eq!(cell(json!("")), json!("<unknown>"));
    assert_eq!(cell(json!(5)), Value::Null);
}
