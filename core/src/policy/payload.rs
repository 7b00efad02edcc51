//! The checks a policy applies to an agent's payload: exact JSON, nesting, size,
//! the object an MCP tool takes, and the payload schema. Imports `spec`.
//!
//! The checks themselves exist only with the `payload-schema` feature (the one that
//! builds jsonschema): whoever admits payloads (the server) has it; signer-cli, which
//! reads policies but never admits a payload, builds without it. The refusal type is
//! always here, since the wire answers name it.

use crate::json::PayloadError;
use thiserror::Error;
#[cfg(feature = "payload-schema")]
use {super::spec::PolicySpec, crate::json, serde_json::Value};

/// The deepest nesting of arrays and objects a payload may have (the payload itself
/// counts as one). Responses wrap the payload in a few more levels, and common JSON
/// readers (serde_json, for one) stop at 128, so a payload must stay well below that for
/// agents and approvers to be able to read it back.
pub const MAX_PAYLOAD_NESTING: usize = 64;

/// The children of an array or object, with their pointer tokens.
#[cfg(feature = "payload-schema")]
type Children<'a> = Box<dyn Iterator<Item = (String, &'a Value)> + 'a>;

#[cfg(feature = "payload-schema")]
fn children(v: &Value) -> Option<Children<'_>> {
    match v {
        Value::Array(a) => Some(Box::new(
            a.iter().enumerate().map(|(i, x)| (i.to_string(), x)),
        )),
        Value::Object(m) => Some(Box::new(m.iter().map(|(k, x)| (k.clone(), x)))),
        _ => None,
    }
}

/// The first array or object nested deeper than `limit`, as a JSON pointer.
///
/// Iterative, so a hostile value cannot exhaust the stack here either, and its memory
/// is bounded by the nesting (one iterator and one pointer per open level), never by
/// the number of values: a wide array of a million members costs no more than a
/// short one.
#[cfg(feature = "payload-schema")]
fn too_deep(v: &Value, limit: usize) -> Option<String> {
    let root = children(v)?;
    if limit == 0 {
        return Some(String::new());
    }
    let mut open: Vec<(String, Children<'_>)> = vec![(String::new(), root)];
    while let Some((ptr, it)) = open.last_mut() {
        let Some((token, child)) = it.next() else {
            open.pop();
            continue;
        };
        if let Some(grand) = children(child) {
            let child_ptr = json::pointer_push(ptr, &token);
            if open.len() + 1 > limit {
                return Some(child_ptr);
            }
            open.push((child_ptr, grand));
        }
    }
    None
}

/// A payload the policy refuses.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum PayloadRefusal {
    /// JCS cannot carry it exactly.
    #[error(transparent)]
    Inexact(#[from] PayloadError),
    /// Larger than the policy's `max_payload_bytes`.
    #[error(
        "payload is {size} bytes in canonical form, over this kind's limit of {limit}: send less"
    )]
    TooLarge {
        /// Canonical size.
        size: usize,
        /// The policy's limit.
        limit: u64,
    },
    /// Nested deeper than [`MAX_PAYLOAD_NESTING`] arrays and objects.
    #[error(
        "payload nests more than {limit} arrays/objects deep at {}: flatten it",
        location(pointer)
    )]
    TooDeep {
        /// JSON pointer of the first value past the limit.
        pointer: String,
        /// The limit.
        limit: usize,
    },
    /// Breaks the policy's `payload_schema`.
    #[error(
        "payload does not match this kind's schema at {}: {message}",
        location(pointer)
    )]
    Schema {
        /// JSON pointer of the first failing value.
        pointer: String,
        /// The validator's message.
        message: String,
    },
}

/// Where in the payload a refusal points, for a message: an empty JSON pointer is the
/// payload itself, which a reader would otherwise see as "at : ..." (issue #36).
fn location(pointer: &str) -> String {
    if pointer.is_empty() {
        "the payload's root (the whole payload)".to_owned()
    } else {
        pointer.to_owned()
    }
}

impl PayloadRefusal {
    /// The JSON pointer of the offending value (`""` for the whole payload).
    pub fn pointer(&self) -> &str {
        match self {
            PayloadRefusal::Inexact(e) => &e.pointer,
            PayloadRefusal::TooLarge { .. } => "",
            PayloadRefusal::TooDeep { pointer, .. } | PayloadRefusal::Schema { pointer, .. } => {
                pointer
            }
        }
    }
}

/// Checks a payload against a policy's data and its compiled schema: exact JSON,
/// nesting, size of its canonical form, schema.
#[cfg(feature = "payload-schema")]
pub(super) fn check(
    payload: &Value,
    spec: &PolicySpec,
    schema: Option<&jsonschema::Validator>,
) -> Result<(), PayloadRefusal> {
    json::check_value(payload)?;
    if let Some(pointer) = too_deep(payload, MAX_PAYLOAD_NESTING) {
        return Err(PayloadRefusal::TooDeep {
            pointer,
            limit: MAX_PAYLOAD_NESTING,
        });
    }
    let size = json::canonical_bytes(payload).len();
    if size as u64 > spec.max_payload_bytes {
        return Err(PayloadRefusal::TooLarge {
            size,
            limit: spec.max_payload_bytes,
        });
    }
    if spec.executor.mcp_tool().is_some() && !payload.is_object() {
        return Err(PayloadRefusal::Schema {
            pointer: String::new(),
            message: "this kind calls a downstream MCP tool, whose arguments are a JSON object: send an object".into(),
        });
    }
    if let Some(schema) = schema {
        if let Some(e) = schema.iter_errors(payload).next() {
            return Err(PayloadRefusal::Schema {
                pointer: e.instance_path().to_string(),
                message: e.to_string(),
            });
        }
    }
    Ok(())
}
