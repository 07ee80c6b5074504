use serde_json::json;

use super::*;

const ALL: Options = Options {
    has_params: false,
    has_authorizer: true,
};

fn error(result: Result<Program, CompileError>) -> String {
    match result {
        Ok(p) => panic!("{} compiled", p.source()),
        Err(e) => e.0,
    }
}

#[test]
fn request_and_namespace_have_upstreams_declared_types() {
    let c = Compiler::new();
    for ok in [
        "request.operation == 'CREATE' && request.userInfo.groups.exists(g, g == 'admins')",
        "request.kind.group == 'apps' && request.requestResource.resource == 'deployments'",
        "request.dryRun || has(request.options.fieldManager)",
        "request.userInfo.extra['scopes'].all(s, s != '')",
        "namespaceObject.metadata.labels['env'] == 'prod'",
        "namespaceObject.status.conditions.all(c, c.lastTransitionTime < timestamp('2030-01-01T00:00:00Z'))",
        "object.spec.replicas <= 5 && oldObject == null",
        "authorizer.group('apps').resource('deployments').check('create').allowed()",
        "authorizer.requestResource.check('get').allowed()",
    ] {
        if let Err(e) = c.compile(ok, ALL, Returns::Bool) {
            panic!("{ok}: {e}");
        }
    }
    let e = error(c.compile("request.operaton == 'CREATE'", ALL, Returns::Bool));
    assert!(
        e.starts_with("compilation failed: ERROR: <input>:1:8: undefined field 'operaton'"),
        "{e}"
    );
    let e = error(c.compile("request.operation == 1", ALL, Returns::Bool));
    assert!(
        e.contains("found no matching overload for '_==_' applied to '(string, int)'"),
        "{e}"
    );
    let e = error(c.compile("namespaceObject.metadata.uid == ''", ALL, Returns::Bool));
    assert!(e.contains("undefined field 'uid'"), "{e}");
    let e = error(c.compile("authorizer.allowed()", ALL, Returns::Bool));
    assert!(
        e.contains(
            "found no matching overload for 'allowed' applied to \
             'kubernetes.authorization.Authorizer.()'"
        ),
        "{e}"
    );
}

#[test]
fn each_kind_of_expression_must_evaluate_to_its_type() {
    let c = Compiler::new();
    let e = error(c.compile("6", ALL, Returns::Bool));
    assert_eq!(e, "must evaluate to bool but got int");
    // `object` is `dyn` where a policy is written, so a bare field is `dyn`, not bool.
    let e = error(c.compile("object.spec.paused", ALL, Returns::Bool));
    assert_eq!(e, "must evaluate to bool but got dyn");
    let e = error(c.compile("0 == 0", ALL, Returns::String));
    assert_eq!(e, "must evaluate to string but got bool");
    let e = error(c.compile("true", ALL, Returns::StringOrNull));
    assert_eq!(e, "must evaluate to one of [string null_type] but got bool");
    let e = error(c.compile("request.userInfo", ALL, Returns::Bool));
    assert_eq!(e, "must evaluate to bool but got kubernetes.UserInfo");
    let e = error(c.compile("[]", ALL, Returns::Bool));
    assert_eq!(e, "must evaluate to bool but got list(dyn)");
    for (ok, returns) in [
        ("object.spec.paused == true", Returns::Bool),
        (
            "'replicas: ' + string(object.spec.replicas)",
            Returns::String,
        ),
        ("null", Returns::StringOrNull),
        ("'a' + 'b'", Returns::StringOrNull),
        ("object.spec", Returns::Any),
    ] {
        if let Err(e) = c.compile(ok, ALL, returns) {
            panic!("{ok}: {e}");
        }
    }
}

#[test]
fn optional_variables_are_declared_only_when_the_options_say() {
    let c = Compiler::new();
    let no_authorizer = Options {
        has_params: false,
        has_authorizer: false,
    };
    let e = error(c.compile("params.max > 1", ALL, Returns::Bool));
    assert!(e.contains("undeclared reference to 'params'"), "{e}");
    let e = error(c.compile(
        "authorizer.requestResource.check('get').allowed()",
        no_authorizer,
        Returns::Bool,
    ));
    assert!(e.contains("undeclared reference to 'authorizer'"), "{e}");
    let e = error(c.compile("variables.x", ALL, Returns::Bool));
    assert!(e.contains("undeclared reference to 'variables'"), "{e}");
    let with_params = Options {
        has_params: true,
        has_authorizer: true,
    };
    assert!(
        c.compile("params.max > 1", with_params, Returns::Bool)
            .is_ok()
    );
}

#[test]
fn variables_are_typed_in_the_order_they_are_compiled() {
    let mut c = Compiler::new().with_variables();
    let e = error(c.compile_variable("sum", "114 + '514'", ALL));
    assert!(
        e.starts_with(
            "compilation failed: ERROR: <input>:1:5: found no matching overload for '_+_' \
             applied to '(int, string)'"
        ),
        "{e}"
    );
    // A variable may use the ones before it, not the ones after.
    let e = error(c.compile_variable("early", "variables.foo + 1", ALL));
    assert!(
        e.starts_with("compilation failed: ERROR: <input>:1:10: undefined field 'foo'"),
        "{e}"
    );
    c.compile_variable("foo", "1", ALL).unwrap();
    c.compile_variable("enabled", "object.spec.enabled == true", ALL)
        .unwrap();
    c.compile_variable("names", "object.spec.items.map(i, i.name)", ALL)
        .unwrap();
    assert!(c.compile("variables.enabled", ALL, Returns::Bool).is_ok());
    assert!(
        c.compile("variables.foo + 1 > 2", ALL, Returns::Bool)
            .is_ok()
    );
    // A variable that did not compile is `dyn`.
    assert!(
        c.compile("variables.sum == 'x'", ALL, Returns::Bool)
            .is_ok()
    );
    let e = error(c.compile("variables.foo == 'one'", ALL, Returns::Bool));
    assert!(
        e.contains("found no matching overload for '_==_' applied to '(int, string)'"),
        "{e}"
    );
    let e = error(c.compile("variables.replicas == 2", ALL, Returns::Bool));
    assert!(
        e.contains("<input>:1:10: undefined field 'replicas'"),
        "{e}"
    );
    let e = error(c.compile("variables.foo", ALL, Returns::Bool));
    assert_eq!(e, "must evaluate to bool but got int");
    // A comprehension variable named `variables` is not the policy's.
    assert!(
        c.compile(
            "[{'a': 1}].all(variables, variables.a == 1)",
            ALL,
            Returns::Bool
        )
        .is_ok()
    );
}

#[test]
fn a_typed_compiler_types_object_params_and_variables_from_schemas() {
    let components = json!({
        "Deployment": {"type": "object", "properties": {
            "foo": {"type": "integer"},
            "spec": {"type": "object", "properties": {"replicas": {"type": "integer"}}}}},
    });
    let components = components.as_object().unwrap();
    let object = &components["Deployment"];
    let mut c = Compiler::typed(Some(object), None, components).with_variables();
    c.compile_variable("name", "'something'", ALL).unwrap();
    let e = error(c.compile("variables.name == object.foo", ALL, Returns::Any));
    assert!(
        e.contains("found no matching overload for '_==_' applied to '(string, int)'"),
        "{e}"
    );
    // A variable whose expression does not type-check is `dyn` to the ones after.
    let mut c = Compiler::typed(Some(object), None, components).with_variables();
    assert!(
        c.compile_variable("name", "object.foo == 'str'", ALL)
            .is_err()
    );
    assert!(
        c.compile("variables.name == object.foo", ALL, Returns::Any)
            .is_ok()
    );
    let e = error(c.compile("object.spec.replica > 1", ALL, Returns::Any));
    assert!(e.contains("undefined field 'replica'"), "{e}");
}
