"""Patch ids for workflow changes that running workflows must survive.

A worker replays a workflow's history against the current code; a change in the commands
a workflow issues would make every run started by the previous release fail with a
non-determinism error. Such a change goes behind ``workflow.patched(ID)``: new runs take
the new path (and record the id), old runs replay the old one. ``tests/histories`` holds
runs of the old shapes, so the suite proves both paths still replay.
"""

from __future__ import annotations

# Workspace tools run as local activities, a subtask's first LLM call builds its branch
# and the call that ends it closes the branch (three round trips fewer per subtask).
FEWER_ROUND_TRIPS = "fewer-round-trips-1"

# A cancelled plan reads what its cancelled subtasks had spent (a local activity) before
# it ends, so their report rows give real call counts, usage and branch ids.
CANCELLED_SPEND = "cancelled-spend-1"
