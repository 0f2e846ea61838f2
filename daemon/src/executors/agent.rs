//! An `exec` agent's process group, recorded with its turn while the turn runs.
//!
//! A kikid killed with -9 cannot stop its agents: they would go on working in the thread's
//! cwd after the restart has failed their turns, side by side with the thread's next turn.
//! So the runner records each agent (see [`Agent::record`]) and startup recovery stops the
//! agents of the turns it fails. A record names the group's leader by pid, start time and
//! boot, so a number the kernel has since given to another process is never signalled.

use nix::sys::signal::{Signal, kill, killpg};
use nix::unistd::Pid;

/// A running agent: the leader of its own process group (`exec` starts it that way).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Agent {
    pgid: i32,
    /// The leader's start time, in clock ticks since boot (`/proc/PID/stat`, field 22).
    started: u64,
    boot_id: String,
}

impl Agent {
    /// The running process `pid`, as it can be recognised later; `None` if it is gone.
    pub fn of(pid: u32) -> Option<Self> {
        let pgid = i32::try_from(pid).ok()?;
        Some(Self { pgid, started: stat(pgid)?.started, boot_id: boot_id()? })
    }

    /// `PGID STARTED BOOT_ID`, as stored with the turn.
    pub fn record(&self) -> String {
        format!("{} {} {}", self.pgid, self.started, self.boot_id)
    }

    pub fn from_record(record: &str) -> Option<Self> {
        let mut parts = record.split(' ');
        let agent = Self {
            pgid: parts.next()?.parse().ok()?,
            started: parts.next()?.parse().ok()?,
            boot_id: parts.next()?.to_string(),
        };
        parts.next().is_none().then_some(agent)
    }

    /// Kills what is left of the agent: its whole process group if the leader is still the
    /// recorded process (same boot, same start time); if the leader has exited (say, killed
    /// by a broken pipe when kikid died), the processes still in its group that started
    /// after it. A number now used by another process is left alone. Returns whether
    /// anything was signalled.
    pub fn stop(&self) -> bool {
        if boot_id().as_deref() != Some(self.boot_id.as_str()) {
            return false;
        }
        match stat(self.pgid) {
            Some(leader) if leader.started == self.started => {
                killpg(Pid::from_raw(self.pgid), Signal::SIGKILL).is_ok()
            }
            // Another process has the number: the group, if any, is not the agent's.
            Some(_) => false,
            None => {
                let left: Vec<i32> = processes()
                    .filter(|p| p.group == self.pgid && p.started >= self.started)
                    .map(|p| p.pid)
                    .collect();
                left.iter().filter(|pid| kill(Pid::from_raw(**pid), Signal::SIGKILL).is_ok()).count() > 0
            }
        }
    }
}

/// What `/proc/PID/stat` tells about a process.
struct Stat {
    pid: i32,
    /// Its process group (field 5).
    group: i32,
    /// Its start time in clock ticks since boot (field 22).
    started: u64,
}

/// The fields after the command name (in parentheses, and free to contain spaces) start at
/// field 3.
fn stat(pid: i32) -> Option<Stat> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, after_name) = text.rsplit_once(')')?;
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    if fields.first() == Some(&"Z") {
        return None; // a zombie has exited already
    }
    Some(Stat { pid, group: fields.get(5 - 3)?.parse().ok()?, started: fields.get(22 - 3)?.parse().ok()? })
}

/// Every live process.
fn processes() -> impl Iterator<Item = Stat> {
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse().ok())
        .filter_map(stat)
}

fn boot_id() -> Option<String> {
    let id = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
    Some(id.trim().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::CommandExt;
    use std::process::Command;
    use std::time::{Duration, Instant};

    #[test]
    fn a_record_round_trips_and_refuses_garbage() {
        let agent = Agent { pgid: 42, started: 7, boot_id: "b-1".into() };
        assert_eq!(Agent::from_record(&agent.record()), Some(agent));
        for bad in ["", "unknown", "42", "42 7", "x 7 b", "42 7 b extra"] {
            assert_eq!(Agent::from_record(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn stop_kills_the_recorded_group_and_spares_a_reused_number() {
        let mut child = Command::new("sleep").arg("30").process_group(0).spawn().expect("spawn");
        let agent = Agent::of(child.id()).expect("running");
        // Another start time: the number now belongs to someone else.
        let stranger = Agent { started: agent.started + 1, ..agent.clone() };
        assert!(!stranger.stop());
        assert!(child.try_wait().expect("wait").is_none(), "a stranger's record spared it");
        assert!(agent.stop());
        let started = Instant::now();
        while child.try_wait().expect("wait").is_none() {
            assert!(started.elapsed() < Duration::from_secs(5), "the group was not killed");
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(!agent.stop(), "gone: nothing to stop");
    }

    #[test]
    fn stop_kills_what_an_exited_leader_left_in_its_group() {
        let mut leader = Command::new("sh")
            .args(["-c", "sleep 30 & echo $!; read wait_for_the_record"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .process_group(0)
            .spawn()
            .expect("spawn");
        let agent = Agent::of(leader.id()).expect("running");
        let mut line = String::new();
        let stdout = leader.stdout.take().expect("stdout");
        std::io::BufRead::read_line(&mut std::io::BufReader::new(stdout), &mut line).expect("child pid");
        let child: i32 = line.trim().parse().expect("pid");
        drop(leader.stdin.take()); // the leader exits; its child stays in the group
        leader.wait().expect("leader exits");
        assert!(stat(child).is_some(), "the child outlives its leader");
        assert!(agent.stop());
        let started = Instant::now();
        while stat(child).is_some() {
            assert!(started.elapsed() < Duration::from_secs(5), "the leftover child was not killed");
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}
