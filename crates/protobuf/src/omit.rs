//! Go's `omitempty` on JSON that did not come through Go: the zero value (`0`, `""`,
//! `false`) of a non-pointer scalar field tagged `omitempty` is left out, as upstream's
//! apiserver leaves it out by decoding every body into its Go struct and encoding that.

use serde_json::Value;

use crate::codec::{MAX_DEPTH, is_zero};
use crate::table::{Kind, message, special};
use crate::transcode::{Slot, find};

/// Drops, at any depth of an object of `(api_version, kind)`, the members Go's JSON
/// encoding would not write: zeros of non-pointer `omitempty` scalars. Members the table
/// does not know are kept. `false` when the kind has no message (a custom resource).
pub fn omit_go_zero_values(api_version: &str, kind: &str, object: &mut Value) -> bool {
    let Some(index) = crate::message_for(api_version, kind) else {
        return false;
    };
    omit_in(index, object, 0);
    true
}

fn omit_in(index: u16, value: &mut Value, depth: usize) {
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
                    omit_in(inner, item, depth + 1);
                }
                true
            }
            (Kind::M(inner), member) => {
                omit_in(inner, member, depth + 1);
                true
            }
            (Kind::MapM(inner), Value::Object(entries)) => {
                for entry in entries.values_mut() {
                    omit_in(inner, entry, depth + 1);
                }
                true
            }
            (_, member) => !(field.omitempty() && !field.repeated() && is_zero(member)),
        }
    });
}
