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
    dir: tempfile::TempDir,
    pub port: u16,
    child: Child,
}

impl Sshd {
    /// Starts `sshd` (the README's test command installs `openssh-server`).
    pub fn start() -> Self {
        let dir = tempfile::Builder::new().prefix("kiki-sshd-").tempdir().expect("dir");
        let path = dir.path();
        keygen(&path.join("host_key"));
        keygen(&path.join("client_key"));
        std::fs::copy(path.join("client_key.pub"), path.join("authorized_keys")).expect("authorized_keys");
        let port = free_tcp_port();
        std::fs::create_dir_all("/run/sshd").expect("sshd's privilege separation directory");
        std::fs::write(
            path.join("sshd_config"),
            format!(
                "ListenAddress 127.0.0.1:{port}\nHostKey {host}\nAuthorizedKeysFile {auth}\n\
                 PidFile {pid}\nStrictModes no\nUsePAM no\nPermitRootLogin yes\n\
                 PasswordAuthentication no\nKbdInteractiveAuthentication no\nAllowStreamLocalForwarding yes\n\
                 AllowTcpForwarding yes\nLogLevel ERROR\n",
                host = path.join("host_key").display(),
                auth = path.join("authorized_keys").display(),
                pid = path.join("sshd.pid").display(),
            ),
        )
        .expect("sshd_config");
        let child = Command::new("/usr/sbin/sshd")
            .args(["-D", "-e", "-f"])
            .arg(path.join("sshd_config"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("sshd (apt-get install openssh-server)");
        let sshd = Self { dir, port, child };
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

    /// `ssh://USER@127.0.0.1:PORT`, the running user being the remote user.
    pub fn url(&self) -> String {
        format!("ssh://{}@127.0.0.1:{}", whoami(), self.port)
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
        std::fs::write(self.known_hosts(), format!("[127.0.0.1]:{} {key}", self.port)).expect("known_hosts");
    }

    /// Forgets the host key (an unknown host).
    pub fn forget(&self) {
        std::fs::write(self.known_hosts(), "").expect("known_hosts");
    }

    /// Trusts this server's own host key again.
    pub fn trust(&self) {
        let key = std::fs::read_to_string(self.dir.path().join("host_key.pub")).expect("host key");
        std::fs::write(self.known_hosts(), format!("[127.0.0.1]:{} {key}", self.port)).expect("known_hosts");
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
        while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_err() {
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

fn keygen(path: &Path) {
    let done = Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-f"])
        .arg(path)
        .status()
        .expect("ssh-keygen");
    assert!(done.success(), "ssh-keygen {}", path.display());
}

fn free_tcp_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").expect("probe").local_addr().expect("addr").port()
}

fn whoami() -> String {
    nix::unistd::User::from_uid(nix::unistd::geteuid())
        .ok()
        .flatten()
        .map_or_else(|| "root".to_string(), |u| u.name)
}
