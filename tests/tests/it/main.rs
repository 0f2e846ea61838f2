//! kiki's integration tests, in one test binary (one link instead of one per file): a
//! module per topic. What several topics share is in the `kiki_tests` library (`tests/src/`);
//! what one topic uses stays in its module.
//!
//! Run one topic with `cargo test -p kiki-tests --test it TOPIC::` (e.g. `bridges::` or
//! `smoke::`), one test by its path or any part of it. The tests of every topic share this
//! process: none changes its environment, current directory or signal handlers, and each
//! works in temporary directories of its own and on ports the system picks.
//!
//! Most tests run homes in this process (`kiki_tests::TestHome`); the smoke tier (`smoke`,
//! `safety`, `rooms_cli`, `mcp_install`, and a few tests elsewhere) runs the real `kikid`
//! and `kiki` binaries, as do agents that call `kiki` from their turns: build them first with
//! `cargo build --workspace --bins`. `safety` needs root (it changes file owners and mounts
//! small file systems); `agent_clis` needs the agent CLIs tests/run-all.sh installs.

mod agent_clis;
mod bridges;
mod deploy;
mod mailbox;
mod mcp;
mod mcp_install;
mod rooms;
mod rooms_cli;
mod safety;
mod session_agents;
mod session_tools;
mod sessions;
mod simulated_bridges;
mod smoke;
mod spaces;
mod store_postgres;
mod store_sqlite;
mod team_home;
mod threads;
