"""An accepted revision of a running plan (``domain/revisions.py``), as reports list it.

Apart from the revision's rules so that the report's model can hold it without importing
the plan loader. Pure and passed through the workflow sandbox.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, NonNegativeFloat

__all__ = ["Revision", "Revisions"]


class Revision(BaseModel):
    """An accepted revision, as the report lists it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    number: int = Field(ge=1)  # the plan's first revision is 1
    at_s: NonNegativeFloat  # workflow time (Unix seconds)
    by: str = ""
    subtask: str = ""
    reason: str = ""
    added: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()
    key: str = ""  # the request's key (an agent's tool call), if it had one

    def describe(self) -> str:
        """``added x, y; removed z``: what changed, for the log and ``dplan status``."""
        parts = []
        if self.added:
            parts.append("added " + ", ".join(self.added))
        if self.removed:
            parts.append("removed " + ", ".join(self.removed))
        return "; ".join(parts)


def _none_is_empty(value: object) -> object:
    return () if value is None else value


Revisions = Annotated[tuple[Revision, ...], BeforeValidator(_none_is_empty)]
"""A plan's revisions, oldest first; empty (or null, as Temporal's CLI shows an empty list)."""
