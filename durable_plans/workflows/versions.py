"""Patch ids for workflow changes that running workflows must survive: none since 0.2.0.

A worker replays a workflow's history against its code; a change in the commands a
workflow issues makes every run started on the previous code fail with a
non-determinism error if it replays on the new code. 0.2.0 is the baseline: the
workflows carry no branch for any older history, and ``tests/histories/`` holds the
baseline's shape, which the suite replays.

The rule for the next change:

* **With Worker Versioning** (``DPLAN_DEPLOYMENT`` set): a workflow change ships as a new
  build (``DPLAN_BUILD_ID``), with no patch. Plans and their subtasks are pinned to the
  build they started on and finish there; conversations move to the current build when
  they continue as new, so a new build must still accept the ``SessionInput`` the last
  one continued with.
* **Unversioned** (``DPLAN_DEPLOYMENT`` unset, the embedded demo): drain the workers
  first (no run open when the new code starts), or put the change behind
  ``workflow.patched(ID)`` with its id listed here, and record its shape in a new
  ``tests/histories/`` directory beside the baseline's (``tests/histories/README.md``).

A patch is asked in a run's first activation, before any local activity: a replay may hand
a local activity's result over one workflow task earlier than the run did, and a patch
asked right after it would then be answered otherwise.

What a worker decides for a plan run from its own settings (local LLM calls, whether the
``Dplan*`` search attributes are registered) is no code version: the run asks its worker
in a local activity (``worker_facts``, ``domain.contracts.WorkerFacts``) and the history
records the answer.
"""

from __future__ import annotations

# The patch ids the workflows ask (``workflow.patched``). None since the 0.2.0 baseline.
PATCH_IDS: frozenset[str] = frozenset()
