//! The files that deploy a team home (deploy/): the compose file, the Kubernetes manifests
//! and the entrypoint both run. Where Docker can run containers the compose file is started
//! as it is; elsewhere every config it references is loaded with kikid's own loader, and the
//! entrypoint is run for real — two replicas made from those very files, on the tests'
//! PostgreSQL, with a key made by the command the files' comments give.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use kiki_daemon::config::Config;
use kiki_tests::binaries::{binary, kiki, kiki_json};
use kiki_tests::postgres::TestDatabase;

fn deploy() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy")
}

/// The `file:` entries of a compose file, by the section they are in (`configs`, `secrets`).
fn compose_files(compose: &str) -> Vec<(String, String)> {
    let mut section = String::new();
    let mut files = Vec::new();
    for line in compose.lines() {
        if !line.starts_with(' ') && line.ends_with(':') {
            section = line.trim_end_matches(':').to_string();
        } else if let Some(file) = line.trim().strip_prefix("file: ") {
            files.push((section.clone(), file.to_string()));
        }
    }
    files
}

/// The ConfigMap's `config.toml: |` block of the Kubernetes manifests, as a file.
fn configmap_config(manifests: &str) -> String {
    let mut lines = manifests.lines().skip_while(|l| l.trim() != "config.toml: |").skip(1);
    let first = lines.next().expect("the ConfigMap's config.toml");
    let indent = first.len() - first.trim_start().len();
    std::iter::once(first)
        .chain(lines.take_while(|l| l.trim().is_empty() || l.len() - l.trim_start().len() >= indent))
        .map(|l| l.get(indent..).unwrap_or_default())
        .collect::<Vec<_>>()
        .join("\n")
}

fn docker_runs_containers() -> bool {
    let ok = |args: &[&str]| {
        Command::new("docker")
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    ok(&["info"]) && ok(&["compose", "version"])
}

/// Where Docker runs: the compose file itself, up, with both replicas on record.
fn compose_up(compose_dir: &Path) {
    let secrets = compose_dir.join("secrets");
    std::fs::create_dir_all(&secrets).expect("secrets");
    make_key(&secrets.join("identity.key"));
    std::fs::write(secrets.join("db.password"), "compose-test").expect("password");
    let compose = |args: &[&str]| {
        let out = Command::new("docker")
            .arg("compose")
            .args(args)
            .current_dir(compose_dir)
            .output()
            .expect("docker");
        assert!(out.status.success(), "docker compose {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).to_string()
    };
    compose(&["up", "-d", "--build", "--wait"]);
    let started = Instant::now();
    loop {
        let status = compose(&["exec", "kikid-2", "kiki", "--json", "status"]);
        if status.matches("\"heartbeat_at\"").count() == 2 {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(120), "two replicas never listed: {status}");
        std::thread::sleep(Duration::from_secs(1));
    }
    compose(&["down", "-v"]);
}

/// A home key, made as the deploy files' comments say.
fn make_key(path: &Path) {
    let path = path.display().to_string();
    let out = Command::new("openssl")
        .args(["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", &path])
        .output()
        .expect("openssl");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn the_team_homes_files_hold_what_kikid_loads_and_start_two_replicas() {
    let compose_file = deploy().join("team-home/compose.yaml");
    let compose = std::fs::read_to_string(&compose_file).expect("compose.yaml");
    let dir = tempfile::tempdir().expect("dir");
    if docker_runs_containers() {
        // The whole repository is the image's build context: a copy keeps the secrets out of it.
        let copy = dir.path().join("repo");
        let out = Command::new("git")
            .args(["clone", "-q", &Path::new(env!("CARGO_MANIFEST_DIR")).join("..").display().to_string()])
            .arg(&copy)
            .output()
            .expect("git clone");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        compose_up(&copy.join("deploy/team-home"));
        return;
    }

    // Every config the compose file references loads with kikid's loader; its secrets are
    // the two files its comment says to make.
    let files = compose_files(&compose);
    let configs: Vec<&String> = files.iter().filter(|(s, _)| s == "configs").map(|(_, f)| f).collect();
    let secrets: Vec<&String> = files.iter().filter(|(s, _)| s == "secrets").map(|(_, f)| f).collect();
    assert_eq!(configs, ["./replica.toml"], "{files:?}");
    assert_eq!(secrets, ["./secrets/identity.key", "./secrets/db.password"], "{files:?}");
    // The secrets stay out of git and out of the image built from the repository.
    let root = deploy().join("..");
    let ignored = |file: &str| std::fs::read_to_string(root.join(file)).unwrap_or_default();
    assert!(
        ignored(".gitignore").lines().any(|l| l == "/deploy/team-home/secrets/"),
        "git ignores the secrets"
    );
    assert!(
        ignored(".dockerignore").lines().any(|l| l == "deploy/team-home/secrets"),
        "the image leaves them out"
    );
    let replica_toml = deploy().join("team-home/replica.toml");
    let replica = Config::load(&replica_toml, true).expect("replica.toml loads");
    replica.validate().expect("replica.toml is valid");
    assert_eq!(replica.store.url.as_deref(), Some("postgres://kiki@postgres:5432/kiki"));
    assert_eq!(replica.store.password_file.as_deref(), Some(Path::new("db.password")));
    assert_eq!(replica.store.lease, Duration::from_secs(10));
    assert_eq!(replica.bridge.listen.to_string(), "0.0.0.0:7443");
    // The Kubernetes manifests carry the same config.
    let manifests =
        std::fs::read_to_string(deploy().join("kubernetes/kiki-team-home.yaml")).expect("manifests");
    let in_configmap = dir.path().join("configmap.toml");
    std::fs::write(&in_configmap, configmap_config(&manifests)).expect("write");
    let from_configmap = Config::load(&in_configmap, true).expect("the ConfigMap's config loads");
    assert_eq!(format!("{from_configmap:?}"), format!("{replica:?}"), "the ConfigMap holds replica.toml");
    for name in ["KIKI_CONFIG_FILE", "KIKI_IDENTITY_FILE", "KIKI_PASSWORD_FILE"] {
        assert!(manifests.contains(name), "the manifests give the entrypoint {name}");
    }

    // The entrypoint, for real: two replicas from these files, their database the tests'.
    let database = kiki_tests::postgres::block_on(TestDatabase::create());
    let config = dir.path().join("config.toml");
    let mine = std::fs::read_to_string(&replica_toml)
        .expect("replica.toml")
        .replace("postgres://kiki@postgres:5432/kiki", &database.options.url)
        .replace("0.0.0.0:7443", "127.0.0.1:0");
    std::fs::write(&config, mine).expect("config");
    let key = dir.path().join("identity.key");
    make_key(&key);
    let password = dir.path().join("db.password");
    std::fs::write(&password, database.options.password.as_deref().expect("password")).expect("password");
    let bin = binary("kikid").parent().expect("the binaries' directory").to_path_buf();
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default());
    let homes = [dir.path().join("replica-1/.kiki"), dir.path().join("replica-2/.kiki")];
    let mut replicas = Vec::new();
    for home in &homes {
        let child = Command::new(deploy().join("team-home/entrypoint.sh"))
            .env("KIKI_HOME", home)
            .env("KIKI_CONFIG_FILE", &config)
            .env("KIKI_IDENTITY_FILE", &key)
            .env("KIKI_PASSWORD_FILE", &password)
            .env("PATH", &path)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("the entrypoint");
        replicas.push(Replica(child));
        let started = Instant::now();
        while !kiki(home, &["status"]).status.success() {
            assert!(started.elapsed() < Duration::from_secs(20), "{} never answered", home.display());
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    let status = kiki_json(&homes[1], &["status"]);
    assert_eq!(status["replicas"].as_array().map(Vec::len), Some(2), "{status}");
    assert_eq!(status["home_id"], kiki_json(&homes[0], &["status"])["home_id"], "one home");
    assert!(status["store"].as_str().unwrap_or_default().starts_with("postgres://"), "{status}");
}

/// A replica the entrypoint started, killed with the test.
struct Replica(std::process::Child);

impl Drop for Replica {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `deploy/dev-cluster.sh` starts three homes bridged both ways with metrics on: each has
/// an active bridge to and from each other, a send crosses, metrics answer; `down` stops them.
#[test]
fn the_dev_cluster_is_three_bridged_homes_with_metrics() {
    let dir = tempfile::tempdir().expect("dir");
    let bin = binary("kikid").parent().expect("the binaries' directory").to_path_buf();
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default());
    let base = 20_000 + std::process::id() % 5_000;
    let script = deploy().join("dev-cluster.sh");
    let run = |args: &[&str]| {
        let out = Command::new("bash")
            .arg(&script)
            .args(args)
            .env("PATH", &path)
            .env("PORT_BASE", base.to_string())
            .output()
            .expect("dev-cluster.sh");
        assert!(
            out.status.success(),
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).to_string()
    };
    let cluster = dir.path().join("dev");
    let said = run(&[&cluster.display().to_string()]);
    let homes: Vec<PathBuf> = (1..=3).map(|n| cluster.join(format!("home{n}"))).collect();
    struct Stop<'a>(&'a [PathBuf]);
    impl Drop for Stop<'_> {
        fn drop(&mut self) {
            for home in self.0 {
                let _ = kiki(home, &["down"]);
            }
        }
    }
    let _stop = Stop(&homes);
    for (n, home) in homes.iter().enumerate() {
        let bridges = kiki_json(home, &["bridge", "list"]);
        let bridges = bridges["bridges"].as_array().expect("bridges");
        assert_eq!(bridges.len(), 4, "two out, two in: {bridges:?}");
        assert!(bridges.iter().all(|b| b["state"] == "active"), "{bridges:?}");
        assert!(
            said.contains(&format!("metrics http://127.0.0.1:{}/metrics", base + 101 + n as u32)),
            "{said}"
        );
    }
    let inbox = kiki_json(&homes[1], &["thread", "create", "--title", "inbox"])["id"]
        .as_str()
        .expect("id")
        .to_string();
    let sent = kiki_json(
        &homes[0],
        &["thread", "send", &format!("home2/{inbox}"), "--key", "k1", "--content", "hello"],
    );
    assert_eq!(sent["status"], "delivered", "{sent}");
    let metrics = kiki_tests::scrape((base + 102) as u16);
    assert!(metrics.contains("kiki_sends_total{outcome=\"delivered\"} 1"), "{metrics}");
    run(&[&cluster.display().to_string(), "down"]);
    assert!(!kiki(&homes[0], &["status"]).status.success(), "stopped");
}
