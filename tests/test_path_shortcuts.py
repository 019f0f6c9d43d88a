"""The per-row path helpers of reindex and the index split strings instead of building path objects: they
answer as the ``PurePosixPath`` forms they replace, normalised or not."""

from __future__ import annotations

from pathlib import PurePosixPath

import pytest

from vaultmem.admit import _parent
from vaultmem.layout import FRESH, SOURCES, in_sealed_level

PATHS = [
    "a.md",
    "sources/chat/_fresh/2026-03-01-x-abc.md",
    "sources/chat/01-topic/2026-03-01-x-abc.md",
    "sources/chat/01-topic/_summary.md",
    "sources/chat/01-topic/02-deeper/leaf.md",
    "sources/chat/01-topic",
    "sources/chat/01-topic/",
    "sources/chat/01-topic/.",
    "sources//chat/01-topic/x.md",
    "sources/chat/./01-topic/x.md",
    "./sources/chat/01-topic/x.md",
    "/sources/chat/01-topic/x.md",
    "sources/chat/01-topic//x.md",
    "Travel/Kyoto trip.md#0123456789ab",
    "notes/x.md",
    "",
    ".",
]


def _sealed(rel: str) -> bool:
    parts = PurePosixPath(rel).parts
    return len(parts) >= 4 and parts[0] == SOURCES and parts[2] != FRESH


@pytest.mark.parametrize("rel", PATHS)
def test_in_sealed_level_answers_as_the_path_object_form(rel: str) -> None:
    assert in_sealed_level(rel) == _sealed(rel)


@pytest.mark.parametrize("rel", [p for p in PATHS if p])
def test_parent_answers_as_the_path_object_form(rel: str) -> None:
    assert _parent(rel) == str(PurePosixPath(rel).parent)
