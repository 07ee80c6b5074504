//! JSON that did not come through Go, made what Go's encoder writes for the same
//! struct, as upstream's apiserver does by decoding every body into its Go struct and
//! encoding that: the zero value (`0`, `""`, `false`) of a non-pointer scalar field
//! tagged `omitempty` is left out, and an unset non-pointer time (`metav1.Time`,
//! `MicroTime`) is written as `null`, `omitempty` or not, since encoding/json never
//! finds a struct empty (`creationTimestamp: null` in a pod template,
//! `lastProbeTime: null` in a pod condition).

use serde_json::{Map, Value};

use crate::codec::{MAX_DEPTH, is_zero};
use crate::table::{Kind, message, special};
use crate::transcode::{Slot, find};

/// Rewrites, at any depth of an object of `(api_version, kind)`, the members as Go's
/// JSON encoding of its struct has them: zeros of non-pointer `omitempty` scalars
/// dropped, unset non-pointer times added as null. Members the table does not know are
/// kept. `false` when the kind has no message (a custom resource).
pub fn to_go_json_form(api_version: &str, kind: &str, object: &mut Value) -> bool {
    let Some(index) = crate::message_for(api_version, kind) else {
        return false;
    };
    go_form_in(index, object, 0);
    true
}

/// Adds a null for each unset non-pointer time of message `index` (and of the
/// messages inlined into it, whose fields share the object).
fn add_unset_times(index: u16, members: &mut Map<String, Value>) {
    for field in message(index).fields {
        if field.unset_is_null() && !members.contains_key(field.json) {
            members.insert(field.json.to_owned(), Value::Null);
        } else if field.inline()
            && let Kind::M(inner) = field.kind
        {
            add_unset_times(inner, members);
        }
    }
}

fn go_form_in(index: u16, value: &mut Value, depth: usize) {
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
                    go_form_in(inner, item, depth + 1);
                }
                true
            }
            (Kind::M(inner), member) => {
                go_form_in(inner, member, depth + 1);
                true
            }
            (Kind::MapM(inner), Value::Object(entries)) => {
                for entry in entries.values_mut() {
                    go_form_in(inner, entry, depth + 1);
                }
                true
            }
            (_, member) => !(field.omitempty() && !field.repeated() && is_zero(member)),
        }
    });
    add_unset_times(index, members);
}
