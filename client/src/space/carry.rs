//! A space's bridges carried over SSH (`kiki space add --via-ssh`), for a machine whose
//! firewall lets only SSH through. A bridge is QUIC, which is UDP, and SSH forwards streams,
//! so the datagrams themselves travel inside one SSH channel: the QUIC connection, its
//! pinned mutual TLS and every limit stay exactly as on a direct bridge, end to end between
//! the two kikids; the path only adds hops. (A second, stream-based bridge protocol would
//! need its own framing, multiplexing and stranger limits, and would be one more thing to
//! keep as safe as QUIC.)
//!
//! Two UDP flows share the channel, each datagram framed as `[flow u8][length u16][bytes]`:
//! - flow 0, here → there: this home dials the carrier's port on loopback here
//!   (`127.0.0.1:local_port`, the outbound bridge's address); the relay there sends to the
//!   space's home's bridge port on its loopback;
//! - flow 1, there → here: the space's home dials the relay's port on loopback there
//!   (`127.0.0.1:remote_port`, its bridge's address for this home); the carrier sends to
//!   this home's bridge port.
//!
//! The carrier is a small process of its own (`kiki space carry NAME`, started by `space
//! add`, `space up` and `--space` commands when it is not running), holding a lock under
//! `HOME/spaces/` for its life: it keeps the channel open, opens it again after SSH drops
//! (the QUIC connections ride it out or redial), and exits when this home stops. The relay
//! there (`kiki space relay`) lives as long as the channel.

use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use nix::fcntl::{Flock, FlockArg};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufWriter};
use tokio::net::UdpSocket;
use tokio::sync::mpsc;

use super::registry::{Carried, Registry};
use super::ssh::{Remote, control_dir};

/// The largest datagram carried (QUIC's packets are far smaller).
const MAX_DATAGRAM: usize = u16::MAX as usize;
/// Datagrams waiting for the channel; beyond them new ones are dropped, as a full network
/// queue drops them, and QUIC sends them again.
const QUEUE: usize = 1024;
/// How long `space add` waits for a new carrier's channel.
const START_TIMEOUT: Duration = Duration::from_secs(20);
/// How often the carrier checks that this home still runs.
const HOME_CHECK: Duration = Duration::from_secs(5);

/// A channel that carries nothing for this long is taken for dead (each end sends a
/// heartbeat when it has had nothing to send for [`HEARTBEAT`]): a relay whose SSH session
/// outlived a lost network exits, freeing its port for the next.
const SILENCE: Duration = Duration::from_secs(20);
const HEARTBEAT: Duration = Duration::from_secs(5);
/// The flow of heartbeats: empty frames no port gets.
const HEARTBEAT_FLOW: u8 = u8::MAX;
/// How long a relay waits for its port while an older relay still holds it.
const BIND_PATIENCE: Duration = Duration::from_secs(30);

/// One end's UDP socket of a flow, bound to `bind` and connected to the one kikid it
/// carries for: the kernel drops datagrams from anybody else on the machine, so no other
/// local user can take the flow over.
struct Port(UdpSocket);

impl Port {
    async fn new(bind: &str, kikid: &str) -> Result<Self> {
        let started = Instant::now();
        let socket = loop {
            match UdpSocket::bind(bind).await {
                Ok(socket) => break socket,
                // An older relay, whose session has not noticed its channel died, still
                // holds it: it goes within `SILENCE`.
                Err(e) if e.kind() == std::io::ErrorKind::AddrInUse && started.elapsed() < BIND_PATIENCE => {
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
                Err(e) => return Err(e).with_context(|| format!("binding {bind}")),
            }
        };
        socket.connect(kikid).await.with_context(|| format!("connecting to {kikid}"))?;
        Ok(Self(socket))
    }
}

/// Moves datagrams between the two flows' ports and the channel until the channel ends or
/// falls silent; `ready` is told when the first frame comes from the other end (its ports
/// are bound).
async fn pump<R, W>(
    reader: R,
    writer: W,
    ports: Arc<[Port; 2]>,
    ready: Option<tokio::sync::oneshot::Sender<()>>,
) -> Result<()>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let (queue, mut queued) = mpsc::channel::<(u8, Vec<u8>)>(QUEUE);
    let mut from_ports = tokio::task::JoinSet::new();
    for flow in 0..2u8 {
        let (ports, queue) = (ports.clone(), queue.clone());
        from_ports.spawn(async move {
            let mut buf = vec![0u8; MAX_DATAGRAM];
            loop {
                match ports[usize::from(flow)].0.recv(&mut buf).await {
                    Ok(n) => {
                        let _ = queue.try_send((flow, buf[..n].to_vec()));
                    }
                    // A refused send (ICMP) surfaces here on Linux; the socket still works.
                    Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
                }
            }
        });
    }
    let out = async move {
        let mut writer = BufWriter::new(writer);
        // The first frame tells the other end this one is up.
        write_frame(&mut writer, HEARTBEAT_FLOW, &[]).await?;
        writer.flush().await?;
        loop {
            let (flow, datagram) = match tokio::time::timeout(HEARTBEAT, queued.recv()).await {
                Ok(Some(next)) => next,
                Ok(None) => return Ok::<_, std::io::Error>(()),
                Err(_) => (HEARTBEAT_FLOW, Vec::new()),
            };
            write_frame(&mut writer, flow, &datagram).await?;
            // Whatever else is waiting goes in the same write.
            while let Ok((flow, datagram)) = queued.try_recv() {
                write_frame(&mut writer, flow, &datagram).await?;
            }
            writer.flush().await?;
        }
    };
    let into = async move {
        let mut reader = tokio::io::BufReader::new(reader);
        let mut buf = vec![0u8; MAX_DATAGRAM];
        let mut ready = ready;
        loop {
            let mut header = [0u8; 3];
            match tokio::time::timeout(SILENCE, reader.read_exact(&mut header)).await {
                Err(_) => {
                    return Err(std::io::Error::other(format!("nothing came for {}s", SILENCE.as_secs())));
                }
                Ok(Err(e)) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(()),
                Ok(Err(e)) => return Err(e),
                Ok(Ok(_)) => {}
            }
            if let Some(ready) = ready.take() {
                let _ = ready.send(());
            }
            let [flow, high, low] = header;
            let n = usize::from(u16::from_be_bytes([high, low]));
            reader.read_exact(&mut buf[..n]).await?;
            match flow {
                HEARTBEAT_FLOW => {}
                // One nobody takes now (its kikid is restarting) is dropped, as the network would.
                0 | 1 => drop(ports[usize::from(flow)].0.send(&buf[..n]).await),
                _ => return Err(std::io::Error::other(format!("a frame of flow {flow}"))),
            }
        }
    };
    tokio::select! {
        done = out => done?,
        done = into => done?,
    }
    Ok(())
}

async fn write_frame<W: AsyncWrite + Unpin>(
    writer: &mut W,
    flow: u8,
    datagram: &[u8],
) -> std::io::Result<()> {
    let length = u16::try_from(datagram.len()).map_err(std::io::Error::other)?;
    let [high, low] = length.to_be_bytes();
    writer.write_all(&[flow, high, low]).await?;
    writer.write_all(datagram).await
}

/// The relay on the space's machine (`kiki space relay`), on the channel's stdin and stdout:
/// flow 0 to the home's bridge port `to`, flow 1 from the port `listen` its home dials.
pub async fn relay(to: &str, listen: &str) -> Result<()> {
    let ports = Arc::new([Port::new("127.0.0.1:0", to).await?, Port::new(listen, to).await?]);
    pump(tokio::io::stdin(), tokio::io::stdout(), ports, None).await
}

/// A free UDP port on loopback (`kiki space port`, run there when a space is added).
pub fn free_port() -> Result<u16> {
    Ok(std::net::UdpSocket::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// The lock file a running carrier holds; it also says what the carrier is doing.
fn lock_path(home: &Path, name: &str) -> Result<PathBuf> {
    Ok(control_dir(home)?.join(format!("{name}.carrier")))
}

fn log_path(home: &Path, name: &str) -> Result<PathBuf> {
    Ok(control_dir(home)?.join(format!("{name}.carrier.log")))
}

/// What the space's carrier is doing: `None` when none runs.
pub fn state(home: &Path, name: &str) -> Option<String> {
    let path = lock_path(home, name).ok()?;
    let file = std::fs::OpenOptions::new().read(true).write(true).open(&path).ok()?;
    match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
        // Nobody holds it: no carrier runs.
        Ok(_) => None,
        Err(_) => {
            let text = std::fs::read_to_string(&path).ok()?;
            Some(text.lines().nth(1).unwrap_or("starting").to_string())
        }
    }
}

/// Starts the space's carrier unless one runs, and waits until its channel is open.
pub async fn ensure(home: &Path, name: &str) -> Result<()> {
    start(home, name)?;
    let started = Instant::now();
    loop {
        match state(home, name).as_deref() {
            Some("carrying") => return Ok(()),
            None if started.elapsed() > Duration::from_secs(2) => {
                bail!("the carrier of space {name} stopped (see {})", log_path(home, name)?.display())
            }
            _ if started.elapsed() > START_TIMEOUT => {
                bail!(
                    "the carrier of space {name} did not open its SSH channel in {}s (see {})",
                    START_TIMEOUT.as_secs(),
                    log_path(home, name)?.display()
                )
            }
            _ => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
}

/// Starts the space's carrier unless one runs.
pub fn start(home: &Path, name: &str) -> Result<()> {
    if state(home, name).is_none() {
        let log = std::fs::OpenOptions::new().create(true).append(true).open(log_path(home, name)?)?;
        let kiki = std::env::current_exe().context("this kiki's path")?;
        let mut command = std::process::Command::new(kiki);
        command.arg("--home").arg(home).args(["space", "carry", name]);
        command.stdin(std::process::Stdio::null()).stdout(std::process::Stdio::null()).stderr(log);
        std::os::unix::process::CommandExt::process_group(&mut command, 0);
        command.spawn().context("starting the space's carrier")?;
    }
    Ok(())
}

/// Stops the space's carrier if it runs but does not carry (it cannot reach the machine,
/// maybe with what the command that started it gave it), and waits until it is gone.
pub async fn restart_unless_carrying(home: &Path, name: &str) -> Result<()> {
    if state(home, name).is_none_or(|now| now == "carrying") {
        return Ok(());
    }
    stop(home, name)?;
    let started = Instant::now();
    while state(home, name).is_some() && started.elapsed() < Duration::from_secs(5) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}

/// Stops the space's carrier, if one runs.
pub fn stop(home: &Path, name: &str) -> Result<()> {
    if state(home, name).is_none() {
        return Ok(());
    }
    let text = std::fs::read_to_string(lock_path(home, name)?)?;
    if let Some(pid) = text.lines().next().and_then(|l| l.trim().parse::<i32>().ok()) {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGTERM);
    }
    Ok(())
}

/// The carrier (`kiki space carry NAME`): runs until this home stops or another carrier
/// holds the lock.
pub async fn carry(home: &Path, name: &str) -> Result<()> {
    let path = lock_path(home, name)?;
    let mut file = std::fs::OpenOptions::new().create(true).truncate(false).write(true).open(&path)?;
    // `state` takes the lock for an instant to see whether a carrier runs: a few tries tell
    // that from a carrier holding it.
    let mut tries = 0;
    let mut lock = loop {
        match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
            Ok(lock) => break lock,
            Err((_, _)) if tries == 10 => return Ok(()), // another carrier runs
            Err((back, _)) => file = back,
        }
        tries += 1;
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    // Written over the old text, then cut to its length: a reader never finds it empty.
    let mut say = |what: &str| {
        let text = format!("{}\n{what}\n", std::process::id());
        let _ = std::io::Seek::rewind(&mut *lock);
        let _ = lock.write_all(text.as_bytes());
        let _ = lock.set_len(text.len() as u64);
    };
    say("starting");
    let space = Registry::open(home)?.get(name).cloned().with_context(|| format!("no space {name}"))?;
    let carried: Carried = space.carried.with_context(|| format!("space {name} is not carried over ssh"))?;
    let here = crate::connect::connect(home)
        .await?
        .home()
        .status(kiki_proto::StatusRequest::default())
        .await?
        .into_inner();
    let local_bridge = loopback(&here.bridge_listen)?;
    let ports = Arc::new([
        Port::new(&format!("127.0.0.1:{}", carried.local_port), &local_bridge).await?,
        Port::new("127.0.0.1:0", &local_bridge).await?,
    ]);
    let relay_args = [
        "space".to_string(),
        "relay".to_string(),
        "--to".to_string(),
        format!("127.0.0.1:{}", carried.remote_bridge_port),
        "--listen".to_string(),
        format!("127.0.0.1:{}", carried.remote_port),
    ];
    let home_gone = watch_home(home.to_path_buf());
    let carrying = async {
        let mut backoff = Duration::from_millis(200);
        loop {
            let began = Instant::now();
            let outcome = async {
                let remote = Remote::open(home, name, &space.target).await?;
                let mut relay = remote.spawn(&space.kiki, &relay_args).await?;
                let stdin = relay.stdin().take().context("the relay's stdin")?;
                let stdout = relay.stdout().take().context("the relay's stdout")?;
                // Carrying once the relay there is up (its first frame came).
                let (ready, relay_up) = tokio::sync::oneshot::channel();
                let pumping = pump(stdout, stdin, ports.clone(), Some(ready));
                tokio::pin!(pumping);
                tokio::select! {
                    done = &mut pumping => done,
                    Ok(()) = relay_up => {
                        say("carrying");
                        eprintln!("space {name}: carrying the bridges over ssh");
                        pumping.await
                    }
                }
            }
            .await;
            say("reconnecting");
            eprintln!("space {name}: the ssh channel ended ({outcome:?}); opening it again");
            if began.elapsed() > Duration::from_secs(10) {
                backoff = Duration::from_millis(200);
            }
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(Duration::from_secs(5));
        }
    };
    tokio::select! {
        () = home_gone => eprintln!("space {name}: this home stopped; the carrier stops"),
        () = carrying => {}
    }
    Ok(())
}

/// Ends when the home at `home` stops answering on its socket.
async fn watch_home(home: PathBuf) {
    loop {
        tokio::time::sleep(HOME_CHECK).await;
        if crate::connect::connect(&home).await.is_err() {
            return;
        }
    }
}

/// `IP:PORT` as dialed from this machine: a home listening on every address is dialed on
/// loopback.
fn loopback(listen: &str) -> Result<String> {
    let addr: SocketAddr =
        listen.parse().with_context(|| format!("this home's bridge address {listen:?}"))?;
    let ip = if addr.ip().is_unspecified() { "127.0.0.1".parse().expect("an IP") } else { addr.ip() };
    Ok(SocketAddr::new(ip, addr.port()).to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Datagrams go through a channel both ways, each flow between the two kikids it
    /// carries for; a datagram from anybody else is dropped; each end learns the other is up
    /// from its first frame.
    #[tokio::test]
    async fn datagrams_cross_the_channel_on_their_flows_and_only_theirs() {
        // The kikid at each end stands as a plain UDP socket.
        let near = UdpSocket::bind("127.0.0.1:0").await.expect("near");
        let far = UdpSocket::bind("127.0.0.1:0").await.expect("far");
        let (near_addr, far_addr) =
            (near.local_addr().expect("addr").to_string(), far.local_addr().expect("addr").to_string());
        let (here_port, there_port) = (free_port().expect("port"), free_port().expect("port"));
        let here = Arc::new([
            Port::new(&format!("127.0.0.1:{here_port}"), &near_addr).await.expect("bind"),
            Port::new("127.0.0.1:0", &near_addr).await.expect("bind"),
        ]);
        let there = Arc::new([
            Port::new("127.0.0.1:0", &far_addr).await.expect("bind"),
            Port::new(&format!("127.0.0.1:{there_port}"), &far_addr).await.expect("bind"),
        ]);
        let (a, b) = tokio::io::duplex(1 << 16);
        let (a_read, a_write) = tokio::io::split(a);
        let (b_read, b_write) = tokio::io::split(b);
        let (ready, up) = tokio::sync::oneshot::channel();
        tokio::spawn(pump(a_read, a_write, here, Some(ready)));
        tokio::spawn(pump(b_read, b_write, there, None));
        up.await.expect("the far end said it is up");

        let mut buf = [0u8; 64];
        // Flow 0: the near kikid dials the carrier's port; the far kikid answers the relay.
        near.send_to(b"hello there", ("127.0.0.1", here_port)).await.expect("send");
        let (n, relay) = far.recv_from(&mut buf).await.expect("far gets it");
        assert_eq!(&buf[..n], b"hello there");
        far.send_to(b"hello back", relay).await.expect("answer");
        let (n, from) = near.recv_from(&mut buf).await.expect("the answer");
        assert_eq!((&buf[..n], from.port()), (&b"hello back"[..], here_port));

        // Flow 1: the far kikid dials the relay's port; the near kikid answers the carrier.
        far.send_to(b"from there", ("127.0.0.1", there_port)).await.expect("send");
        let (n, carrier) = near.recv_from(&mut buf).await.expect("near gets it");
        assert_eq!(&buf[..n], b"from there");
        near.send_to(b"answered", carrier).await.expect("answer");
        let (n, from) = far.recv_from(&mut buf).await.expect("the answer");
        assert_eq!((&buf[..n], from.port()), (&b"answered"[..], there_port));

        // Another local process cannot use the carrier's port.
        let stranger = UdpSocket::bind("127.0.0.1:0").await.expect("stranger");
        stranger.send_to(b"let me in", ("127.0.0.1", here_port)).await.expect("send");
        let nothing = tokio::time::timeout(Duration::from_millis(300), far.recv_from(&mut buf)).await;
        assert!(nothing.is_err(), "a stranger's datagram is dropped");
    }
}
