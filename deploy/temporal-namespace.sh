#!/bin/sh
# Creates the namespace plans run in, once the server answers; one that exists is left as
# it is. Run by the temporal-namespace service in temporalio/admin-tools (the temporal CLI).
set -eu

: "${TEMPORAL_ADDRESS:?TEMPORAL_ADDRESS is required}"
NAMESPACE="${TEMPORAL_NAMESPACE:-default}"
ATTEMPTS="${ATTEMPTS:-60}"
PAUSE_S="${PAUSE_S:-2}"

attempt=1
until temporal operator cluster health --address "$TEMPORAL_ADDRESS" >/dev/null 2>&1; do
  if [ "$attempt" -ge "$ATTEMPTS" ]; then
    echo "temporal-namespace: the server at $TEMPORAL_ADDRESS is not healthy after $attempt tries" >&2
    exit 1
  fi
  attempt=$((attempt + 1))
  sleep "$PAUSE_S"
done

attempt=1
while :; do
  if temporal operator namespace describe --namespace "$NAMESPACE" \
    --address "$TEMPORAL_ADDRESS" >/dev/null 2>&1; then
    echo "temporal-namespace: '$NAMESPACE' exists"
    exit 0
  fi
  # Created, it is described on the next pass; a refusal (the server still starting) is
  # tried again.
  temporal operator namespace create --namespace "$NAMESPACE" \
    --address "$TEMPORAL_ADDRESS" || true
  if [ "$attempt" -ge "$ATTEMPTS" ]; then
    echo "temporal-namespace: cannot create '$NAMESPACE' at $TEMPORAL_ADDRESS" >&2
    exit 1
  fi
  attempt=$((attempt + 1))
  sleep "$PAUSE_S"
done
