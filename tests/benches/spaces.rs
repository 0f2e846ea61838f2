//! The three numbers for spaces, each printed next to what it is measured against in the
//! same run (never asserted). A real `sshd` on a loopback port (`kiki_tests::sshd`), a local
//! home and two remote homes under it, all on the release binaries:
//!
//! ```sh
//! cargo build --release --workspace --bins && cargo bench -p kiki-tests --bench spaces
//! ```
//!
//! - `kiki space add` with the binaries already there, under 2 s: the space removed and
//!   added again each round (a new SSH connection, the remote home found running, two new
//!   bridges requested and approved), next to a new SSH connection running `true` there.
//! - `kiki --space NAME status` at most the local command plus one SSH round trip plus
//!   5 ms: alternately with `kiki status` of the same home through its own socket, next to a
//!   command (`true`) run there over the kept SSH master (more than one round trip).
//! - a bridged send carried over SSH (`--via-ssh`) within 2× the QUIC path's p50: owner
//!   ThreadSends over gRPC from here to an `echo` thread in a plainly bridged space and to one
//!   in a carried space, alternately, each answered once the target home has it.
//!
//! Settings: `ROUNDS` (3 adds; a home takes 5 pairing requests a minute from a peer), `STATUS` (40 of each), `SENDS` (200 of each, after 20).

use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use kiki_client::Client;
use kiki_proto as pb;
use kiki_tests::binaries::{binary, free_udp_port, kiki_json};
use kiki_tests::measure::{ms, percentile, setting};
use kiki_tests::sshd::Sshd;

struct Bench {
    sshd: Sshd,
    local: std::path::PathBuf,
    _dir: tempfile::TempDir,
}

impl Bench {
    fn kiki(&self, args: &[&str]) -> Output {
        let out = Command::new(binary("kiki"))
            .arg("--home")
            .arg(&self.local)
            .args(args)
            .env("KIKI_SSH_CONFIG", self.sshd.config())
            .output()
            .expect("kiki");
        assert!(out.status.success(), "kiki {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        out
    }

    fn json(&self, args: &[&str]) -> serde_json::Value {
        let mut all = vec!["--json"];
        all.extend_from_slice(args);
        serde_json::from_slice(&self.kiki(&all).stdout).expect("JSON")
    }

    fn add(&self, name: &str, remote_home: &Path, extra: &[&str]) -> Duration {
        let url = self.sshd.url();
        let mut args =
            vec!["space", "add", &url, "--name", name, "--remote-home", remote_home.to_str().expect("path")];
        args.extend_from_slice(extra);
        let t = Instant::now();
        self.kiki(&args);
        t.elapsed()
    }

    /// `ssh … true` there: over the kept master of `space`, or over a new connection.
    fn ssh_true(&self, master: Option<&str>) -> Duration {
        let mut command = Command::new("ssh");
        command.arg("-F").arg(self.sshd.config());
        if let Some(space) = master {
            let kept =
                std::fs::read_to_string(self.local.join(format!("spaces/{space}.master"))).expect("master");
            command.args(["-S", kept.lines().next().expect("control socket")]);
        } else {
            command.args(["-o", "ControlMaster=no", "-o", "ControlPath=none"]);
        }
        command.arg(self.sshd.url()).arg("true");
        let t = Instant::now();
        assert!(command.status().expect("ssh").success());
        t.elapsed()
    }
}

fn p50(samples: &mut [Duration]) -> Duration {
    samples.sort();
    percentile(samples, 0.5)
}

#[tokio::main]
async fn main() {
    // A home takes at most 5 pairing requests a minute from one peer: the first add and
    // three more.
    let rounds = setting("ROUNDS", 3) as usize;
    let statuses = setting("STATUS", 40) as usize;
    let sends = setting("SENDS", 200) as usize;
    let (dir, local) = kiki_tests::binaries::new_home();
    std::fs::create_dir_all(&local).expect("home");
    std::fs::write(
        local.join("config.toml"),
        format!("[bridge]\nlisten = \"127.0.0.1:{}\"\n", free_udp_port()),
    )
    .expect("config");
    kiki_json(&local, &["up"]);
    let bench = Bench { sshd: Sshd::start(), local, _dir: dir };
    let direct_home = bench.sshd.remote_dir("direct");
    let carried_home = bench.sshd.remote_dir("carried");
    bench.space_adds(&direct_home, rounds);
    bench.statuses(&direct_home, statuses);
    bench.bridged_sends(&carried_home, sends).await;
    for space in ["dev", "tunnel"] {
        bench.kiki(&["space", "remove", space, "--stop"]);
    }
    kiki_tests::binaries::kiki(&bench.local, &["down"]);
}

impl Bench {
    /// `space add` of `dev` (its home at `direct_home`): the first, uploading the
    /// binaries, then `rounds` more with the binaries there, each next to a new SSH
    /// connection running `true`.
    fn space_adds(&self, direct_home: &Path, rounds: usize) {
        let first = self.add("dev", direct_home, &[]);
        let mut adds = Vec::new();
        let mut connects = Vec::new();
        for _ in 0..rounds {
            self.kiki(&["space", "remove", "dev"]);
            adds.push(self.add("dev", direct_home, &[]));
            connects.push(self.ssh_true(None));
        }
        println!("space add (first, uploading the binaries): {}", ms(first));
        println!(
            "space add (binaries there, p50 of {rounds}): {}   new ssh connection running `true`: {}   target < 2000 ms",
            ms(p50(&mut adds)),
            ms(p50(&mut connects))
        );
    }

    /// `--space dev status` against the same home's own socket, next to `true` over the
    /// kept master.
    fn statuses(&self, direct_home: &Path, statuses: usize) {
        let (mut there, mut here, mut mux) = (Vec::new(), Vec::new(), Vec::new());
        for i in 0..statuses + 3 {
            let t = Instant::now();
            self.kiki(&["--space", "dev", "status"]);
            let over_ssh = t.elapsed();
            let t = Instant::now();
            kiki_tests::binaries::kiki(direct_home, &["status"]);
            let direct = t.elapsed();
            let round_trip = self.ssh_true(Some("dev"));
            if i >= 3 {
                there.push(over_ssh);
                here.push(direct);
                mux.push(round_trip);
            }
        }
        let (there, here, mux) = (p50(&mut there), p50(&mut here), p50(&mut mux));
        println!(
            "status p50: --space {}   local {}   difference {}   `true` over the kept master {}   target: difference ≤ one round trip + 5 ms",
            ms(there),
            ms(here),
            ms(there.saturating_sub(here)),
            ms(mux)
        );
    }

    /// Bridged sends to an echo thread of each space, alternately: `dev` over QUIC
    /// straight, `tunnel` (its home at `carried_home`) carried over SSH.
    async fn bridged_sends(&self, carried_home: &Path, sends: usize) {
        self.add("tunnel", carried_home, &["--via-ssh"]);
        let mut targets = Vec::new();
        for space in ["dev", "tunnel"] {
            let created = self.json(&["--space", space, "thread", "create", "--profile", "echo"]);
            let id = created["id"].as_str().expect("id").to_string();
            self.json(&["--space", space, "thread", "set", &id, "--communication", "on"]);
            targets.push((space, id));
        }
        let client = Client::connect(&self.local.join("kikid.sock")).await.expect("the local home");
        let mut took = [Vec::new(), Vec::new()];
        for i in 0..sends + 20 {
            let order: [usize; 2] = if i % 2 == 0 { [0, 1] } else { [1, 0] };
            for which in order {
                let (space, id) = &targets[which];
                let request = pb::ThreadSendRequest {
                    target: Some(pb::ThreadRef {
                        host_id: (*space).to_string(),
                        workspace_id: String::new(),
                        session_id: id.clone(),
                    }),
                    content: format!("message {i:06}"),
                    idempotency_key: format!("{space}-{i:06}"),
                    ..Default::default()
                };
                let t = Instant::now();
                client.threads().thread_send(request).await.expect("send");
                if i >= 20 {
                    took[which].push(t.elapsed());
                }
                // The echo turn ends before the next send to the thread.
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
        let [mut quic, mut carried] = took;
        quic.sort();
        carried.sort();
        let (q50, c50) = (percentile(&quic, 0.5), percentile(&carried, 0.5));
        println!(
            "bridged send p50 / p90: QUIC {} / {}   carried over ssh {} / {}   ratio {:.2}×   target ≤ 2×",
            ms(q50),
            ms(percentile(&quic, 0.9)),
            ms(c50),
            ms(percentile(&carried, 0.9)),
            c50.as_secs_f64() / q50.as_secs_f64()
        );
    }
}
