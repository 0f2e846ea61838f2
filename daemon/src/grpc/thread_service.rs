//! `kiki.v1.ThreadService`: the agent-facing operations of contract §2.

use kiki_proto as pb;
use tonic::{Request, Response, Status};
use tracing::instrument;

use super::{caller, read_response, status, target, thread_to_pb, wait_result_to_pb};
use crate::bridges::Bridges;
use crate::error::Error;
use crate::mailbox::Mailbox;
use crate::store::MessageStatus;
use crate::threads::{CreateRequest, Threads};

#[derive(Clone)]
pub struct ThreadServiceImpl {
    threads: Threads,
    mailbox: Mailbox,
    bridges: Bridges,
}

impl ThreadServiceImpl {
    pub fn new(threads: Threads, mailbox: Mailbox, bridges: Bridges) -> Self {
        Self { threads, mailbox, bridges }
    }

    /// ThreadWait: on this home's threads, or forwarded over the one bridge they are behind.
    /// No tracing span and a boxed remote branch keep a parked call's state small.
    pub async fn wait(&self, r: pb::ThreadWaitRequest) -> Result<pb::ThreadWaitResponse, Status> {
        let hosts: Vec<&str> = r.targets.iter().map(|t| t.host_id.as_str()).collect();
        if let Some(host) = hosts.iter().find(|h| self.threads.resolve_host(h).is_err()) {
            if hosts.iter().any(|h| h != host) {
                return Err(status(Error::invalid(
                    "targets",
                    "must all be on one home: this one, or the same bridge",
                )));
            }
            let host = host.to_string();
            return Box::pin(self.bridges.wait_remote(&host, &r.targets, r.timeout_ms, &r.cursors))
                .await
                .map_err(status);
        }
        drop(hosts);
        let (results, timed_out) =
            self.mailbox.wait(r.targets, r.timeout_ms, r.cursors).await.map_err(status)?;
        Ok(pb::ThreadWaitResponse {
            results: results.into_iter().map(wait_result_to_pb).collect(),
            timed_out,
        })
    }
}

#[tonic::async_trait]
impl pb::thread_service_server::ThreadService for ThreadServiceImpl {
    #[instrument(level = "debug", skip_all)]
    async fn thread_create(
        &self,
        request: Request<pb::ThreadCreateRequest>,
    ) -> Result<Response<pb::ThreadCreateResponse>, Status> {
        let caller = caller(&self.threads, &request)?;
        let r = request.into_inner();
        let created = self
            .threads
            .create(
                caller.as_ref(),
                CreateRequest { cwd: r.cwd, profile: r.profile, prompt: r.prompt, title: r.title },
            )
            .await
            .map_err(status)?;
        let t = created.thread;
        Ok(Response::new(pb::ThreadCreateResponse {
            id: t.id,
            title: t.title,
            cwd: t.cwd,
            profile: t.profile,
            prompt_started: created.prompt_started,
            workspace_id: t.workspace_id,
        }))
    }

    #[instrument(level = "debug", skip_all)]
    async fn thread_list(
        &self,
        request: Request<pb::ThreadListRequest>,
    ) -> Result<Response<pb::ThreadListResponse>, Status> {
        let r = request.into_inner();
        if !r.bridge.is_empty() && self.threads.resolve_host(&r.bridge).is_err() {
            let page = self.bridges.list_remote(&r.bridge.clone(), r).await.map_err(status)?;
            return Ok(Response::new(page));
        }
        let page = self.threads.list(Some(r.workspace_id), r.limit, &r.cursor, &[]).await.map_err(status)?;
        Ok(Response::new(pb::ThreadListResponse {
            threads: page.threads.iter().map(|t| thread_to_pb(t, "")).collect(),
            next_cursor: page.next_cursor,
        }))
    }

    #[instrument(level = "debug", skip_all)]
    async fn thread_read(
        &self,
        request: Request<pb::ThreadReadRequest>,
    ) -> Result<Response<pb::ThreadReadResponse>, Status> {
        let r = request.into_inner();
        let target = target(r.target.clone())?;
        if self.threads.resolve_host(&target.host_id).is_err() {
            let page = self.bridges.read_remote(&target.host_id, r).await.map_err(status)?;
            return Ok(Response::new(page));
        }
        let thread = self
            .threads
            .get(&target.host_id, &target.workspace_id, &target.session_id)
            .await
            .map_err(status)?;
        let page = read_response(&self.threads, thread, r.limit, &r.cursor, &r.content_ref, "")
            .await
            .map_err(status)?;
        Ok(Response::new(page))
    }

    #[instrument(level = "debug", skip_all)]
    async fn thread_send(
        &self,
        request: Request<pb::ThreadSendRequest>,
    ) -> Result<Response<pb::ThreadSendResponse>, Status> {
        let caller = caller(&self.threads, &request)?;
        let r = request.into_inner();
        if !r.room.is_empty() {
            return Err(status(Error::Unimplemented("rooms are not implemented yet".into())));
        }
        if !r.mentions.is_empty() {
            return Err(status(Error::invalid("mentions", "only for room sends")));
        }
        let target = target(r.target)?;
        let sent = if self.threads.resolve_host(&target.host_id).is_err() {
            let source = self.mailbox.sender(caller.as_ref()).await.map_err(status)?;
            let source_thread = source.map(|s| s.thread_id);
            self.bridges
                .send_remote(
                    source_thread,
                    &target.host_id,
                    &target.session_id,
                    &r.content,
                    &r.idempotency_key,
                )
                .await
                .map_err(status)?
        } else {
            self.mailbox
                .send(caller.as_ref(), &target, &r.content, &r.idempotency_key)
                .await
                .map_err(status)?
        };
        Ok(Response::new(pb::ThreadSendResponse {
            message_id: sent.message_id,
            status: match sent.status {
                MessageStatus::Delivered => pb::SendStatus::Delivered,
                MessageStatus::Pending => pb::SendStatus::Pending,
                MessageStatus::Undeliverable => pb::SendStatus::Undeliverable,
            } as i32,
            replayed: sent.replayed,
            reason: sent.reason,
        }))
    }

    // Served by `wait_route` (tonic's per-call state would dominate 10,000 parked waits);
    // this stays for completeness of the generated service.
    async fn thread_wait(
        &self,
        request: Request<pb::ThreadWaitRequest>,
    ) -> Result<Response<pb::ThreadWaitResponse>, Status> {
        self.wait(request.into_inner()).await.map(Response::new)
    }

    async fn room_read(
        &self,
        _request: Request<pb::RoomReadRequest>,
    ) -> Result<Response<pb::RoomReadResponse>, Status> {
        Err(status(Error::Unimplemented("rooms are not implemented yet".into())))
    }

    async fn room_add(
        &self,
        _request: Request<pb::RoomAddRequest>,
    ) -> Result<Response<pb::RoomAddResponse>, Status> {
        Err(status(Error::Unimplemented("rooms are not implemented yet".into())))
    }

    async fn attention(
        &self,
        request: Request<pb::AttentionRequest>,
    ) -> Result<Response<pb::AttentionResponse>, Status> {
        let caller = caller(&self.threads, &request)?;
        self.mailbox.attention(caller.as_ref(), &request.into_inner().reason).await.map_err(status)?;
        Ok(Response::new(pb::AttentionResponse {}))
    }
}
