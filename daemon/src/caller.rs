//! Who is calling. Every operation is given its caller, resolved once where the call
//! arrives (the gRPC layer from the `kiki-token` header), and the domain decides what that
//! caller may do — never inferred from a missing value.

use crate::error::{Error, Result};
use crate::threads::runner::TurnCaller;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Caller {
    /// The home's owner: whoever reaches the owner-only socket without a turn's token (a
    /// person, a script, an agent CLI outside a turn — the owner's external client).
    Owner,
    /// A thread's agent, by the token of its running turn: it acts as that thread.
    Turn(TurnCaller),
}

impl Caller {
    /// The turn, for a thread's agent.
    pub fn turn(&self) -> Option<&TurnCaller> {
        match self {
            Caller::Owner => None,
            Caller::Turn(turn) => Some(turn),
        }
    }

    /// Refuses a thread's agent what only the owner may do (`what` names it).
    pub fn owner_only(&self, what: &str) -> Result<()> {
        match self {
            Caller::Owner => Ok(()),
            Caller::Turn(_) => {
                Err(Error::PermissionDenied(format!("{what} is an owner action, not an agent tool")))
            }
        }
    }

    /// The turn of a call only a running turn may make (`what` names it).
    pub fn turn_only(&self, what: &str) -> Result<&TurnCaller> {
        self.turn().ok_or_else(|| {
            Error::FailedPrecondition(format!(
                "{what} is made from inside a turn (it needs the turn's KIKI_TOKEN)"
            ))
        })
    }
}

impl From<Option<TurnCaller>> for Caller {
    fn from(turn: Option<TurnCaller>) -> Self {
        turn.map_or(Caller::Owner, Caller::Turn)
    }
}
