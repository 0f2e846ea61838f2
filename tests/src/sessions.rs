//! Threads as agent sessions, with the scripted agents of `tests/agents/` (and the real CLIs):
//! a thread started on a profile with a first prompt, the turn and session a scripted answer
//! names, and what the owner sees and does while a turn runs — its events, attention,
//! permission requests and their answers, waiting for it to run, stopping it.

use kiki_proto as pb;

use crate::{TestHome, eventually, local};

impl TestHome {
    /// Creates a thread on `profile` with a first `prompt`, working in the directory
    /// `workdir(profile)` and resuming the agent session `resume` if given: its id.
    pub async fn session_thread(
        &self,
        profile: &str,
        prompt: &str,
        resume: Option<&str>,
    ) -> Result<String, tonic::Status> {
        self.create(pb::ThreadCreateRequest {
            cwd: Some(self.workdir(profile).display().to_string()),
            profile: Some(profile.into()),
            prompt: Some(prompt.into()),
            title: None,
            resume_agent_session: resume.map(str::to_string),
        })
        .await
        .map(|created| created.id)
    }

    /// The thread's events since its latest turn started, at once.
    pub async fn events(&self, thread: &str) -> Vec<pb::Event> {
        let wait = pb::ThreadWaitRequest {
            targets: vec![local(thread)],
            timeout_ms: Some(0),
            cursors: Default::default(),
        };
        let waited = self.client().threads().thread_wait(wait).await.expect("wait").into_inner();
        waited.results.into_iter().next().expect("one result").events
    }

    /// The reasons of the attention events among [`TestHome::events`].
    pub async fn attention(&self, thread: &str) -> Vec<String> {
        let events = self.events(thread).await;
        events.into_iter().filter(|e| e.kind == pb::EventKind::Attention as i32).map(|e| e.reason).collect()
    }

    /// The permission request an event of the thread names, once there is one other than
    /// those `seen`.
    pub async fn permission_request(&self, thread: &str, seen: &[&str]) -> String {
        eventually("a permission request", || async {
            let ids: Vec<String> = self
                .events(thread)
                .await
                .into_iter()
                .map(|e| e.request_id)
                .filter(|id| !id.is_empty())
                .collect();
            ids.into_iter().find(|id| !seen.contains(&id.as_str()))
        })
        .await
    }

    /// The owner's answer to permission request `id`.
    pub async fn decide(
        &self,
        id: &str,
        allow: bool,
        reason: &str,
    ) -> Result<pb::PermissionDecideResponse, tonic::Status> {
        let request = pb::PermissionDecideRequest { request_id: id.into(), allow, reason: reason.into() };
        self.client().threads().permission_decide(request).await.map(|r| r.into_inner())
    }

    /// The owner's `kiki thread stop`.
    pub async fn stop(&self, thread: &str) -> Result<pb::ThreadStopResponse, tonic::Status> {
        let request = pb::ThreadStopRequest { target: Some(local(thread)) };
        self.client().home().thread_stop(request).await.map(|r| r.into_inner())
    }

    /// Waits until the thread's turn runs.
    pub async fn wait_running(&self, thread: &str) {
        eventually("the turn to run", || async {
            (self.thread_record(thread).await.state == pb::ThreadState::Running as i32).then_some(())
        })
        .await;
    }
}

/// A scripted agent's answer, `turn N of SESSION: PROMPT…` → (N, SESSION).
pub fn turn_of(output: &str) -> (u32, String) {
    let rest = output.strip_prefix("turn ").unwrap_or_else(|| panic!("the scripted answer: {output:?}"));
    let (n, rest) = rest.split_once(" of ").expect("of");
    let (session, _) = rest.split_once(": ").expect(": ");
    (n.parse().expect("n"), session.to_string())
}
