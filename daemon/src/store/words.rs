//! The bridges' words as types: a bridge's direction and state, a pairing request's status,
//! permissions, an outbox entry's status. Each has one spelling, [`as_str`](Direction::as_str)
//! for rows, the wire and JSON, and one parser; inside the daemon they are compared as
//! values, never as strings.

use std::fmt;

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

            pub fn as_str(self) -> &'static str {
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

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

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
