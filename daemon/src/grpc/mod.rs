//! The gRPC surface: one file per service, the one `Error` → `tonic::Status` mapping, and
//! the conversions from store records to `kiki.v1` messages.
//!
//! Each connection has its own limits (`connection.rs`): at most [`WAITS_PER_CONNECTION`]
//! parked ThreadWaits and [`CALLS_PER_CONNECTION`] other calls at once, applied per call by
//! `wait_route.rs`, so parked waits never hold back a connection's other calls.

mod bridge_service;
mod connection;
mod home_service;
mod room_service;
mod thread_service;
mod tool_service;
mod wait_route;

use std::future::Future;
use std::sync::Arc;

use kiki_proto as pb;
use tokio::net::UnixListener;
use tokio_stream::StreamExt;
use tokio_stream::wrappers::UnixListenerStream;
use tonic::{Request, Status};

use crate::bridges::Bridges;
use crate::caller::Caller;
use crate::error::Error;
use crate::mailbox::{Mailbox, PermissionRequests, Waits};
use crate::rooms::Rooms;
use crate::store::{CommunicationSetting, StoreError};
use crate::threads::Threads;
use crate::threads::runner::TurnCaller;

pub use connection::{CALLS_PER_CONNECTION, STREAMS_PER_CONNECTION, WAITS_PER_CONNECTION};
pub use home_service::{HomeInfo, HomeServiceImpl};
pub use thread_service::ThreadServiceImpl;

/// The home's domain services, which the gRPC layer translates to and from protobuf.
pub struct Services {
    pub threads: Threads,
    pub mailbox: Mailbox,
    pub waits: Waits,
    pub permissions: PermissionRequests,
    pub bridges: Bridges,
    pub rooms: Rooms,
    pub tools: crate::tools::SessionTools,
    pub info: Arc<HomeInfo>,
}

/// Serves the home's API on `listener` until `shutdown` resolves; in-flight calls finish.
pub async fn serve(
    listener: UnixListener,
    services: Services,
    shutdown: impl Future<Output = ()> + Send,
    request_shutdown: tokio_util::sync::CancellationToken,
) -> Result<(), ServeError> {
    let Services { threads, mailbox, waits, permissions, bridges, rooms, tools, info } = services;
    let reflection_v1 = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(pb::FILE_DESCRIPTOR_SET)
        .build_v1()?;
    let reflection_v1alpha = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(pb::FILE_DESCRIPTOR_SET)
        .build_v1alpha()?;
    let thread_service = ThreadServiceImpl::new(
        threads.clone(),
        mailbox.clone(),
        waits.clone(),
        permissions,
        bridges.clone(),
        rooms.clone(),
        tools.clone(),
    );
    // No tonic concurrency limit: it would count parked waits with the other calls.
    // `wait_route` applies each connection's own limits instead.
    tonic::transport::Server::builder()
        // A span per call, named by its method, around everything the call does; it
        // continues the caller's trace (`kiki`'s, an agent's, `kiki mcp`'s tool call).
        .trace_fn(|request| {
            let header = |name| request.headers().get(name).and_then(|v| v.to_str().ok()).unwrap_or_default();
            let span = tracing::debug_span!(
                "rpc",
                method = %request.uri().path(),
                mcp_tool = tracing::field::Empty
            );
            let tool = header(kiki_proto::MCP_TOOL_METADATA_KEY);
            if !tool.is_empty() {
                span.record("mcp_tool", tool);
            }
            crate::observe::traces::continue_trace(&span, header(kiki_proto::TRACE_METADATA_KEY));
            span
        })
        .max_concurrent_streams(STREAMS_PER_CONNECTION)
        .layer(wait_route::WaitRouteLayer::new(thread_service.clone()))
        .add_service(pb::thread_service_server::ThreadServiceServer::new(thread_service))
        .add_service(pb::bridge_service_server::BridgeServiceServer::new(
            bridge_service::BridgeServiceImpl::new(threads.clone(), bridges.clone()),
        ))
        .add_service(pb::tool_service_server::ToolServiceServer::new(tool_service::ToolServiceImpl::new(
            threads.clone(),
            tools,
        )))
        .add_service(pb::room_service_server::RoomServiceServer::new(room_service::RoomServiceImpl::new(
            threads.clone(),
            rooms,
        )))
        .add_service(pb::home_service_server::HomeServiceServer::new(HomeServiceImpl::new(
            threads,
            bridges,
            mailbox,
            waits,
            info,
            request_shutdown,
        )))
        .add_service(reflection_v1)
        .add_service(reflection_v1alpha)
        .serve_with_incoming_shutdown(
            UnixListenerStream::new(listener)
                .map(|accepted| accepted.map(connection::LimitedConnection::new)),
            shutdown,
        )
        .await?;
    Ok(())
}

#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("reflection: {0}")]
    Reflection(#[from] tonic_reflection::server::Error),
    #[error("gRPC server: {0}")]
    Transport(#[from] tonic::transport::Error),
}

/// The one mapping from daemon errors to gRPC status codes.
pub fn status(e: Error) -> Status {
    match e {
        Error::InvalidArgument { .. } => Status::invalid_argument(e.to_string()),
        Error::NotFound(m) => Status::not_found(m),
        Error::Conflict(m) => Status::already_exists(m),
        Error::FailedPrecondition(m) => Status::failed_precondition(m),
        Error::PermissionDenied(m) => Status::permission_denied(m),
        Error::Unimplemented(m) => Status::unimplemented(m),
        Error::Unavailable(m) => Status::unavailable(m),
        Error::Store(e @ StoreError::Busy) => Status::resource_exhausted(e.to_string()),
        // Not a failure: the home is stopping.
        Error::Store(e @ StoreError::Closed) => Status::unavailable(e.to_string()),
        // Not kikid's failure: its database is down or restarting, and it reconnects.
        Error::Store(e @ StoreError::Unavailable(_)) => {
            tracing::warn!(error = %e, "store unavailable");
            Status::unavailable(e.to_string())
        }
        // Nothing was written; retrying helps once the owner frees space, not before.
        Error::Store(e @ StoreError::DiskFull(_)) => {
            tracing::error!(error = %e, "store write refused");
            Status::resource_exhausted(e.to_string())
        }
        Error::Store(e @ StoreError::Corrupt { .. }) => {
            tracing::error!(error = %e, "store failure");
            Status::data_loss(e.to_string())
        }
        Error::Store(e) => {
            tracing::error!(error = %e, "store failure");
            Status::unavailable(format!("store: {e}"))
        }
    }
}

/// Who makes a call: the turn its `kiki-token` metadata names, else the owner. A token
/// that is not (or no longer) valid is refused rather than silently taken for the owner.
pub async fn caller<T>(threads: &Threads, request: &Request<T>) -> Result<Caller, Status> {
    caller_of(threads, token_of(request)).await.map(Caller::from)
}

/// The call's `kiki-token` header, if any (`Err` if it is not ASCII).
pub fn token_of<T>(request: &Request<T>) -> Option<Result<&str, ()>> {
    request.metadata().get(pb::TOKEN_METADATA_KEY).map(|v| v.to_str().map_err(drop))
}

/// [`caller`] from the token header's value, if there is one (`Err` if it is not ASCII).
pub async fn caller_of(
    threads: &Threads,
    token: Option<Result<&str, ()>>,
) -> Result<Option<TurnCaller>, Status> {
    let Some(token) = token else { return Ok(None) };
    let token = token.map_err(|()| Status::unauthenticated("kiki-token: not valid ASCII"))?;
    let caller = threads.runner().caller(token).await.map_err(|e| status(e.into()))?;
    caller.map(Some).ok_or_else(|| {
        Status::unauthenticated("KIKI_TOKEN is not valid: a turn's token stops working when its turn ends")
    })
}

/// The `target` every thread call needs.
pub fn target(r: Option<pb::ThreadRef>) -> Result<pb::ThreadRef, Status> {
    r.ok_or_else(|| status(Error::invalid("target", "required")))
}

pub fn communication_from_pb(value: i32) -> Result<CommunicationSetting, Status> {
    match pb::Communication::try_from(value) {
        Ok(pb::Communication::Default) => Ok(CommunicationSetting::Default),
        Ok(pb::Communication::On) => Ok(CommunicationSetting::On),
        Ok(pb::Communication::Off) => Ok(CommunicationSetting::Off),
        _ => Err(status(Error::invalid("communication", "must be default, on or off"))),
    }
}
