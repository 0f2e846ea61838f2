//! `kiki.v1.HomeService`: the owner's actions on the home.

use std::sync::Arc;

use kiki_proto as pb;
use tokio_util::sync::CancellationToken;
use tonic::{Request, Response, Status};
use tracing::{info, instrument};

use super::{communication_from_pb, owner_only, status, target, thread_to_pb};
use crate::mailbox::Mailbox;
use crate::threads::Threads;

/// What `Status` reports that does not change while the daemon runs.
#[derive(Debug, Clone)]
pub struct HomeInfo {
    pub home_id: String,
    pub home: String,
    pub socket: String,
    pub store: String,
    pub started_at: String,
    pub default_profile: String,
    pub profiles: Vec<String>,
    pub bridge_listen: String,
}

pub struct HomeServiceImpl {
    threads: Threads,
    mailbox: Mailbox,
    info: Arc<HomeInfo>,
    shutdown: CancellationToken,
}

impl HomeServiceImpl {
    pub fn new(threads: Threads, mailbox: Mailbox, info: Arc<HomeInfo>, shutdown: CancellationToken) -> Self {
        Self { threads, mailbox, info, shutdown }
    }
}

#[tonic::async_trait]
impl pb::home_service_server::HomeService for HomeServiceImpl {
    async fn status(
        &self,
        _request: Request<pb::StatusRequest>,
    ) -> Result<Response<pb::StatusResponse>, Status> {
        let store = self.threads.store();
        let threads = store.count_threads().await.map_err(|e| status(e.into()))?;
        let running_turns = store.running_turns().await.map_err(|e| status(e.into()))?;
        let i = &self.info;
        Ok(Response::new(pb::StatusResponse {
            home_id: i.home_id.clone(),
            home: i.home.clone(),
            pid: std::process::id(),
            version: env!("CARGO_PKG_VERSION").to_string(),
            socket: i.socket.clone(),
            store: i.store.clone(),
            started_at: i.started_at.clone(),
            threads,
            running_turns,
            default_profile: i.default_profile.clone(),
            profiles: i.profiles.clone(),
            bridge_listen: i.bridge_listen.clone(),
        }))
    }

    async fn shutdown(
        &self,
        request: Request<pb::ShutdownRequest>,
    ) -> Result<Response<pb::ShutdownResponse>, Status> {
        owner_only(&self.threads, &request, "shutdown")?;
        info!("shutdown requested over the API");
        self.shutdown.cancel();
        Ok(Response::new(pb::ShutdownResponse { stopped: false }))
    }

    #[instrument(level = "debug", skip_all)]
    async fn thread_say(
        &self,
        request: Request<pb::ThreadSayRequest>,
    ) -> Result<Response<pb::ThreadSayResponse>, Status> {
        owner_only(&self.threads, &request, "thread say")?;
        let r = request.into_inner();
        let t = target(r.target)?;
        let thread = self.threads.get(&t.host_id, &t.workspace_id, &t.session_id).await.map_err(status)?;
        let (turn_started, input_id) = self.threads.say(&thread, &r.content).await.map_err(status)?;
        Ok(Response::new(pb::ThreadSayResponse { turn_started, input_id }))
    }

    #[instrument(level = "debug", skip_all)]
    async fn thread_archive(
        &self,
        request: Request<pb::ThreadArchiveRequest>,
    ) -> Result<Response<pb::ThreadArchiveResponse>, Status> {
        owner_only(&self.threads, &request, "thread archive")?;
        let r = request.into_inner();
        let t = target(r.target)?;
        let thread = self.threads.get(&t.host_id, &t.workspace_id, &t.session_id).await.map_err(status)?;
        let done = self.mailbox.set_archived(&thread.id, r.archived).await.map_err(status)?;
        Ok(Response::new(pb::ThreadArchiveResponse {
            thread: Some(thread_to_pb(&done.thread, "")),
            changed: done.changed,
        }))
    }

    #[instrument(level = "debug", skip_all)]
    async fn thread_set(
        &self,
        request: Request<pb::ThreadSetRequest>,
    ) -> Result<Response<pb::ThreadSetResponse>, Status> {
        owner_only(&self.threads, &request, "thread set")?;
        let r = request.into_inner();
        let setting = communication_from_pb(r.communication)?;
        let t = target(r.target)?;
        let thread = self.threads.get(&t.host_id, &t.workspace_id, &t.session_id).await.map_err(status)?;
        let thread = self.mailbox.set_communication(&thread, setting).await.map_err(status)?;
        Ok(Response::new(pb::ThreadSetResponse { thread: Some(thread_to_pb(&thread, "")) }))
    }
}
