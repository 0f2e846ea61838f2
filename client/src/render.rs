//! The text form of results that more than one command shows (with `--json` each command
//! prints the response itself instead).

use kiki_proto as pb;
use kiki_proto::Word;

/// `kiki status`, and what `kiki up` shows of the home it started or found running.
pub fn show_status(s: &pb::StatusResponse) {
    outln!("home      {}", s.home);
    outln!("home id   {}", s.home_id);
    outln!("kikid     pid {} · version {} · since {}", s.pid, s.version, s.started_at);
    outln!("socket    {}", s.socket);
    outln!("store     {}", s.store);
    outln!("threads   {} ({} running turns)", s.threads, s.running_turns);
    if s.agents_cost_usd > 0.0 {
        outln!("cost      ${:.4} (as the agents reported it)", s.agents_cost_usd);
    }
    outln!("profiles  {} (default {})", s.profiles.join(", "), s.default_profile);
    outln!("peers     {}", s.thread_communication);
    outln!("bridges   listening on {} (QUIC)", s.bridge_listen);
    let lease = match s.lease_ms % 1000 {
        0 => format!("{}s", s.lease_ms / 1000),
        _ => format!("{}ms", s.lease_ms),
    };
    outln!("replicas  {} (lease {lease})", s.replicas.len());
    for r in &s.replicas {
        let state = match (r.this, r.live) {
            (true, _) => "this one",
            (false, true) => "live",
            (false, false) => "silent",
        };
        let outbox = if r.works_outbox { " · works the outbox" } else { "" };
        outln!(
            "          {} · {} pid {} · bridges {} · heartbeat {} · {state}{outbox}",
            r.id,
            r.host,
            r.pid,
            r.bridge_listen,
            r.heartbeat_at
        );
    }
    if !s.workers.is_empty() {
        outln!("workers   {}", s.workers.len());
    }
    for w in &s.workers {
        let failed = match w.last_error.as_str() {
            "" => String::new(),
            error => format!(" · last error at {}: {error}", w.last_error_at),
        };
        outln!("          {:<26} {:<8} {} rounds{failed}", w.name, w.state().word(), w.rounds);
    }
}

/// A page of ended turns, each with its input quoted, and how to read what was cut.
pub fn show_turns(page: &pb::ThreadReadResponse) {
    for turn in &page.turns {
        show_turn(turn);
    }
    if page.turns.is_empty() {
        outln!("(no ended turns)");
    }
    // On stderr, like every paging hint: stdout holds the turns alone.
    if let Some(next) = &page.next_cursor {
        hint!("more: --cursor {next}");
    }
}

/// One ended turn: a header, its input quoted, its output, and how to read what was cut.
pub fn show_turn(turn: &pb::Turn) {
    let status = pb::json::enum_word(turn.status().as_str_name(), "TURN_STATUS_");
    let usage = turn.usage.map_or(String::new(), |u| {
        format!(" · {} in / {} out tokens, ${:.4}", u.input_tokens, u.output_tokens, u.cost_usd)
    });
    outln!("── turn {} · {} · {}{usage}", turn.seq, status, turn.ended_at);
    for line in turn.input.lines() {
        outln!("> {line}");
    }
    if turn.input_truncated {
        outln!("> … (input cut; read it with --content-ref {}.input)", turn.id);
    }
    outln!("{}", turn.output);
    if turn.output_truncated {
        outln!("… (output cut; read it with --content-ref {}.output)", turn.id);
    }
    if !turn.error.is_empty() {
        outln!("error: {}", turn.error);
    }
}

/// A wait's events, one per line, then each thread's `--cursor` for the next wait.
pub fn show_wait(w: &pb::ThreadWaitResponse) {
    for result in &w.results {
        let target = result.target.as_ref().map(pb::format_ref).unwrap_or_default();
        for e in &result.events {
            let kind = pb::json::enum_word(e.kind().as_str_name(), "EVENT_KIND_");
            let detail = match e.kind() {
                pb::EventKind::Terminal => {
                    let status = pb::json::enum_word(e.turn_status().as_str_name(), "TURN_STATUS_");
                    format!("turn {} {status}", e.turn_id)
                }
                pb::EventKind::Lifecycle => e.lifecycle().word(),
                pb::EventKind::Undeliverable => format!("message {}: {}", e.message_id, e.reason),
                _ => e.reason.clone(),
            };
            outln!("{target}  {}  {kind}  {detail}", e.at);
        }
    }
    if w.timed_out {
        outln!("(timed out: no new events)");
    }
    for result in &w.results {
        let target = result.target.as_ref().map(pb::format_ref).unwrap_or_default();
        outln!("--cursor {target}={}", result.cursor);
    }
}

/// A bridge's permissions as `kiki bridge list` shows them.
pub fn granted(b: &pb::Bridge) -> String {
    if b.permissions.is_empty() { "none yet".into() } else { permissions(&b.permissions) }
}

/// Permissions as words, joined by commas (`read,send`).
pub fn permissions(values: &[i32]) -> String {
    pb::json::joined::<pb::Permission>(values)
}

/// The workspaces a bridge's grant is limited to, if it is.
pub fn scope(b: &pb::Bridge) -> String {
    if b.workspaces.is_empty() { String::new() } else { format!(" in {}", b.workspaces.join(",")) }
}

/// `text` as one shell word, to paste back: quoted if it holds anything but plain
/// characters.
pub fn shell_word(text: &str) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "-_./:=@%+,".contains(c);
    if !text.is_empty() && text.chars().all(plain) {
        return text.to_string();
    }
    format!("'{}'", text.replace('\'', "'\\''"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hint_quotes_what_a_shell_would_split() {
        assert_eq!(shell_word("ws_0123456789abcdef"), "ws_0123456789abcdef");
        assert_eq!(shell_word("/tmp/a dir"), "'/tmp/a dir'");
        assert_eq!(shell_word("it's"), "'it'\\''s'");
        assert_eq!(shell_word(""), "''");
    }
}
