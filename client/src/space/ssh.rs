//! The SSH channel to a remote space: the system's `ssh` (through the `openssh` crate), so
//! the user's `~/.ssh/config`, agents, `ProxyJump` and ControlMaster work as they expect.
//! Host keys are checked against the user's known_hosts, strictly: an unknown or changed
//! key is refused, never accepted for the user. One multiplexed master connection per
//! space is kept between commands (its control socket under `HOME/spaces/`), and closes
//! itself after ten idle minutes; a master that died is started again by the next command.

use std::num::NonZeroUsize;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result};
use openssh::{ControlPersist, KnownHosts, Session, SessionBuilder, Stdio};
use tokio::io::AsyncWriteExt;

/// How long an idle master connection stays up.
const MASTER_IDLE: NonZeroUsize = NonZeroUsize::new(600).expect("non-zero");
/// How long reaching the machine may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(15);

/// An open SSH connection to a space's machine.
pub struct Remote {
    session: Session,
    target: String,
    /// The directory of the master's control socket and log.
    master_dir: PathBuf,
}

/// What a remote command printed, and whether it succeeded.
pub struct Ran {
    pub ok: bool,
    pub stdout: String,
    pub stderr: String,
}

impl Remote {
    /// The connection to `target` for the space `name` of the home at `home`: the master
    /// kept from an earlier command if it still answers, else a new one.
    pub async fn open(home: &Path, name: &str, target: &str) -> Result<Self> {
        let dir = control_dir(home)?;
        let kept = dir.join(format!("{name}.master"));
        // Kept as its control socket, its log, and the target it reaches: reused only for that
        // target (an earlier `space add` of the name may have gone to another machine).
        if let Ok(text) = std::fs::read_to_string(&kept) {
            let mut lines = text.lines();
            if let (Some(ctl), log, Some(kept_target)) =
                (lines.next().map(PathBuf::from), lines.next(), lines.next())
                && kept_target == target
            {
                let master_dir = ctl.parent().map(Path::to_path_buf).unwrap_or_default();
                let log = log.filter(|l| !l.is_empty()).map(|l| PathBuf::from(l).into_boxed_path());
                let session = Session::resume(ctl.into_boxed_path(), log);
                if session.check().await.is_ok() {
                    return Ok(Self { session, target: target.to_string(), master_dir });
                }
                // Dead: its socket and log go with it.
                forget_master(&dir, &master_dir);
            }
        }
        let mut builder = SessionBuilder::default();
        builder
            .known_hosts_check(KnownHosts::Strict)
            .control_directory(&dir)
            .control_persist(ControlPersist::IdleFor(MASTER_IDLE))
            .connect_timeout(CONNECT_TIMEOUT)
            .server_alive_interval(Duration::from_secs(15));
        if let Some(config) = kiki_client::env_var("KIKI_SSH_CONFIG") {
            builder.config_file(config);
        }
        let (builder, destination) = builder.resolve(target);
        let master = builder.launch_master(destination).await.map_err(|e| refused(target, &e))?;
        let session = Session::new_process_mux(master);
        let (ctl, log) = session.detach();
        let saved = format!(
            "{}\n{}\n{target}\n",
            ctl.display(),
            log.as_deref().map(|l| l.display().to_string()).unwrap_or_default()
        );
        std::fs::write(&kept, saved).with_context(|| format!("writing {}", kept.display()))?;
        let master_dir = ctl.parent().map(Path::to_path_buf).unwrap_or_default();
        Ok(Self { session: Session::resume(ctl, log), target: target.to_string(), master_dir })
    }

    /// Closes the kept master connection (the space is forgotten).
    pub async fn close(self, home: &Path, name: &str) {
        let _ = self.session.close().await;
        if let Ok(dir) = control_dir(home) {
            let _ = std::fs::remove_file(dir.join(format!("{name}.master")));
            let _ = std::fs::remove_dir_all(dir.join(name));
            forget_master(&dir, &self.master_dir);
        }
    }

    /// Runs `program` with `args` there (each argument quoted for the remote shell).
    pub async fn run(&self, program: &str, args: &[&str]) -> Result<Ran> {
        let out =
            self.session.command(program).args(args).output().await.map_err(|e| lost(&self.target, &e))?;
        Ok(Ran {
            ok: out.status.success(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        })
    }

    /// Runs a shell command line there.
    pub async fn shell(&self, line: &str) -> Result<Ran> {
        let out = self.session.shell(line).output().await.map_err(|e| lost(&self.target, &e))?;
        Ok(Ran {
            ok: out.status.success(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        })
    }

    /// Starts `program` with `args` there, its stdin and stdout piped here (stderr to
    /// this process's).
    pub async fn spawn(&self, program: &str, args: &[String]) -> Result<openssh::Child<&Session>> {
        self.session
            .command(program)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .await
            .map_err(|e| lost(&self.target, &e))
    }

    /// Copies `local` to `remote` (made executable), through the SSH channel: written to a
    /// file beside it, then renamed over it, so a running program is never half-replaced.
    /// `progress` is told each chunk's size.
    pub async fn upload(&self, local: &Path, remote: &str, progress: &dyn Fn(u64)) -> Result<()> {
        let bytes = std::fs::read(local).with_context(|| format!("reading {}", local.display()))?;
        self.write(remote, &bytes, "755", progress).await
    }

    /// Writes `bytes` to the file `remote` there with `mode`, whole or not at all (see
    /// [`Remote::upload`]).
    pub async fn write(&self, remote: &str, bytes: &[u8], mode: &str, progress: &dyn Fn(u64)) -> Result<()> {
        let dir = remote.rsplit_once('/').map_or(".", |(dir, _)| dir);
        let line = format!(
            "mkdir -p {dir} && cat > {tmp} && chmod {mode} {tmp} && mv {tmp} {dest}",
            dir = quote(dir),
            tmp = quote(&format!("{remote}.uploading")),
            dest = quote(remote)
        );
        let mut child = self
            .session
            .shell(line)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .await
            .map_err(|e| lost(&self.target, &e))?;
        let mut stdin = child.stdin().take().context("the upload's stdin")?;
        let mut written = Ok(());
        for chunk in bytes.chunks(256 * 1024) {
            written = stdin.write_all(chunk).await;
            if written.is_err() {
                break; // the remote stopped reading: its stderr says why
            }
            progress(chunk.len() as u64);
        }
        if written.is_ok() {
            written = stdin.shutdown().await;
        }
        drop(stdin);
        let out = child.wait_with_output().await.map_err(|e| lost(&self.target, &e))?;
        if !out.status.success() || written.is_err() {
            let said = String::from_utf8_lossy(&out.stderr).trim().to_string();
            let why =
                if said.is_empty() { written.err().map(|e| e.to_string()).unwrap_or_default() } else { said };
            anyhow::bail!("uploading {remote}: {why}");
        }
        Ok(())
    }

    /// Forwards the local Unix socket `local` to `remote` there, over the master connection
    /// (kept as long as the master runs). A stale socket file from an earlier master goes.
    pub async fn forward_socket(&self, local: &Path, remote: &Path) -> Result<()> {
        // A forward the master holds from before (whose socket another command removed)
        // would be taken as in place: it is cancelled first.
        let _ = self
            .session
            .close_port_forward(
                openssh::ForwardType::Local,
                openssh::Socket::UnixSocket { path: local.into() },
                openssh::Socket::UnixSocket { path: remote.into() },
            )
            .await;
        let _ = std::fs::remove_file(local);
        self.session
            .request_port_forward(
                openssh::ForwardType::Local,
                openssh::Socket::UnixSocket { path: local.into() },
                openssh::Socket::UnixSocket { path: remote.into() },
            )
            .await
            .map_err(|e| lost(&self.target, &e))
    }
}

/// The name or address `ssh` connects to for `host` (`ssh -G`: a Host alias resolved by the
/// user's config); `host` itself if ssh cannot say.
pub async fn hostname(host: &str) -> String {
    let mut ssh = tokio::process::Command::new("ssh");
    if let Some(config) = kiki_client::env_var("KIKI_SSH_CONFIG") {
        ssh.arg("-F").arg(config);
    }
    let printed = ssh.arg("-G").arg(host).stdin(std::process::Stdio::null()).output().await;
    let printed =
        printed.ok().filter(|o| o.status.success()).map(|o| String::from_utf8_lossy(&o.stdout).into_owned());
    printed
        .and_then(|p| p.lines().find_map(|l| l.strip_prefix("hostname ").map(str::to_string)))
        .unwrap_or_else(|| host.to_string())
}

/// Removes a master's directory (its control socket and log) once it is closed or dead: one
/// the openssh crate made under the home's control directory, nothing else.
fn forget_master(control_dir: &Path, master_dir: &Path) {
    let made_here = master_dir.parent() == Some(control_dir)
        && master_dir.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with(".ssh-connection"));
    if made_here {
        let _ = std::fs::remove_dir_all(master_dir);
    }
}

/// The owner-only directory of the home's SSH control sockets and forwarded sockets.
pub fn control_dir(home: &Path) -> Result<PathBuf> {
    use std::os::unix::fs::DirBuilderExt;
    let dir = home.join("spaces");
    std::fs::DirBuilder::new().recursive(true).mode(0o700).create(&dir)?;
    Ok(dir)
}

/// Quoted for a POSIX shell.
pub fn quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', "'\\''"))
}

/// Why `ssh` could not reach `target`, in words that say what to do: a host key that is
/// unknown or changed is refused (permission denied), never accepted for the user.
fn refused(target: &str, e: &openssh::Error) -> anyhow::Error {
    let said = chain(e);
    let hostkey = ["host key", "HOST IDENTIFICATION", "Host key verification"];
    if hostkey.iter().any(|w| said.contains(w)) {
        return tonic::Status::permission_denied(format!(
            "ssh refused {target}'s host key ({said}): kiki checks host keys against your known_hosts and never \
             accepts one for you; if this is the machine you mean, check its key's fingerprint and trust it \
             with `ssh {target}` (or fix the changed entry in ~/.ssh/known_hosts), then run this again"
        ))
        .into();
    }
    tonic::Status::unavailable(format!("cannot reach {target} over ssh: {said}")).into()
}

/// A remote command that could not run: the connection went away.
fn lost(target: &str, e: &openssh::Error) -> anyhow::Error {
    tonic::Status::unavailable(format!("the ssh connection to {target} failed: {}", chain(e))).into()
}

fn chain(e: &dyn std::error::Error) -> String {
    let mut parts = vec![e.to_string()];
    let mut cause = e.source();
    while let Some(next) = cause {
        parts.push(next.to_string());
        cause = next.source();
    }
    parts.join(": ").trim().to_string()
}
