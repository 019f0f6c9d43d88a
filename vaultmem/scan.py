"""Walking a vault's files: which Markdown files are candidate nodes, which links leave the vault.

Owns the traversal rules shared by reindex, check and (later) the watcher: engine state, editor and VCS
folders and temp files are ignored; symlinks are never followed out of the vault. Read-only.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from vaultmem import fsio, index, leaffile
from vaultmem.layout import SUMMARY_NAME, Layout, is_ignored
from vaultmem.model import Leaf
from vaultmem.summaryfile import SummaryNode, parse_summary


@dataclass(frozen=True)
class ScanEntry:
    rel: str
    is_summary: bool


@dataclass(frozen=True)
class Scan:
    entries: tuple[ScanEntry, ...]
    outside_links: tuple[str, ...]  # symlinks that resolve outside the vault (never followed)


def _leaves(root: Path, link: Path) -> bool:
    """True when a symlink resolves outside the (resolved) vault root."""
    target = link.resolve()
    return target != root and root not in target.parents


def scan(layout: Layout) -> Scan:
    root = layout.root.resolve()
    entries: list[ScanEntry] = []
    outside: list[str] = []
    for dirpath, dirnames, filenames in os.walk(layout.root, followlinks=False):
        base = Path(dirpath)
        rel_dir = "" if base == layout.root else base.relative_to(layout.root).as_posix()
        kept = []
        for d in sorted(dirnames):
            rel = f"{rel_dir}/{d}" if rel_dir else d
            if is_ignored(rel):
                continue
            if (base / d).is_symlink():
                if _leaves(root, base / d):
                    outside.append(rel)
                continue  # links inside the vault would index files twice
            kept.append(d)
        dirnames[:] = kept
        for name in sorted(filenames):
            rel = f"{rel_dir}/{name}" if rel_dir else name
            if not name.endswith(".md") or is_ignored(rel):
                continue
            if (base / name).is_symlink():
                if _leaves(root, base / name):
                    outside.append(rel)
                continue
            entries.append(ScanEntry(rel, name == SUMMARY_NAME))
    return Scan(tuple(entries), tuple(outside))


def leaf_candidates(layout: Layout) -> Iterator[str]:
    for entry in scan(layout).entries:
        if not entry.is_summary:
            yield entry.rel


def read_leaf_file(layout: Layout, rel: str, max_bytes: int) -> tuple[Leaf, index.FileStamp]:
    """Read and validate one leaf file from disk (FrontmatterError / InvalidInput when it is not one)."""
    text, digest, st = fsio.read_text_stat(layout.abs(rel), max_bytes)
    leaf, _doc = leaffile.parse_leaf(text, rel, blocks=False)
    return leaf, index.FileStamp(digest, st.st_size, st.st_mtime_ns)


def read_summary_file(layout: Layout, rel: str, max_bytes: int) -> tuple[SummaryNode, index.FileStamp]:
    """Read and validate one ``_summary.md`` (FrontmatterError / InvalidInput when it is not one)."""
    path = layout.abs(rel)
    text, digest = fsio.read_text_guarded(path, max_bytes)
    st = path.stat()
    node, _doc = parse_summary(text, rel)
    return node, index.FileStamp(digest, st.st_size, st.st_mtime_ns)
