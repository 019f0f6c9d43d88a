"""Topic trees: one summary tree per hot entity, beside the source trees.

``heat`` says how hot an entity is; ``plan`` pictures one topic and plans its next step; ``route`` drives the
steps under the write lock (archive, revive, which topics to route); ``query`` reads the entity index (a name
to its key, hot topics, a topic's view, the co-occurrence graph).

Each module is imported on first use (``topics.heat`` alone does not import the planner): a search reads
the heat and nothing else, and `vaultmem search` from a cold shell must not pay for the rest.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from vaultmem.topics import heat, plan, query, route

__all__ = ["heat", "plan", "query", "route"]


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return importlib.import_module(f"{__name__}.{name}")
