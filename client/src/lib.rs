//! kiki-client: a typed client for a kiki home's `kiki.v1` API over its Unix socket, and the
//! `kiki` command line built on it.
//!
//! ```no_run
//! # async fn demo() -> Result<(), kiki_client::ClientError> {
//! let client = kiki_client::Client::connect(&kiki_client::home_dir(None)?.join("kikid.sock")).await?;
//! let status = client.home().status(kiki_proto::StatusRequest::default()).await?;
//! println!("{}", status.into_inner().home_id);
//! # Ok(()) }
//! ```
//!
//! A process started by a turn's executor has `KIKI_TOKEN`; [`Client::with_token`] makes
//! its calls act as that turn's thread. It also has `TRACEPARENT`; [`Client::with_trace`]
//! makes the home's spans for its calls part of the turn's trace.

use std::path::{Path, PathBuf};

use hyper_util::rt::TokioIo;
use kiki_proto as pb;
use kiki_proto::home::HomeDir;
use tonic::metadata::AsciiMetadataValue;
use tonic::service::Interceptor;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Channel, Endpoint};

/// The largest response the client accepts: a ThreadRead page of 100 turns with inline
/// fields just under the 16,384-unit limit stays well inside it.
const MAX_RESPONSE_BYTES: usize = 64 * 1024 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("cannot reach kikid at {socket}: {message} (is the home running? start it with `kiki up`)")]
    Unreachable { socket: String, message: String },
    #[error("{0}")]
    Home(String),
    #[error("KIKI_TOKEN is not a valid token")]
    BadToken,
    /// A home another user could have set up: its socket may be anyone's daemon.
    #[error("{0}")]
    UntrustedHome(String),
    #[error(transparent)]
    Status(#[from] tonic::Status),
}

pub use kiki_proto::home::env_var;

/// `--home DIR`, else `KIKI_HOME`, else `~/.kiki` (the same rule as `kikid`), checked: a
/// home that exists must be a directory of the running user's that nobody else may write,
/// since a daemon answering on its socket could otherwise be anyone's.
pub fn home_dir(flag: Option<PathBuf>) -> Result<PathBuf, ClientError> {
    let home = HomeDir::resolve(flag).map_err(|e| ClientError::Home(e.to_string()))?;
    home.check().map_err(|e| ClientError::UntrustedHome(e.to_string()))?;
    Ok(home.root().to_path_buf())
}

/// Adds to every call the turn token, the trace context and the `kiki mcp` tool it serves,
/// where there are.
#[derive(Clone, Default)]
pub struct CallInterceptor {
    token: Option<AsciiMetadataValue>,
    trace: Option<AsciiMetadataValue>,
    tool: Option<AsciiMetadataValue>,
}

impl Interceptor for CallInterceptor {
    fn call(&mut self, mut request: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
        let metadata = request.metadata_mut();
        for (key, value) in [
            (pb::TOKEN_METADATA_KEY, &self.token),
            (pb::TRACE_METADATA_KEY, &self.trace),
            (pb::MCP_TOOL_METADATA_KEY, &self.tool),
        ] {
            if let Some(value) = value {
                metadata.insert(key, value.clone());
            }
        }
        Ok(request)
    }
}

pub type ThreadClient =
    pb::thread_service_client::ThreadServiceClient<InterceptedService<Channel, CallInterceptor>>;
pub type BridgeClient =
    pb::bridge_service_client::BridgeServiceClient<InterceptedService<Channel, CallInterceptor>>;
pub type HomeClient =
    pb::home_service_client::HomeServiceClient<InterceptedService<Channel, CallInterceptor>>;
pub type ToolClient =
    pb::tool_service_client::ToolServiceClient<InterceptedService<Channel, CallInterceptor>>;
pub type RoomClient =
    pb::room_service_client::RoomServiceClient<InterceptedService<Channel, CallInterceptor>>;

/// A connection to one home. Cheap to clone; calls may run concurrently.
#[derive(Clone)]
pub struct Client {
    channel: Channel,
    interceptor: CallInterceptor,
}

impl Client {
    /// Connects to the daemon listening on `socket`.
    pub async fn connect(socket: &Path) -> Result<Self, ClientError> {
        let path = socket.to_path_buf();
        // The URI is required by the API but unused: the connector dials the socket. Its
        // authority is what HTTP/2 sends as `:authority`, so it must be a valid host.
        let channel =
            Endpoint::from_static("http://localhost")
                .connect_with_connector(tower::service_fn(move |_| {
                    let path = path.clone();
                    async move {
                        Ok::<_, std::io::Error>(TokioIo::new(tokio::net::UnixStream::connect(path).await?))
                    }
                }))
                .await
                .map_err(|e| ClientError::Unreachable {
                    socket: socket.display().to_string(),
                    message: source_message(&e),
                })?;
        Ok(Self { channel, interceptor: CallInterceptor::default() })
    }

    /// Acts as the turn that owns `token` (the `KIKI_TOKEN` an executor hands its agent).
    pub fn with_token(mut self, token: &str) -> Result<Self, ClientError> {
        self.interceptor.token = Some(token.parse().map_err(|_| ClientError::BadToken)?);
        Ok(self)
    }

    /// Continues the trace `traceparent` names (W3C; an agent's `TRACEPARENT`): the home's
    /// spans for these calls join it. One that is not a header value is left out.
    pub fn with_trace(mut self, traceparent: &str) -> Self {
        self.interceptor.trace = traceparent.parse().ok().filter(|_| !traceparent.is_empty());
        self
    }

    /// Marks the calls as serving the `kiki mcp` tool `tool` (named on the home's spans).
    pub fn for_tool(mut self, tool: &str) -> Self {
        self.interceptor.tool = tool.parse().ok();
        self
    }

    /// The underlying channel, for other services on the same socket (e.g. reflection).
    pub fn channel(&self) -> Channel {
        self.channel.clone()
    }

    pub fn threads(&self) -> ThreadClient {
        pb::thread_service_client::ThreadServiceClient::with_interceptor(
            self.channel.clone(),
            self.interceptor.clone(),
        )
        .max_decoding_message_size(MAX_RESPONSE_BYTES)
    }

    pub fn bridges(&self) -> BridgeClient {
        pb::bridge_service_client::BridgeServiceClient::with_interceptor(
            self.channel.clone(),
            self.interceptor.clone(),
        )
        .max_decoding_message_size(MAX_RESPONSE_BYTES)
    }

    /// The owner's room actions (create, list, remove, persona, pause/resume/archive);
    /// reading, adding a thread and posting are [`Client::threads`]' RoomRead, RoomAdd and
    /// ThreadSend.
    pub fn rooms(&self) -> RoomClient {
        pb::room_service_client::RoomServiceClient::with_interceptor(
            self.channel.clone(),
            self.interceptor.clone(),
        )
        .max_decoding_message_size(MAX_RESPONSE_BYTES)
    }

    /// The home's session tools (files, shell, tasks, todo, cron), listed and called.
    pub fn tools(&self) -> ToolClient {
        pb::tool_service_client::ToolServiceClient::with_interceptor(
            self.channel.clone(),
            self.interceptor.clone(),
        )
        .max_decoding_message_size(MAX_RESPONSE_BYTES)
    }

    pub fn home(&self) -> HomeClient {
        pb::home_service_client::HomeServiceClient::with_interceptor(
            self.channel.clone(),
            self.interceptor.clone(),
        )
        .max_decoding_message_size(MAX_RESPONSE_BYTES)
    }
}

/// The innermost cause, which is what a person needs ("No such file or directory").
fn source_message(e: &dyn std::error::Error) -> String {
    let mut cause = e;
    while let Some(next) = cause.source() {
        cause = next;
    }
    cause.to_string()
}
