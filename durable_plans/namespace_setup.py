"""What a namespace needs for plans to be found: the search attributes, checked and added.

The attributes are defined in ``domain/search_attributes.py``; this is the part that talks
to a server about them:

* ``registered_attributes`` / ``check_search_attributes``: which are there (the worker
  asks at start, and tells its workflows whether to set them);
* ``setup_search_attributes``: register what is missing (``dplan setup``), idempotently.

It sits below the client layer so that ``plugin.py`` can call it without an arrow up the
module graph (``tests/unit/test_layers.py``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import (
    AddSearchAttributesRequest,
    ListSearchAttributesRequest,
)
from temporalio.client import Client
from temporalio.common import SearchAttributeIndexedValueType, SearchAttributeKey
from temporalio.service import RPCError

from durable_plans._errors import SearchAttributesUnavailable
from durable_plans.activities.log import get_logger
from durable_plans.domain import search_attributes as sa

__all__ = [
    "SearchAttributesUnavailable",
    "attribute_names",
    "check_search_attributes",
    "one_line",
    "registered_attributes",
    "setup_search_attributes",
]


async def registered_attributes(client: Client) -> dict[str, int]:
    """Custom search attributes of the client's namespace: name → ``IndexedValueType``."""
    try:
        response = await client.operator_service.list_search_attributes(
            ListSearchAttributesRequest(namespace=client.namespace)
        )
    except RPCError as err:
        raise SearchAttributesUnavailable(one_line(err.message)) from err
    return dict(response.custom_attributes)


async def check_search_attributes(client: Client) -> bool:
    """Whether every attribute of ``sa.ALL`` is registered; says what is missing otherwise.

    Called by each worker at start (``DurablePlansPlugin.run_worker``): its workflows set
    the attributes only when this is true, since setting an unregistered one fails the
    workflow task. Exactly one warning line when they are missing or cannot be checked,
    naming the fix; silence when all is well.
    """
    log = get_logger(component="worker")
    try:
        registered = await registered_attributes(client)
    except SearchAttributesUnavailable as err:
        log.warning(
            "worker.search_attributes_unchecked",
            namespace=client.namespace,
            reason=str(err),
            note="plans run without search attributes (run `dplan setup` if they are missing)",
        )
        return False
    missing = sa.missing_from(registered)
    if missing:
        log.warning(
            "worker.search_attributes_missing",
            namespace=client.namespace,
            missing=[key.name for key in missing],
            note=(
                "plans run without search attributes (not findable by status, goal or cost "
                "in `temporal workflow list --query`); register them with `dplan setup`"
            ),
        )
        return False
    return True


async def setup_search_attributes(client: Client) -> tuple[list[str], list[str]]:
    """Register the attributes the namespace lacks; ``(added, already there)`` by name.

    Idempotent: a second call adds nothing. An attribute registered under our name with
    another type cannot be fixed by adding, so it is an error that names it.
    """
    registered = await registered_attributes(client)
    wrong_type = [
        f"{key.name} is {_type_name(registered[key.name])}, expected {key.indexed_value_type.name}"
        for key in sa.ALL
        if key.name in registered and registered[key.name] != int(key.indexed_value_type)
    ]
    if wrong_type:
        raise SearchAttributesUnavailable(
            "registered with another type (remove them first): " + "; ".join(wrong_type)
        )
    to_add = [key for key in sa.ALL if key.name not in registered]
    if to_add:
        try:
            await client.operator_service.add_search_attributes(
                AddSearchAttributesRequest(
                    namespace=client.namespace,
                    search_attributes={
                        key.name: IndexedValueType.ValueType(int(key.indexed_value_type))
                        for key in to_add
                    },
                )
            )
        except RPCError as err:
            raise SearchAttributesUnavailable(one_line(err.message)) from err
    present = [key.name for key in sa.ALL if key.name in registered]
    return [key.name for key in to_add], present


def _type_name(value: int) -> str:
    try:
        return SearchAttributeIndexedValueType(value).name
    except ValueError:
        return f"type {value}"


def one_line(text: str) -> str:
    """A server's message on one line, cut to 300 characters."""
    return re.sub(r"\s+", " ", text).strip()[:300]


def attribute_names(keys: Sequence[SearchAttributeKey[Any]]) -> str:
    return ", ".join(key.name for key in keys)
