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
use std::sync::{Arc, Mutex};
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

/// One end's UDP socket of a flow: the one a kikid dials (it answers whoever sent last), or
/// the one that dials a kikid.
enum Port {
    Listening { socket: UdpSocket, peer: Mutex<Option<SocketAddr>> },
    Dialing(UdpSocket),
}

impl Port {
    async fn listening(addr: &str) -> Result<Self> {
        let socket = UdpSocket::bind(addr).await.with_context(|| format!("binding {addr}"))?;
        Ok(Self::Listening { socket, peer: Mutex::new(None) })
    }

    async fn dialing(addr: &str) -> Result<Self> {
        let socket = UdpSocket::bind("127.0.0.1:0").await?;
        socket.connect(addr).await.with_context(|| format!("dialing {addr}"))?;
        Ok(Self::Dialing(socket))
    }

    async fn recv(&self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Port::Listening { socket, peer } => {
                let (n, from) = socket.recv_from(buf).await?;
                *peer.lock().unwrap_or_else(|p| p.into_inner()) = Some(from);
                Ok(n)
            }
            Port::Dialing(socket) => socket.recv(buf).await,
        }
    }

    /// Sends a datagram out; one nobody can take (no peer yet, or refused) is dropped, as
    /// the network would.
    async fn send(&self, datagram: &[u8]) {
        let _ = match self {
            Port::Listening { socket, peer } => {
                let to = *peer.lock().unwrap_or_else(|p| p.into_inner());
                match to {
                    Some(to) => socket.send_to(datagram, to).await,
                    None => return,
                }
            }
            Port::Dialing(socket) => socket.send(datagram).await,
        };
    }
}

/// Moves datagrams between the two flows' ports and the channel until the channel ends.
async fn pump<R, W>(reader: R, writer: W, ports: Arc<[Port; 2]>) -> Result<()>
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
                match ports[usize::from(flow)].recv(&mut buf).await {
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
        while let Some((flow, datagram)) = queued.recv().await {
            write_frame(&mut writer, flow, &datagram).await?;
            // Whatever else is waiting goes in the same write.
            while let Ok((flow, datagram)) = queued.try_recv() {
                write_frame(&mut writer, flow, &datagram).await?;
            }
            writer.flush().await?;
        }
        Ok::<_, std::io::Error>(())
    };
    let into = async move {
        let mut reader = tokio::io::BufReader::new(reader);
        let mut buf = vec![0u8; MAX_DATAGRAM];
        loop {
            let mut header = [0u8; 3];
            match reader.read_exact(&mut header).await {
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(()),
                Err(e) => return Err(e),
            }
            let [flow, high, low] = header;
            let n = usize::from(u16::from_be_bytes([high, low]));
            reader.read_exact(&mut buf[..n]).await?;
            match ports.get(usize::from(flow)) {
                Some(port) => port.send(&buf[..n]).await,
                None => return Err(std::io::Error::other(format!("a frame of flow {flow}"))),
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
    let ports = Arc::new([Port::dialing(to).await?, Port::listening(listen).await?]);
    pump(tokio::io::stdin(), tokio::io::stdout(), ports).await
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
    let mut say = |what: &str| {
        let _ = lock.set_len(0);
        let _ = std::io::Seek::rewind(&mut *lock);
        let _ = write!(lock, "{}\n{what}\n", std::process::id());
    };
    say("starting");
    let space = Registry::open(home)?.get(name).cloned().with_context(|| format!("no space {name}"))?;
    let carried: Carried = space.carried.with_context(|| format!("space {name} is not carried over ssh"))?;
    let here =
        crate::connect::connect(home).await?.home().status(kiki_proto::StatusRequest {}).await?.into_inner();
    let local_bridge = loopback(&here.bridge_listen)?;
    let ports = Arc::new([
        Port::listening(&format!("127.0.0.1:{}", carried.local_port)).await?,
        Port::dialing(&local_bridge).await?,
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
                say("carrying");
                eprintln!("space {name}: carrying the bridges over ssh");
                pump(stdout, stdin, ports.clone()).await
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

    /// Datagrams go through a channel both ways, each to its flow's far end, and a listening
    /// port answers whoever sent to it last.
    #[tokio::test]
    async fn datagrams_cross_the_channel_on_their_flows() {
        // Two kikids, one at each end, stand as plain UDP sockets.
        let far = UdpSocket::bind("127.0.0.1:0").await.expect("far");
        let near_home = UdpSocket::bind("127.0.0.1:0").await.expect("near home");
        let here_listen = free_port().expect("port");
        let there_listen = free_port().expect("port");
        let here = Arc::new([
            Port::listening(&format!("127.0.0.1:{here_listen}")).await.expect("bind"),
            Port::dialing(&near_home.local_addr().expect("addr").to_string()).await.expect("dial"),
        ]);
        let there = Arc::new([
            Port::dialing(&far.local_addr().expect("addr").to_string()).await.expect("dial"),
            Port::listening(&format!("127.0.0.1:{there_listen}")).await.expect("bind"),
        ]);
        let (a, b) = tokio::io::duplex(1 << 16);
        let (a_read, a_write) = tokio::io::split(a);
        let (b_read, b_write) = tokio::io::split(b);
        tokio::spawn(pump(a_read, a_write, here));
        tokio::spawn(pump(b_read, b_write, there));

        let mut buf = [0u8; 64];
        // Flow 0: a home here dials the carrier; the far home answers.
        let dialer = UdpSocket::bind("127.0.0.1:0").await.expect("dialer");
        dialer.send_to(b"hello there", ("127.0.0.1", here_listen)).await.expect("send");
        let (n, relay) = far.recv_from(&mut buf).await.expect("far gets it");
        assert_eq!(&buf[..n], b"hello there");
        far.send_to(b"hello back", relay).await.expect("answer");
        let n = dialer.recv(&mut buf).await.expect("the answer");
        assert_eq!(&buf[..n], b"hello back");

        // Flow 1: the far side dials the relay's port; the home here answers.
        let far_dialer = UdpSocket::bind("127.0.0.1:0").await.expect("dialer");
        far_dialer.send_to(b"from there", ("127.0.0.1", there_listen)).await.expect("send");
        let (n, carrier) = near_home.recv_from(&mut buf).await.expect("near home gets it");
        assert_eq!(&buf[..n], b"from there");
        near_home.send_to(b"answered", carrier).await.expect("answer");
        let n = far_dialer.recv(&mut buf).await.expect("the answer");
        assert_eq!(&buf[..n], b"answered");
    }
}
