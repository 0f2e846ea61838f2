//! What the executors that hold a conversation with their agent (`codex`, `acp`) share: the
//! turn's transcript as a follower sees it, the tools a profile allows, and how the agent's
//! process is closed and the turn's outcome told.

use std::time::Duration;

use tokio::sync::mpsc;

use super::desk::TurnDesk;
use super::process::Spawned;
use super::rpc::{Incoming, Peer};
use super::turn::{Live, LiveSink, TurnFailure, say};
use crate::store::PartKind;

/// After the turn, how long the agent has to exit by itself once its stdin is closed (it
/// may be saving its session) before its process group is killed.
const EXIT_GRACE: Duration = Duration::from_secs(5);

/// What the agent said in the turn: its answers (the turn's output), parts for followers.
pub struct Transcript {
    /// The agent was given the turn's input (or told its session is gone): a failure from
    /// here on is the turn's, and its messages count as delivered.
    pub prompted: bool,
    live: Option<LiveSink>,
    answers: Vec<String>,
    /// Text streamed in chunks, not yet one answer.
    streaming: String,
    bytes: usize,
    limit: usize,
    errors: Vec<String>,
}

impl Transcript {
    pub fn new(live: Option<LiveSink>, limit: usize) -> Self {
        Self {
            prompted: false,
            live,
            answers: Vec::new(),
            streaming: String::new(),
            bytes: 0,
            limit,
            errors: Vec::new(),
        }
    }

    /// Tells followers `event` as it is.
    pub fn say(&self, event: Live) {
        say(self.live.as_ref(), event);
    }

    /// A tool call or its result (any text streamed before it is one answer first).
    pub fn part(&mut self, kind: PartKind, text: String) {
        self.flush();
        say(self.live.as_ref(), Live::Part(kind, text));
    }

    /// One whole message of the agent, in place of what was streamed of it.
    pub fn answer(&mut self, text: String) {
        self.streaming.clear();
        self.keep(text);
    }

    /// A piece of a message streamed as it is written.
    pub fn chunk(&mut self, text: &str) {
        if self.bytes + self.streaming.len() <= self.limit {
            self.streaming.push_str(text);
        }
    }

    /// An error the agent reported mid-turn.
    pub fn error(&mut self, message: String) {
        self.errors.push(message);
    }

    pub fn last_error(&self) -> Option<String> {
        self.errors.last().cloned()
    }

    /// The agent has said nothing yet.
    pub fn is_empty(&self) -> bool {
        self.answers.is_empty() && self.streaming.is_empty()
    }

    fn flush(&mut self) {
        if !self.streaming.is_empty() {
            let text = std::mem::take(&mut self.streaming);
            self.keep(text);
        }
    }

    fn keep(&mut self, text: String) {
        say(self.live.as_ref(), Live::Part(PartKind::Text, text.clone()));
        let len = text.len();
        // Past the limit nothing more is kept; the output is cut to it.
        if self.bytes < self.limit {
            self.answers.push(text);
        }
        self.bytes += len;
    }

    /// The turn's output (its answers, a blank line apart) and whether it overflowed.
    pub fn output(mut self) -> (String, bool) {
        self.flush();
        let mut output = self.answers.join("\n\n");
        let overflowed = self.bytes > self.limit || output.len() > self.limit;
        if overflowed {
            let mut cut = self.limit.min(output.len());
            while !output.is_char_boundary(cut) {
                cut -= 1;
            }
            output.truncate(cut);
        }
        (output, overflowed)
    }
}

/// Whether the agent may use `tool` (or the tool titled `title`): the profile allows it up
/// front, or the owner is asked.
pub async fn permitted(
    tool: &str,
    title: Option<&str>,
    details: &str,
    desk: Option<&TurnDesk>,
    allowed: &[String],
) -> bool {
    if allowed.iter().any(|a| a == tool || Some(a.as_str()) == title) {
        return true;
    }
    let Some(desk) = desk else { return false };
    desk.ask_permission(title.unwrap_or(tool), details).await.allowed
}

/// Closes the conversation and the agent, and tells the turn's outcome: `driven` is how
/// the conversation ended (`Err("")` when the agent closed its output before the turn's end).
pub async fn finish(
    agent: Spawned,
    peer: Peer,
    incoming: mpsc::UnboundedReceiver<Incoming>,
    transcript: Transcript,
    driven: Result<(), String>,
    name: &str,
) -> Result<String, TurnFailure> {
    // The last handle on the agent's stdin: it sees the end of its input.
    drop(peer);
    drop(incoming);
    let exit = agent.end(EXIT_GRACE).await;
    let limit = transcript.limit;
    let (output, overflowed) = transcript.output();
    let fail = |output: String, error: String| Err(TurnFailure { output, error, agent_started: true });
    match driven {
        Ok(()) if overflowed => {
            fail(output, format!("output exceeded turns.max_output_bytes ({limit} bytes)"))
        }
        Ok(()) => Ok(output),
        Err(why) if why.is_empty() => {
            let exit = exit.unwrap_or_else(|| "it closed its output".into());
            fail(output, format!("{name} ended without finishing the turn: {exit}"))
        }
        Err(why) => fail(output, why),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_make_one_answer_between_tool_calls_and_the_output_keeps_the_limit() {
        let (live, mut followed) = mpsc::unbounded_channel();
        let mut transcript = Transcript::new(Some(live), 1000);
        transcript.chunk("hel");
        transcript.chunk("lo");
        transcript.part(PartKind::Tool, "ls".into());
        transcript.answer("done".into());
        assert_eq!(transcript.output(), ("hello\n\ndone".to_string(), false));
        let mut seen = Vec::new();
        while let Ok(event) = followed.try_recv() {
            seen.push(event);
        }
        assert_eq!(
            seen,
            [
                Live::Part(PartKind::Text, "hello".into()),
                Live::Part(PartKind::Tool, "ls".into()),
                Live::Part(PartKind::Text, "done".into())
            ]
        );
        let mut small = Transcript::new(None, 4);
        small.answer("héllo".into());
        assert_eq!(small.output(), ("hél".to_string(), true));
    }
}
