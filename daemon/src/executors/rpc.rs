//! JSON-RPC 2.0 over an agent's stdio, one message per line, as the `codex` (app-server) and
//! `acp` (Agent Client Protocol) executors speak it. Both sides make requests: kiki asks
//! the agent to start turns, the agent asks kiki for permissions.
//!
//! A writer task owns the agent's stdin and a reader task its stdout. Answers to kiki's
//! requests go to their callers; the agent's notifications and requests come out of
//! [`Peer::start`]'s channel, in order. When the agent closes stdout, every call still
//! waiting fails with [`RpcError::Closed`] and the channel ends.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt};
use tokio::process::{ChildStdin, ChildStdout};
use tokio::sync::{mpsc, oneshot};

/// The longest line an agent may write: more is a broken agent, not a message.
pub const LINE_MAX_BYTES: u64 = 32 << 20;

/// JSON-RPC's "method not found".
pub const METHOD_NOT_FOUND: i64 = -32601;

#[derive(Debug, Clone, PartialEq)]
pub enum RpcError {
    /// The agent answered with an error.
    Failed { code: i64, message: String },
    /// The agent closed its output (exited) before answering.
    Closed,
}

impl std::fmt::Display for RpcError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Failed { code, message } => write!(f, "{message} (code {code})"),
            Self::Closed => f.write_str("the agent closed its output before answering"),
        }
    }
}

/// What the agent sent that is not an answer to kiki.
#[derive(Debug, Clone, PartialEq)]
pub enum Incoming {
    Notification {
        method: String,
        params: Value,
    },
    /// Answer it with [`Peer::respond`] (its `id` as given).
    Request {
        id: Value,
        method: String,
        params: Value,
    },
    /// A line that is not JSON-RPC, or longer than [`LINE_MAX_BYTES`]: the reader stops.
    Garbled(String),
}

type Pending = Arc<Mutex<HashMap<u64, oneshot::Sender<Result<Value, RpcError>>>>>;

/// kiki's side of the conversation; cheap to clone.
#[derive(Clone)]
pub struct Peer {
    out: mpsc::UnboundedSender<Value>,
    pending: Pending,
    /// Set by the reader as it stops, before it fails whoever waits.
    closed: Arc<AtomicBool>,
    next_id: Arc<AtomicU64>,
    /// Codex's app-server leaves out `"jsonrpc": "2.0"`; ACP requires it.
    header: bool,
}

impl Peer {
    /// Starts the reader and writer tasks; they end when the agent closes its output and
    /// every `Peer` is dropped.
    pub fn start(
        stdin: ChildStdin,
        stdout: ChildStdout,
        header: bool,
    ) -> (Self, mpsc::UnboundedReceiver<Incoming>) {
        let (out, mut outgoing) = mpsc::unbounded_channel::<Value>();
        tokio::spawn(async move {
            let mut stdin = stdin;
            while let Some(message) = outgoing.recv().await {
                let mut line = message.to_string();
                line.push('\n');
                if stdin.write_all(line.as_bytes()).await.is_err() || stdin.flush().await.is_err() {
                    return;
                }
            }
        });
        let (pending, closed): (Pending, Arc<AtomicBool>) = Default::default();
        let (incoming, received) = mpsc::unbounded_channel();
        tokio::spawn(read(stdout, pending.clone(), closed.clone(), incoming));
        (Self { out, pending, closed, next_id: Arc::new(AtomicU64::new(0)), header }, received)
    }

    /// Calls `method` and waits for the agent's answer.
    pub async fn request(&self, method: &str, params: Value) -> Result<Value, RpcError> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (answer, answered) = oneshot::channel();
        lock(&self.pending).insert(id, answer);
        let sent = self.send(json!({"id": id, "method": method, "params": params}));
        // Asked as the reader stopped: nobody will answer.
        if !sent || self.closed.load(Ordering::SeqCst) {
            lock(&self.pending).remove(&id);
            return Err(RpcError::Closed);
        }
        answered.await.unwrap_or(Err(RpcError::Closed))
    }

    /// Sends a notification; `Value::Null` sends it without params.
    pub fn notify(&self, method: &str, params: Value) {
        let mut message = json!({"method": method});
        if !params.is_null() {
            message["params"] = params;
        }
        self.send(message);
    }

    /// Answers the agent's request `id`: a result, or an error `(code, message)`.
    pub fn respond(&self, id: Value, answer: Result<Value, (i64, String)>) {
        self.send(match answer {
            Ok(result) => json!({"id": id, "result": result}),
            Err((code, message)) => json!({"id": id, "error": {"code": code, "message": message}}),
        });
    }

    fn send(&self, mut message: Value) -> bool {
        if self.header {
            message["jsonrpc"] = json!("2.0");
        }
        self.out.send(message).is_ok()
    }
}

async fn read(
    stdout: ChildStdout,
    pending: Pending,
    closed: Arc<AtomicBool>,
    incoming: mpsc::UnboundedSender<Incoming>,
) {
    let mut reader = tokio::io::BufReader::new(stdout);
    let mut line = Vec::new();
    loop {
        line.clear();
        match (&mut reader).take(LINE_MAX_BYTES + 1).read_until(b'\n', &mut line).await {
            Ok(0) | Err(_) => break,
            Ok(_) if line.len() as u64 > LINE_MAX_BYTES => {
                let _ = incoming.send(Incoming::Garbled(format!("a line of over {LINE_MAX_BYTES} bytes")));
                break;
            }
            Ok(_) => {}
        }
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        match classify(&line) {
            Some(Message::Answer(id, answer)) => {
                if let Some(waiting) = lock(&pending).remove(&id) {
                    let _ = waiting.send(answer);
                }
            }
            Some(Message::Incoming(message)) => {
                let _ = incoming.send(message);
            }
            None => {
                let shown: String = String::from_utf8_lossy(&line).chars().take(200).collect();
                let _ = incoming.send(Incoming::Garbled(format!("not JSON-RPC: {}", shown.trim_end())));
                break;
            }
        }
    }
    // Whoever still waits for an answer will not get one.
    closed.store(true, Ordering::SeqCst);
    lock(&pending).clear();
}

enum Message {
    Answer(u64, Result<Value, RpcError>),
    Incoming(Incoming),
}

fn classify(line: &[u8]) -> Option<Message> {
    let mut message: Value = serde_json::from_slice(line).ok()?;
    let params = message.get_mut("params").map(Value::take).unwrap_or(Value::Null);
    match (message.get("method").and_then(Value::as_str), message.get("id")) {
        (Some(method), Some(id)) => {
            Some(Message::Incoming(Incoming::Request { id: id.clone(), method: method.into(), params }))
        }
        (Some(method), None) => {
            Some(Message::Incoming(Incoming::Notification { method: method.into(), params }))
        }
        (None, Some(id)) => {
            let id = id.as_u64()?;
            let answer = match message.get_mut("error") {
                Some(error) => {
                    Err(RpcError::Failed { code: error["code"].as_i64().unwrap_or(0), message: said(error) })
                }
                None => Ok(message.get_mut("result").map(Value::take).unwrap_or(Value::Null)),
            };
            Some(Message::Answer(id, answer))
        }
        (None, None) => None,
    }
}

/// An error's message, with its `data` when it has some (ACP's `details` as text).
fn said(error: &Value) -> String {
    let message = error["message"].as_str().unwrap_or("an error without a message");
    match &error["data"] {
        Value::Null => message.to_string(),
        Value::String(data) => format!("{message}: {data}"),
        data => match data["details"].as_str() {
            Some(details) => format!("{message}: {details}"),
            None => format!("{message}: {data}"),
        },
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_answers_notifications_or_requests() {
        let Some(Message::Answer(3, Ok(result))) = classify(br#"{"id":3,"result":{"ok":true}}"#) else {
            panic!("an answer")
        };
        assert_eq!(result, json!({"ok": true}));
        let Some(Message::Answer(4, Err(RpcError::Failed { code: -32600, message }))) =
            classify(br#"{"jsonrpc":"2.0","id":4,"error":{"code":-32600,"message":"no rollout"}}"#)
        else {
            panic!("an error")
        };
        assert_eq!(message, "no rollout");
        let with_data =
            json!({"code": -32603, "message": "Internal error", "data": {"details": "the model failed"}});
        assert_eq!(said(&with_data), "Internal error: the model failed");
        let Some(Message::Incoming(note)) = classify(br#"{"method":"turn/started","params":{"a":1}}"#) else {
            panic!("a notification")
        };
        assert_eq!(note, Incoming::Notification { method: "turn/started".into(), params: json!({"a": 1}) });
        let Some(Message::Incoming(ask)) = classify(br#"{"id":"x","method":"session/request_permission"}"#)
        else {
            panic!("a request")
        };
        assert_eq!(
            ask,
            Incoming::Request {
                id: json!("x"),
                method: "session/request_permission".into(),
                params: Value::Null
            }
        );
        assert!(classify(b"not json").is_none());
        assert!(classify(br#"{"neither":1}"#).is_none());
    }
}
