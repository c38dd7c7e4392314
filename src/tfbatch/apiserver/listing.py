"""List* operations' shared part: filters, sort order and NextToken paging as AWS does them.

A NextToken is opaque to clients; here it holds the sort position of the last item answered
(its sort value and name), so a page stays correct while resources are created or deleted
between calls (an offset would skip or repeat items).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from typing import Any

from tfbatch.apiserver.protocol import parse_timestamp, validation


def _encode(position: list[Any]) -> str:
    return base64.urlsafe_b64encode(json.dumps(position).encode()).decode()


def _decode(token: str) -> list[Any]:
    try:
        position = json.loads(base64.urlsafe_b64decode(token.encode()))
        if isinstance(position, list) and len(position) == 2:
            return position
    except ValueError:
        pass
    raise validation(f"Invalid pagination token: {token[:64]!r} was not returned by an earlier call")


def page(items: list[dict], params: dict, *, name_key: str, time_key: str = "CreationTime",
         status_key: str | None = None, sort_keys: dict[str, str] | None = None,
         default_sort: str = "CreationTime", default_order: str = "Descending",
         max_default: int = 10) -> tuple[list[dict], str | None]:
    """Filter ``items`` (Describe documents) by the common List* parameters; one page and its token."""
    chosen = []
    contains = params.get("NameContains")
    after, before = params.get("CreationTimeAfter"), params.get("CreationTimeBefore")
    mod_after, mod_before = params.get("LastModifiedTimeAfter"), params.get("LastModifiedTimeBefore")
    for item in items:
        if contains and contains.lower() not in item[name_key].lower():
            continue
        if after is not None and item[time_key] <= parse_timestamp(after).timestamp():
            continue
        if before is not None and item[time_key] >= parse_timestamp(before).timestamp():
            continue
        modified = item.get("LastModifiedTime", item[time_key])
        if mod_after is not None and modified <= parse_timestamp(mod_after).timestamp():
            continue
        if mod_before is not None and modified >= parse_timestamp(mod_before).timestamp():
            continue
        if status_key and params.get("StatusEquals") and item.get(status_key) != params["StatusEquals"]:
            continue
        chosen.append(item)
    fields = sort_keys or {"Name": name_key, "CreationTime": time_key}
    sort_field = fields.get(params.get("SortBy", default_sort), time_key)
    descending = params.get("SortOrder", default_order) == "Descending"

    def position(item: dict) -> list[Any]:
        return [item.get(sort_field), item[name_key].lower()]

    key: Callable[[dict], Any] = lambda item: tuple(position(item))  # noqa: E731
    chosen.sort(key=key, reverse=descending)
    if params.get("NextToken"):
        last = tuple(_decode(params["NextToken"]))
        chosen = [i for i in chosen if (key(i) < last if descending else key(i) > last)]
    limit = params.get("MaxResults", max_default)
    result = chosen[:limit]
    token = _encode(position(result[-1])) if len(chosen) > limit else None
    return result, token
