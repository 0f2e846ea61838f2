#!/usr/bin/env bash
# A PostgreSQL server for the tests of the Postgres store: installs PostgreSQL when missing,
# starts the machine's cluster (creating one if there is none) and makes sure the role the
# tests log in as exists, with a password (they connect over TCP with it, as a team home
# would) and the right to create the databases each test makes for itself.
# Idempotent; run by tests/run-all.sh and by the tests themselves (tests/src/postgres.rs).
set -euo pipefail

if ! command -v pg_lsclusters >/dev/null || ! command -v pgbench >/dev/null; then
    apt-get update && apt-get install -y postgresql postgresql-contrib
fi
if [ -z "$(pg_lsclusters --no-header)" ]; then
    version=$(ls /usr/lib/postgresql | sort -n | tail -1)
    pg_createcluster "$version" main
fi
read -r version cluster port status _ < <(pg_lsclusters --no-header | head -1)
if [ "$status" != "online" ]; then
    pg_ctlcluster "$version" "$cluster" start
fi
role=${KIKI_TEST_PG_USER:-kiki_test}
password=${KIKI_TEST_PG_PASSWORD:-not-the-role-name}
runuser -u postgres -- psql -p "$port" -qAt -v ON_ERROR_STOP=1 -c "
DO \$\$ BEGIN
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '$role') THEN
        CREATE ROLE $role LOGIN CREATEDB;
    END IF;
    ALTER ROLE $role PASSWORD '$password';
END \$\$;"
echo "postgres://$role@127.0.0.1:$port/postgres"
