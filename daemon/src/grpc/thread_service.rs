//! `kiki.v1.ThreadService`: the thread and room operations agents and owners share
//! (ThreadCreate, ThreadList, ThreadRead, ThreadSend, ThreadWait, RoomRead, RoomAdd, …).

use kiki_proto as pb;
use tonic::{Request, Response, Status};
use tracing::instrument;

use super::{caller, status, target};
use crate::bridges::{Bridges, ReadQuery};
use crate::convert::{
    posted_to_pb, read_to_pb, room_page_to_pb, sent_to_pb, thread_to_pb, wait_result_to_pb,
};
use crate::error::Error;
use crate::mailbox::{Mailbox, PermissionRequests, Waits};
use crate::messaging::{Messaging, Routed};
use crate::rooms::Rooms;
use crate::threads::{CreateRequest, Threads};

#[derive(Clone)]
pub struct ThreadServiceImpl {
    threads: Threads,
    mailbox: Mailbox,
    waits: Waits,
    permissions: PermissionRequests,
    messaging: Messaging,
    tools: crate::tools::SessionTools,
}

impl ThreadServiceImpl {
    /// ThreadRead with tool_calls: a page of a thread's session-tool calls (this home's
    /// threads only; the cursor is the last seq read).
    async fn read_tool_calls(
        &self,
        request: Request<pb::ThreadReadRequest>,
    ) -> Result<Response<pb::ThreadReadResponse>, Status> {
        let caller = caller(&self.threads, &request).await?;
        let r = request.into_inner();
        let target = target(r.target)?;
        if !r.content_ref.is_empty() || r.last.is_some() {
            return Err(status(Error::invalid("tool_calls", "reads pages with limit and cursor only")));
        }
        let limit = r.limit.unwrap_or(20);
        if !(1..=100).contains(&limit) {
            return Err(status(Error::invalid("limit", format!("1-100, got {limit}"))));
        }
        let after = if r.cursor.is_empty() {
            0
        } else {
            r.cursor
                .parse::<i64>()
                .map_err(|_| status(Error::invalid("cursor", "not a cursor of tool calls")))?
        };
        let thread = self.threads.named(&target).await.map_err(status)?;
        let calls = self.tools.history(&caller, &thread.id, after, limit).await.map_err(status)?;
        let next_cursor =
            (calls.len() == limit as usize).then(|| calls.last().map(|c| c.seq.to_string())).flatten();
        Ok(Response::new(pb::ThreadReadResponse {
            tool_calls: calls.into_iter().map(crate::convert::tool_call_to_pb).collect(),
            next_cursor,
            ..Default::default()
        }))
    }

    pub fn new(
        threads: Threads,
        mailbox: Mailbox,
        waits: Waits,
        permissions: PermissionRequests,
        bridges: Bridges,
        rooms: Rooms,
        tools: crate::tools::SessionTools,
    ) -> Self {
        let messaging = Messaging::new(threads.clone(), mailbox.clone(), waits.clone(), bridges, rooms);
        Self { threads, mailbox, waits, permissions, messaging, tools }
    }

    /// A peer tool called with `token` (the `kiki-token` header, if any): an agent's call
    /// needs a valid token and its thread's communication on (see [`Mailbox::peer_tool`]).
    pub async fn admit_peer_tool(&self, token: Option<Result<&str, ()>>, tool: &str) -> Result<(), Status> {
        match super::caller_of(&self.threads, token).await? {
            Some(caller) => self.mailbox.peer_tool(&caller, tool).await.map(drop).map_err(status),
            None => Ok(()),
        }
    }

    async fn admit<T>(&self, request: &Request<T>, tool: &str) -> Result<(), Status> {
        self.admit_peer_tool(super::token_of(request), tool).await
    }

    /// ThreadWait, wherever its targets are (see [`Messaging::wait`]).
    pub async fn wait(&self, r: pb::ThreadWaitRequest) -> Result<pb::ThreadWaitResponse, Status> {
        let (results, timed_out) =
            self.messaging.wait(r.targets, r.timeout_ms, r.cursors).await.map_err(status)?;
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
        let caller = caller(&self.threads, &request).await?;
        let r = request.into_inner();
        let created = self
            .threads
            .create(
                &caller,
                CreateRequest {
                    cwd: r.cwd,
                    profile: r.profile,
                    prompt: r.prompt,
                    title: r.title,
                    resume_agent_session: r.resume_agent_session,
                    ..Default::default()
                },
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
        self.admit(&request, "ThreadList").await?;
        let r = request.into_inner();
        let listed =
            self.messaging.list(&r.bridge, &r.workspace_id, r.limit, &r.cursor).await.map_err(status)?;
        Ok(Response::new(match listed {
            Routed::Here(page) => pb::ThreadListResponse {
                threads: page
                    .threads
                    .iter()
                    .map(|t| thread_to_pb(t, "", self.threads.communication(t)))
                    .collect(),
                next_cursor: page.next_cursor,
            },
            Routed::There(page) => page.into_pb(),
        }))
    }

    #[instrument(level = "debug", skip_all)]
    async fn thread_read(
        &self,
        request: Request<pb::ThreadReadRequest>,
    ) -> Result<Response<pb::ThreadReadResponse>, Status> {
        self.admit(&request, "ThreadRead").await?;
        if request.get_ref().tool_calls {
            return self.read_tool_calls(request).await;
        }
        let r = request.into_inner();
        let target = target(r.target)?;
        let query =
            ReadQuery { limit: r.limit, cursor: &r.cursor, content_ref: &r.content_ref, last: r.last };
        let read = self.messaging.read(&target, query).await.map_err(status)?;
        Ok(Response::new(match read {
            Routed::Here(read) => {
                let communication = self.threads.communication(Threads::read_thread(&read));
                let mut answer = read_to_pb(read, "", communication);
                if let Some(thread) = answer.thread.as_mut() {
                    thread.agent_session =
                        self.threads.agent_session(&thread.id).await.map_err(status)?.unwrap_or_default();
                }
                answer
            }
            Routed::There(page) => page.into_pb(),
        }))
    }

    #[instrument(level = "debug", skip_all)]
    async fn thread_send(
        &self,
        request: Request<pb::ThreadSendRequest>,
    ) -> Result<Response<pb::ThreadSendResponse>, Status> {
        let caller = caller(&self.threads, &request).await?;
        let r = request.into_inner();
        if !r.room.is_empty() {
            if r.target.is_some() {
                return Err(status(Error::invalid("target", "a send names a target or a room, not both")));
            }
            let posted = self
                .messaging
                .room_post(&caller, &r.room, &r.content, &r.mentions, &r.idempotency_key)
                .await
                .map_err(status)?;
            return Ok(Response::new(match posted {
                Routed::Here(posted) => posted_to_pb(posted),
                Routed::There(answer) => answer.into_pb(),
            }));
        }
        if !r.mentions.is_empty() {
            return Err(status(Error::invalid("mentions", "only for room sends")));
        }
        let target = target(r.target)?;
        let sent =
            self.messaging.send(&caller, &target, &r.content, &r.idempotency_key).await.map_err(status)?;
        Ok(Response::new(pb::ThreadSendResponse { idempotency_key: r.idempotency_key, ..sent_to_pb(sent) }))
    }

    // Served by `wait_route` (tonic's per-call state would dominate 10,000 parked waits);
    // this stays for completeness of the generated service.
    async fn thread_wait(
        &self,
        request: Request<pb::ThreadWaitRequest>,
    ) -> Result<Response<pb::ThreadWaitResponse>, Status> {
        self.admit(&request, "ThreadWait").await?;
        self.wait(request.into_inner()).await.map(Response::new)
    }

    #[instrument(level = "debug", skip_all)]
    async fn room_read(
        &self,
        request: Request<pb::RoomReadRequest>,
    ) -> Result<Response<pb::RoomReadResponse>, Status> {
        let caller = caller(&self.threads, &request).await?;
        let r = request.into_inner();
        let page = self.messaging.room_read(&caller, &r.room, r.limit, &r.after_id).await.map_err(status)?;
        Ok(Response::new(match page {
            Routed::Here(page) => room_page_to_pb(page),
            Routed::There(page) => page.into_pb(),
        }))
    }

    #[instrument(level = "debug", skip_all)]
    async fn room_add(
        &self,
        request: Request<pb::RoomAddRequest>,
    ) -> Result<Response<pb::RoomAddResponse>, Status> {
        let caller = caller(&self.threads, &request).await?;
        let r = request.into_inner();
        let added = self.messaging.room_add(&caller, &r.room, &r.session_id).await.map_err(status)?;
        Ok(Response::new(pb::RoomAddResponse { added }))
    }

    async fn attention(
        &self,
        request: Request<pb::AttentionRequest>,
    ) -> Result<Response<pb::AttentionResponse>, Status> {
        let caller = caller(&self.threads, &request).await?;
        self.waits.attention(&caller, &request.into_inner().reason).await.map_err(status)?;
        Ok(Response::new(pb::AttentionResponse {}))
    }

    type ThreadFollowStream = tokio_stream::wrappers::ReceiverStream<Result<pb::TurnProgress, Status>>;

    #[instrument(level = "debug", skip_all)]
    async fn thread_follow(
        &self,
        request: Request<pb::ThreadFollowRequest>,
    ) -> Result<Response<Self::ThreadFollowStream>, Status> {
        let caller = caller(&self.threads, &request).await?;
        let r = request.into_inner();
        let turn_id = (!r.turn_id.is_empty()).then_some(r.turn_id);
        let mut progress =
            self.waits.follow(&caller, &target(r.target)?, turn_id, r.wait_ms).await.map_err(status)?;
        let (tx, rx) = tokio::sync::mpsc::channel(16);
        tokio::spawn(async move {
            loop {
                // A follower that goes away ends this relay, and with it the reader.
                let next = tokio::select! {
                    next = progress.recv() => next,
                    () = tx.closed() => return,
                };
                let Some(next) = next else { return };
                if tx.send(next.map(crate::convert::progress_to_pb).map_err(status)).await.is_err() {
                    return;
                }
            }
        });
        Ok(Response::new(tokio_stream::wrappers::ReceiverStream::new(rx)))
    }

    #[instrument(level = "debug", skip_all)]
    async fn permission_ask(
        &self,
        request: Request<pb::PermissionAskRequest>,
    ) -> Result<Response<pb::PermissionAskResponse>, Status> {
        let caller = caller(&self.threads, &request).await?;
        let r = request.into_inner();
        let decision = self.permissions.ask_permission(&caller, &r.tool, &r.input).await.map_err(status)?;
        Ok(Response::new(pb::PermissionAskResponse {
            request_id: decision.request_id,
            allowed: decision.allowed,
            reason: decision.reason,
        }))
    }

    #[instrument(level = "debug", skip_all)]
    async fn permission_decide(
        &self,
        request: Request<pb::PermissionDecideRequest>,
    ) -> Result<Response<pb::PermissionDecideResponse>, Status> {
        let caller = caller(&self.threads, &request).await?;
        let r = request.into_inner();
        let stands = self
            .permissions
            .decide_permission(&caller, &r.request_id, r.allow, &r.reason)
            .await
            .map_err(status)?;
        Ok(Response::new(pb::PermissionDecideResponse {
            status: crate::convert::permission_status_to_pb(stands.status) as i32,
            tool: stands.tool,
            thread_id: stands.thread_id,
        }))
    }

    #[instrument(level = "debug", skip_all)]
    async fn thread_inbox(
        &self,
        request: Request<pb::ThreadInboxRequest>,
    ) -> Result<Response<pb::ThreadInboxResponse>, Status> {
        let caller = caller(&self.threads, &request).await?;
        let r = request.into_inner();
        let (items, delivered) = self.waits.inbox(&caller, r.taken, r.timeout_ms).await.map_err(status)?;
        Ok(Response::new(pb::ThreadInboxResponse {
            items: items.into_iter().map(crate::convert::inbox_item_to_pb).collect(),
            delivered,
        }))
    }
}
