"""The stream a workflow hosts for its LLM calls' live text (``domain/streaming.py``).

``temporalio.contrib.workflow_streams`` keeps the stream in the workflow: its LLM
activities publish batches by signal, watchers long-poll it by update. Two rules keep it
from getting in the way of the workflow's own life:

* Before the workflow ends or continues as new, ``release`` lets go of the watchers'
  waiting polls: a poll is an update handler, and one left waiting would hold up
  continue-as-new (which waits for every handler) or end the run with a handler unfinished.
* Only the offset crosses continue-as-new, not the items: a watcher that follows the
  chain keeps reading from where it was, and the carried input stays small. The text
  itself is a display; the stored answers are the record.
"""

from __future__ import annotations

from temporalio import workflow
from temporalio.contrib.workflow_streams import WorkflowStream, WorkflowStreamState

__all__ = ["carried_stream", "release"]


def carried_stream(offset: int) -> WorkflowStreamState | None:
    """The state to start a run's stream with: empty, numbered on from ``offset``."""
    if offset <= 0:
        return None
    return WorkflowStreamState(log=[], base_offset=offset, publishers={})


async def release(stream: WorkflowStream) -> None:
    """Let waiting watchers go and wait until their polls have returned."""
    stream.detach_pollers()
    await workflow.wait_condition(workflow.all_handlers_finished)
