//! The peer-communication switches, evaluated for one thread:
//!
//! 1. `[thread_communication] enabled = false` in the home config: off, whatever else says.
//! 2. The thread's own switch (`kiki thread set REF --communication on|off`), if set.
//! 3. The thread's profile (`[profiles.NAME] thread_communication = true|false`), if set.
//! 4. `[thread_communication] enabled = true`: on. Unset: off by default.
//!
//! A refusal names the switch that refused, so the user knows which one to change.

use crate::config::Config;
use crate::store::{CommunicationSetting, ThreadRecord};

/// `Ok` if the thread may take part in peer communication; else which switch says no.
pub fn communication(config: &Config, thread: &ThreadRecord) -> Result<(), String> {
    let (open, why) = decide(config, thread);
    if open { Ok(()) } else { Err(why) }
}

/// Whether peer communication is open for the thread, and the switch that decides it, in
/// words a person can act on (shown by `kiki thread set`, `thread list --json`, ThreadRead).
pub fn decide(config: &Config, thread: &ThreadRecord) -> (bool, String) {
    if config.thread_communication.enabled == Some(false) {
        return (
            false,
            "the home's [thread_communication] enabled = false turns peer communication off".into(),
        );
    }
    match thread.communication {
        CommunicationSetting::On => {
            return (true, format!("thread {}'s communication switch is on", thread.id));
        }
        CommunicationSetting::Off => {
            return (false, format!("thread {}'s communication switch is off", thread.id));
        }
        CommunicationSetting::Default => {}
    }
    if let Some(open) = config.profile(&thread.profile).and_then(|p| p.thread_communication) {
        return (open, format!("profile {:?} has thread_communication = {open}", thread.profile));
    }
    if config.thread_communication.enabled == Some(true) {
        (true, "the home's [thread_communication] enabled = true turns it on by default".into())
    } else {
        (
            false,
            format!(
                "peer communication is off by default and thread {} has not opted in \
                 (kiki thread set {} --communication on)",
                thread.id, thread.id
            ),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{ExecutorKind, ProfileConfig};

    fn thread(setting: CommunicationSetting, profile: &str) -> ThreadRecord {
        ThreadRecord {
            seq: 1,
            id: "th_a".into(),
            workspace_id: "ws".into(),
            cwd: "/".into(),
            title: "t".into(),
            profile: profile.into(),
            created_at: 0,
            updated_at: 0,
            archived: false,
            enabled: true,
            running: false,
            turn_count: 0,
            communication: setting,
        }
    }

    #[test]
    fn precedence_home_off_then_thread_then_profile_then_home_default() {
        use CommunicationSetting::*;
        let mut config = Config::default();
        config.profiles.insert(
            "social".into(),
            ProfileConfig {
                executor: ExecutorKind::Echo,
                command: vec![],
                default: false,
                enabled: true,
                thread_communication: Some(true),
                allowed_tools: Vec::new(),
                max_cost_usd: None,
            },
        );
        // Unset: off by default; a thread or its profile opts in.
        assert!(
            communication(&config, &thread(Default, "echo")).expect_err("refused").contains("off by default")
        );
        assert!(communication(&config, &thread(On, "echo")).is_ok());
        assert!(communication(&config, &thread(Default, "social")).is_ok());
        assert!(
            communication(&config, &thread(Off, "social")).expect_err("refused").contains("switch is off")
        );
        // true: on by default, a thread can still close itself.
        config.thread_communication.enabled = Some(true);
        assert!(communication(&config, &thread(Default, "echo")).is_ok());
        assert!(communication(&config, &thread(Off, "echo")).is_err());
        // false: off completely.
        config.thread_communication.enabled = Some(false);
        let err = communication(&config, &thread(On, "social")).expect_err("refused");
        assert!(err.contains("enabled = false"), "{err}");
    }
}
