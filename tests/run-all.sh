#!/usr/bin/env bash
# The whole test suite, as CI runs it (.ci/run) and as a developer should before pushing.
# It installs what the tests need when it is missing, then runs the gates in order:
# formatting, lints, the binaries the smoke tier spawns, and every test.
set -euo pipefail
cd "$(dirname "$0")/.."

# Nothing outside the Rust toolchain is needed yet: the default store is embedded SQLite.
# (Postgres and sshd join here with the issues that bring them.)

export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"
cargo fmt --all --check
cargo clippy --workspace --all-targets --locked -- -D warnings
cargo build --workspace --bins --locked
log=$(mktemp)
trap 'rm -f "$log"' EXIT
cargo test --workspace --locked 2>&1 | tee "$log"
# One closing line for the whole run: cargo prints one per test binary, the last of which
# (a doc-test crate) often counts zero.
awk '/^test result:/ { for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i } }
     END { printf "%d passed, %d failed\n", p, f }' "$log"
