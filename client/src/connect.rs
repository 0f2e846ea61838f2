//! Reaching the home's daemon: its socket, and acting as the calling turn when there is one.

use std::path::{Path, PathBuf};

use anyhow::Result;
use kiki_client::Client;

/// The Unix socket the home's kikid answers on.
pub fn socket(home: &Path) -> PathBuf {
    kiki_proto::home::HomeDir::new(home).socket()
}

/// Connects to the home, acting as the calling turn when `KIKI_TOKEN` is set.
pub async fn connect(home: &Path) -> Result<Client> {
    as_caller(Client::connect(&socket(home)).await?)
}

/// The client acting as the calling turn when `KIKI_TOKEN` is set (the daemon then refuses
/// owner actions), in the trace of `TRACEPARENT` when set.
pub fn as_caller(client: Client) -> Result<Client> {
    let client = in_callers_trace(client);
    Ok(match kiki_client::env_var("KIKI_TOKEN") {
        Some(token) => client.with_token(&token)?,
        None => client,
    })
}

/// The client continuing the trace of `TRACEPARENT` (a turn's agent has it), when set.
pub fn in_callers_trace(client: Client) -> Client {
    match kiki_client::env_var(kiki_proto::TRACE_ENV) {
        Some(traceparent) => client.with_trace(&traceparent),
        None => client,
    }
}
