//! Words as types: every state, kind and status the daemon keeps is an enum declared with
//! [`words!`], which gives each value its one spelling ([`as_str`](Direction::as_str), for
//! rows, the wire and JSON) and one parser; inside the daemon they are compared as values,
//! never as strings. The bridges' words live here (a bridge's direction and state, a pairing
//! request's status, permissions, an outbox entry's status, refusals); the others beside
//! the records that hold them.

/// Declares a unit enum with its one spelling per value.
macro_rules! words {
    ($(#[$meta:meta])* $name:ident { $($(#[$vmeta:meta])* $value:ident => $word:literal,)* }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum $name {
            $($(#[$vmeta])* $value,)*
        }

        impl $name {
            pub const ALL: &[$name] = &[$($name::$value),*];

            pub const fn as_str(self) -> &'static str {
                match self {
                    $($name::$value => $word,)*
                }
            }

            /// The value spelled `word`, if any.
            pub fn parse(word: &str) -> Option<Self> {
                match word {
                    $($word => Some($name::$value),)*
                    _ => None,
                }
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}
pub(crate) use words;

/// Calls the macro `$each` with every word type a row holds (each backend binds them, the
/// mappers read them): the list is kept here once.
macro_rules! row_words {
    ($each:ident) => {
        $each!(
            Direction,
            BridgeState,
            RequestStatus,
            OutboxStatus,
            InputKind,
            TurnStatus,
            MessageStatus,
            MemberKind,
            CommunicationSetting,
            PermissionStatus,
            EventKind,
            PartKind,
            ToolOutcome
        );
    };
}
pub(crate) use row_words;

words! {
    /// Which way a bridge goes, seen from this home.
    Direction {
        /// The peer acts on this home.
        Inbound => "inbound",
        /// This home acts on the peer.
        Outbound => "outbound",
    }
}

words! {
    /// Where a bridge stands.
    BridgeState {
        /// Outbound: filed, waiting for the target's owner.
        Requested => "requested",
        Active => "active",
        /// Inbound access turned off by this home's owner (outbound: by the target's).
        Disabled => "disabled",
        Rejected => "rejected",
        /// The request went undecided, or the target no longer knows it.
        Expired => "expired",
        Revoked => "revoked",
    }
}

words! {
    /// Where a pairing request filed with this home stands.
    RequestStatus {
        /// Waiting for the owner's decision.
        Pending => "pending",
        Approved => "approved",
        Rejected => "rejected",
        /// Undecided for `[bridge] request_expiry`.
        Expired => "expired",
        /// The same peer filed a newer request.
        Replaced => "replaced",
        /// The peer revoked its side before the owner decided.
        Withdrawn => "withdrawn",
    }
}

words! {
    /// Where a cross-home send stands at its source.
    OutboxStatus {
        /// Not yet answered by the target: retried.
        Pending => "pending",
        /// The target holds it, no turn has taken it yet: followed up.
        Accepted => "accepted",
        Delivered => "delivered",
        Rejected => "rejected",
        Expired => "expired",
    }
}

words! {
    /// Why a home refused a peer's call or message: the word both homes use for it, on the
    /// wire, in receipts and in the outbox.
    Refusal {
        /// The bridge does not grant what the call needs, or there is no approved bridge.
        PermissionDenied => "permission_denied",
        BridgeRevoked => "bridge_revoked",
        /// The target's owner turned the bridge's inbound access off for now.
        BridgeDisabled => "bridge_disabled",
        /// The source's outbound bridge no longer exists (its entries end).
        BridgeRemoved => "bridge_removed",
        ThreadNotFound => "thread_not_found",
        ThreadArchived => "thread_archived",
        TooLarge => "too_large",
        /// The target thread takes no peer messages (a switch is off).
        CommunicationDisabled => "communication_disabled",
        InvalidArgument => "invalid_argument",
        FailedPrecondition => "failed_precondition",
        /// A follow-up asked about a key the target does not know.
        UnknownKey => "unknown_key",
        /// Too many pairing requests.
        RateLimited => "rate_limited",
        /// The retry window ended before the message was delivered or confirmed.
        Expired => "expired",
        Internal => "internal",
    }
}

impl Refusal {
    /// Whether retrying the message cannot help: its outbox entry ends `rejected`. Not so a
    /// refusal for now, nor `expired`: the source decides its own expiry (asking the target
    /// at the end of the window).
    pub fn is_final(self) -> bool {
        !matches!(
            self,
            Refusal::BridgeDisabled
                | Refusal::RateLimited
                | Refusal::Internal
                | Refusal::Expired
                | Refusal::BridgeRemoved
        )
    }

    /// Whether it ends every message of a call refused as a whole (a follow-up, a send):
    /// a refusal of the call itself says nothing about the messages otherwise.
    pub fn ends_each_message(self) -> bool {
        matches!(self, Refusal::BridgeRevoked | Refusal::PermissionDenied)
    }

    /// What it means, for the sender of a refused message.
    pub fn meaning(self) -> &'static str {
        match self {
            // A send needs `send` (without `wake` it is taken in, to wait).
            Refusal::PermissionDenied => {
                "this bridge does not grant \"send\" there, or is not approved (yet)"
            }
            Refusal::BridgeRevoked => "this bridge was revoked",
            Refusal::ThreadNotFound => "no such thread there, or not in the workspaces this bridge may reach",
            Refusal::ThreadArchived => "the thread is archived there",
            Refusal::CommunicationDisabled => {
                "the thread takes no peer messages (its communication switch, or its home's [thread_communication], is off)"
            }
            Refusal::TooLarge => "the content is over the target's limit",
            _ => "the target refused it",
        }
    }
}

words! {
    /// What a bridge can grant.
    Permission {
        /// ThreadList, ThreadRead.
        Read => "read",
        /// ThreadSend (the message waits at the target).
        Send => "send",
        /// Delivery into a prompt: starting a cold thread's turn.
        Wake => "wake",
        /// ThreadWait.
        Wait => "wait",
    }
}

/// A set of permissions, kept and shown in one order (read, send, wake, wait).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Permissions(u8);

impl Permissions {
    pub fn contains(self, p: Permission) -> bool {
        self.0 & bit(p) != 0
    }

    pub fn insert(&mut self, p: Permission) {
        self.0 |= bit(p);
    }

    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// Whether every permission of `self` is in `other`.
    pub fn within(self, other: Permissions) -> bool {
        self.0 & !other.0 == 0
    }

    pub fn iter(self) -> impl Iterator<Item = Permission> {
        Permission::ALL.iter().copied().filter(move |p| self.contains(*p))
    }

    /// The words, in order: `["read", "send"]`.
    pub fn words(self) -> Vec<String> {
        self.iter().map(|p| p.as_str().to_string()).collect()
    }

    /// `read,send`.
    pub fn joined(self) -> String {
        self.words().join(",")
    }

    /// The set of `words`; `Err` names the first word that is not a permission.
    pub fn parse<'a>(words: impl IntoIterator<Item = &'a str>) -> Result<Self, &'a str> {
        let mut set = Permissions::default();
        for word in words {
            set.insert(Permission::parse(word).ok_or(word)?);
        }
        Ok(set)
    }
}

fn bit(p: Permission) -> u8 {
    1 << (p as u8)
}

impl FromIterator<Permission> for Permissions {
    fn from_iter<I: IntoIterator<Item = Permission>>(iter: I) -> Self {
        let mut set = Permissions::default();
        for p in iter {
            set.insert(p);
        }
        set
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_word_parses_back_to_its_value() {
        for d in Direction::ALL {
            assert_eq!(Direction::parse(d.as_str()), Some(*d));
        }
        for s in BridgeState::ALL {
            assert_eq!(BridgeState::parse(s.as_str()), Some(*s));
        }
        for s in RequestStatus::ALL {
            assert_eq!(RequestStatus::parse(s.as_str()), Some(*s));
        }
        for s in OutboxStatus::ALL {
            assert_eq!(OutboxStatus::parse(s.as_str()), Some(*s));
        }
        assert_eq!(BridgeState::parse("Active"), None, "one spelling");
        for r in Refusal::ALL {
            assert_eq!(Refusal::parse(r.as_str()), Some(*r));
        }
    }

    #[test]
    fn a_refusal_for_now_is_retried_a_final_one_is_not() {
        let retried: Vec<&str> = Refusal::ALL.iter().filter(|r| !r.is_final()).map(|r| r.as_str()).collect();
        assert_eq!(retried, ["bridge_disabled", "bridge_removed", "rate_limited", "expired", "internal"]);
        let whole: Vec<&str> =
            Refusal::ALL.iter().filter(|r| r.ends_each_message()).map(|r| r.as_str()).collect();
        assert_eq!(whole, ["permission_denied", "bridge_revoked"]);
        assert!(Refusal::PermissionDenied.meaning().contains("\"send\""));
    }

    #[test]
    fn permissions_are_a_set_in_one_order() {
        let set = Permissions::parse(["wait", "read", "read"]).expect("valid");
        assert_eq!(set.words(), ["read", "wait"]);
        assert_eq!(set.joined(), "read,wait");
        assert!(set.contains(Permission::Read) && !set.contains(Permission::Send));
        assert!(Permissions::parse(["read"]).expect("valid").within(set));
        assert!(!set.within(Permissions::parse(["read"]).expect("valid")));
        assert_eq!(Permissions::parse(["read", "fly"]), Err("fly"));
        assert!(Permissions::default().is_empty());
    }
}
