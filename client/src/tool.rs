//! `kiki tool`: the home's session tools from the command line — listed, or one called for
//! a thread (its workspace, its history), as `kiki mcp` calls them for an agent.

use anyhow::Result;
use clap::Subcommand;
use kiki_proto as pb;
use kiki_proto::Word;

use crate::connect::connect;
use crate::output::print_json;

#[derive(Subcommand)]
pub enum ToolCommand {
    /// The session tools: name, approval rule and what each does.
    List,
    /// Call one for a thread: it runs in the thread's workspace and is kept in its history
    /// (`kiki thread read SESSION --tools`). The owner's calls are not asked for approval.
    Call {
        /// The tool (`kiki tool list`).
        name: String,
        /// Its arguments, a JSON object (default `{}`).
        arguments: Option<String>,
        /// The thread it acts for.
        #[arg(long, value_name = "SESSION")]
        thread: String,
    },
}

pub const TOOL_EXAMPLES: &str = "\
Examples:
  kiki tool list
  kiki tool call Read '{\"path\": \"src/main.rs\", \"n_lines\": 40}' --thread th_1
  kiki tool call Bash '{\"command\": \"cargo test\"}' --thread th_1
  kiki thread read th_1 --tools                 # the calls, as the thread's history keeps them";

pub async fn run(home: &std::path::Path, command: ToolCommand, json: bool) -> Result<()> {
    let client = connect(home).await?;
    match command {
        ToolCommand::List => {
            let listed = client.tools().tool_list(pb::ToolListRequest {}).await?.into_inner();
            if json {
                print_json(&listed);
                return Ok(());
            }
            for tool in &listed.tools {
                let asks = match tool.approval() {
                    pb::Approval::Never => String::new(),
                    rule => format!("  (asks: {})", rule.word().replace('_', " ")),
                };
                outln!("{:<11} {}{asks}", tool.name, tool.title);
            }
            Ok(())
        }
        ToolCommand::Call { name, arguments, thread } => {
            let request =
                pb::ToolCallRequest { name, arguments: arguments.unwrap_or_default(), thread_id: thread };
            let answer = client.tools().tool_call(request).await?.into_inner();
            if json {
                print_json(&answer);
            } else {
                outln!("{}", answer.text);
            }
            if answer.outcome != pb::ToolOutcome::Ok as i32 {
                let outcome = pb::ToolOutcome::try_from(answer.outcome).map(|o| o.word());
                return Err(crate::output::ToolFailed(outcome.unwrap_or_default()).into());
            }
            Ok(())
        }
    }
}
