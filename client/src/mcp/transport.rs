//! `kiki mcp`'s stdio: JSON-RPC lines in on stdin, out on stdout, with three guarantees
//! rmcp's own stdio transport does not give.
//!
//! - **Bounded memory.** A request takes one of [`CALLS_AT_ONCE`] places when it is read
//!   and gives it back once its answer is written to stdout; with every place taken, no
//!   more requests are read (the client's writes then block, as a pipe's back-pressure
//!   would). A client that stops reading stdout therefore holds at most that many answers
//!   in `kiki mcp`, never all of them. A call that parks for long (ThreadWait, a
//!   permission prompt) trades its place for one of [`PARKED_AT_ONCE`], so waits do not
//!   starve short calls. Writes go through one task and a queue of [`QUEUED_WRITES`]
//!   messages; a message the server sends counts as sent once its line is written, as over
//!   a pipe (a pushed channel message is delivered only then).
//! - **Every request line is answered.** A line that is not JSON gets `-32700` (id null);
//!   one that is JSON but no valid message `-32600`, keeping its id where it has one; a
//!   known method with params of the wrong shape (`tools/call` without an object of
//!   `arguments`) `-32602`. A line longer than [`LINE_MAX`] is not kept: it is read to its
//!   end through [`Skim`], and a `tools/call` gets the same tool error as any over-long
//!   argument (`content: must be at most 100000 characters, got N`), other requests `-32600`.
//! - Notifications are never answered, as JSON-RPC says; one that is not valid is dropped.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use rmcp::RoleServer;
use rmcp::model::{
    ClientJsonRpcMessage, ClientNotification, ClientRequest, ErrorCode, JsonRpcMessage, RequestId, Tool,
};
use rmcp::service::TxJsonRpcMessage;
use rmcp::transport::{StdioReader, StdioWriter, Transport};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc, oneshot};

use super::arguments;
use super::skim::Skim;

/// Requests read and not yet answered (their answers written), at most.
pub const CALLS_AT_ONCE: usize = 32;
/// Parked calls (ThreadWait, PermissionPrompt) at most, besides.
pub const PARKED_AT_ONCE: usize = 256;
/// Messages waiting for stdout, at most (answers hold their place until written).
const QUEUED_WRITES: usize = 16;
/// The longest request line kept whole: far above any call within kikid's limits (content
/// and prompts are at most 100,000 characters, a few hundred KB), below kikid's 4 MiB
/// message limit.
pub const LINE_MAX: usize = 4 * 1024 * 1024;
/// A line buffer grown past this is given back after its line.
const KEEP_CAPACITY: usize = 64 * 1024;

/// The places of the requests in flight (see the module docs), shared by the transport and
/// the server.
#[derive(Clone)]
pub struct Answers {
    calls: Arc<Semaphore>,
    parked: Arc<Semaphore>,
    held: Arc<Mutex<HashMap<RequestId, OwnedSemaphorePermit>>>,
}

impl Answers {
    fn new() -> Self {
        Self {
            calls: Arc::new(Semaphore::new(CALLS_AT_ONCE)),
            parked: Arc::new(Semaphore::new(PARKED_AT_ONCE)),
            held: Arc::default(),
        }
    }

    fn hold(&self, id: RequestId, place: OwnedSemaphorePermit) {
        self.places().insert(id, place);
    }

    /// The request's place, handed to the write of its answer (or dropped).
    fn release(&self, id: &RequestId) -> Option<OwnedSemaphorePermit> {
        self.places().remove(id)
    }

    /// The request `id` is about to wait for long: it gives its place to other calls and
    /// takes a parked one, if one is free (else it keeps its own).
    pub fn park(&self, id: &RequestId) {
        let Ok(parked) = self.parked.clone().try_acquire_owned() else { return };
        if let Some(place) = self.places().get_mut(id) {
            *place = parked;
        }
    }

    fn places(&self) -> std::sync::MutexGuard<'_, HashMap<RequestId, OwnedSemaphorePermit>> {
        self.held.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// One line of output, with the place of the request it answers and, for a message the
/// server sends, who waits for it to be written.
struct Outgoing {
    line: Vec<u8>,
    _place: Option<OwnedSemaphorePermit>,
    written: Option<oneshot::Sender<()>>,
}

/// The server side of stdio; see the module docs.
pub struct Stdio {
    lines: Lines,
    out: mpsc::Sender<Outgoing>,
    answers: Answers,
    /// A message read and not yet handed on: a request waiting for a place, or an answer
    /// of our own waiting for room in the queue. Kept here so that a `receive` dropped
    /// while it waits (rmcp polls it in a `select!`) loses nothing.
    held: Option<Held>,
    /// Every tool kiki has: what an over-long call is checked against.
    tools: Vec<Tool>,
}

enum Held {
    Request(Box<ClientJsonRpcMessage>, RequestId),
    Answer(Vec<u8>),
}

impl Stdio {
    /// stdin and stdout (non-blocking pipes where they are pipes), and the task writing
    /// stdout. The places are shared with the server through [`Stdio::answers`]; `tools`
    /// are the server's, for the answer to a call too long to read.
    pub fn start(tools: Vec<Tool>) -> (Self, tokio::task::JoinHandle<()>) {
        let (reader, writer) = rmcp::transport::stdio_pipes();
        let (out, queue) = mpsc::channel(QUEUED_WRITES);
        let writing = tokio::spawn(write_out(writer, queue));
        let stdio = Self { lines: Lines::new(reader), out, answers: Answers::new(), held: None, tools };
        (stdio, writing)
    }

    pub fn answers(&self) -> Answers {
        self.answers.clone()
    }
}

/// Writes each message as it comes, then says so and gives its request's place back. Ends
/// when stdout is closed or every sender is gone.
async fn write_out(mut stdout: StdioWriter, mut queue: mpsc::Receiver<Outgoing>) {
    while let Some(message) = queue.recv().await {
        if stdout.write_all(&message.line).await.is_err() || stdout.flush().await.is_err() {
            return;
        }
        if let Some(written) = message.written {
            let _ = written.send(());
        }
    }
}

fn line_of(message: &impl serde::Serialize) -> Vec<u8> {
    let mut line = serde_json::to_vec(message).unwrap_or_else(|e| {
        serde_json::to_vec(&json!({"jsonrpc": "2.0", "id": null, "error": {
            "code": ErrorCode::INTERNAL_ERROR.0, "message": format!("kiki mcp could not encode its answer: {e}")
        }}))
        .unwrap_or_default()
    });
    line.push(b'\n');
    line
}

impl Transport<RoleServer> for Stdio {
    type Error = std::io::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleServer>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        let place = match &item {
            JsonRpcMessage::Response(response) => self.answers.release(&response.id),
            JsonRpcMessage::Error(error) => error.id.as_ref().and_then(|id| self.answers.release(id)),
            _ => None,
        };
        // Sent once written, as over a pipe: a message pushed into the session (channel.rs)
        // counts as delivered only once it is out of `kiki mcp`.
        let (written, done) = oneshot::channel();
        let message = Outgoing { line: line_of(&item), _place: place, written: Some(written) };
        let out = self.out.clone();
        async move {
            let closed = || std::io::Error::new(std::io::ErrorKind::BrokenPipe, "stdout is closed");
            out.send(message).await.map_err(|_| closed())?;
            done.await.map_err(|_| closed())
        }
    }

    async fn receive(&mut self) -> Option<ClientJsonRpcMessage> {
        loop {
            match &self.held {
                Some(Held::Request(..)) => {
                    let place = self.answers.calls.clone().acquire_owned().await.ok()?;
                    let Some(Held::Request(message, id)) = self.held.take() else { continue };
                    self.answers.hold(id, place);
                    return Some(*message);
                }
                Some(Held::Answer(_)) => {
                    let room = self.out.reserve().await.ok()?;
                    if let Some(Held::Answer(line)) = self.held.take() {
                        room.send(Outgoing { line, _place: None, written: None });
                    }
                    continue;
                }
                None => {}
            }
            let incoming = match self.lines.next().await? {
                Line::Whole(line) => read(&line),
                Line::TooLong(skim) => too_long(&skim, &self.tools),
            };
            match incoming {
                Incoming::Message(message) => {
                    if let JsonRpcMessage::Request(request) = &*message {
                        let id = request.id.clone();
                        self.held = Some(Held::Request(message, id));
                        continue;
                    }
                    // A cancelled request's answer is never sent: its place is given back now.
                    if let JsonRpcMessage::Notification(notification) = &*message
                        && let ClientNotification::CancelledNotification(cancelled) =
                            &notification.notification
                        && let Some(id) = &cancelled.params.request_id
                    {
                        drop(self.answers.release(id));
                    }
                    return Some(*message);
                }
                Incoming::Answer(answer) => self.held = Some(Held::Answer(line_of(&answer))),
                Incoming::Nothing => {}
            }
        }
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        Ok(())
    }
}

/// What a line is.
#[derive(Debug)]
enum Incoming {
    /// For the server.
    Message(Box<ClientJsonRpcMessage>),
    /// Answered here, without the server: an error, or an over-long call's tool error.
    Answer(Value),
    /// Nothing to do (an empty line, a notification that is not valid).
    Nothing,
}

fn error(id: Option<&Value>, code: ErrorCode, message: impl Into<String>) -> Incoming {
    let id = id.cloned().unwrap_or(Value::Null);
    Incoming::Answer(
        json!({"jsonrpc": "2.0", "id": id, "error": {"code": code.0, "message": message.into()}}),
    )
}

/// The methods a client sends that kiki's server knows the params of: a request for one of
/// them that rmcp could only read as a custom request had params of the wrong shape.
const KNOWN_METHODS: &[&str] = &[
    "initialize",
    "ping",
    "tools/list",
    "tools/call",
    "prompts/list",
    "prompts/get",
    "resources/list",
    "resources/read",
    "resources/templates/list",
    "resources/subscribe",
    "resources/unsubscribe",
    "completion/complete",
    "logging/setLevel",
];

/// A whole line, checked as JSON-RPC 2.0 and MCP before the server sees it.
fn read(line: &[u8]) -> Incoming {
    let line = line.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(line);
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    if line.iter().all(u8::is_ascii_whitespace) {
        return Incoming::Nothing;
    }
    let value: Value = match serde_json::from_slice(line) {
        Ok(value) => value,
        Err(e) => {
            return error(None, ErrorCode::PARSE_ERROR, format!("Parse error: the line is not JSON ({e})"));
        }
    };
    let Value::Object(fields) = &value else {
        return error(
            None,
            ErrorCode::INVALID_REQUEST,
            "Invalid Request: a message is one JSON object per line",
        );
    };
    let id = fields.get("id").filter(|id| id.is_string() || id.is_number());
    let method = fields.get("method");
    if fields.contains_key("id") && id.is_none() {
        return error(None, ErrorCode::INVALID_REQUEST, "Invalid Request: `id` must be a string or a number");
    }
    if method.is_some_and(|method| !method.is_string()) {
        return error(id, ErrorCode::INVALID_REQUEST, "Invalid Request: `method` must be a string");
    }
    let request = id.is_some() && method.is_some();
    if request
        && let Some(method) = method.and_then(Value::as_str)
        && let Some(problem) = params_problem(method, fields.get("params"))
    {
        return error(id, ErrorCode::INVALID_PARAMS, problem);
    }
    match serde_json::from_value::<ClientJsonRpcMessage>(value.clone()) {
        Ok(JsonRpcMessage::Request(request))
            if matches!(&request.request, ClientRequest::CustomRequest(custom)
                if KNOWN_METHODS.contains(&custom.method.as_str())) =>
        {
            let method = request.request.method().to_string();
            error(id, ErrorCode::INVALID_PARAMS, format!("Invalid params: not the params of {method}"))
        }
        Ok(message) => Incoming::Message(Box::new(message)),
        // A notification is never answered, not even a bad one.
        Err(_) if id.is_none() && method.is_some() => Incoming::Nothing,
        Err(e) if request => error(id, ErrorCode::INVALID_REQUEST, format!("Invalid Request: {e}")),
        // A response to nothing kiki asked, or no message at all.
        Err(_) if id.is_some() && (fields.contains_key("result") || fields.contains_key("error")) => {
            Incoming::Nothing
        }
        Err(_) => error(
            id,
            ErrorCode::INVALID_REQUEST,
            "Invalid Request: a request has \"jsonrpc\": \"2.0\", an id and a method",
        ),
    }
}

/// What is wrong with a request's params, where the shape is known.
fn params_problem(method: &str, params: Option<&Value>) -> Option<String> {
    if method != "tools/call" {
        return match params {
            None | Some(Value::Null | Value::Object(_)) => None,
            Some(other) => {
                Some(format!("Invalid params: {method}'s params must be an object, got {}", kind(other)))
            }
        };
    }
    match params {
        None | Some(Value::Null) => {
            Some("Invalid params: tools/call takes params {name, arguments}; none were given".into())
        }
        Some(Value::Object(params)) => match (params.get("name"), params.get("arguments")) {
            (Some(Value::String(_)), None | Some(Value::Object(_) | Value::Null)) => None,
            (Some(Value::String(_)), Some(other)) => Some(format!(
                "Invalid params: tools/call's `arguments` must be an object, got {}",
                kind(other)
            )),
            (None, _) => Some("Invalid params: tools/call's `name` (the tool) is missing".into()),
            (Some(other), _) => {
                Some(format!("Invalid params: tools/call's `name` must be a string, got {}", kind(other)))
            }
        },
        Some(other) => {
            Some(format!("Invalid params: tools/call's params must be an object, got {}", kind(other)))
        }
    }
}

fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// The answer to a line longer than [`LINE_MAX`]: a call's tool error naming the argument
/// and its limit (or the request's size), else `-32600`; none for a notification.
fn too_long(skim: &Skim, tools: &[Tool]) -> Incoming {
    let (id, method) = (skim.id.as_ref(), skim.method.as_deref());
    if id.is_none() && method.is_some() {
        return Incoming::Nothing;
    }
    if let (Some(id), Some("tools/call"), Some(tool)) = (id, method, skim.tool.as_deref()) {
        let schema = tools.iter().find(|t| t.name == tool).map(|t| &*t.input_schema);
        let text = arguments::over_long(tool, schema, &skim.arguments).unwrap_or_else(|| too_big(skim));
        return Incoming::Answer(json!({"jsonrpc": "2.0", "id": id, "result": {
            "content": [{"type": "text", "text": text}], "isError": true
        }}));
    }
    error(
        id,
        ErrorCode::INVALID_REQUEST,
        format!(
            "Invalid Request: the line is {} bytes; kiki mcp reads requests of at most {LINE_MAX} bytes",
            skim.bytes
        ),
    )
}

/// An over-long call with no argument over its limit: the request's size, and its largest
/// argument.
fn too_big(skim: &Skim) -> String {
    let largest = skim
        .arguments
        .iter()
        .max_by_key(|a| a.bytes)
        .map_or_else(String::new, |a| format!(" ({} alone is {} bytes)", a.name, a.bytes));
    format!(
        "invalid_argument: the request is {} bytes{largest}; kiki mcp reads requests of at most \
         {LINE_MAX} bytes. Shorten the arguments.",
        skim.bytes
    )
}

/// A line as read: whole, or too long to keep (and seen through a [`Skim`]).
enum Line {
    Whole(Vec<u8>),
    TooLong(Box<Skim>),
}

/// stdin split into lines of at most [`LINE_MAX`] bytes kept. Safe to drop mid-line: what
/// was read stays in `line` (or `skim`) for the next call.
struct Lines {
    read: BufReader<StdioReader>,
    line: Vec<u8>,
    skim: Option<Box<Skim>>,
}

impl Lines {
    fn new(reader: StdioReader) -> Self {
        Self { read: BufReader::new(reader), line: Vec::new(), skim: None }
    }

    /// The next line, without its newline; `None` at the end of stdin (a last line without
    /// a newline is dropped, as rmcp does) or when it cannot be read.
    async fn next(&mut self) -> Option<Line> {
        loop {
            let (used, ended) = {
                let available = self.read.fill_buf().await.ok()?;
                if available.is_empty() {
                    return None;
                }
                let newline = available.iter().position(|&b| b == b'\n');
                let piece = &available[..newline.unwrap_or(available.len())];
                match &mut self.skim {
                    Some(skim) => skim.feed(piece),
                    None if self.line.len() + piece.len() > LINE_MAX => {
                        let mut skim = Box::<Skim>::default();
                        skim.feed(&self.line);
                        skim.feed(piece);
                        self.skim = Some(skim);
                        self.line = Vec::new();
                    }
                    None => self.line.extend_from_slice(piece),
                }
                (newline.map_or(available.len(), |at| at + 1), newline.is_some())
            };
            self.read.consume(used);
            if ended {
                if let Some(skim) = self.skim.take() {
                    return Some(Line::TooLong(skim));
                }
                let line = if self.line.capacity() > KEEP_CAPACITY {
                    std::mem::take(&mut self.line)
                } else {
                    let line = self.line.clone();
                    self.line.clear();
                    line
                };
                return Some(Line::Whole(line));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(line: &str) -> Value {
        match read(line.as_bytes()) {
            Incoming::Answer(answer) => answer,
            other => panic!("{line}: no answer but {other:?}"),
        }
    }

    #[test]
    fn every_bad_request_is_answered_keeping_its_id() {
        for (line, id, code) in [
            ("not json", Value::Null, -32700),
            ("{\"jsonrpc\": \"2.0\", \"id\": 1, ", Value::Null, -32700),
            ("[1, 2]", Value::Null, -32600),
            (r#"{"jsonrpc":"2.0","id":[1],"method":"ping"}"#, Value::Null, -32600),
            (r#"{"id":3,"method":"ping"}"#, json!(3), -32600),
            (r#"{"jsonrpc":"1.0","id":"a","method":"ping"}"#, json!("a"), -32600),
            (r#"{"jsonrpc":"2.0","id":4}"#, json!(4), -32600),
            (r#"{"jsonrpc":"2.0","id":5,"method":"tools/call"}"#, json!(5), -32602),
            (
                r#"{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{"name":"ThreadList","arguments":[1]}}"#,
                json!(6),
                -32602,
            ),
            (
                r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"T","arguments":"x"}}"#,
                json!(7),
                -32602,
            ),
            (r#"{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"arguments":{}}}"#, json!(8), -32602),
            (r#"{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":5}}"#, json!(9), -32602),
            (r#"{"jsonrpc":"2.0","id":10,"method":"tools/call","params":[]}"#, json!(10), -32602),
            (r#"{"jsonrpc":"2.0","id":11,"method":"tools/list","params":[]}"#, json!(11), -32602),
            (r#"{"jsonrpc":"2.0","id":12,"method":"initialize","params":{}}"#, json!(12), -32602),
            (r#"{"jsonrpc":"2.0","id":13,"method":5}"#, json!(13), -32600),
        ] {
            let answer = answer(line);
            assert_eq!(answer["id"], id, "{line}: {answer}");
            assert_eq!(answer["error"]["code"], code, "{line}: {answer}");
            assert!(answer["error"]["message"].as_str().is_some_and(|m| m.len() > 10), "{answer}");
        }
    }

    #[test]
    fn good_messages_go_to_the_server_and_notifications_are_never_answered() {
        for line in [
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"ThreadList","arguments":{}}}"#,
            r#"{"jsonrpc":"2.0","id":"x","method":"tools/call","params":{"name":"ThreadList"}}"#,
            r#"{"jsonrpc":"2.0","id":2,"method":"ping"}"#,
            "\u{feff}{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"tools/list\"}\r",
            r#"{"jsonrpc":"2.0","id":4,"method":"vendor/thing","params":{"a":1}}"#,
            r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
        ] {
            assert!(matches!(read(line.as_bytes()), Incoming::Message(_)), "{line}");
        }
        for line in ["", "  ", r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":7}"#] {
            assert!(matches!(read(line.as_bytes()), Incoming::Nothing), "{line:?}");
        }
    }

    /// A tool taking `content` of at most 100000 characters, and `mentions`.
    fn tools() -> Vec<Tool> {
        let schema = json!({"type": "object", "additionalProperties": false, "properties": {
            "session_id": {"type": "string"}, "idempotency_key": {"type": "string"},
            "content": {"type": "string", "maxLength": 100_000}, "mentions": {"type": "array"}
        }});
        let Value::Object(schema) = schema else { unreachable!() };
        vec![Tool::new("ThreadSend", "", Arc::new(schema))]
    }

    #[test]
    fn an_over_long_line_is_answered_under_its_id() {
        let mut skim = Skim::default();
        skim.feed(br#"{"jsonrpc":"2.0","id":41,"method":"tools/list","params":{"cursor":"#);
        skim.feed(&[b'x'; 100]);
        skim.feed(b"\"}}");
        let Incoming::Answer(answer) = too_long(&skim, &tools()) else { panic!("no answer") };
        assert_eq!((answer["id"].clone(), answer["error"]["code"].clone()), (json!(41), json!(-32600)));

        let mut skim = Skim::default();
        skim.feed(br#"{"jsonrpc":"2.0","method":"tools/call","params":{"name":"ThreadSend","arguments":{"session_id":"th_1","content":""#);
        skim.feed(&vec![b'x'; 200_000]);
        skim.feed(br#"","idempotency_key":"k"}},"id":"last"}"#);
        let Incoming::Answer(answer) = too_long(&skim, &tools()) else { panic!("no answer") };
        assert_eq!(answer["id"], json!("last"));
        assert_eq!(answer["result"]["isError"], json!(true));
        let text = answer["result"]["content"][0]["text"].as_str().expect("text");
        assert_eq!(text, "invalid_argument: content: must be at most 100000 characters, got 200000");

        let mut notification = Skim::default();
        notification.feed(br#"{"jsonrpc":"2.0","method":"notifications/progress","params":{}}"#);
        assert!(matches!(too_long(&notification, &tools()), Incoming::Nothing));
        let mut garbage = Skim::default();
        garbage.feed(b"xyz");
        let Incoming::Answer(answer) = too_long(&garbage, &tools()) else { panic!("no answer") };
        assert_eq!((answer["id"].clone(), answer["error"]["code"].clone()), (Value::Null, json!(-32600)));

        // Nothing over a length limit: the request's size, and its largest argument.
        let mut mentions = Skim::default();
        mentions.feed(br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"ThreadSend","arguments":{"mentions":[""#);
        mentions.feed(&[b'x'; 100]);
        mentions.feed(br#""]}}}"#);
        let said = too_big(&mentions);
        let alone = format!("mentions alone is {} bytes", mentions.arguments[0].bytes);
        assert!(said.contains(&format!("is {} bytes", mentions.bytes)) && said.contains(&alone), "{said}");
    }
}
