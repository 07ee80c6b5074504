//! JSON that did not come through Go, made what Go's encoder writes for the same
//! struct, as upstream's apiserver does by decoding every body into its Go struct and
//! encoding that: the zero value (`0`, `""`, `false`) of a non-pointer scalar field
//! tagged `omitempty` is left out; and since encoding/json never finds a struct empty,
//! an unset non-pointer time (`metav1.Time`, `MicroTime`) is written as `null`
//! (`creationTimestamp: null` in a pod template, `lastProbeTime: null` in a pod
//! condition) and an unset non-pointer struct as its zero value (`status: {}`,
//! `resources: {}`, `lastState: {}`), `omitempty` or not.

use serde_json::{Map, Value};

use crate::codec::{MAX_DEPTH, is_zero};
use crate::table::{Kind, message, special};
use crate::transcode::{Slot, find};

/// Which of Go's rules a walk applies.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Pass {
    /// Before decoding into the kind's type: unset non-pointer structs get their zero
    /// values, so that defaulting sees them as upstream's does (a policy without a
    /// `spec` gets `failurePolicy: Fail`). Times and zeros are left for the stored form.
    Decoding,
    /// The stored form: every rule.
    Stored,
}

/// Rewrites, at any depth of an object of `(api_version, kind)`, the members as Go's
/// JSON encoding of its struct has them: zeros of non-pointer `omitempty` scalars
/// dropped, unset non-pointer times added as null, unset non-pointer structs as their
/// zero values. Members the table does not know are kept. `false` when the kind has no
/// message (a custom resource).
pub fn to_go_json_form(api_version: &str, kind: &str, object: &mut Value) -> bool {
    walk(api_version, kind, object, Pass::Stored)
}

/// Adds, at any depth of a body of `(api_version, kind)` about to be decoded into the
/// kind's type, the zero value of each unset non-pointer struct (with its scalars and
/// the lists the type requires, without the nulls of times), as decoding into
/// upstream's Go struct has it. `false` when the kind has no message.
pub fn add_go_zero_structs(api_version: &str, kind: &str, body: &mut Value) -> bool {
    walk(api_version, kind, body, Pass::Decoding)
}

fn walk(api_version: &str, kind: &str, object: &mut Value, pass: Pass) -> bool {
    let Some(index) = crate::message_for(api_version, kind) else {
        return false;
    };
    go_form_in(index, object, 0, pass);
    true
}

/// Adds what Go writes for the unset fields of message `index` (and of the messages
/// inlined into it, whose fields share the object): null for a non-pointer time, the
/// zero value of a non-pointer struct.
fn add_unset_fields(index: u16, members: &mut Map<String, Value>, depth: usize, pass: Pass) {
    if depth > MAX_DEPTH {
        return;
    }
    for field in message(index).fields {
        let Kind::M(inner) = field.kind else {
            continue;
        };
        if field.inline() {
            add_unset_fields(inner, members, depth + 1, pass);
            continue;
        }
        // A null struct decodes into Go as the zero value, like an absent one.
        let unset = members.get(field.json).is_none_or(Value::is_null);
        if field.unset_is_null() && pass == Pass::Stored {
            if unset {
                members.insert(field.json.to_owned(), Value::Null);
            }
        } else if field.zero_is_struct() && unset && !message(inner).array {
            members.insert(field.json.to_owned(), go_zero(inner, depth + 1, pass));
        }
    }
}

/// What Go's JSON encoder writes for the zero value of message `index`'s struct: its
/// scalars without `omitempty` as zeros, its times null, its structs their zeros. Its
/// lists and maps are left out, but for those k8s-openapi's types require and write
/// empty (`[]` where Go writes null for a nil one): every object passes through those
/// types, and this way it comes out of them as it went in.
fn go_zero(index: u16, depth: usize, pass: Pass) -> Value {
    let mut members = Map::new();
    scalar_zeros(index, &mut members, depth);
    add_unset_fields(index, &mut members, depth, pass);
    Value::Object(members)
}

fn scalar_zeros(index: u16, members: &mut Map<String, Value>, depth: usize) {
    if depth > MAX_DEPTH {
        return;
    }
    for field in message(index).fields {
        if field.written_empty() {
            let empty = if field.repeated() {
                Value::Array(Vec::new())
            } else {
                Value::Object(Map::new())
            };
            members.insert(field.json.to_owned(), empty);
            continue;
        }
        if field.repeated() || field.omitempty() || field.nullable() {
            continue;
        }
        let zero = match field.kind {
            Kind::S => Value::String(String::new()),
            Kind::Bool => Value::Bool(false),
            Kind::I32 | Kind::I64 | Kind::F64 => Value::from(0),
            Kind::M(inner) if field.inline() => {
                scalar_zeros(inner, members, depth + 1);
                continue;
            }
            // A nil `[]byte` is a slice: null in Go, left out here as the others.
            Kind::B | Kind::M(_) | Kind::MapS | Kind::MapB | Kind::MapM(_) => continue,
        };
        members.insert(field.json.to_owned(), zero);
    }
}

fn go_form_in(index: u16, value: &mut Value, depth: usize, pass: Pass) {
    if depth > MAX_DEPTH || special(index).is_some() || message(index).array {
        return;
    }
    let Value::Object(members) = value else {
        return;
    };
    members.retain(|name, member| {
        let field = match find(index, name) {
            Some(Slot::Direct(f) | Slot::Inline(_, f)) => f,
            None => return true,
        };
        match (field.kind, member) {
            (Kind::M(inner), Value::Array(items)) if field.repeated() => {
                for item in items {
                    go_form_in(inner, item, depth + 1, pass);
                }
                true
            }
            (Kind::M(inner), member) => {
                go_form_in(inner, member, depth + 1, pass);
                true
            }
            (Kind::MapM(inner), Value::Object(entries)) => {
                for entry in entries.values_mut() {
                    go_form_in(inner, entry, depth + 1, pass);
                }
                true
            }
            (_, member) => {
                pass == Pass::Decoding
                    || !(field.omitempty() && !field.repeated() && is_zero(member))
            }
        }
    });
    add_unset_fields(index, members, depth, pass);
}
