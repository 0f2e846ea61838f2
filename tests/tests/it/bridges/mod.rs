//! Bridges between homes in one process, over real QUIC on loopback: pairing, permissions
//! checked at the target, workspace scope, revocation, pinned identities, cross-home sends and
//! what becomes of them, and the faults they must survive. A module per topic; what the
//! topics share is in `kiki_tests::bridges`.

mod doctor;
mod faults;
mod follow_ups;
mod pairing;
mod permissions;
mod reads;
mod receipts;
mod revocation;
mod rooms;
mod sends;
