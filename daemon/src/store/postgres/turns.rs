//! Turns on PostgreSQL.

use async_trait::async_trait;

use super::*;

#[async_trait]
impl TurnStore for PostgresStore {
    #[allow(unused_variables)]
    async fn enqueue_input(&self, thread_id: &str, input: &NewInput) -> StoreResult<Option<bool>> {
        todo!("enqueue_input")
    }

    #[allow(unused_variables)]
    async fn claim_turn(&self, thread_id: &str, claim: TurnClaim, now: Millis) -> StoreResult<Option<ClaimedTurn>> {
        todo!("claim_turn")
    }

    #[allow(unused_variables)]
    async fn inbox(&self, thread_id: &str, take_messages: bool) -> StoreResult<Vec<InputRecord>> {
        todo!("inbox")
    }

    #[allow(unused_variables)]
    async fn take_into_turn(&self, thread_id: &str, turn_id: &str, take_messages: bool, ids: Vec<String>, render: RenderInput, now: Millis) -> StoreResult<Vec<String>> {
        todo!("take_into_turn")
    }

    #[allow(unused_variables)]
    async fn add_turn_part(&self, turn_id: &str, kind: PartKind, text: &str, now: Millis) -> StoreResult<()> {
        todo!("add_turn_part")
    }

    #[allow(unused_variables)]
    async fn turn_parts(&self, turn_id: &str, after: i64, limit: u32) -> StoreResult<Vec<TurnPart>> {
        todo!("turn_parts")
    }

    #[allow(unused_variables)]
    async fn latest_turn(&self, thread_id: &str) -> StoreResult<Option<(String, TurnStatus)>> {
        todo!("latest_turn")
    }

    #[allow(unused_variables)]
    async fn agent_session(&self, thread_id: &str) -> StoreResult<Option<String>> {
        todo!("agent_session")
    }

    #[allow(unused_variables)]
    async fn set_agent_session(&self, thread_id: &str, session: &str, now: Millis) -> StoreResult<()> {
        todo!("set_agent_session")
    }

    #[allow(unused_variables)]
    async fn cost(&self, thread_id: Option<&str>) -> StoreResult<f64> {
        todo!("cost")
    }

    #[allow(unused_variables)]
    async fn finish_turn(&self, outcome: &TurnOutcome) -> StoreResult<()> {
        todo!("finish_turn")
    }

    #[allow(unused_variables)]
    async fn record_agent(&self, turn_id: &str, agent: &str) -> StoreResult<()> {
        todo!("record_agent")
    }

    #[allow(unused_variables)]
    async fn interrupted_turns(&self) -> StoreResult<Vec<InterruptedTurn>> {
        todo!("interrupted_turns")
    }

    #[allow(unused_variables)]
    async fn fail_interrupted_turns(&self, reason: &str, now: Millis) -> StoreResult<Vec<String>> {
        todo!("fail_interrupted_turns")
    }

    #[allow(unused_variables)]
    async fn threads_with_queued_input(&self) -> StoreResult<Vec<String>> {
        todo!("threads_with_queued_input")
    }

    #[allow(unused_variables)]
    async fn running_turns(&self) -> StoreResult<u64> {
        todo!("running_turns")
    }

    #[allow(unused_variables)]
    async fn ended_turns(&self, thread_id: &str, after_seq: i64, limit: u32) -> StoreResult<Vec<TurnRecord>> {
        todo!("ended_turns")
    }

    #[allow(unused_variables)]
    async fn last_ended_turns(&self, thread_id: &str, limit: u32) -> StoreResult<Vec<TurnRecord>> {
        todo!("last_ended_turns")
    }

    #[allow(unused_variables)]
    async fn turn(&self, thread_id: &str, turn_id: &str) -> StoreResult<Option<TurnRecord>> {
        todo!("turn")
    }

    #[allow(unused_variables)]
    async fn ended_turn_exists(&self, thread_id: &str, seq: i64) -> StoreResult<bool> {
        todo!("ended_turn_exists")
    }

    #[allow(unused_variables)]
    async fn undeliver_turn_messages(&self, turn_id: &str, reason: &str, now: Millis) -> StoreResult<Vec<String>> {
        todo!("undeliver_turn_messages")
    }

}

#[allow(unused_variables)]
pub(super) async fn claim_turn(
    tx: &mut Tx,
    thread_id: &str,
    claim: &TurnClaim,
    now: Millis,
    arriving: Option<InputRecord>,
) -> StoreResult<Option<ClaimedTurn>> {
    todo!("claim_turn")
}

#[allow(unused_variables)]
pub(super) async fn save_agent_session(tx: &mut Tx, thread_id: &str, session: &str, now: Millis) -> StoreResult<()> {
    todo!("save_agent_session")
}

#[allow(unused_variables)]
pub(super) async fn attach_items(conn: &mut PgConnection, turns: &mut [TurnRecord]) -> StoreResult<()> {
    todo!("attach_items")
}

#[allow(unused_variables)]
pub(super) async fn insert_input(
    tx: &mut Tx,
    thread_id: &str,
    input: &NewInput,
    wake: bool,
    turn: Option<&str>,
) -> StoreResult<()> {
    todo!("insert_input")
}
