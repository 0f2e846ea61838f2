//! `kiki mcp`: the collaboration tools — and the home's session tools (`session.rs`) — as an
//! MCP server on stdio, named
//! `kiki` (an agent sees `mcp__kiki__ThreadSend`), and `kiki mcp install`, which sets agent
//! CLIs up to start it.
//!
//! The server is a client of kikid like the rest of `kiki`: each tool is the same `kiki.v1`
//! call the CLI makes. Started inside a turn (the agent CLI passes on `KIKI_TOKEN`), every
//! call acts as that turn's thread; outside one, as the owner's external client.

mod arguments;
mod calls;
mod channel;
pub mod install;
mod params;
mod session;
mod skim;
mod tools;
mod transport;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;
use clap::{Args, Subcommand};
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::tool::{IntoCallToolResult, ToolCallContext};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, ErrorData, Implementation, InitializeResult, ListToolsResult,
    PaginatedRequestParams, ServerCapabilities, ServerConfig,
};
use rmcp::service::{NotificationContext, RequestContext, RoleServer};
use rmcp::{ServerHandler, ServiceExt};
use tokio_util::sync::CancellationToken;

use self::calls::Caller;

#[derive(Args)]
#[command(after_help = MCP_EXAMPLES)]
pub struct McpArgs {
    #[command(subcommand)]
    command: Option<McpCommand>,
    /// How long the MCP client gives one tool call, in ms: ThreadWait answers 2 s before it.
    #[arg(long, default_value_t = 60_000, value_parser = clap::value_parser!(u64).range(5_000..))]
    tool_timeout_ms: u64,
    /// The home when neither --home nor KIKI_HOME names one (a turn sets KIKI_HOME; `kiki mcp
    /// install` records the home it was run with here, for the agent outside a turn).
    #[arg(long, value_name = "DIR")]
    default_home: Option<std::path::PathBuf>,
    /// Outside a turn, the thread the home's session tools (Read, Edit, Bash, …) act for:
    /// its workspace is where they work, its history where their calls are kept. Without
    /// it (and outside a turn) they are not offered. Inside a turn they act for the turn's.
    #[arg(long, value_name = "SESSION")]
    thread: Option<String>,
}

impl McpArgs {
    /// The home `--default-home` names, if any.
    pub fn default_home(&self) -> Option<std::path::PathBuf> {
        self.default_home.clone()
    }
}

#[derive(Subcommand)]
enum McpCommand {
    /// Set an agent CLI up to start `kiki mcp` (its own config file, merged, not overwritten).
    Install(install::InstallArgs),
}

const MCP_EXAMPLES: &str = "\
Examples:
  kiki mcp                          # the server on stdio (an agent CLI starts it)
  kiki --space dev mcp --thread th_1   # with the session tools of thread th_1 in space dev
  kiki mcp install claude           # adds it to ~/.claude.json; codex, gemini, kimi likewise
  kiki mcp install codex --print    # shows what it would write";

pub async fn run(home: &Path, args: McpArgs, json: bool) -> Result<()> {
    match args.command {
        Some(McpCommand::Install(install)) => install::run(home, install, json),
        None => serve(home, Duration::from_millis(args.tool_timeout_ms), args.thread).await,
    }
}

/// How long answers already queued may take to reach stdout once the client has closed
/// stdin (a client that reads them gets them; one that does not is not waited for).
const LAST_WRITES: Duration = Duration::from_secs(5);

/// Serves MCP on stdin/stdout until the client closes it.
async fn serve(home: &Path, tool_timeout: Duration, thread: Option<String>) -> Result<()> {
    let token = kiki_client::env_var("KIKI_TOKEN");
    let (stdio, writing) = transport::Stdio::start(tools::all());
    // Only inside a turn is there a turn to ask the owner's permission for.
    let tools = tools::router(token.is_some());
    let caller = Arc::new(Caller::new(crate::connect::socket(home), token, tool_timeout, stdio.answers()));
    let pusher = Pusher::default();
    let session = session::SessionTools::new(thread);
    let running = KikiServer { caller, tools, session, pusher: pusher.clone() }.serve(stdio).await?;
    running.waiting().await?;
    // The client closed the session: nothing more is pushed.
    pusher.stop.cancel();
    let _ = tokio::time::timeout(LAST_WRITES, writing).await;
    Ok(())
}

struct KikiServer {
    caller: Arc<Caller>,
    /// The tools this session serves (see `tools.rs`).
    tools: ToolRouter<Caller>,
    /// The home's session tools, forwarded to kikid (see `session.rs`).
    session: session::SessionTools,
    pusher: Pusher,
}

/// Stops the task pushing messages into the session (see [`channel`]), if there is one.
#[derive(Clone, Default)]
struct Pusher {
    stop: CancellationToken,
}

impl ServerHandler for KikiServer {
    fn get_info(&self) -> ServerConfig {
        let mut capabilities = ServerCapabilities::builder().enable_tools().build();
        // Claude Code takes pushed messages from a server that declares this.
        capabilities.experimental =
            Some([(channel::CAPABILITY.to_string(), serde_json::Map::new())].into_iter().collect());
        InitializeResult::new(capabilities)
            .with_server_info(Implementation::new("kiki", env!("CARGO_PKG_VERSION")).with_title("kiki"))
            .with_instructions(
                "kiki connects agent threads on this machine and other homes. ThreadList finds threads, \
                 ThreadSend messages one (or posts to a room), ThreadWait waits for their activity, \
                 ThreadRead reads their turns. Messages for this thread may arrive mid-turn as channel \
                 events from kiki; answer them with ThreadSend.",
            )
    }

    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        // Only inside a turn is there a thread to push messages to.
        let pushes = self.caller.token.is_some()
            && context.peer.peer_info().is_some_and(|client| channel::supported_by(&client));
        if pushes {
            tokio::spawn(channel::push(self.caller.clone(), context.peer.clone(), self.pusher.stop.clone()));
        }
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let mut listed = tools::listed(&self.tools);
        listed.extend(self.session.list(&self.caller).await.iter().cloned());
        Ok(ListToolsResult::with_all_items(listed))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let call = calls::ToolCall::new(&request.name, &context);
        if !self.tools.has_route(&request.name) {
            if self.session.has(&self.caller, &request.name).await {
                let (name, arguments) = (request.name.clone(), request.arguments);
                return call
                    .serve(self.session.call(&self.caller, &name, arguments))
                    .await
                    .into_call_tool_result();
            }
            return arguments::unknown_tool(&request.name).into_call_tool_result();
        }
        call.serve(self.tools.call(ToolCallContext::new(self.caller.as_ref(), request, context))).await
    }
}
