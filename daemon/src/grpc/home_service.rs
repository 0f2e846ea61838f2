//! `kiki.v1.HomeService`: the owner's actions on the home.

use std::path::PathBuf;
use std::sync::Arc;

use kiki_proto as pb;
use tokio_util::sync::CancellationToken;
use tonic::{Request, Response, Status};
use tracing::{info, instrument};

use super::{caller, communication_from_pb, status, target};
use crate::convert::{thread_to_pb, worker_to_pb};
use crate::doctor::{self, StoreAt};
use crate::mailbox::{Mailbox, Waits};
use crate::threads::Threads;
use kiki_proto::home::HomeDir;

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
    /// The home's [thread_communication] switch, in words.
    pub thread_communication: String,
    /// The config file kikid read (or would have: it may not exist).
    pub config_file: PathBuf,
    /// Where the store is.
    pub store_location: crate::store::StoreLocation,
    /// This process among the home's replicas.
    pub replica_id: String,
    /// `[store] lease`.
    pub lease: std::time::Duration,
}

/// How long ThreadStop waits for the stopped turn's end: the agent's grace to stop
/// (`executors::STOP_GRACE`), then up to as long again to close it, and some.
const STOP_WAIT: std::time::Duration = std::time::Duration::from_secs(20);

pub struct HomeServiceImpl {
    threads: Threads,
    bridges: crate::bridges::Bridges,
    mailbox: Mailbox,
    waits: Waits,
    info: Arc<HomeInfo>,
    shutdown: CancellationToken,
}

impl HomeServiceImpl {
    pub fn new(
        threads: Threads,
        bridges: crate::bridges::Bridges,
        mailbox: Mailbox,
        waits: Waits,
        info: Arc<HomeInfo>,
        shutdown: CancellationToken,
    ) -> Self {
        Self { threads, bridges, mailbox, waits, info, shutdown }
    }
}

#[tonic::async_trait]
impl pb::home_service_server::HomeService for HomeServiceImpl {
    type EventsStream = tokio_stream::wrappers::ReceiverStream<Result<pb::HomeEvent, Status>>;

    #[instrument(level = "debug", skip_all)]
    async fn events(
        &self,
        request: Request<pb::EventsRequest>,
    ) -> Result<Response<Self::EventsStream>, Status> {
        let caller = caller(&self.threads, &request).await?;
        caller.owner_only("events").map_err(status)?;
        let r = request.into_inner();
        let peer = match r.bridge.as_str() {
            "" => None,
            name => {
                let bridges = self.threads.store().bridges().await.map_err(|e| status(e.into()))?;
                let bridge = bridges.into_iter().find(|b| b.answers_to(name)).ok_or_else(|| {
                    Status::not_found(format!("bridge: no bridge by the name or id {name:?}"))
                })?;
                Some(bridge.peer_home_id)
            }
        };
        let wanted = move |e: &crate::observe::feed::FeedEvent| {
            (r.thread_id.is_empty() || e.thread_id == r.thread_id)
                && (r.room_id.is_empty() || e.room_id == r.room_id)
                && peer.as_ref().is_none_or(|p| &e.peer_home_id == p)
        };
        let (kept, mut live) = self.threads.observer().feed().follow();
        let (tx, rx) = tokio::sync::mpsc::channel(64);
        let follow = r.follow;
        tokio::spawn(async move {
            for event in kept.iter().filter(|e| wanted(e)) {
                if tx.send(Ok(crate::convert::feed_event_to_pb(event))).await.is_err() {
                    return;
                }
            }
            if !follow {
                return;
            }
            loop {
                // A reader that goes away ends this relay.
                let next = tokio::select! {
                    next = live.recv() => next,
                    () = tx.closed() => return,
                };
                match next {
                    Ok(event) if wanted(&event) => {
                        if tx.send(Ok(crate::convert::feed_event_to_pb(&event))).await.is_err() {
                            return;
                        }
                    }
                    Ok(_) => {}
                    // A reader too slow for the feed misses what it fell behind by, and is told.
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(missed)) => {
                        let said = Status::data_loss(format!(
                            "events: {missed} events went by unread; follow again"
                        ));
                        let _ = tx.send(Err(said)).await;
                        return;
                    }
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
                }
            }
        });
        Ok(Response::new(tokio_stream::wrappers::ReceiverStream::new(rx)))
    }

    async fn status(
        &self,
        request: Request<pb::StatusRequest>,
    ) -> Result<Response<pb::StatusResponse>, Status> {
        let workers = match request.into_inner().workers {
            false => Vec::new(),
            true => self.threads.observer().workers().into_iter().map(worker_to_pb).collect(),
        };
        let store = self.threads.store();
        let threads = store.count_threads().await.map_err(|e| status(e.into()))?;
        let running_turns = store.running_turns().await.map_err(|e| status(e.into()))?;
        let agents_cost_usd = store.cost(None).await.map_err(|e| status(e.into()))?;
        let i = &self.info;
        let now = self.threads.clock().now_ms();
        let replicas = store.replicas().await.map_err(|e| status(e.into()))?;
        let live_since = now - crate::time::ms(i.lease);
        let works_outbox: Vec<bool> =
            replicas.iter().map(|r| crate::replica::works_outbox(&r.id, &replicas, live_since)).collect();
        let replicas = replicas
            .into_iter()
            .zip(works_outbox)
            .map(|(r, works_outbox)| pb::Replica {
                live: r.heartbeat_at >= live_since,
                this: r.id == i.replica_id,
                works_outbox,
                id: r.id,
                host: r.host,
                pid: r.pid,
                bridge_listen: r.bridge_listen,
                started_at: crate::time::rfc3339(r.started_at),
                heartbeat_at: crate::time::rfc3339(r.heartbeat_at),
            })
            .collect();
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
            thread_communication: i.thread_communication.clone(),
            agents_cost_usd,
            lease_ms: i.lease.as_millis() as u64,
            replicas,
            workers,
        }))
    }

    async fn shutdown(
        &self,
        request: Request<pb::ShutdownRequest>,
    ) -> Result<Response<pb::ShutdownResponse>, Status> {
        let caller = caller(&self.threads, &request).await?;
        caller.owner_only("shutdown").map_err(status)?;
        info!("shutdown requested over the API");
        self.shutdown.cancel();
        Ok(Response::new(pb::ShutdownResponse { stopped: false }))
    }

    #[instrument(level = "debug", skip_all)]
    async fn thread_say(
        &self,
        request: Request<pb::ThreadSayRequest>,
    ) -> Result<Response<pb::ThreadSayResponse>, Status> {
        let caller = caller(&self.threads, &request).await?;
        let r = request.into_inner();
        let said = self.threads.say(&caller, &target(r.target)?, &r.content).await.map_err(status)?;
        Ok(Response::new(pb::ThreadSayResponse {
            turn_started: said.turn_started,
            input_id: said.input_id,
            reason: said.reason,
        }))
    }

    #[instrument(level = "debug", skip_all)]
    async fn thread_stop(
        &self,
        request: Request<pb::ThreadStopRequest>,
    ) -> Result<Response<pb::ThreadStopResponse>, Status> {
        let caller = caller(&self.threads, &request).await?;
        let t = target(request.into_inner().target)?;
        let stopped = self.threads.stop(&caller, &t, STOP_WAIT).await.map_err(status)?;
        info!(thread_id = %t.session_id, turn_id = %stopped.turn_id, "turn stopped by its owner");
        Ok(Response::new(pb::ThreadStopResponse {
            turn_id: stopped.turn_id,
            turn_status: crate::convert::turn_status_to_pb(stopped.status) as i32,
        }))
    }

    #[instrument(level = "debug", skip_all)]
    async fn thread_archive(
        &self,
        request: Request<pb::ThreadArchiveRequest>,
    ) -> Result<Response<pb::ThreadArchiveResponse>, Status> {
        let caller = caller(&self.threads, &request).await?;
        let r = request.into_inner();
        let done =
            self.mailbox.set_archived(&caller, &target(r.target)?, r.archived).await.map_err(status)?;
        Ok(Response::new(pb::ThreadArchiveResponse {
            thread: Some(thread_to_pb(&done.thread, "", self.threads.communication(&done.thread))),
            changed: done.changed,
        }))
    }

    #[instrument(level = "debug", skip_all)]
    async fn thread_set(
        &self,
        request: Request<pb::ThreadSetRequest>,
    ) -> Result<Response<pb::ThreadSetResponse>, Status> {
        let caller = caller(&self.threads, &request).await?;
        let r = request.into_inner();
        let setting = communication_from_pb(r.communication)?;
        let thread =
            self.mailbox.set_communication(&caller, &target(r.target)?, setting).await.map_err(status)?;
        let communication = self.threads.communication(&thread);
        Ok(Response::new(pb::ThreadSetResponse { thread: Some(thread_to_pb(&thread, "", communication)) }))
    }

    async fn doctor(
        &self,
        request: Request<pb::DoctorRequest>,
    ) -> Result<Response<pb::DoctorResponse>, Status> {
        let caller = caller(&self.threads, &request).await?;
        caller.owner_only("doctor").map_err(status)?;
        let i = &self.info;
        let store = self.threads.store();
        let mut findings = doctor::examine(
            &HomeDir::new(&i.home),
            &i.config_file,
            &i.store_location,
            StoreAt::Running(store.as_ref()),
        )
        .await;
        findings.push(doctor::Finding {
            check: "daemon",
            ok: true,
            message: format!("kikid pid {} serves this home since {}", std::process::id(), i.started_at),
            fix: String::new(),
        });
        let links = self.bridges.check_links().await.map_err(status)?;
        let now = self.threads.clock().now_ms();
        let window = self.threads.config().bridge.retry_window;
        for (bridge, _) in links.iter().filter(|(b, _)| b.direction == crate::store::Direction::Outbound) {
            let oldest =
                store.outbox_oldest_pending(&bridge.peer_home_id).await.map_err(|e| status(e.into()))?;
            if let Some(oldest) = oldest {
                let waited = std::time::Duration::from_millis((now - oldest).max(0) as u64);
                findings.extend(doctor::stale_outbox(bridge, waited, window));
            }
        }
        findings.extend(doctor::links(links));
        let config = self.threads.config();
        if config.profiles.values().any(|p| p.max_cost_usd.is_some()) {
            let query = crate::store::ThreadQuery { limit: doctor::BUDGET_THREADS, ..Default::default() };
            for thread in store.list_threads(&query).await.map_err(|e| status(e.into()))? {
                let Some(budget) = config.profile(&thread.profile).and_then(|p| p.max_cost_usd) else {
                    continue;
                };
                let spent = store.cost(Some(&thread.id)).await.map_err(|e| status(e.into()))?;
                findings.extend(doctor::budget(&thread.id, &thread.profile, spent, budget));
            }
        }
        findings.extend(doctor::long_turns(&self.threads.runner().running(), now));
        let open = store.open_attention(1000).await.map_err(|e| status(e.into()))?;
        findings.extend(doctor::waiting_permissions(open.iter().filter(|e| e.request_id.is_some()).count()));
        let findings = findings.into_iter().map(crate::convert::finding_to_pb).collect();
        Ok(Response::new(pb::DoctorResponse { findings }))
    }

    async fn backup(
        &self,
        request: Request<pb::BackupRequest>,
    ) -> Result<Response<pb::BackupResponse>, Status> {
        let caller = caller(&self.threads, &request).await?;
        caller.owner_only("backup").map_err(status)?;
        let dest = PathBuf::from(request.into_inner().dest);
        let i = &self.info;
        let store = self.threads.store();
        let backed = crate::backup::write(&HomeDir::new(&i.home), &i.config_file, store.as_ref(), &dest)
            .await
            .map_err(status)?;
        info!(dest = %backed.dest.display(), bytes = backed.store_bytes, "home backed up");
        Ok(Response::new(pb::BackupResponse {
            dest: backed.dest.display().to_string(),
            files: backed.files,
            store_bytes: backed.store_bytes,
        }))
    }

    async fn attention_list(
        &self,
        request: Request<pb::AttentionListRequest>,
    ) -> Result<Response<pb::AttentionListResponse>, Status> {
        let caller = caller(&self.threads, &request).await?;
        let (open, more) = self.waits.open_attention(&caller).await.map_err(status)?;
        let open = open
            .into_iter()
            .map(|a| pb::OpenAttention {
                thread_id: a.thread.id,
                thread_title: a.thread.title,
                event: Some(crate::convert::event_to_pb(a.event)),
                next: a.next,
            })
            .collect();
        Ok(Response::new(pb::AttentionListResponse { open, more }))
    }
}
