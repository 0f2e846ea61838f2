//! `kiki space`: a machine reached over SSH brought in as a home of its own — a remote
//! space — in one command, owner control staying here. `space add` makes sure this
//! version's `kiki` and `kikid` are there (uploading this machine's when the platform
//! matches), starts the remote home, reads its id and bridge address through the SSH channel
//! (one the owner already trusts: that is the owner's approval on both sides), and makes the
//! bridges, pinned to the ids read over SSH. `kiki --space NAME …` runs any command against
//! the remote home through its socket, forwarded over the space's one multiplexed SSH
//! connection. SSH carries only bootstrap and owner control; threads talk over the bridges.

mod carry;
mod registry;
mod ssh;

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use clap::Subcommand;
use kiki_proto as pb;
use kiki_proto::Word;
use serde_json::{Value, json};

use crate::connect::connect;
use crate::output::{UsageError, print_json};
pub use registry::{Carried, Registry, Space};
use ssh::{Remote, quote};

#[derive(Subcommand)]
pub enum SpaceCommand {
    /// Bring a machine reachable by SSH in as a space: this version's kiki there, its home
    /// started, and a bridge from here to it (and, with --grant, back). Running it again
    /// changes nothing that is in place.
    #[command(
        after_help = "Examples:\n  kiki space add ssh://me@devbox --name devbox --want read,send,wake,wait\n  \
                      kiki space add ssh://devbox:2222 --name devbox --want read,send --grant send,wake"
    )]
    Add {
        /// `ssh://[user@]host[:port]`; the system's ssh (its config, keys, agent) reaches it.
        target: String,
        /// The space's name here: it names the bridge too (`NAME/SESSION`).
        #[arg(long)]
        name: String,
        /// The home directory there (default: ~/.kiki there).
        #[arg(long)]
        remote_home: Option<String>,
        /// What this home may do there (the bridge from here to it).
        #[arg(long, default_value = "read,send,wake,wait")]
        want: String,
        /// What the space's home may do here (a bridge back), if anything.
        #[arg(long)]
        grant: Option<String>,
        /// Carry the bridges inside the SSH connection, for a machine whose firewall lets
        /// only SSH through (the space's home then listens on its loopback only).
        #[arg(long)]
        via_ssh: bool,
    },
    /// The spaces of this home, with their bridges.
    List,
    /// Start a space's home again (after its machine rebooted, say).
    Up {
        /// The space's name (`kiki space list`).
        name: String,
    },
    /// Revoke a space's bridges at both ends and forget it; with --stop, stop its home too.
    Remove {
        /// The space's name (`kiki space list`).
        name: String,
        /// Stop the space's home too (`kiki down` there).
        #[arg(long)]
        stop: bool,
    },
    /// Carries a space's bridges over SSH until this home stops (started by `kiki space`).
    #[command(hide = true)]
    Carry {
        /// The space's name.
        name: String,
    },
    /// The far end of a carrier, run there over SSH: datagrams on stdin and stdout.
    #[command(hide = true)]
    Relay {
        /// The home's bridge address there, which flow 0 dials.
        #[arg(long)]
        to: String,
        /// Where the home there dials for flow 1.
        #[arg(long)]
        listen: String,
    },
    /// Prints a free UDP port on loopback (run there when a space is added).
    #[command(hide = true)]
    Port,
}

pub async fn run(home: &Path, command: SpaceCommand, json: bool) -> Result<()> {
    match command {
        SpaceCommand::Add { target, name, remote_home, want, grant, via_ssh } => {
            let asked = Asked { target: &target, name: &name, remote_home: remote_home.as_deref(), via_ssh };
            add(home, asked, &want, grant.as_deref(), json).await
        }
        SpaceCommand::List => list(home, json).await,
        SpaceCommand::Up { name } => up(home, &name, json).await,
        SpaceCommand::Remove { name, stop } => remove(home, &name, stop, json).await,
        SpaceCommand::Carry { name } => carry::carry(home, &name).await,
        SpaceCommand::Relay { to, listen } => carry::relay(&to, &listen).await,
        SpaceCommand::Port => {
            let port = carry::free_port()?;
            if json {
                print_json(&json!({ "port": port }));
            } else {
                outln!("{port}");
            }
            Ok(())
        }
    }
}

/// The directory standing for the space's home here: its socket is the remote home's,
/// forwarded over SSH. Commands run with `--space NAME` use it as their home.
pub async fn home_of(home: &Path, name: &str) -> Result<PathBuf> {
    let registry = Registry::open(home)?;
    let space = registry.get(name).ok_or_else(|| no_space(name))?.clone();
    if space.carried.is_some() {
        carry::start(home, name)?;
    }
    let dir = ssh::control_dir(home)?.join(name);
    {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new().recursive(true).mode(0o700).create(&dir)?;
    }
    let socket = dir.join("kikid.sock");
    // A forward kept by the master from an earlier command answers at once.
    if kiki_client::Client::connect(&socket).await.is_ok() {
        return Ok(dir);
    }
    let remote = Remote::open(home, name, &space.target).await?;
    remote.forward_socket(&socket, &Path::new(&space.remote_home).join("kikid.sock")).await?;
    Ok(dir)
}

/// What `space add` was asked for.
struct Asked<'a> {
    target: &'a str,
    name: &'a str,
    remote_home: Option<&'a str>,
    via_ssh: bool,
}

async fn add(home: &Path, asked: Asked<'_>, want: &str, grant: Option<&str>, json: bool) -> Result<()> {
    let Asked { target, name, .. } = asked;
    if let Some(problem) = registry::name_problem(name) {
        return Err(UsageError(format!("--name: {problem}")).into());
    }
    let host = target_host(target)?;
    let kept = Registry::open(home)?.get(name).cloned();
    if let Some(kept) = kept.as_ref().filter(|k| k.carried.is_some() != asked.via_ssh) {
        let was = if kept.carried.is_some() { "with" } else { "without" };
        return Err(UsageError(format!(
            "--via-ssh: space {name} was added {was} it; `kiki space remove {name}`, then add it again"
        ))
        .into());
    }
    let local = connect(home).await.context("the local home must run (kiki up) to add a space")?;
    let here = local.home().status(pb::StatusRequest::default()).await?.into_inner();
    let remote = Remote::open(home, name, target).await?;
    let remote_home = remote_path(&remote, asked.remote_home.unwrap_or("~/.kiki")).await?;
    let (kiki, uploaded) = ensure_binaries(&remote, &remote_home, json).await?;
    // Carried over SSH, the space's home listens on its loopback only.
    let listen_ip = if asked.via_ssh { "127.0.0.1" } else { "0.0.0.0" };
    let there = start_remote(&remote, &kiki, &remote_home, listen_ip).await?;
    let home_id = there["home_id"].as_str().context("the remote home's id")?.to_string();
    let port =
        there["bridge_listen"].as_str().and_then(|a| a.rsplit_once(':')).and_then(|(_, p)| p.parse().ok());
    let port: u16 = port.context("the remote home's bridge address")?;
    let carried = match (asked.via_ssh, kept.and_then(|k| k.carried)) {
        (false, _) => None,
        (true, Some(kept)) => Some(Carried { remote_bridge_port: port, ..kept }),
        (true, None) => {
            let free = remote_kiki(&remote, &kiki, &remote_home, &["space", "port"]).await?;
            Some(Carried {
                local_port: carry::free_port()?,
                remote_port: free["port"]
                    .as_u64()
                    .and_then(|p| u16::try_from(p).ok())
                    .context("a free port there")?,
                remote_bridge_port: port,
            })
        }
    };
    let bridge = match carried {
        Some(c) => format!("127.0.0.1:{}", c.local_port),
        // The address ssh connects to (a Host alias of ~/.ssh/config is not one).
        None => match ssh::hostname(&host).await {
            ip if ip.contains(':') => format!("[{ip}]:{port}"),
            name => format!("{name}:{port}"),
        },
    };
    let space = Space {
        target: target.to_string(),
        remote_home: remote_home.clone(),
        kiki,
        home_id,
        bridge,
        carried,
    };
    if space.carried.is_some() {
        // The carrier reads the space from the registry, and must carry before any bridge
        // is asked for.
        Registry::open(home)?.put(name, space.clone())?;
        carry::ensure(home, name).await?;
    }
    let outbound = ensure_outbound(&local, &remote, &space, name, want).await?;
    let inbound = match grant {
        Some(grant) => Some(ensure_inbound(&local, &remote, &space, &here, grant).await?),
        None => None,
    };
    Registry::open(home)?.put(name, space.clone())?;
    if json {
        print_json(&json!({
            "space": {"name": name, "target": space.target, "remote_home": space.remote_home,
                      "home_id": space.home_id, "bridge": space.bridge, "via_ssh": space.carried.is_some()},
            "uploaded": uploaded, "outbound": outbound, "inbound": inbound,
        }));
    } else {
        outln!("space {name}: home {} at {} ({})", space.home_id, space.remote_home, space.target);
        outln!("bridge {name} → there: {outbound}");
        if let Some(inbound) = inbound {
            outln!("bridge there → here: {inbound}");
        }
        if space.carried.is_some() {
            outln!("the bridges are carried over ssh");
        }
    }
    Ok(())
}

/// The host part of `ssh://[user@]host[:port]`.
fn target_host(target: &str) -> Result<String> {
    let rest = target
        .strip_prefix("ssh://")
        .ok_or_else(|| UsageError(format!("{target:?}: a target is ssh://[user@]host[:port]")))?;
    let host = rest.rsplit_once('@').map_or(rest, |(_, h)| h);
    let host = match host.strip_prefix('[') {
        Some(v6) => v6.split_once(']').map(|(h, _)| h).unwrap_or(v6),
        None => host.split(':').next().unwrap_or(host),
    };
    if host.is_empty() || host.starts_with('-') {
        return Err(UsageError(format!("{target:?}: no host (a host never starts with '-')")).into());
    }
    Ok(host.to_string())
}

/// `path` on the remote, `~/` expanded there.
async fn remote_path(remote: &Remote, path: &str) -> Result<String> {
    match path.strip_prefix("~/") {
        Some(rest) => {
            let home = remote.shell("printf %s \"$HOME\"").await?;
            Ok(format!("{}/{rest}", home.stdout.trim_end_matches('/')))
        }
        None if path.starts_with('/') => Ok(path.to_string()),
        None => Err(UsageError(format!("--remote-home {path:?}: an absolute path, or one under ~/")).into()),
    }
}

/// The remote `kiki` of this version: the one beside the remote home, or on the remote's
/// PATH, else this machine's binaries uploaded beside the remote home when the platform
/// matches. Whether it uploaded them.
async fn ensure_binaries(remote: &Remote, remote_home: &str, json: bool) -> Result<(String, bool)> {
    let version = format!("kiki {}", env!("CARGO_PKG_VERSION"));
    let beside = format!("{remote_home}/bin/kiki");
    for candidate in [beside.as_str(), "kiki"] {
        // `|| true`: a missing program is an answer here, not a lost connection (`ssh`
        // reports exit 127 as one).
        let ran = remote.shell(&format!("{} --version 2>/dev/null || true", quote(candidate))).await?;
        if ran.stdout.trim() == version {
            return Ok((candidate.to_string(), false));
        }
    }
    let platform = remote.shell("uname -sm").await?.stdout.trim().to_string();
    let ours = local_platform();
    if platform != ours {
        return Err(tonic::Status::failed_precondition(format!(
            "the remote has no {version} and is {platform:?}, not {ours:?} like this machine: install {version} \
             there (kiki and kikid, on its PATH or in {remote_home}/bin), then run this again"
        ))
        .into());
    }
    let here = std::env::current_exe().context("this kiki's path")?;
    let dir = here.parent().context("this kiki's directory")?;
    // kikid first: an upload cut off between the two leaves no `kiki` of this version there
    // beside an old kikid, so the next run uploads both again.
    let files = [dir.join("kikid"), dir.join("kiki")];
    let total: u64 = files.iter().map(|f| std::fs::metadata(f).map(|m| m.len()).unwrap_or(0)).sum();
    let bar = progress_bar(total, json);
    for file in &files {
        let name = file.file_name().and_then(|n| n.to_str()).unwrap_or("kiki");
        remote.upload(file, &format!("{remote_home}/bin/{name}"), &|n| bar.inc(n)).await?;
    }
    bar.finish_and_clear();
    Ok((beside, true))
}

/// This machine's platform as `uname -sm` prints it.
fn local_platform() -> String {
    let os = match std::env::consts::OS {
        "linux" => "Linux",
        "macos" => "Darwin",
        other => other,
    };
    let arch = match std::env::consts::ARCH {
        "aarch64" if os == "Darwin" => "arm64",
        arch => arch,
    };
    format!("{os} {arch}")
}

/// A progress bar for uploads, shown on a terminal only (never with --json).
fn progress_bar(total: u64, json: bool) -> indicatif::ProgressBar {
    use std::io::IsTerminal;
    if json || !std::io::stderr().is_terminal() {
        return indicatif::ProgressBar::hidden();
    }
    let bar = indicatif::ProgressBar::new(total);
    if let Ok(style) =
        indicatif::ProgressStyle::with_template("uploading kiki {bar:30} {bytes}/{total_bytes}")
    {
        bar.set_style(style);
    }
    bar
}

/// `kiki --home HOME --json ARGS…` there: its JSON answer, or its error.
async fn remote_kiki(remote: &Remote, kiki: &str, remote_home: &str, args: &[&str]) -> Result<Value> {
    let mut all = vec!["--home", remote_home, "--json"];
    all.extend_from_slice(args);
    let ran = remote.run(kiki, &all).await?;
    let answer: Value = serde_json::from_str(&ran.stdout).unwrap_or(Value::Null);
    if !ran.ok {
        let said = answer["error"]["message"].as_str().map(str::to_string).unwrap_or(ran.stderr);
        bail!("kiki {} there: {}", args.join(" "), said.trim());
    }
    Ok(answer)
}

/// Starts the remote home with its bridge listening where the space needs it — on every
/// address, or (`--via-ssh`) on its loopback only — on a port of its own kept in its config,
/// so its restarts keep it and this home can dial it; its status. A home whose config
/// listens on another address is set right and restarted.
async fn start_remote(remote: &Remote, kiki: &str, remote_home: &str, listen_ip: &str) -> Result<Value> {
    let path = format!("{remote_home}/config.toml");
    let config = remote.shell(&format!("cat {} 2>/dev/null || true", quote(&path))).await?.stdout;
    let (config_now, restart) = match bridge_listen(&config) {
        None => {
            remote.shell(&format!("mkdir -p {home} && chmod 700 {home}", home = quote(remote_home))).await?;
            let sep = if config.is_empty() || config.ends_with('\n') { "" } else { "\n" };
            (format!("{config}{sep}[bridge]\nlisten = \"{listen_ip}:0\"\n"), false)
        }
        Some((line, ip, port)) if ip != listen_ip => {
            (config.replacen(&line, &format!("listen = \"{listen_ip}:{port}\""), 1), true)
        }
        Some(_) => (config.clone(), false),
    };
    if config_now != config {
        remote.write(&path, config_now.as_bytes(), "600", &|_| {}).await?;
    }
    if restart {
        remote_kiki(remote, kiki, remote_home, &["down"]).await?;
    }
    let status = remote_kiki(remote, kiki, remote_home, &["up"]).await?;
    // Fixed from now on: the port it got.
    if let Some((line, _, port)) = bridge_listen(&config_now).filter(|(_, _, port)| port == "0") {
        let got = status["bridge_listen"].as_str().and_then(|a| a.rsplit_once(':')).map(|(_, p)| p);
        let got = got.filter(|p| *p != port).context("the remote home's bridge port")?;
        let fixed = config_now.replacen(&line, &format!("listen = \"{listen_ip}:{got}\""), 1);
        remote.write(&path, fixed.as_bytes(), "600", &|_| {}).await?;
    }
    Ok(status)
}

/// The `listen = "IP:PORT"` line of a config's `[bridge]` table: the line, the IP, the port.
fn bridge_listen(config: &str) -> Option<(String, String, String)> {
    let mut in_bridge = false;
    for line in config.lines() {
        let trimmed = line.trim();
        if trimmed.starts_with('[') {
            in_bridge = trimmed == "[bridge]";
        } else if in_bridge
            && let Some((key, value)) = trimmed.split_once('=')
            && key.trim() == "listen"
        {
            let value = value.split('#').next().unwrap_or_default().trim().trim_matches('"');
            let (ip, port) = value.rsplit_once(':')?;
            return Some((line.to_string(), ip.to_string(), port.to_string()));
        }
    }
    None
}

/// The bridge from here to the space's home: the one in place, or a request from here
/// approved there, both ends pinned to the home ids read over SSH.
async fn ensure_outbound(
    local: &kiki_client::Client,
    remote: &Remote,
    space: &Space,
    name: &str,
    want: &str,
) -> Result<String> {
    let bridges = local.bridges().bridge_list(pb::BridgeListRequest {}).await?.into_inner().bridges;
    let kept = bridges.iter().find(|b| {
        b.peer_home_id == space.home_id
            && b.direction() == pb::Direction::Outbound
            && b.state() != pb::BridgeState::Revoked
    });
    if let Some(bridge) = kept.filter(|b| b.state() == pb::BridgeState::Active) {
        return Ok(format!("{} ({}), already in place", bridge.id, bridge.state().word()));
    }
    let request = pb::BridgeRequestRequest {
        address: space.bridge.clone(),
        want: vec![want.to_string()],
        expect: space.home_id.clone(),
        name: name.to_string(),
    };
    let requested = local.bridges().bridge_request(request).await?.into_inner();
    remote_kiki(
        remote,
        &space.kiki,
        &space.remote_home,
        &["bridge", "approve", &requested.request_id, "--allow", want],
    )
    .await?;
    let bridge = requested.bridge.map(|b| b.id).unwrap_or_default();
    Ok(format!("{bridge} requested here, approved there ({want})"))
}

/// The bridge from the space's home to here (`--grant`): one in place, or a request from
/// there approved here, pinned to this home's id. The space's home dials this home at the
/// address the SSH connection came from.
async fn ensure_inbound(
    local: &kiki_client::Client,
    remote: &Remote,
    space: &Space,
    here: &pb::StatusResponse,
    grant: &str,
) -> Result<String> {
    let bridges = local.bridges().bridge_list(pb::BridgeListRequest {}).await?.into_inner().bridges;
    if let Some(bridge) = bridges.iter().find(|b| {
        b.peer_home_id == space.home_id
            && b.direction() == pb::Direction::Inbound
            && b.state() == pb::BridgeState::Active
    }) {
        return Ok(format!("{} ({}), already in place", bridge.id, bridge.state().word()));
    }
    let address = match space.carried {
        Some(carried) => format!("127.0.0.1:{}", carried.remote_port),
        None => {
            let from = remote.shell("printf %s \"$SSH_CONNECTION\"").await?.stdout;
            let client_ip = from.split_whitespace().next().unwrap_or("127.0.0.1").to_string();
            let port = here.bridge_listen.rsplit_once(':').map(|(_, p)| p).unwrap_or_default();
            format!("{client_ip}:{port}")
        }
    };
    let asked = remote_kiki(
        remote,
        &space.kiki,
        &space.remote_home,
        &["bridge", "request", &address, "--want", grant, "--expect", &here.home_id, "--name", "origin"],
    )
    .await?;
    let request_id = asked["request_id"].as_str().context("the request's id")?.to_string();
    // Approved here only if it is the space's home's own request.
    let pending = local.bridges().bridge_pending(pb::BridgePendingRequest {}).await?.into_inner().requests;
    if !pending.iter().any(|r| r.id == request_id && r.peer_home_id == space.home_id) {
        bail!(
            "the space's home asked with request {request_id}, which is not a pending request of its home here"
        );
    }
    let approve = pb::BridgeApproveRequest {
        request_id: request_id.clone(),
        allow: vec![grant.to_string()],
        workspaces: Vec::new(),
        name: String::new(),
    };
    let approved = local.bridges().bridge_approve(approve).await?.into_inner();
    let id = approved.bridge.map(|b| b.id).unwrap_or_default();
    Ok(format!("{id} requested there, approved here ({grant})"))
}

async fn list(home: &Path, json: bool) -> Result<()> {
    let registry = Registry::open(home)?;
    let bridges = match connect(home).await {
        Ok(local) => local.bridges().bridge_list(pb::BridgeListRequest {}).await?.into_inner().bridges,
        Err(_) => Vec::new(),
    };
    let mut listed = Vec::new();
    for (name, space) in registry.all() {
        let of = |direction: pb::Direction| {
            bridges
                .iter()
                .find(|b| b.peer_home_id == space.home_id && b.direction() == direction)
                .map(|b| json!({"id": b.id, "state": b.state().word(), "last_success": b.last_success, "last_error": b.last_error}))
        };
        // Carried over SSH: what its carrier is doing ("stopped" when none runs).
        let carrier = space.carried.map(|_| carry::state(home, name).unwrap_or_else(|| "stopped".into()));
        listed.push(json!({
            "name": name, "target": space.target, "remote_home": space.remote_home, "home_id": space.home_id,
            "bridge": space.bridge, "outbound": of(pb::Direction::Outbound), "inbound": of(pb::Direction::Inbound),
            "via_ssh": carrier,
        }));
    }
    if json {
        print_json(&json!({"spaces": listed}));
        return Ok(());
    }
    if listed.is_empty() {
        outln!("no spaces (kiki space add ssh://HOST --name NAME)");
    }
    for s in &listed {
        let state = |v: &Value| v["state"].as_str().unwrap_or("none").to_string();
        let via = s["via_ssh"].as_str().map(|c| format!("  via ssh: {c}")).unwrap_or_default();
        outln!(
            "{}  {}  home {}  out: {}  in: {}{via}",
            s["name"].as_str().unwrap_or_default(),
            s["target"].as_str().unwrap_or_default(),
            s["home_id"].as_str().unwrap_or_default(),
            state(&s["outbound"]),
            state(&s["inbound"])
        );
    }
    Ok(())
}

async fn up(home: &Path, name: &str, json: bool) -> Result<()> {
    let space = Registry::open(home)?.get(name).cloned().ok_or_else(|| no_space(name))?;
    let remote = Remote::open(home, name, &space.target).await?;
    let status = remote_kiki(&remote, &space.kiki, &space.remote_home, &["up"]).await?;
    if space.carried.is_some() {
        // A carrier that is not carrying starts over, from this command's environment.
        carry::restart_unless_carrying(home, name).await?;
        carry::ensure(home, name).await?;
    }
    if json {
        print_json(&status);
    } else {
        outln!("space {name}: home {} is up", status["home_id"].as_str().unwrap_or_default());
    }
    Ok(())
}

async fn remove(home: &Path, name: &str, stop: bool, json: bool) -> Result<()> {
    let space = Registry::open(home)?.get(name).cloned().ok_or_else(|| no_space(name))?;
    let local = connect(home).await?;
    let bridges = local.bridges().bridge_list(pb::BridgeListRequest {}).await?.into_inner().bridges;
    let mut revoked = Vec::new();
    for bridge in
        bridges.iter().filter(|b| b.peer_home_id == space.home_id && b.state() != pb::BridgeState::Revoked)
    {
        local.bridges().bridge_revoke(pb::BridgeRevokeRequest { bridge: bridge.id.clone() }).await?;
        revoked.push(bridge.id.clone());
    }
    carry::stop(home, name)?;
    // The other ends, there, if the machine can be reached: revoked here, its bridges to this
    // home carry nothing any more (their peer refuses them), and learn so from this home.
    let here = local.home().status(pb::StatusRequest::default()).await?.into_inner();
    let there = async {
        let remote = Remote::open(home, name, &space.target).await?;
        let theirs = remote_kiki(&remote, &space.kiki, &space.remote_home, &["bridge", "list"]).await?;
        let mut revoked = Vec::new();
        for bridge in theirs["bridges"].as_array().into_iter().flatten() {
            if bridge["peer_home_id"] == here.home_id.as_str() && bridge["state"] != "revoked" {
                let id = bridge["id"].as_str().unwrap_or_default();
                remote_kiki(&remote, &space.kiki, &space.remote_home, &["bridge", "revoke", id]).await?;
                revoked.push(id.to_string());
            }
        }
        if stop {
            remote_kiki(&remote, &space.kiki, &space.remote_home, &["down"]).await?;
        }
        remote.close(home, name).await;
        anyhow::Ok(revoked)
    }
    .await;
    let (reached, stopped) = match there {
        Ok(theirs) => {
            revoked.extend(theirs);
            (true, stop)
        }
        Err(e) => {
            hint!(
                "the space's machine was not reached ({e:#}); its ends of the bridges are refused by this home"
            );
            (false, false)
        }
    };
    Registry::open(home)?.remove(name)?;
    if json {
        print_json(&json!({"removed": name, "revoked": revoked, "stopped": stopped, "reached": reached}));
    } else {
        outln!("space {name} removed; bridges revoked: {}", revoked.join(", "));
    }
    Ok(())
}

fn no_space(name: &str) -> anyhow::Error {
    tonic::Status::not_found(format!("no space {name:?} (kiki space list)")).into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bridge_listen_line_is_found_in_its_table_only() {
        let config =
            "# mine\n[profiles.x]\nlisten = \"9.9.9.9:1\"\n[bridge]\n  listen = \"0.0.0.0:7443\" # fixed\n";
        let (line, ip, port) = bridge_listen(config).expect("found");
        assert_eq!(
            (line.as_str(), ip.as_str(), port.as_str()),
            ("  listen = \"0.0.0.0:7443\" # fixed", "0.0.0.0", "7443")
        );
        assert_eq!(bridge_listen("[bridge]\nrequest_expiry = \"1h\"\n"), None);
        assert_eq!(bridge_listen("").map(|(_, ip, _)| ip), None);
    }

    #[test]
    fn a_target_names_a_host_that_ssh_cannot_take_for_an_option() {
        assert_eq!(target_host("ssh://me@devbox:2222").expect("host"), "devbox");
        assert_eq!(target_host("ssh://[::1]:22").expect("host"), "::1");
        assert!(target_host("ssh://-oProxyCommand=x").is_err());
        assert!(target_host("devbox").is_err(), "the scheme is required");
    }
}
