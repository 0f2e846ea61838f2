//! A call's arguments, checked before its tool reads them — in kiki's words, and by the
//! tool's input schema alone. Each tool's parameters are declared once, as a type (see
//! `params.rs`); its schema, made from that type, is what `tools/list` shows and what is
//! checked here: the parameter names (an unknown one is refused, naming those the tool
//! takes), each parameter's type (`content: must be a string, got 5`), and the API's
//! length limits, its `maxLength`s (kikid checks them too, with the same words). The
//! length check runs here as well so that an over-long argument of any size — even one
//! kikid's message limit would refuse first, or a request line too long to keep (see
//! [`over_long`]) — gets the same error: `content: must be at most 100000 characters, got N`.
//! Ranges and the rest are kikid's.

use rmcp::handler::server::common::FromContextPart;
use rmcp::handler::server::tool::{ToolCallContext, schema_for_input};
use rmcp::model::{CallToolResponse, CallToolResult, ContentBlock, ErrorData, JsonObject};
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::skim;

/// Why a call failed, as the agent reads it: a tool error (`isError`) with this text.
#[derive(Debug)]
pub struct Refused(pub String);

impl Refused {
    pub fn parameter(name: &str, what: impl std::fmt::Display) -> Self {
        Self(format!("invalid_argument: {name}: {what}"))
    }
}

impl rmcp::handler::server::tool::IntoCallToolResult for Refused {
    fn into_call_tool_result(self) -> Result<CallToolResponse, ErrorData> {
        Ok(CallToolResult::error(vec![ContentBlock::text(self.0)]).into())
    }
}

pub fn unknown_tool(tool: &str) -> Refused {
    Refused(format!("not_found: no tool named {tool:?}; tools/list names them"))
}

/// A tool's parameters of type `T`, read from the call's arguments once they pass
/// [`check`]; a refusal is the call's answer (a tool error), never a protocol error. Named
/// as rmcp's own extractor is, so that `#[tool]` makes the tool's input schema from `T`.
pub struct Parameters<T>(pub Result<T, Refused>);

impl<S, T> FromContextPart<ToolCallContext<'_, S>> for Parameters<T>
where
    T: DeserializeOwned + schemars::JsonSchema + 'static,
{
    fn from_context_part(context: &mut ToolCallContext<'_, S>) -> Result<Self, ErrorData> {
        Ok(Self(read(context.arguments.take().unwrap_or_default())))
    }
}

impl<T: schemars::JsonSchema> schemars::JsonSchema for Parameters<T> {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        T::schema_name()
    }

    fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        T::json_schema(generator)
    }
}

/// `arguments` as `T`, checked against `T`'s schema first.
pub fn read<T: DeserializeOwned + schemars::JsonSchema + 'static>(
    arguments: JsonObject,
) -> Result<T, Refused> {
    let schema = schema_for_input::<T>().map_err(|e| Refused(format!("internal: {e}")))?;
    check(&schema, &arguments)?;
    // Whatever the checks let through fits `T`; anything else is said as serde says it.
    serde_json::from_value(Value::Object(arguments)).map_err(|e| Refused(format!("invalid_argument: {e}")))
}

/// Checks `arguments` against `schema`: unknown names first, then lengths, then types,
/// each in the schema's order.
pub fn check(schema: &JsonObject, arguments: &JsonObject) -> Result<(), Refused> {
    check_object(schema, arguments, "")
}

fn check_object(schema: &JsonObject, arguments: &JsonObject, prefix: &str) -> Result<(), Refused> {
    known(schema, arguments.keys().map(String::as_str), prefix)?;
    let string = |name: &str| arguments.get(name).map(Value::is_string);
    for (name, _) in properties(schema) {
        if let (Some(Value::String(text)), Some(max)) =
            (arguments.get(name), max_chars(schema, name, &string))
        {
            let chars = text.chars().count();
            if chars > max {
                return Err(too_long(&format!("{prefix}{name}"), max, chars));
            }
        }
    }
    for (name, property) in properties(schema) {
        if let Some(value) = arguments.get(name) {
            check_type(&format!("{prefix}{name}"), property, value)?;
        }
    }
    Ok(())
}

/// The tool error for a call whose request line was too long to keep (see the transport):
/// the one it would get whole — an unknown tool or parameter, or the first argument over
/// its length limit — if any. `schema` is the tool's input schema, `None` for no such tool.
pub fn over_long(tool: &str, schema: Option<&JsonObject>, arguments: &[skim::Argument]) -> Option<String> {
    let Some(schema) = schema else {
        return Some(unknown_tool(tool).0);
    };
    if let Err(refused) = known(schema, arguments.iter().map(|a| a.name.as_str()), "") {
        return Some(refused.0);
    }
    let string = |name: &str| arguments.iter().find(|a| a.name == name).map(|a| a.chars.is_some());
    arguments.iter().find_map(|argument| {
        let (max, chars) = (max_chars(schema, &argument.name, &string)?, argument.chars?);
        (chars > max).then(|| too_long(&argument.name, max, chars).0)
    })
}

fn too_long(name: &str, max: usize, chars: usize) -> Refused {
    Refused::parameter(name, format!("must be at most {max} characters, got {chars}"))
}

/// The schema's properties, in its order.
fn properties(schema: &JsonObject) -> impl Iterator<Item = (&String, &Value)> {
    schema.get("properties").and_then(Value::as_object).into_iter().flatten()
}

/// Refuses a name the schema does not have, unless it takes any (`additionalProperties`
/// not `false`: Claude Code's permission prompt, whose arguments may grow).
fn known<'a>(
    schema: &JsonObject,
    mut names: impl Iterator<Item = &'a str>,
    prefix: &str,
) -> Result<(), Refused> {
    if schema.get("additionalProperties") != Some(&Value::Bool(false)) {
        return Ok(());
    }
    let Some(unknown) = names.find(|name| !properties(schema).any(|(known, _)| known == name)) else {
        return Ok(());
    };
    let takes = properties(schema).map(|(name, _)| name.as_str()).collect::<Vec<_>>().join(", ");
    Err(match (prefix, schema.get("title").and_then(Value::as_str)) {
        ("", _) => Refused::parameter(unknown, format!("not a parameter of this tool (it takes {takes})")),
        (_, title) => Refused::parameter(
            &format!("{prefix}{unknown}"),
            format!("not a {}'s field (it takes {takes})", title.unwrap_or("value")),
        ),
    })
}

/// A parameter's length limit in characters: its `maxLength`, or a narrower one where the
/// schema's `if` holds (a room post's content: `if` the call has a `room` string, `then`
/// the room's limit). `string` says whether an argument is there, and is a string.
fn max_chars(schema: &JsonObject, name: &str, string: &dyn Fn(&str) -> Option<bool>) -> Option<usize> {
    let max_length = |properties: Option<&Value>| properties?.get(name)?.get("maxLength")?.as_u64();
    let narrowed = match (schema.get("if"), schema.get("then")) {
        (Some(condition), Some(then)) if holds(condition, string) => max_length(then.get("properties")),
        _ => None,
    };
    let max = narrowed.or_else(|| max_length(schema.get("properties")))?;
    usize::try_from(max).ok()
}

/// Whether a condition of the shape `{required: [..], properties: {name: {type: "string"}}}`
/// holds: every name required is there, and a string where it must be.
fn holds(condition: &Value, string: &dyn Fn(&str) -> Option<bool>) -> bool {
    let required = condition["required"].as_array().into_iter().flatten().filter_map(Value::as_str);
    required.into_iter().all(|name| match string(name) {
        None => false,
        Some(is_string) => is_string || condition["properties"][name]["type"] != "string",
    })
}

/// The type a property's schema names besides `null` (which every parameter takes as absent).
fn type_of(property: &Value) -> Option<&str> {
    match &property["type"] {
        Value::String(kind) => Some(kind),
        Value::Array(kinds) => kinds.iter().filter_map(Value::as_str).find(|kind| *kind != "null"),
        _ => None,
    }
}

/// Checks a value against its property's type: strings, integers kiki reads as `u32`,
/// lists of strings, lists of objects (each checked as a call's arguments are). Other
/// types are read as they come.
fn check_type(field: &str, property: &Value, value: &Value) -> Result<(), Refused> {
    if value.is_null() {
        return Ok(());
    }
    match type_of(property) {
        Some("string") if !value.is_string() => {
            Err(Refused::parameter(field, format!("must be a string, got {value}")))
        }
        Some("integer") => {
            let fits = match property["format"].as_str() {
                Some("uint32") => value.as_u64().is_some_and(|n| u32::try_from(n).is_ok()),
                _ => value.as_u64().is_some(),
            };
            if fits {
                Ok(())
            } else {
                Err(Refused::parameter(field, format!("must be a non-negative integer, got {value}")))
            }
        }
        Some("array") => check_items(field, &property["items"], value),
        _ => Ok(()),
    }
}

fn check_items(field: &str, items: &Value, value: &Value) -> Result<(), Refused> {
    let object = type_of(items) == Some("object");
    // `{session_id, …}`: an object by what it must have.
    let shape = || {
        let required = items["required"].as_array().into_iter().flatten().filter_map(Value::as_str);
        format!("{{{}, …}}", required.collect::<Vec<_>>().join(", "))
    };
    let Value::Array(values) = value else {
        let list = if object { format!("objects {}", shape()) } else { "strings".into() };
        return Err(Refused::parameter(field, format!("must be a list of {list}, got {value}")));
    };
    for (i, item) in values.iter().enumerate() {
        match (item, items.as_object()) {
            (Value::Object(members), Some(schema)) if object => {
                check_object(schema, members, &format!("{field}[{i}]."))?;
            }
            (_, _) if object => {
                let field = format!("{field}[{i}]");
                return Err(Refused::parameter(&field, format!("must be an object {}, got {item}", shape())));
            }
            (_, _) if type_of(items) == Some("string") && !item.is_string() => {
                return Err(Refused::parameter(field, format!("must be a list of strings, got {item}")));
            }
            _ => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn object(value: Value) -> JsonObject {
        match value {
            Value::Object(map) => map,
            _ => panic!("not an object"),
        }
    }

    fn schema() -> JsonObject {
        object(json!({
            "type": "object", "additionalProperties": false,
            "properties": {
                "room": {"type": ["string", "null"]},
                "content": {"type": ["string", "null"], "maxLength": 10},
                "limit": {"type": ["integer", "null"], "format": "uint32"},
                "mentions": {"type": ["array", "null"], "items": {"type": "string"}},
                "targets": {"type": "array", "items": {
                    "type": "object", "title": "target", "additionalProperties": false,
                    "required": ["session_id"], "properties": {"session_id": {"type": "string"}}
                }}
            },
            "if": {"required": ["room"], "properties": {"room": {"type": "string"}}},
            "then": {"properties": {"content": {"maxLength": 4}}}
        }))
    }

    fn said(arguments: Value) -> String {
        check(&schema(), &object(arguments)).expect_err("refused").0
    }

    #[test]
    fn arguments_are_checked_in_kikis_words() {
        assert!(check(&schema(), &object(json!({"content": "0123456789", "limit": null}))).is_ok());
        assert_eq!(
            said(json!({"content": "x", "nope": 1})),
            "invalid_argument: nope: not a parameter of this tool (it takes room, content, limit, mentions, targets)"
        );
        assert_eq!(
            said(json!({"content": "01234567890"})),
            "invalid_argument: content: must be at most 10 characters, got 11"
        );
        // A room's content has the narrower limit; a room that is no string is no room.
        assert_eq!(
            said(json!({"room": "r", "content": "01234"})),
            "invalid_argument: content: must be at most 4 characters, got 5"
        );
        assert!(
            said(json!({"room": 5, "content": "01234"}))
                .starts_with("invalid_argument: room: must be a string, got 5")
        );
        assert_eq!(
            said(json!({"limit": -1})),
            "invalid_argument: limit: must be a non-negative integer, got -1"
        );
        assert_eq!(
            said(json!({"limit": 1u64 << 32})),
            "invalid_argument: limit: must be a non-negative integer, got 4294967296"
        );
        assert_eq!(
            said(json!({"mentions": ["a", 1]})),
            "invalid_argument: mentions: must be a list of strings, got 1"
        );
        assert_eq!(
            said(json!({"mentions": "a"})),
            "invalid_argument: mentions: must be a list of strings, got \"a\""
        );
        assert_eq!(
            said(json!({"targets": [{"session_id": "a"}, 7]})),
            "invalid_argument: targets[1]: must be an object {session_id, …}, got 7"
        );
        assert_eq!(
            said(json!({"targets": [{"session_id": "a", "x": 1}]})),
            "invalid_argument: targets[0].x: not a target's field (it takes session_id)"
        );
        assert_eq!(
            said(json!({"targets": [{"session_id": 1}]})),
            "invalid_argument: targets[0].session_id: must be a string, got 1"
        );
    }

    fn argument(name: &str, bytes: usize, chars: Option<usize>) -> skim::Argument {
        skim::Argument { name: name.into(), bytes, chars }
    }

    #[test]
    fn an_over_long_call_gets_the_error_it_would_get_whole() {
        let schema = schema();
        let content = argument("content", 5 << 20, Some(5 << 20));
        let said = |arguments: &[skim::Argument]| over_long("T", Some(&schema), arguments);
        assert_eq!(
            said(&[argument("limit", 1, None), content.clone()]).as_deref(),
            Some("invalid_argument: content: must be at most 10 characters, got 5242880")
        );
        assert_eq!(
            said(&[argument("room", 10, Some(8)), content.clone()]).as_deref(),
            Some("invalid_argument: content: must be at most 4 characters, got 5242880")
        );
        assert!(said(&[argument("nope", 1, None)]).is_some_and(|s| s.contains("nope: not a parameter")));
        assert_eq!(said(&[argument("mentions", 5 << 20, None)]), None);
        assert!(
            over_long("Nope", None, &[]).is_some_and(|s| s.starts_with("not_found: no tool named \"Nope\""))
        );
        // A tool that takes any arguments refuses none.
        let open = object(json!({"type": "object", "properties": {"input": {"type": "object"}}}));
        assert_eq!(
            over_long("T", Some(&open), &[argument("input", 5 << 20, None), argument("x", 1, None)]),
            None
        );
    }
}
