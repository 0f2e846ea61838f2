//! A look at a request line too long to keep in memory. Fed the line's bytes as they are
//! read, it keeps only what an answer needs: the top-level `id` and `method`, the tool's
//! `params.name`, and the size of each `params.arguments` member (a string's length in
//! characters, as kikid counts them). So an over-long call of any size is refused with the
//! same limit error as one just over its limit, under the id it came with.
//!
//! It is a tokenizer, not a validator: it follows strings (and their escapes) and nesting,
//! and a line that is not JSON simply yields less.

use serde_json::Value;

/// Nesting levels followed; deeper ones are only counted (a line of `[[[[…` costs nothing).
const LEVELS_KEPT: usize = 8;
/// The most of a key or of an `id` / `method` / `name` value kept; a longer one is unreadable.
const KEPT_MAX: usize = 1024;

/// An argument of the call, as far as its size goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Argument {
    pub name: String,
    /// Its value's length in bytes, as written in the line.
    pub bytes: usize,
    /// A string value's length in characters (Unicode scalar values); `None` for another value.
    pub chars: Option<usize>,
}

/// What the line showed.
#[derive(Debug, Default)]
pub struct Skim {
    /// The line's length in bytes.
    pub bytes: usize,
    /// The top-level `id`, if it was a string or a number.
    pub id: Option<Value>,
    pub method: Option<String>,
    /// `params.name`: the tool of a `tools/call`.
    pub tool: Option<String>,
    pub arguments: Vec<Argument>,
    levels: Vec<Level>,
    depth: usize,
    string: Option<Text>,
    /// The raw bytes of what is being kept (a key, or the value of `id`, `method`, `name`).
    kept: Option<Kept>,
    /// The `params.arguments` member being read: its index and where its value started.
    argument: Option<(usize, usize)>,
    seen_value: bool,
}

/// What an object level is, by where it sits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Place {
    /// The message itself.
    Message,
    /// `params`.
    Params,
    /// `params.arguments`.
    Arguments,
    Other,
}

#[derive(Debug)]
struct Level {
    object: bool,
    place: Place,
    /// In an object: the next string is a key.
    expect_key: bool,
    /// The member whose value is being read.
    member: Member,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Member {
    None,
    Id,
    Method,
    Params,
    Name,
    Arguments,
    Argument,
}

#[derive(Debug)]
struct Text {
    key: bool,
    escape: bool,
    /// Hex digits of a `\u` escape still to come, and the code so far.
    hex: u8,
    code: u32,
    chars: usize,
}

#[derive(Debug)]
struct Kept {
    /// A key (else a member's value).
    key: bool,
    bytes: Vec<u8>,
    too_long: bool,
}

impl Kept {
    fn new(key: bool) -> Self {
        Self { key, bytes: Vec::new(), too_long: false }
    }

    fn push(&mut self, b: u8) {
        if self.bytes.len() < KEPT_MAX {
            self.bytes.push(b);
        } else {
            self.too_long = true;
        }
    }
}

impl Skim {
    /// Takes the next bytes of the line (without its newline).
    pub fn feed(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.byte(b);
            self.bytes += 1;
        }
    }

    fn byte(&mut self, b: u8) {
        if let Some(kept) = &mut self.kept {
            kept.push(b);
        }
        if self.string.is_some() {
            self.in_string(b);
            return;
        }
        match b {
            b'"' => self.open_string(),
            b'{' | b'[' => self.open(b == b'{'),
            b'}' | b']' => self.close(),
            b':' => self.colon(),
            b',' => self.comma(),
            _ => {}
        }
    }

    /// The followed level the tokenizer is at, if it is followed.
    fn level(&mut self) -> Option<&mut Level> {
        if self.depth == 0 || self.depth > self.levels.len() {
            return None;
        }
        self.levels.last_mut()
    }

    fn open_string(&mut self) {
        let depth = self.depth;
        let key = self.level().is_some_and(|level| level.object && level.expect_key);
        self.string = Some(Text { key, escape: false, hex: 0, code: 0, chars: 0 });
        if key && depth <= 3 && self.kept.is_none() {
            let mut kept = Kept::new(true);
            kept.push(b'"');
            self.kept = Some(kept);
        }
    }

    fn in_string(&mut self, b: u8) {
        let Some(text) = &mut self.string else { return };
        if text.hex > 0 {
            text.code = text.code * 16 + char::from(b).to_digit(16).unwrap_or(0);
            text.hex -= 1;
            // A high surrogate is counted with the low one after it: one character.
            if text.hex == 0 && !(0xD800..=0xDBFF).contains(&text.code) {
                text.chars += 1;
            }
        } else if text.escape {
            text.escape = false;
            if b == b'u' {
                text.hex = 4;
                text.code = 0;
            } else {
                text.chars += 1;
            }
        } else if b == b'\\' {
            text.escape = true;
        } else if b == b'"' {
            self.close_string();
        } else if b & 0xC0 != 0x80 {
            // Not a UTF-8 continuation byte: a character starts here.
            text.chars += 1;
        }
    }

    fn close_string(&mut self) {
        let Some(text) = self.string.take() else { return };
        if text.key {
            if let Some(kept) = self.kept.take_if(|kept| kept.key) {
                let name =
                    if kept.too_long { None } else { serde_json::from_slice::<String>(&kept.bytes).ok() };
                self.key(name);
            }
            return;
        }
        // A string that is an argument's whole value: its length in characters.
        if let (Some((index, _)), Some(level)) = (self.argument, self.levels.get(self.depth.wrapping_sub(1)))
            && self.depth == self.levels.len()
            && level.place == Place::Arguments
            && let Some(argument) = self.arguments.get_mut(index)
        {
            argument.chars = Some(text.chars);
        }
    }

    /// A key was read in the current object: what its value will be.
    fn key(&mut self, name: Option<String>) {
        let Some(level) = self.level() else { return };
        let place = level.place;
        let member = match (place, name.as_deref()) {
            (Place::Message, Some("id")) => Member::Id,
            (Place::Message, Some("method")) => Member::Method,
            (Place::Message, Some("params")) => Member::Params,
            (Place::Params, Some("name")) => Member::Name,
            (Place::Params, Some("arguments")) => Member::Arguments,
            (Place::Arguments, _) => Member::Argument,
            _ => Member::None,
        };
        level.member = member;
        if member == Member::Argument {
            let name = name.unwrap_or_else(|| "(an unreadable name)".into());
            self.arguments.push(Argument { name, bytes: 0, chars: None });
        }
    }

    fn colon(&mut self) {
        let at = self.bytes + 1;
        let Some(level) = self.level() else { return };
        if !level.object {
            return;
        }
        level.expect_key = false;
        match level.member {
            Member::Id | Member::Method | Member::Name => self.kept = Some(Kept::new(false)),
            Member::Argument => self.argument = Some((self.arguments.len() - 1, at)),
            _ => {}
        }
    }

    fn comma(&mut self) {
        self.end_member();
        if let Some(level) = self.level()
            && level.object
        {
            level.expect_key = true;
        }
    }

    /// The current object's member ends here (at `,` or `}`): keep what was read of it.
    fn end_member(&mut self) {
        let at = self.bytes;
        let Some(level) = self.level() else { return };
        if !level.object {
            return;
        }
        let member = std::mem::replace(&mut level.member, Member::None);
        match member {
            Member::Id | Member::Method | Member::Name => {
                let Some(kept) = self.kept.take() else { return };
                // The `,` or `}` that ended it was kept too.
                let raw = &kept.bytes[..kept.bytes.len().saturating_sub(1)];
                let value = if kept.too_long { None } else { serde_json::from_slice::<Value>(raw).ok() };
                match (member, value) {
                    (Member::Id, Some(id @ (Value::String(_) | Value::Number(_)))) => self.id = Some(id),
                    (Member::Method, Some(Value::String(method))) => self.method = Some(method),
                    (Member::Name, Some(Value::String(tool))) => self.tool = Some(tool),
                    _ => {}
                }
            }
            Member::Argument => {
                if let Some((index, start)) = self.argument.take()
                    && let Some(argument) = self.arguments.get_mut(index)
                {
                    argument.bytes = at.saturating_sub(start);
                }
            }
            _ => {}
        }
    }

    fn open(&mut self, object: bool) {
        let top = self.depth == 0 && !self.seen_value;
        self.seen_value = true;
        let place = if top && object {
            Place::Message
        } else {
            match self.level().map(|level| (level.place, level.member)) {
                Some((Place::Message, Member::Params)) if object => Place::Params,
                Some((Place::Params, Member::Arguments)) if object => Place::Arguments,
                _ => Place::Other,
            }
        };
        // Only a level whose parent is followed can be followed.
        if self.depth == self.levels.len() && self.levels.len() < LEVELS_KEPT {
            self.levels.push(Level { object, place, expect_key: object, member: Member::None });
        }
        self.depth += 1;
    }

    fn close(&mut self) {
        self.end_member();
        if self.depth == 0 {
            return;
        }
        if self.depth == self.levels.len() {
            self.levels.pop();
        }
        self.depth -= 1;
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn skim(line: &str) -> Skim {
        let mut skim = Skim::default();
        // In pieces, as a line arrives.
        for piece in line.as_bytes().chunks(7) {
            skim.feed(piece);
        }
        skim
    }

    fn argument(name: &str, bytes: usize, chars: Option<usize>) -> Argument {
        Argument { name: name.into(), bytes, chars }
    }

    #[test]
    fn a_call_shows_its_id_method_tool_and_argument_sizes() {
        let content = "é".repeat(50);
        let line = format!(
            r#"{{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{{"name":"ThreadSend","arguments":{{"session_id":"th_1","content":"{content}","mentions":["a","b"]}}}}}}"#
        );
        let seen = skim(&line);
        assert_eq!(seen.bytes, line.len());
        assert_eq!(seen.id, Some(json!(7)));
        assert_eq!(seen.method.as_deref(), Some("tools/call"));
        assert_eq!(seen.tool.as_deref(), Some("ThreadSend"));
        assert_eq!(
            seen.arguments,
            [
                argument("session_id", 6, Some(4)),
                argument("content", 102, Some(50)),
                argument("mentions", 9, None)
            ]
        );
    }

    #[test]
    fn the_id_may_come_last_and_nested_ids_are_not_it() {
        let line = r#"{"method":"tools/call","params":{"name":"T","arguments":{"id":"inner","x":{"id":9}}},"jsonrpc":"2.0","id":"outer"}"#;
        let seen = skim(line);
        assert_eq!(seen.id, Some(json!("outer")));
        assert_eq!(seen.arguments, [argument("id", 7, Some(5)), argument("x", 8, None)]);
        // Whitespace anywhere, and an id that is not a string or number, is no id.
        let seen = skim(r#" { "id" : [1] , "method" : "ping" } "#);
        assert_eq!((seen.id, seen.method.as_deref()), (None, Some("ping")));
    }

    #[test]
    fn escapes_and_structure_inside_strings_are_followed() {
        // `\"`, `\\`, `\u00e9`, a surrogate pair (one character), and `{`, `,`, `:` in text.
        let line =
            r#"{"id":"a\"b","params":{"name":"N","arguments":{"content":"x\\\"\u00e9\ud83d\ude00{,:}"}}}"#;
        let seen = skim(line);
        assert_eq!(seen.id, Some(json!("a\"b")));
        assert_eq!(seen.tool.as_deref(), Some("N"));
        assert_eq!(seen.arguments[0].chars, Some(9), "{:?}", seen.arguments);
        let escaped_key = skim(r#"{"params":{"arguments":{"con\u0074ent":"x"}}}"#);
        assert_eq!(escaped_key.arguments[0].name, "content");
    }

    #[test]
    fn what_is_not_a_request_shows_nothing() {
        for line in ["not json at all", "[1, 2, {\"id\": 3}]", "\"id\"", "{{{{{{{{{{{{{{{{{"] {
            let seen = skim(line);
            assert_eq!((seen.id, seen.method, seen.tool), (None, None, None), "{line}");
            assert!(seen.arguments.is_empty(), "{line}");
        }
        let deep = format!("{{\"id\": 1, \"x\": {}{}}}", "[".repeat(100_000), "]".repeat(100_000));
        let seen = skim(&deep);
        assert_eq!(seen.id, Some(json!(1)));
        assert!(seen.levels.is_empty() && seen.depth == 0);
    }

    #[test]
    fn a_long_id_or_key_is_not_kept() {
        let long = "k".repeat(KEPT_MAX * 2);
        let seen = skim(&format!(r#"{{"id":"{long}","params":{{"arguments":{{"{long}":1}}}}}}"#));
        assert_eq!(seen.id, None);
        assert_eq!(seen.arguments[0].name, "(an unreadable name)");
    }
}
