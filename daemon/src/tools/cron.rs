//! `Cron`: prompts scheduled into a thread, fired by the home's [`Scheduler`] as the thread's
//! input. A schedule is a 5-field cron expression in the home's local time zone. Each thread
//! holds at most [`MAX_PER_THREAD`].
//!
//! So that schedules do not all fire at once on the hour, fire times get a fixed jitter
//! derived from the cron's id: a recurring one is shifted later by up to 10% of its period
//! (at most 15 minutes); a one-time one falling on :00 or :30 is moved earlier by up to 90 s.
//! Fires missed while the home was down come as one, with their count (`coalescedCount`); a
//! recurring cron older than 7 days fires a last time (`stale="true"`) and is deleted.
//! Crons live in the store: they survive restarts, and a fire is committed with its input in
//! one transaction (a replica that lost the race fires nothing).

use std::str::FromStr;
use std::sync::Arc;

use chrono::{DateTime, Local, TimeZone, Timelike};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::{Output, ToolContext, ToolError};
use crate::store::{Change, CronRecord, Millis, Publisher, Store};
use crate::threads::{Threads, new_id, user_input};
use crate::time::rfc3339;

pub const MAX_PER_THREAD: u32 = 50;
pub const PROMPT_MAX_BYTES: usize = 8 * 1024;
const MINUTE: Millis = 60_000;
const RECURRING_JITTER_MAX: Millis = 15 * MINUTE;
const ONE_TIME_JITTER_MAX: Millis = 90_000;
const STALE_AFTER: Millis = 7 * 24 * 60 * MINUTE;
/// How many missed fires are counted one by one (a cron every minute, down for a week, is
/// 10,080): past it the count says "at least".
const COUNT_MISSED_MAX: u64 = 100_000;
/// Set to 1: no cron fires, none can be made.
pub const DISABLE_VAR: &str = "KIKI_DISABLE_CRON";

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CronArgs {
    /// `create`, `list` or `delete`.
    pub action: String,
    /// create: the 5-field cron expression (minute hour day-of-month month day-of-week).
    pub cron: Option<String>,
    /// create: the text the fire puts into the thread (at most 8 KB).
    pub prompt: Option<String>,
    /// create: fire again and again (default true), or once and be deleted.
    pub recurring: Option<bool>,
    /// delete: the cron's id.
    pub id: Option<String>,
}

/// A checked `Cron` call.
enum Action {
    Create { schedule: Box<Schedule>, expression: String, prompt: String, recurring: bool },
    List,
    Delete { id: String },
}

impl CronArgs {
    /// Checks the call (before anyone is asked): create and delete ask the owner first,
    /// list does not.
    pub fn check(&self) -> Result<Option<String>, ToolError> {
        Ok(match self.action()? {
            Action::List => None,
            _ => Some(format!("Cron {} asks the owner first", self.action)),
        })
    }

    /// The call, its fields checked for its action.
    fn action(&self) -> Result<Action, ToolError> {
        let given = [
            ("cron", self.cron.is_some()),
            ("prompt", self.prompt.is_some()),
            ("recurring", self.recurring.is_some()),
            ("id", self.id.is_some()),
        ];
        let only = |takes: &[&str]| match given.iter().find(|(field, given)| *given && !takes.contains(field))
        {
            Some((field, _)) => {
                Err(ToolError::invalid(*field, format!("not taken by action {:?}", self.action)))
            }
            None => Ok(()),
        };
        match self.action.as_str() {
            "create" => {
                only(&["cron", "prompt", "recurring"])?;
                let expression =
                    self.cron.clone().ok_or_else(|| ToolError::invalid("cron", "required to create"))?;
                let schedule = Schedule::parse(&expression).map_err(|e| ToolError::invalid("cron", e))?;
                let prompt = self.prompt.clone().unwrap_or_default();
                if prompt.trim().is_empty() || prompt.len() > PROMPT_MAX_BYTES {
                    return Err(ToolError::invalid(
                        "prompt",
                        format!("1-{PROMPT_MAX_BYTES} bytes of UTF-8, got {}", prompt.len()),
                    ));
                }
                Ok(Action::Create {
                    schedule: Box::new(schedule),
                    expression,
                    prompt,
                    recurring: self.recurring.unwrap_or(true),
                })
            }
            "list" => only(&[]).map(|()| Action::List),
            "delete" => {
                only(&["id"])?;
                let id = self.id.clone().ok_or_else(|| ToolError::invalid("id", "required to delete"))?;
                Ok(Action::Delete { id })
            }
            other => Err(ToolError::invalid("action", format!("create, list or delete, got {other:?}"))),
        }
    }
}

/// A parsed 5-field schedule.
#[derive(Debug, Clone)]
pub struct Schedule(croner::Cron);

impl Schedule {
    pub fn parse(expression: &str) -> Result<Self, String> {
        let fields = expression.split_whitespace().count();
        if fields != 5 {
            return Err(format!("5 fields (minute hour day-of-month month day-of-week), got {fields}"));
        }
        croner::Cron::from_str(expression).map(Schedule).map_err(|e| e.to_string())
    }

    /// The first time after `after` the expression names, local time.
    fn next_after(&self, after: Millis) -> Option<Millis> {
        let at: DateTime<Local> = Local.timestamp_millis_opt(after).single()?;
        self.0.find_next_occurrence(&at, false).ok().map(|t| t.timestamp_millis())
    }

    pub fn describe(&self) -> String {
        self.0.describe()
    }
}

/// The fixed jitter of a cron: a number from its id, below `bound`.
fn jitter(id: &str, bound: Millis) -> Millis {
    use sha2::Digest as _;
    let digest = sha2::Sha256::digest(id.as_bytes());
    let n = u64::from_be_bytes(digest[..8].try_into().unwrap_or_default());
    if bound <= 0 { 0 } else { (n % (bound as u64 + 1)) as Millis }
}

/// The jittered fire time of the schedule's first time after `after` (a time the jitter
/// moved to or before `after` is skipped, so each base time fires once).
pub fn next_fire(schedule: &Schedule, id: &str, recurring: bool, after: Millis) -> Option<Millis> {
    // Base times whose jittered fire is after `after`: a recurring shift is forward (a base
    // time up to the jitter before `after` still fires later), a one-time one backward.
    let mut base = schedule.next_after(after - if recurring { RECURRING_JITTER_MAX } else { 0 })?;
    for _ in 0..1_000 {
        let fire = if recurring {
            let period = schedule.next_after(base).map_or(0, |n| n - base);
            base + jitter(id, (period / 10).min(RECURRING_JITTER_MAX))
        } else {
            let local = Local.timestamp_millis_opt(base).single()?;
            let on_the_half_hour = local.minute() % 30 == 0;
            if on_the_half_hour { base - jitter(id, ONE_TIME_JITTER_MAX) } else { base }
        };
        if fire > after {
            return Some(fire);
        }
        base = schedule.next_after(base)?;
    }
    None
}

/// What a fire at `now` of a due cron does: how many fire times it stands for, whether it is
/// its last as stale, and when it fires next (`None`: it is deleted).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fire {
    pub coalesced: u64,
    pub stale: bool,
    pub next: Option<Millis>,
}

pub fn plan_fire(cron: &CronRecord, now: Millis) -> Fire {
    let schedule = Schedule::parse(&cron.cron).ok();
    let stale = cron.recurring && now - cron.created_at > STALE_AFTER;
    let mut coalesced = 1;
    let mut next = None;
    if let (Some(schedule), true) = (&schedule, cron.recurring) {
        let mut at = cron.next_fire_at;
        loop {
            match next_fire(schedule, &cron.id, true, at) {
                Some(later) if later <= now && coalesced < COUNT_MISSED_MAX => {
                    coalesced += 1;
                    at = later;
                }
                Some(later) if later <= now => at = now,
                later => {
                    next = later;
                    break;
                }
            }
        }
    }
    Fire { coalesced, stale, next: if stale { None } else { next } }
}

/// The input a fire puts into the thread.
pub fn envelope(cron: &CronRecord, fire: &Fire) -> String {
    let stale = if fire.stale { " stale=\"true\"" } else { "" };
    format!(
        "<cron-fire id=\"{}\" cron=\"{}\" coalescedCount=\"{}\"{stale}>\n{}\n</cron-fire>",
        cron.id, cron.cron, fire.coalesced, cron.prompt
    )
}

fn disabled() -> bool {
    std::env::var(DISABLE_VAR).is_ok_and(|v| v == "1")
}

/// `Cron` (its arguments checked: [`CronArgs::check`]).
pub async fn cron_tool(context: &ToolContext, args: CronArgs) -> Result<Output, ToolError> {
    let thread = &context.thread.id;
    let now = context.threads.clock().now_ms();
    match args.action()? {
        Action::Create { schedule, expression, prompt, recurring } => {
            if disabled() {
                return Err(ToolError::Failed(format!(
                    "scheduled prompts are disabled here ({DISABLE_VAR}=1)"
                )));
            }
            let id = new_id("cron");
            let next_fire_at = next_fire(&schedule, &id, recurring, now)
                .ok_or_else(|| ToolError::invalid("cron", "names no time to come"))?;
            let record = CronRecord {
                id,
                thread_id: thread.clone(),
                cron: expression,
                prompt,
                recurring,
                created_at: now,
                next_fire_at,
            };
            if !context.store.add_cron(&record, MAX_PER_THREAD).await? {
                return Err(ToolError::Failed(format!(
                    "this thread has {MAX_PER_THREAD} scheduled prompts, the most it may; delete one first"
                )));
            }
            Ok(Output::json(&json!({
                "id": record.id,
                "humanSchedule": schedule.describe(),
                "nextFireAt": rfc3339(next_fire_at),
                "recurring": recurring,
            })))
        }
        Action::List => {
            let crons = context.store.crons(Some(thread)).await?;
            let records: Vec<_> = crons
                .iter()
                .map(|c| {
                    let human = Schedule::parse(&c.cron).map(|s| s.describe()).unwrap_or_default();
                    json!({
                        "id": c.id,
                        "cron": c.cron,
                        "humanSchedule": human,
                        "nextFireAt": rfc3339(c.next_fire_at),
                        "recurring": c.recurring,
                        "ageDays": (now - c.created_at) / (24 * 60 * MINUTE),
                        "stale": c.recurring && now - c.created_at > STALE_AFTER,
                    })
                })
                .collect();
            let text = if records.is_empty() {
                "no scheduled prompts".to_string()
            } else {
                let each: Vec<String> =
                    records.iter().map(|r| serde_json::to_string_pretty(r).unwrap_or_default()).collect();
                each.join("\n---\n")
            };
            Ok(Output { text, structured: json!({ "crons": records }) })
        }
        Action::Delete { id } => {
            if !context.store.delete_cron(thread, &id).await? {
                return Err(ToolError::Failed(format!("No cron job with id {id}")));
            }
            Ok(Output::json(&json!({ "deleted": id })))
        }
    }
}

/// Fires the home's crons when they are due.
#[derive(Clone)]
pub struct Scheduler {
    wake: Arc<Notify>,
}

impl Scheduler {
    /// A scheduler that looks at the next fire time again whenever the store publishes that
    /// the crons changed, whichever replica of the home changed them (or that changes may
    /// have gone unheard).
    pub fn listening(changes: &Publisher) -> Self {
        let wake = Arc::new(Notify::new());
        changes.listen(Arc::new({
            let wake = wake.clone();
            move |changes: &[Change]| {
                if changes.iter().any(|c| matches!(c, Change::Crons | Change::Missed)) {
                    wake.notify_one();
                }
            }
        }));
        Self { wake }
    }

    /// Runs until `stopping`: fires every due cron (those missed while the home was down
    /// first), then sleeps until the next one is due or a cron changes.
    pub async fn run(self, store: Arc<dyn Store>, threads: Threads, stopping: CancellationToken) {
        if disabled() {
            return;
        }
        let clock = threads.clock().clone();
        loop {
            let now = clock.now_ms();
            let next = match store.crons(None).await {
                Ok(crons) => {
                    for due in crons.iter().filter(|c| c.next_fire_at <= now) {
                        let fire = plan_fire(due, now);
                        let input = user_input(&envelope(due, &fire), now);
                        match store.fire_cron(due, &input, fire.next).await {
                            Ok(true) => threads.runner().kick(&due.thread_id),
                            Ok(false) => {}
                            Err(e) => tracing::warn!(error = %e, cron = %due.id, "cron not fired"),
                        }
                    }
                    crons.iter().filter(|c| c.next_fire_at > now).map(|c| c.next_fire_at).min()
                }
                Err(e) => {
                    tracing::warn!(error = %e, "crons not read");
                    Some(now + 5_000)
                }
            };
            // Looked at again at least hourly all the same: the sleep is timed by the monotonic
            // clock and fire times by the wall clock, which may jump (a suspended laptop, a
            // clock set right).
            let until = next.unwrap_or(i64::MAX).min(now + 60 * MINUTE).max(now + 1);
            tokio::select! {
                () = clock.sleep_until(until) => {}
                () = self.wake.notified() => {}
                () = stopping.cancelled() => return,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> Millis {
        Local
            .from_local_datetime(
                &chrono::NaiveDateTime::parse_from_str(text, "%Y-%m-%d %H:%M").expect("cron test"),
            )
            .single()
            .expect("cron test")
            .timestamp_millis()
    }

    #[test]
    fn an_expression_has_five_fields_and_a_time_to_come() {
        assert!(Schedule::parse("*/5 * * * *").is_ok());
        assert!(Schedule::parse("0 */5 * * * *").expect_err("refused").contains("got 6"));
        assert!(Schedule::parse("61 * * * *").is_err());
        assert!(Schedule::parse("0 9 * * MON-FRI").is_ok());
    }

    #[test]
    fn recurring_fires_are_shifted_later_by_at_most_a_tenth_of_the_period() {
        let every_ten = Schedule::parse("*/10 * * * *").expect("cron test");
        let start = at("2026-01-01 12:01");
        for id in ["a", "b", "c", "d"] {
            let fire = next_fire(&every_ten, id, true, start).expect("cron test");
            let base = at("2026-01-01 12:10");
            assert!((base..=base + MINUTE).contains(&fire), "{id}: {fire} vs {base}");
            // The same id, the same shift.
            assert_eq!(next_fire(&every_ten, id, true, start), Some(fire));
        }
        // Hourly: at most 6 minutes; daily: at most 15.
        let daily = Schedule::parse("0 3 * * *").expect("cron test");
        let fire = next_fire(&daily, "x", true, at("2026-01-01 12:00")).expect("cron test");
        let base = at("2026-01-02 03:00");
        assert!((base..=base + RECURRING_JITTER_MAX).contains(&fire));
    }

    #[test]
    fn a_one_time_fire_on_the_hour_moves_earlier_by_at_most_90_seconds() {
        let once = Schedule::parse("0 15 * * *").expect("cron test");
        let fire = next_fire(&once, "y", false, at("2026-01-01 12:00")).expect("cron test");
        let base = at("2026-01-01 15:00");
        assert!((base - ONE_TIME_JITTER_MAX..=base).contains(&fire));
        let odd = Schedule::parse("7 15 * * *").expect("cron test");
        assert_eq!(next_fire(&odd, "y", false, at("2026-01-01 12:00")), Some(at("2026-01-01 15:07")));
    }

    #[test]
    fn missed_fires_come_as_one_with_their_count() {
        let cron = CronRecord {
            id: "cron_1".into(),
            thread_id: "t".into(),
            cron: "0 * * * *".into(),
            prompt: "check".into(),
            recurring: true,
            created_at: at("2026-01-01 00:00"),
            next_fire_at: next_fire(
                &Schedule::parse("0 * * * *").expect("cron test"),
                "cron_1",
                true,
                at("2026-01-01 00:30"),
            )
            .expect("cron test"),
        };
        // Down from before 01:00 to 04:30: the 01, 02, 03 and 04 o'clock fires, as one.
        let fire = plan_fire(&cron, at("2026-01-01 04:30"));
        assert_eq!(fire.coalesced, 4);
        assert!(!fire.stale);
        let next = fire.next.expect("cron test");
        assert!((at("2026-01-01 05:00")..=at("2026-01-01 05:06")).contains(&next));
        assert!(envelope(&cron, &fire).contains("coalescedCount=\"4\""));
        // Eight days old: a last fire, marked stale, and no next.
        let fire = plan_fire(&cron, at("2026-01-09 00:30"));
        assert!(fire.stale);
        assert_eq!(fire.next, None);
        // A one-time cron fires once and is gone.
        let once = CronRecord { recurring: false, ..cron };
        assert_eq!(plan_fire(&once, at("2026-01-05 00:00")), Fire { coalesced: 1, stale: false, next: None });
    }
}
