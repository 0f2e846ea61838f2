//! A kiki home on the release binaries, as the scenarios start and reach it.

use super::*;

/// A home on the release binaries with `busy` threads held by a sleeping agent and `idle`
/// `echo` threads; `delivery_wait = 0`, so a send to a busy thread answers once it is durable.
pub(super) struct KikiHome {
    pub(super) home: PathBuf,
    pub(super) client: Client,
    pub(super) pid: u32,
    pub(super) busy: Vec<String>,
    pub(super) idle: Vec<String>,
}

impl KikiHome {
    pub(super) async fn start(dir: &Path, busy: usize, idle: usize) -> Self {
        Self::start_with(dir, busy, idle, "").await
    }

    /// [`KikiHome::start`] with more config (sections of its own: `[store]`).
    pub(super) async fn start_with(dir: &Path, busy: usize, idle: usize, extra: &str) -> Self {
        let home = dir.join("home");
        std::fs::create_dir_all(&home).expect("home");
        std::fs::write(
            home.join("config.toml"),
            format!(
                "[mailbox]\ndelivery_wait = \"0s\"\n[thread_communication]\nenabled = true\n[bridge]\nlisten = \"127.0.0.1:{}\"\n\
                 [profiles.hold]\nexecutor = \"exec\"\ncommand = [\"sleep\", \"3600\"]\n{extra}",
                kiki_tests::binaries::free_udp_port()
            ),
        )
        .expect("config");
        let (client, pid) = serve(&home).await;
        let create = |profile: &str, prompt: Option<&str>| {
            let mut args = vec!["thread", "create", "--profile", profile];
            if let Some(prompt) = prompt {
                args.extend(["--prompt", prompt]);
            }
            kiki_json(&home, &args)["id"].as_str().expect("id").to_string()
        };
        let busy = (0..busy).map(|_| create("hold", Some("hold"))).collect();
        let idle = (0..idle).map(|_| create("echo", None)).collect();
        // The held agents have started: sends to their threads queue behind their turns.
        tokio::time::sleep(Duration::from_millis(300)).await;
        Self { home, client, pid, busy, idle }
    }

    /// A bridge from this home to `target` with `permissions`, named `alias` here.
    pub(super) fn bridge_to(&self, target: &KikiHome, alias: &str, permissions: &str) {
        let status = kiki_json(&target.home, &["status"]);
        self.bridge_via(target, status["bridge_listen"].as_str().expect("listen"), alias, permissions);
    }

    /// [`KikiHome::bridge_to`] reaching `target` at `address` (a relay on the path).
    pub(super) fn bridge_via(&self, target: &KikiHome, address: &str, alias: &str, permissions: &str) {
        let status = kiki_json(&target.home, &["status"]);
        let id = status["home_id"].as_str().expect("id");
        let requested = kiki_json(
            &self.home,
            &["bridge", "request", address, "--want", permissions, "--expect", id, "--name", alias],
        );
        let request = requested["request_id"].as_str().expect("request id");
        kiki_json(&target.home, &["bridge", "approve", request, "--allow", permissions]);
    }

    pub(super) fn socket(&self) -> PathBuf {
        self.home.join("kikid.sock")
    }

    pub(super) fn cpu(&self) -> Duration {
        process_cpu_time(self.pid)
    }

    pub(super) fn peak_rss_kb(&self) -> u64 {
        peak_rss_kb_of(self.pid)
    }

    pub(super) fn rss_kb(&self) -> u64 {
        kiki_tests::measure::rss_kb(self.pid)
    }

    /// ThreadWaits parked on `woken` (from their events so far), then `request` sent: from
    /// its answer until every wait returned (each thread's turn ended).
    pub(super) async fn wake_round(&self, request: pb::ThreadSendRequest, woken: &[String]) -> Duration {
        let targets: Vec<pb::ThreadRef> = woken.iter().map(|t| kiki_tests::local(t)).collect();
        let now =
            pb::ThreadWaitRequest { targets: targets.clone(), timeout_ms: Some(0), ..Default::default() };
        let results = self.client.threads().thread_wait(now).await.expect("cursors").into_inner().results;
        let mut waits = Vec::new();
        for (thread, result) in woken.iter().zip(results) {
            let mut threads = self.client.threads();
            let request = pb::ThreadWaitRequest {
                targets: vec![kiki_tests::local(thread)],
                timeout_ms: Some(10_000),
                cursors: [(thread.clone(), result.cursor)].into_iter().collect(),
            };
            waits.push(tokio::spawn(async move {
                let answer = threads.thread_wait(request).await.expect("wait").into_inner();
                assert!(!answer.timed_out, "a woken thread's turn ended within 10 s");
                Instant::now()
            }));
        }
        tokio::time::sleep(Duration::from_millis(3)).await;
        self.client.threads().thread_send(request).await.expect("send");
        let answered = Instant::now();
        let mut last = Duration::ZERO;
        for wait in waits {
            last = last.max(wait.await.expect("a wait").saturating_duration_since(answered));
        }
        last
    }

    /// Bytes kikid has caused to be written to storage.
    pub(super) fn bytes_written(&self) -> u64 {
        let io = std::fs::read_to_string(format!("/proc/{}/io", self.pid)).unwrap_or_default();
        io.lines()
            .find_map(|l| l.strip_prefix("write_bytes:"))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0)
    }

    /// Starts the (stopped) home again and reconnects.
    pub(super) async fn up(&mut self) {
        (self.client, self.pid) = serve(&self.home).await;
    }

    pub(super) fn stop(self) {
        kiki_json(&self.home, &["down"]);
    }
}

/// `kiki up` on `home`: a connection to it, and kikid's pid.
pub(super) async fn serve(home: &Path) -> (Client, u32) {
    kiki_json(home, &["up"]);
    let client = Client::connect(&home.join("kikid.sock")).await.expect("connect");
    let status = client.home().status(pb::StatusRequest::default()).await.expect("status").into_inner();
    (client, status.pid)
}
