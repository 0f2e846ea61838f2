//! `mcp-agent KIKI`: a small agent for an `exec` turn that speaks MCP to `kiki mcp`, as an
//! agent CLI would. Its turn input (stdin) says what to do, one command per line:
//!
//! - `send TARGET`: ThreadSend "hello from the agent" to TARGET (key `agent-send`);
//! - `listen N`: declare `claude/channel`, then print each of the first N messages pushed
//!   (up to 20 s);
//! - `listen-timed N`: the same, but print for each pushed message only `MESSAGE_ID NANOS`,
//!   NANOS the moment it was received (ns since the UNIX epoch, the machine's clock), for the
//!   sessions bench;
//! - `deaf MS`: do not declare it; print how many were pushed anyway in MS milliseconds.

use std::io::Read;
use std::path::PathBuf;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use kiki_tests::mcp::{self, Pushed};
use serde_json::json;

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let kiki =
        PathBuf::from(std::env::args().nth(1).ok_or_else(|| anyhow::anyhow!("usage: mcp-agent KIKI"))?);
    let mut input = String::new();
    std::io::stdin().read_to_string(&mut input)?;
    // The executor's environment (KIKI_HOME, KIKI_TOKEN) is passed on, as agent CLIs do.
    let token = std::env::var("KIKI_TOKEN").unwrap_or_default();
    let env = [("KIKI_TOKEN", token.as_str())];
    for line in input.lines() {
        let mut words = line.split_whitespace();
        match (words.next(), words.next()) {
            (Some("send"), Some(target)) => {
                let (session, _) = mcp::start(&kiki, None, &[], &env, false).await?;
                let arguments = json!({"session_id": target, "content": "hello from the agent", "idempotency_key": "agent-send"});
                let result = mcp::call(&session, "ThreadSend", arguments).await?;
                println!("send: {}", mcp::text(&result).lines().next().unwrap_or_default());
                session.cancel().await?;
            }
            (Some("listen"), Some(n)) => {
                let (session, mut pushed) = mcp::start(&kiki, None, &[], &env, true).await?;
                for _ in 0..n.parse::<usize>()? {
                    match tokio::time::timeout(Duration::from_secs(20), pushed.recv()).await {
                        Ok(Some(Pushed::Channel(event))) => {
                            let meta = &event["meta"];
                            let what = match meta["room"].as_str() {
                                Some(room) => format!(
                                    "{room} entry {}",
                                    meta["room_entry"].as_str().unwrap_or_default()
                                ),
                                None => meta["message_id"].as_str().unwrap_or_default().to_string(),
                            };
                            let from = meta["from"].as_str().unwrap_or_default();
                            println!(
                                "pushed from {from} ({what}): {}",
                                event["content"].as_str().unwrap_or_default()
                            );
                        }
                        _ => println!("nothing pushed"),
                    }
                }
                // Goes on with its turn a little, as an agent does, before it closes.
                tokio::time::sleep(Duration::from_millis(200)).await;
                session.cancel().await?;
            }
            (Some("listen-timed"), Some(n)) => {
                let (session, mut pushed) = mcp::start(&kiki, None, &[], &env, true).await?;
                for _ in 0..n.parse::<usize>()? {
                    match tokio::time::timeout(Duration::from_secs(20), pushed.recv()).await {
                        Ok(Some(Pushed::Channel(event))) => {
                            let received = SystemTime::now().duration_since(UNIX_EPOCH)?.as_nanos();
                            let id = event["meta"]["message_id"].as_str().unwrap_or_default();
                            println!("{id} {received}");
                        }
                        _ => println!("nothing pushed"),
                    }
                }
                // Long enough for `kiki mcp` to hand the last one back as taken.
                tokio::time::sleep(Duration::from_millis(200)).await;
                session.cancel().await?;
            }
            (Some("deaf"), Some(ms)) => {
                let (session, mut pushed) = mcp::start(&kiki, None, &[], &env, false).await?;
                tokio::time::sleep(Duration::from_millis(ms.parse()?)).await;
                let mut count = 0;
                while pushed.try_recv().is_ok() {
                    count += 1;
                }
                println!("pushed to a client without the capability: {count}");
                session.cancel().await?;
            }
            _ => println!("unknown command {line:?}"),
        }
    }
    Ok(())
}
