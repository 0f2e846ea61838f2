//! The async runtime kikid runs on: tokio's multi-threaded scheduler, one worker per core,
//! **without the LIFO slot**.
//!
//! Tokio runs the task a worker just woke before anything else queued there (the LIFO
//! slot), which speeds a lone request/response hand-off. Under concurrent calls it defeats
//! batching: each handler that writes an answer wakes its connection's task (an HTTP/2
//! connection, a QUIC connection's driver), which then runs at once and flushes that one
//! answer — a `write` or UDP datagram per call. Without the slot the connection task runs
//! after the handlers already queued, and one flush carries all of their answers. Measured
//! (docs/benchmarks.md, "What moved them"): at 64 concurrent senders kikid's CPU per local send fell
//! 17–25%, cross-home sends went from 2.02 to 0.56 UDP datagrams each, and single-sender
//! latency did not move.
//!
//! Turning the slot off is an unstable tokio API, compiled in under `--cfg tokio_unstable`
//! (set for this workspace in `.cargo/config.toml`); a build without it gets the default
//! scheduler.

/// Whether this build turns the LIFO slot off (kikid logs it when it starts: a `RUSTFLAGS`
/// set in the environment replaces the workspace's, `--cfg tokio_unstable` included).
pub const LIFO_SLOT_OFF: bool = cfg!(tokio_unstable);

/// Builds kikid's runtime (also used by benchmarks that run homes in their own process).
pub fn build() -> std::io::Result<tokio::runtime::Runtime> {
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    builder.enable_all();
    #[cfg(tokio_unstable)]
    builder.disable_lifo_slot();
    builder.build()
}
