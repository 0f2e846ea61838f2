//! A real OpenSSH server for the spaces' tests: `sshd` on a free loopback port with a host
//! key of its own, a client key it authorizes, and an ssh_config and known_hosts file for
//! the client — so `kiki` talks to it through the system's `ssh`, host key checked, as it
//! would to a remote machine. The "remote" is this machine, as the running user, under other
//! directories. Stopped when dropped.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running `sshd` and the files a client uses to reach it.
pub struct Sshd {
    child: Child,
    /// The address it listens on.
    pub host: String,
    pub port: u16,
    /// The machine behind a firewall it runs on, if not this one.
    _machine: Option<Machine>,
    dir: tempfile::TempDir,
}

impl Sshd {
    /// Starts `sshd` on loopback (the README's test command installs `openssh-server`).
    pub fn start() -> Self {
        Self::start_on(None)
    }

    /// Starts `sshd` on a machine of its own behind a firewall that lets only TCP through
    /// (so SSH, and no QUIC): a network namespace joined to this one by a veth pair, whose
    /// nftables drop every UDP datagram that comes from outside it (the README's test command
    /// installs `nftables`). Its programs, kikid among them, share this machine's files.
    pub fn start_behind_firewall() -> Self {
        Self::start_on(Some(Machine::new()))
    }

    fn start_on(machine: Option<Machine>) -> Self {
        let host = machine.as_ref().map_or_else(|| "127.0.0.1".to_string(), |m| m.address.clone());
        let dir = tempfile::Builder::new().prefix("kiki-sshd-").tempdir().expect("dir");
        let path = dir.path();
        keygen(&path.join("host_key"));
        keygen(&path.join("client_key"));
        std::fs::copy(path.join("client_key.pub"), path.join("authorized_keys")).expect("authorized_keys");
        let port = crate::binaries::free_tcp_port();
        std::fs::create_dir_all("/run/sshd").expect("sshd's privilege separation directory");
        std::fs::write(
            path.join("sshd_config"),
            format!(
                "ListenAddress {host}:{port}\nHostKey {host_key}\nAuthorizedKeysFile {auth}\n\
                 PidFile {pid}\nStrictModes no\nUsePAM no\nPermitRootLogin yes\n\
                 PasswordAuthentication no\nKbdInteractiveAuthentication no\nAllowStreamLocalForwarding yes\n\
                 AllowTcpForwarding yes\nLogLevel ERROR\n",
                host_key = path.join("host_key").display(),
                auth = path.join("authorized_keys").display(),
                pid = path.join("sshd.pid").display(),
            ),
        )
        .expect("sshd_config");
        let mut sshd = Command::new(if machine.is_some() { "ip" } else { "/usr/sbin/sshd" });
        if let Some(machine) = &machine {
            sshd.args(["netns", "exec", &machine.netns, "/usr/sbin/sshd"]);
        }
        let child = sshd
            .args(["-D", "-e", "-f"])
            .arg(path.join("sshd_config"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("sshd (apt-get install openssh-server)");
        let sshd = Self { child, host, port, _machine: machine, dir };
        sshd.trust();
        sshd.write_config(&sshd.known_hosts());
        sshd.wait_ready();
        sshd
    }

    /// The ssh_config file a client passes to `ssh -F` (`KIKI_SSH_CONFIG`): the client key,
    /// the known_hosts file, no agent, strict host key checking.
    pub fn config(&self) -> PathBuf {
        self.dir.path().join("ssh_config")
    }

    /// The client's known_hosts file (this server's host key, once [`Sshd::start`] wrote it).
    pub fn known_hosts(&self) -> PathBuf {
        self.dir.path().join("known_hosts")
    }

    /// `ssh://USER@HOST:PORT`, the running user being the remote user.
    pub fn url(&self) -> String {
        format!("ssh://{}@{}:{}", whoami(), self.host, self.port)
    }

    /// A directory of the "remote" machine's, for a remote home or binaries.
    pub fn remote_dir(&self, name: &str) -> PathBuf {
        let dir = self.dir.path().join("remote").join(name);
        std::fs::create_dir_all(&dir).expect("remote dir");
        dir
    }

    /// Replaces the trusted host key with another key's (a changed host key).
    pub fn distrust(&self) {
        let other = self.dir.path().join("other_key");
        keygen(&other);
        let key = std::fs::read_to_string(other.with_extension("pub")).expect("other key");
        std::fs::write(self.known_hosts(), format!("[{}]:{} {key}", self.host, self.port))
            .expect("known_hosts");
    }

    /// Forgets the host key (an unknown host).
    pub fn forget(&self) {
        std::fs::write(self.known_hosts(), "").expect("known_hosts");
    }

    /// Trusts this server's own host key again.
    pub fn trust(&self) {
        let key = std::fs::read_to_string(self.dir.path().join("host_key.pub")).expect("host key");
        std::fs::write(self.known_hosts(), format!("[{}]:{} {key}", self.host, self.port))
            .expect("known_hosts");
    }

    fn write_config(&self, known_hosts: &Path) {
        std::fs::write(
            self.config(),
            format!(
                "Host *\n  IdentityFile {key}\n  IdentitiesOnly yes\n  UserKnownHostsFile {known}\n  \
                 GlobalKnownHostsFile /dev/null\n  StrictHostKeyChecking yes\n  IdentityAgent none\n  \
                 LogLevel ERROR\n",
                key = self.dir.path().join("client_key").display(),
                known = known_hosts.display(),
            ),
        )
        .expect("ssh_config");
    }

    fn wait_ready(&self) {
        let started = Instant::now();
        while std::net::TcpStream::connect((self.host.as_str(), self.port)).is_err() {
            assert!(started.elapsed() < Duration::from_secs(10), "sshd never listened on {}", self.port);
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Sshd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A second machine on this one: a network namespace with a veth pair to this one's, on a
/// /30 of its own in 198.18.0.0/15 (the range set aside for tests), whose firewall drops UDP
/// from outside. Deleted when dropped.
struct Machine {
    netns: String,
    veth: String,
    address: String,
}

impl Machine {
    fn new() -> Self {
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let index = (std::process::id() * 8 + n) % 32768;
        let base = u32::from(std::net::Ipv4Addr::new(198, 18, 0, 0)) + index * 4;
        let (here, there) = (std::net::Ipv4Addr::from(base + 1), std::net::Ipv4Addr::from(base + 2));
        let machine = Self {
            netns: format!("kiki-{}-{n}", std::process::id()),
            veth: format!("kk{index}h"),
            address: there.to_string(),
        };
        let peer = format!("kk{index}r");
        let ns = |args: &[&str]| {
            let mut all = vec!["netns", "exec", &machine.netns];
            all.extend_from_slice(args);
            run("ip", &all, None);
        };
        run("ip", &["netns", "add", &machine.netns], None);
        run(
            "ip",
            &["link", "add", &machine.veth, "type", "veth", "peer", "name", &peer, "netns", &machine.netns],
            None,
        );
        run("ip", &["addr", "add", &format!("{here}/30"), "dev", &machine.veth], None);
        run("ip", &["link", "set", &machine.veth, "up"], None);
        ns(&["ip", "addr", "add", &format!("{there}/30"), "dev", &peer]);
        ns(&["ip", "link", "set", &peer, "up"]);
        ns(&["ip", "link", "set", "lo", "up"]);
        let firewall = "table inet kiki_firewall {\n  chain input {\n    type filter hook input priority 0; policy accept;\n    \
                        iifname != \"lo\" meta l4proto udp drop\n  }\n}\n";
        run("ip", &["netns", "exec", &machine.netns, "nft", "-f", "-"], Some(firewall));
        machine
    }
}

impl Drop for Machine {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["link", "del", &self.veth]).status();
        let _ = Command::new("ip").args(["netns", "del", &self.netns]).status();
    }
}

/// Runs a setup command, `input` on its stdin; it must succeed.
fn run(program: &str, args: &[&str], input: Option<&str>) {
    use std::io::Write;
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{program}: {e}"));
    if let Some(input) = input {
        child.stdin.take().expect("stdin").write_all(input.as_bytes()).expect("stdin");
    }
    drop(child.stdin.take());
    let out = child.wait_with_output().expect("wait");
    assert!(out.status.success(), "{program} {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

fn keygen(path: &Path) {
    let done = Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-f"])
        .arg(path)
        .status()
        .expect("ssh-keygen");
    assert!(done.success(), "ssh-keygen {}", path.display());
}

fn whoami() -> String {
    nix::unistd::User::from_uid(nix::unistd::geteuid())
        .ok()
        .flatten()
        .map_or_else(|| "root".to_string(), |u| u.name)
}
