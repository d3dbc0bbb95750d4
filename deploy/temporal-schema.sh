#!/bin/sh
# Creates or upgrades Temporal's two databases on PostgreSQL: `temporal` (workflow state) and
# `temporal_visibility` (what lists and search attributes query). Run by the
# temporal-schema service in temporalio/admin-tools (temporal-sql-tool and the schema files
# of that server version) before the server starts, on every `docker compose up`.
#
# Safe to run again: `create` accepts a database that exists, `setup-schema -v 0.0` leaves
# a versioned schema alone, and `update-schema` applies only the versions not yet applied,
# so the same admin-tools version as the server brings an existing database up to it.
set -eu

: "${POSTGRES_SEEDS:?POSTGRES_SEEDS (the PostgreSQL host) is required}"
: "${POSTGRES_USER:?POSTGRES_USER is required}"
: "${SQL_PASSWORD:?SQL_PASSWORD is required}"
PORT="${DB_PORT:-5432}"
SCHEMA_DIR=/etc/temporal/schema/postgresql/v12

sql() {
  temporal-sql-tool --plugin postgres12 --ep "$POSTGRES_SEEDS" -p "$PORT" -u "$POSTGRES_USER" \
    "$@"
}

for db in temporal:temporal temporal_visibility:visibility; do
  name="${db%%:*}"
  schema="$SCHEMA_DIR/${db#*:}/versioned"
  echo "temporal-schema: $name"
  sql --db "$name" create
  sql --db "$name" setup-schema -v 0.0
  sql --db "$name" update-schema -d "$schema"
done
echo "temporal-schema: done"
