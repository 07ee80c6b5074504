//! How deeply a JSON value nests, measured without trusting it.
//!
//! serde_json refuses to read a document nested more than [`MAX_JSON_DEPTH`] arrays and
//! objects deep, and most of this server's walks over objects recurse. A request body
//! cannot be deeper (it is read with that limit), but a JSON patch can build a deeper
//! object from a shallow body (an `add` at a deep path, a `copy` into itself), and the
//! stored form of an object is deeper than the object (its `managedFields` repeat its
//! fields one level further down). Both are checked against this bound, so that a
//! hostile request neither overflows a stack nor stores an object that cannot be read
//! back.

use serde_json::Value;

/// serde_json's recursion limit when it reads a document: arrays and objects nested
/// this deep are read, one more is refused.
pub const MAX_JSON_DEPTH: usize = 128;

/// The nesting of `v` in arrays and objects (a scalar is 0) when it is at most `cap`;
/// some number above `cap` otherwise. The walk never goes more than `cap + 1` levels
/// down, so its stack is bounded whatever `v` holds.
pub fn depth_up_to(v: &Value, cap: usize) -> usize {
    match v {
        Value::Array(items) => deepest_child(items.iter(), cap),
        Value::Object(fields) => deepest_child(fields.values(), cap),
        _ => 0,
    }
}

fn deepest_child<'a>(children: impl Iterator<Item = &'a Value>, cap: usize) -> usize {
    if cap == 0 {
        return 1;
    }
    let mut deepest = 0;
    for child in children {
        deepest = deepest.max(depth_up_to(child, cap - 1));
        if deepest >= cap {
            break;
        }
    }
    1 + deepest
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn nested(levels: usize) -> Value {
        let mut v = json!("leaf");
        for _ in 0..levels {
            v = json!({"a": [v]});
        }
        v
    }

    #[test]
    fn counts_arrays_and_objects_up_to_the_cap() {
        assert_eq!(depth_up_to(&json!(1), 5), 0);
        assert_eq!(depth_up_to(&json!({}), 5), 1);
        assert_eq!(depth_up_to(&json!({"a": [1, {"b": []}], "c": 2}), 5), 4);
        assert_eq!(depth_up_to(&nested(3), 6), 6);
        assert!(depth_up_to(&nested(3), 5) > 5);
        assert!(depth_up_to(&nested(3), 0) > 0);
    }

    #[test]
    fn a_value_far_deeper_than_the_cap_costs_only_the_cap_in_stack() {
        let mut v = Value::Null;
        for _ in 0..200_000 {
            v = Value::Array(vec![v]);
        }
        assert_eq!(depth_up_to(&v, MAX_JSON_DEPTH), MAX_JSON_DEPTH + 1);
        // Taken apart a level at a time: serde_json's own Drop would recurse.
        while let Value::Array(mut items) = v {
            v = items.pop().unwrap_or(Value::Null);
        }
    }
}
