#!/usr/bin/env bash
# The whole test suite, as CI runs it (.ci/run) and as a developer should before pushing.
# It installs what the tests need when it is missing, then runs the gates in order:
# formatting, lints, the binaries the smoke tier spawns, and every test.
set -euo pipefail
cd "$(dirname "$0")/.."

# The default store is embedded SQLite. The MCP tests drive `kiki mcp` with a second,
# independent client too: the Python MCP SDK from PyPI.
# The spaces' tests start a real OpenSSH server on a loopback port (tests/src/sshd.rs), and
# one on a second "machine" (a network namespace, iproute2) behind a firewall (nftables).
if [ ! -x /usr/sbin/sshd ] || ! command -v nft >/dev/null || ! command -v ip >/dev/null; then
    apt-get update && apt-get install -y openssh-server nftables iproute2
fi
# The Postgres store's tests run on a real PostgreSQL server: installed when missing,
# started, with the role the tests log in as (each test makes a database of its own).
bash tests/postgres-up.sh
if ! python3 -c 'import mcp' 2>/dev/null; then
    python3 -m pip install --quiet --disable-pip-version-check 'mcp==2.3.0'
fi

# The real Claude Code, Codex and Gemini CLIs, for the executors' handshake tests
# (tests/tests/it/agent_clis.rs): pinned versions from npm, into target/agent-clis.
export KIKI_AGENT_CLIS="${KIKI_AGENT_CLIS:-$PWD/target/agent-clis}"
if ! command -v npm >/dev/null; then
    apt-get update && apt-get install -y nodejs npm
fi
if [ ! -x "$KIKI_AGENT_CLIS/node_modules/.bin/codex" ] || [ ! -x "$KIKI_AGENT_CLIS/node_modules/.bin/gemini" ] \
    || [ ! -x "$KIKI_AGENT_CLIS/node_modules/.bin/claude" ]; then
    npm install --prefix "$KIKI_AGENT_CLIS" --no-audit --no-fund --loglevel=error \
        @openai/codex@0.171.0 @google/gemini-cli@0.61.0 @anthropic-ai/claude-code@2.1.197
fi
# And an old Codex without the app-server (it came in 0.44), for the `codex exec` fallback,
# in a prefix of its own beside the current one.
export KIKI_AGENT_CLIS_OLD="${KIKI_AGENT_CLIS_OLD:-$PWD/target/agent-clis-old}"
if [ ! -x "$KIKI_AGENT_CLIS_OLD/node_modules/.bin/codex" ]; then
    npm install --prefix "$KIKI_AGENT_CLIS_OLD" --no-audit --no-fund --loglevel=error @openai/codex@0.39.0
fi

export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"
# A whole run builds everything once: incremental state would only double the disk it takes.
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"
cargo fmt --all --check
cargo clippy --workspace --all-targets --locked -- -D warnings
cargo build --workspace --bins --locked
log=$(mktemp)
trap 'rm -f "$log"' EXIT
cargo test --workspace --locked 2>&1 | tee "$log"
# The store conformance suite runs on both backends above; the suites of the home's
# features run once more with every home's store on Postgres.
KIKI_TEST_STORE=postgres cargo test -p kiki-tests --test it --locked -- mailbox:: rooms:: bridges:: sessions:: 2>&1 | tee -a "$log"
# One closing line for the whole run: cargo prints one per test binary, the last of which
# (a doc-test crate) often counts zero.
awk '/^test result:/ { for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i } }
     END { printf "%d passed, %d failed\n", p, f }' "$log"
