"""A workflow's start argument, taken raw so that no input can stall the workflow.

When a workflow's run method is typed with a model, the SDK decodes the argument before
any workflow code runs; an argument that does not decode (not JSON, an unknown payload
encoding, no argument at all) fails the workflow *task*, which Temporal retries forever:
the workflow stays Running and nobody is told why. Typed ``RawValue`` instead, the
argument always reaches the workflow, which decodes it here and fails itself, at once and
non-retryably, naming the problem.
"""

from __future__ import annotations

from typing import Any, Final

from temporalio import workflow
from temporalio.api.common.v1 import Payload
from temporalio.common import RawValue

with workflow.unsafe.imports_passed_through():
    from pydantic import ValidationError

    from durable_plans._errors import InvalidInput
    from durable_plans.domain.plan_loader import MAX_PLAN_BYTES
    from durable_plans.domain.text_formats import one_line

__all__ = ["NO_INPUT", "decode_input"]

# The default of a run method's raw argument: a start without arguments reaches the
# workflow as this payload (no encoding), instead of failing the call with a TypeError.
NO_INPUT: Final = RawValue(Payload())

_DETAIL_LIMIT: Final = 300


def decode_input(raw: RawValue, *, what: str) -> Any:
    """The JSON value in ``raw``, decoded by the workflow's payload converter.

    ``InvalidInput`` (one problem line) when there is no argument, it is larger than any
    input we accept, or it does not decode. ``what`` names the expected input in the
    message ("the plan file's JSON object").
    """
    payload = raw.payload
    encoding = payload.metadata.get("encoding", b"").decode("utf-8", "replace")
    if not encoding:
        raise InvalidInput([f"no input: start the workflow with {what} as its one argument"])
    size = payload.ByteSize()
    if size > MAX_PLAN_BYTES:
        raise InvalidInput([f"the input is too large ({size} bytes, limit {MAX_PLAN_BYTES})"])
    try:
        return workflow.payload_converter().from_payloads([payload])[0]
    except Exception as err:  # any decoding failure is the sender's; say which
        cause = err.__cause__ or err
        if isinstance(cause, ValidationError) and cause.errors():
            # pydantic's JSON parser: its first error says where ("... at line 1 column 15").
            cause_text = cause.errors()[0]["msg"]
        else:
            cause_text = str(cause)
        detail = one_line(cause_text)[:_DETAIL_LIMIT]
        raise InvalidInput(
            [f"the input cannot be decoded as JSON (encoding {encoding!r}): {detail}"]
        ) from None
