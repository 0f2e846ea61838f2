//! `kiki.v1.ThreadService`: the agent-facing operations of contract §2.

use kiki_proto as pb;
use tonic::{Request, Response, Status};
use tracing::instrument;

use super::{caller, status, thread_to_pb, turn_to_pb};
use crate::error::Error;
use crate::threads::{CreateRequest, Threads};

pub struct ThreadServiceImpl {
    threads: Threads,
}

impl ThreadServiceImpl {
    pub fn new(threads: Threads) -> Self {
        Self { threads }
    }
}

fn target(r: Option<pb::ThreadRef>) -> Result<pb::ThreadRef, Status> {
    r.ok_or_else(|| status(Error::invalid("target", "required")))
}

#[tonic::async_trait]
impl pb::thread_service_server::ThreadService for ThreadServiceImpl {
    #[instrument(skip_all)]
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

    #[instrument(skip_all)]
    async fn thread_list(
        &self,
        request: Request<pb::ThreadListRequest>,
    ) -> Result<Response<pb::ThreadListResponse>, Status> {
        let r = request.into_inner();
        if !r.bridge.is_empty() {
            self.threads.resolve_host(&r.bridge).map_err(status)?;
        }
        let page = self.threads.list(Some(r.workspace_id), r.limit, &r.cursor).await.map_err(status)?;
        Ok(Response::new(pb::ThreadListResponse {
            threads: page.threads.iter().map(|t| thread_to_pb(t, "")).collect(),
            next_cursor: page.next_cursor,
        }))
    }

    #[instrument(skip_all)]
    async fn thread_read(
        &self,
        request: Request<pb::ThreadReadRequest>,
    ) -> Result<Response<pb::ThreadReadResponse>, Status> {
        let r = request.into_inner();
        let target = target(r.target)?;
        let thread = self
            .threads
            .get(&target.host_id, &target.workspace_id, &target.session_id)
            .await
            .map_err(status)?;
        if !r.content_ref.is_empty() {
            if r.limit.is_some() {
                return Err(status(Error::invalid(
                    "limit",
                    "not used with content_ref (segments have a fixed size)",
                )));
            }
            let s = self.threads.read_content(thread, &r.content_ref, &r.cursor).await.map_err(status)?;
            return Ok(Response::new(pb::ThreadReadResponse {
                turns: Vec::new(),
                next_cursor: None,
                thread: Some(thread_to_pb(&s.thread, "")),
                segment: Some(pb::ContentSegment {
                    content_ref: s.content_ref,
                    text: s.text,
                    offset: s.offset as u64,
                    utf16_length: s.total as u64,
                    next: s.next,
                }),
            }));
        }
        let page = self.threads.read(thread, r.limit, &r.cursor).await.map_err(status)?;
        Ok(Response::new(pb::ThreadReadResponse {
            thread: Some(thread_to_pb(&page.thread, "")),
            turns: page.turns.into_iter().map(turn_to_pb).collect(),
            next_cursor: page.next_cursor,
            segment: None,
        }))
    }

    async fn thread_send(
        &self,
        _request: Request<pb::ThreadSendRequest>,
    ) -> Result<Response<pb::ThreadSendResponse>, Status> {
        Err(status(Error::Unimplemented("ThreadSend is not implemented yet (mailbox)".into())))
    }

    async fn thread_wait(
        &self,
        _request: Request<pb::ThreadWaitRequest>,
    ) -> Result<Response<pb::ThreadWaitResponse>, Status> {
        Err(status(Error::Unimplemented("ThreadWait is not implemented yet (mailbox)".into())))
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
        _request: Request<pb::AttentionRequest>,
    ) -> Result<Response<pb::AttentionResponse>, Status> {
        Err(status(Error::Unimplemented("attention is not implemented yet (mailbox)".into())))
    }
}
