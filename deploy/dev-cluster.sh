#!/usr/bin/env bash
# Three kiki homes on this machine, each bridged to the other two (read, send, wake, wait),
# threads open to peers, metrics on: a place to try kiki out (docs/guide/operating.md).
#
#   deploy/dev-cluster.sh [DIR]        start them in DIR (default: $TMPDIR/kiki-dev)
#   deploy/dev-cluster.sh [DIR] down   stop them
#
# Home N listens for bridges on UDP 127.0.0.1:(PORT_BASE+N) and serves its metrics on
# http://127.0.0.1:(PORT_BASE+100+N)/metrics; PORT_BASE defaults to 17400. `kiki` and
# `kikid` are taken from PATH, else from this checkout's target/release or target/debug.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
dir=${1:-${TMPDIR:-/tmp}/kiki-dev}
base=${PORT_BASE:-17400}
if ! command -v kiki >/dev/null; then
    for build in release debug; do
        if [ -x "$here/target/$build/kiki" ]; then
            PATH="$here/target/$build:$PATH"
            break
        fi
    done
fi
command -v kiki >/dev/null || { echo "no kiki on PATH: cargo build --release --workspace --bins" >&2; exit 1; }

if [ "${2:-}" = down ]; then
    for n in 1 2 3; do kiki --home "$dir/home$n" down; done
    exit 0
fi

# A field of `kiki --json …`'s one document (pretty-printed: one field a line).
field() { sed -n "s/^  \"$1\": \"\\([^\"]*\\)\".*/\\1/p"; }

mkdir -p "$dir"
for n in 1 2 3; do
    home="$dir/home$n"
    mkdir -p "$home" && chmod 700 "$home"
    cat > "$home/config.toml" <<TOML
[bridge]
listen = "127.0.0.1:$((base + n))"

[metrics]
listen = "127.0.0.1:$((base + 100 + n))"

[thread_communication]
enabled = true
TOML
    chmod 600 "$home/config.toml"
    kiki --home "$home" up >/dev/null
done
for a in 1 2 3; do
    for b in 1 2 3; do
        [ "$a" = "$b" ] && continue
        id=$(kiki --home "$dir/home$b" --json status | field home_id)
        request=$(kiki --home "$dir/home$a" --json bridge request "127.0.0.1:$((base + b))" \
            --want read,send,wake,wait --expect "$id" --name "home$b" | field request_id)
        kiki --home "$dir/home$b" bridge approve "$request" --allow read,send,wake,wait --name "home$a" >/dev/null
    done
done
for n in 1 2 3; do
    echo "home$n  $dir/home$n  $(kiki --home "$dir/home$n" --json status | field home_id)  metrics http://127.0.0.1:$((base + 100 + n))/metrics"
done
cat <<HELP

Each home names the others home1, home2, home3. Try:
  kiki --home $dir/home2 thread create --title inbox
  kiki --home $dir/home1 thread send home2/TH_… --content hello
  kiki --home $dir/home2 events --follow
Stop them with: $0 $dir down
HELP
