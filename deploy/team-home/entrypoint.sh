#!/bin/sh
# A team home's replica starting in a container: its home directory is the container's own
# (its socket, lock and log), its config, identity key and database password are the team's,
# given as files (compose secrets and configs, Kubernetes Secret and ConfigMap volumes).
# kikid trusts only files its own user owns and no one else reads, so they are copied into
# the home with mode 0600 before it starts.
set -eu
home=${KIKI_HOME:-$HOME/.kiki}
mkdir -p "$home"
chmod 700 "$home"
install -m 600 "${KIKI_CONFIG_FILE:-/etc/kiki/config.toml}" "$home/config.toml"
install -m 600 "${KIKI_IDENTITY_FILE:-/run/secrets/kiki_identity}" "$home/identity.key"
install -m 600 "${KIKI_PASSWORD_FILE:-/run/secrets/kiki_db_password}" "$home/db.password"
exec kikid --home "$home"
