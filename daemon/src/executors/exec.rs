//! The `exec` executor: runs the profile's command per turn (see [`super::process`]);
//! stdout is the output, a non-zero exit a failed turn.

use super::process;
use super::turn::{TurnFailure, TurnInput};

pub async fn run(command: &[String], input: TurnInput<'_>) -> Result<String, TurnFailure> {
    let exited = process::run(command, &input, &mut |_| {}).await?;
    let output = String::from_utf8_lossy(&exited.stdout).into_owned();
    if exited.status.success() {
        return Ok(output);
    }
    Err(TurnFailure { error: exited.failure_reason(), output, agent_started: true })
}
