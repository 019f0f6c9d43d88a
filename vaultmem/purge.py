"""Purging a text from a vault (issue #20): what must go besides the leaf, history rewriting, the proof.

Owns the needles a purged text is searched by (its whole body and each line or sentence of 24 bytes
or more in UTF-8: 24 Latin letters, 8 Chinese characters; each also as JSON writes it with non-ASCII
escaped), the files outside the tree that may still hold it (copies in ``.trash/``, the
derived snapshots of other tombstones, ``.vaultmem/duplicates/``, damaged indexes set aside), wiping the
index's free pages and write-ahead log, rewriting a git history so no commit holds it (every ref, git
notes moved to the rewritten commits they annotate), and ``traces``:
every place under the vault directory that still does (files, git objects loose or packed and
reachable or not, ``chunks.db`` and its WAL). Destructive by design; ``Vault.purge`` drives it under the
write lock. Never prints.
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
import subprocess
import zlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vaultmem import fsio
from vaultmem.errors import GitError, InvalidInput
from vaultmem.layout import REVIEW, TOMBSTONES, Layout

MIN_NEEDLE = 24  # UTF-8 bytes: shorter lines or sentences are too common to prove anything ("ok, thanks!")
_SENTENCE_RE = re.compile(r"(?<=[.!?])\s+|(?<=[。！？；])\s*")
_FTS_TABLES = ("fts_words", "fts_trigram", "fts_nav_words", "fts_nav_trigram")


@dataclass(frozen=True)
class PurgeReport:
    id: str
    removed: tuple[str, ...] = ()  # vault-relative files removed besides the leaf
    rewritten: int = 0  # commits rewritten (``rewrite_history``)
    traces: tuple[str, ...] = ()  # where the text still is (empty: nowhere)
    notes: tuple[str, ...] = field(default=())

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "removed": list(self.removed),
            "rewritten_commits": self.rewritten,
            "traces": list(self.traces),
            "clean": not self.traces,
            "notes": list(self.notes),
        }


def needles(text: str) -> list[str]:
    """What proves the text is still somewhere: the whole body, and every line or sentence of it of
    ``MIN_NEEDLE`` characters or more (a summary quotes sentences, a digest lines)."""
    body = text.strip()
    out: dict[str, None] = {body: None} if body else {}
    for line in body.splitlines():
        for piece in (line.strip(), *_SENTENCE_RE.split(line.strip())):
            piece = piece.strip().lstrip("-*> ").strip()
            if _size(piece) >= MIN_NEEDLE:
                out.setdefault(piece, None)
    return [n for n in out if _size(n) >= min(MIN_NEEDLE, _size(body))]


def _size(text: str) -> int:
    return len(text.encode("utf-8"))


def _holds(data: bytes, encoded: Sequence[bytes]) -> bool:
    return any(n in data for n in encoded)


def _encoded(found: Sequence[str]) -> list[bytes]:
    """Each needle as UTF-8 and as JSON writes it (non-ASCII as ``\\uXXXX``, quotes escaped): the
    index's provenance, a sidecar or a tombstone note may hold it either way."""
    out: dict[bytes, None] = {}
    for n in found:
        out.setdefault(n.encode("utf-8"), None)
        for ascii_only in (True, False):
            out.setdefault(json.dumps(n, ensure_ascii=ascii_only)[1:-1].encode("utf-8"), None)
    return list(out)


def stray_copies(layout: Layout, found: Sequence[str]) -> list[Path]:
    """Files outside the tree that hold the text: anything under ``.trash/`` (tombstones of other
    leaves included), ``.vaultmem/duplicates/`` and damaged indexes set aside."""
    encoded = _encoded(found)
    places = [layout.root / ".trash", layout.state / "duplicates"]
    out = [p for base in places if base.is_dir() for p in sorted(base.rglob("*")) if p.is_file()]
    out += sorted(layout.state.glob("chunks.db.damaged-*"))
    return [p for p in out if not p.is_symlink() and _holds(p.read_bytes(), encoded)]


def scrub_review(layout: Layout, leaf_id: str, found: Sequence[str]) -> list[str]:
    """The review inbox after a purge: a proposal naming the leaf (or quoting it) goes; every other
    line of ``review/`` holding the text (the weekly log) goes. Returns the files changed or removed."""
    encoded = _encoded(found)
    base = layout.root / REVIEW
    changed = []
    for path in sorted(base.rglob("*.md")) if base.is_dir() else []:
        if path.is_symlink() or not path.is_file():
            continue
        data = path.read_bytes()
        names_it = path.parent == base and leaf_id in path.name
        if names_it or (path.parent == base and _holds(data, encoded)):
            fsio.remove_file(layout.root, path)
        elif _holds(data, encoded):
            kept = b"".join(line for line in data.splitlines(keepends=True) if not _holds(line, encoded))
            fsio.atomic_write(path, kept, root=layout.root, expected=fsio.sha256_bytes(data))
        else:
            continue
        changed.append(layout.rel(path))
    return changed


def remove_copies(layout: Layout, paths: Iterable[Path]) -> list[str]:
    """Remove the copies; a tombstone's derived snapshot also leaves its ``tombstone.json`` (a restore
    of that leaf then re-summarises instead of putting it back)."""
    removed = []
    tombs = layout.root / TOMBSTONES
    for path in paths:
        fsio.remove_file(layout.root, path)
        removed.append(layout.rel(path))
        parts = path.relative_to(tombs).parts if path.is_relative_to(tombs) else ()
        if len(parts) > 2 and parts[1] == "derived":
            note = tombs / parts[0] / "tombstone.json"
            data = json.loads(note.read_text(encoding="utf-8"))
            data.get("derived", {}).pop("/".join(parts[2:]), None)
            text = json.dumps(data, indent=1, ensure_ascii=False, sort_keys=True) + "\n"
            fsio.atomic_write(note, text.encode("utf-8"), root=layout.root, expected=fsio.file_hash(note))
        up = path.parent
        while up != layout.root and fsio.remove_empty_dir(layout.root, up):
            up = up.parent
    return removed


def wipe_index(conn: sqlite3.Connection) -> None:
    """Leave no deleted text in ``chunks.db``: full-text indexes merged (their segments keep old
    postings), freed pages rebuilt away (``VACUUM``), the write-ahead log emptied and truncated."""
    for table in _FTS_TABLES:
        try:
            conn.execute(f"INSERT INTO {table}({table}) VALUES ('optimize')")
        except sqlite3.OperationalError:
            continue  # an index made before that table existed
    conn.commit()
    conn.execute("VACUUM")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()


# -- git ---------------------------------------------------------------------------------------------------
def _git(root: Path, *args: str, data: bytes | None = None) -> bytes:
    done = subprocess.run(["git", "-C", str(root), *args], input=data, capture_output=True, check=False)
    if done.returncode != 0:
        line = done.stderr.decode("utf-8", "replace").strip().splitlines()
        raise GitError(f"git {args[0]} failed: {line[-1] if line else done.returncode}")
    return done.stdout


def is_repo_top(root: Path) -> bool:
    return (root / ".git").exists()


def upstreams(root: Path) -> list[str]:
    """The remotes this repository knows (a history pushed anywhere cannot be unpushed)."""
    return _git(root, "remote").decode().split()


def _all_blobs(root: Path, kinds: tuple[str, ...] = ("blob",)) -> dict[str, bytes]:
    """Every object of ``kinds`` in the repository (loose or packed, reachable or not), by id."""
    listing = _git(root, "cat-file", "--batch-all-objects", "--batch-check=%(objectname) %(objecttype)")
    ids = [line.split()[0] for line in listing.decode().splitlines() if line.split()[1] in kinds]
    if not ids:
        return {}
    raw = _git(root, "cat-file", "--batch", data=("\n".join(ids) + "\n").encode())
    out: dict[str, bytes] = {}
    pos = 0
    while pos < len(raw):
        end = raw.index(b"\n", pos)
        sha, _kind, size = raw[pos:end].decode().split()
        start = end + 1
        out[sha] = raw[start : start + int(size)]
        pos = start + int(size) + 1
    return out


def rewrite_history(root: Path, found: Sequence[str], drop_paths: Sequence[str]) -> int:
    """Rewrite every commit any ref reaches (branches, tags, remote-tracking refs; notes after them) so no
    blob holds the text: files at ``drop_paths``
    go, lines holding a needle in other files go. Then the reflogs are expired and unreachable objects
    pruned (``git gc --prune=now``). Returns the number of commits rewritten."""
    encoded = _encoded(found)
    blobs = _all_blobs(root)
    bad = {sha for sha, data in blobs.items() if _holds(data, encoded)}
    if not bad and not any(_holds(d, encoded) for d in _all_blobs(root, ("commit", "tag")).values()):
        return 0
    new_blob: dict[str, str | None] = {}
    new_tree: dict[str, str] = {}
    drop = set(drop_paths)

    def clean_blob(sha: str, path: str) -> str | None:
        if path in drop or path.startswith(tuple(p + "/" for p in drop)):
            return None
        if sha not in new_blob:
            kept = b"".join(
                line for line in blobs[sha].splitlines(keepends=True) if not _holds(line, encoded)
            )
            new_blob[sha] = _git(root, "hash-object", "-w", "--stdin", data=kept).decode().strip()
        return new_blob[sha]

    def clean_tree(sha: str, prefix: str) -> str:
        key = f"{sha}:{prefix}"
        if key in new_tree:
            return new_tree[key]
        entries = []
        changed = False
        for line in _git(root, "ls-tree", "-z", sha).split(b"\0"):
            if not line:
                continue
            meta, name = line.split(b"\t", 1)
            mode, kind, obj = meta.decode().split()
            path = prefix + name.decode("utf-8", "surrogateescape")
            if kind == "tree":
                rewritten = clean_tree(obj, path + "/")
                changed |= rewritten != obj
                obj = rewritten
            elif kind == "blob" and (obj in bad or path in drop):
                cleaned = clean_blob(obj, path)
                changed = True
                if cleaned is None:
                    continue
                obj = cleaned
            entries.append(f"{mode} {kind} {obj}\t".encode() + name)
        result = sha
        if changed:
            result = _git(root, "mktree", "-z", data=b"".join(e + b"\0" for e in entries)).decode().strip()
        new_tree[key] = result
        return result

    # Every commit any ref reaches (branches, tags, remote-tracking refs, anything else) but git notes,
    # whose commits annotate the others by name: they are rewritten after them (``_renote``).
    commits = (
        _git(root, "rev-list", "--topo-order", "--reverse", "--exclude=refs/notes/*", "--all")
        .decode()
        .split()
    )
    mapping: dict[str, str] = {}
    rewritten = 0
    for commit in commits:
        raw = _git(root, "cat-file", "commit", commit)
        head, _, message = raw.partition(b"\n\n")
        lines = head.split(b"\n")
        tree = lines[0].split()[1].decode()
        out = [f"tree {clean_tree(tree, '')}".encode()]
        dropping = False  # inside a header whose continuation lines go with it
        for line in lines[1:]:
            if line.startswith(b" "):
                if not dropping:
                    out.append(line)
                continue
            dropping = line.startswith(_UNSIGNABLE)  # a signature cannot survive a rewrite
            if line.startswith(b"parent "):
                parent = line.split()[1].decode()
                out.append(f"parent {mapping.get(parent, parent)}".encode())
            elif not dropping:
                out.append(line)  # author, committer, encoding
        body = b"\n".join(out) + b"\n\n" + _without(message, encoded)
        new = _git(root, "hash-object", "-t", "commit", "-w", "--stdin", data=body).decode().strip()
        mapping[commit] = new
        rewritten += new != commit
    refs = _git(root, "for-each-ref", "--format=%(objectname) %(objecttype) %(refname)")
    for ref_line in refs.decode().splitlines():
        tip, kind, ref = ref_line.split()
        if ref.startswith("refs/notes/"):
            new_tip = _renote(
                root, tip, mapping, lambda obj, path: clean_blob(obj, path) if obj in bad else obj
            )
        elif kind == "tag":
            new_tip = _retag(root, tip, mapping, encoded)
        else:
            new_tip = mapping.get(tip, tip)
        if new_tip != tip:
            _git(root, "update-ref", ref, new_tip, tip)
    for name in ("ORIG_HEAD", "FETCH_HEAD", "refs/stash"):
        if _has_ref(root, name):
            _git(root, "update-ref", "-d", name)
    _git(root, "reflog", "expire", "--expire=now", "--all")
    _git(root, "gc", "-q", "--prune=now")
    return rewritten


_UNSIGNABLE = (b"gpgsig", b"gpgsig-sha256", b"mergetag")


def _renote(
    root: Path, tip: str, mapping: dict[str, str], clean_blob: Callable[[str, str], str | None]
) -> str:
    """A notes ref's history rewritten: each note moved to the rewritten commit it annotates (notes are
    named by the object they annotate) and cleaned like any file; messages less the lines holding the
    text. Each notes tree is written flat (git reads flat and fanned-out notes alike)."""
    done: dict[str, str] = {}
    for commit in _git(root, "rev-list", "--topo-order", "--reverse", tip).decode().split():
        raw = _git(root, "cat-file", "commit", commit)
        head, _, message = raw.partition(b"\n\n")
        lines = head.split(b"\n")
        entries = []
        for line in _git(root, "ls-tree", "-r", "-z", lines[0].split()[1].decode()).split(b"\0"):
            if not line:
                continue
            meta, name = line.split(b"\t", 1)
            mode, kind, obj = meta.decode().split()
            path = name.decode("utf-8", "surrogateescape")
            target = path.replace("/", "")
            if kind == "blob":
                cleaned = clean_blob(obj, path)
                if cleaned is None:
                    continue
                obj = cleaned
            entries.append(f"{mode} {kind} {obj}\t".encode() + mapping.get(target, target).encode())
        tree = _git(root, "mktree", "-z", data=b"".join(e + b"\0" for e in entries)).decode().strip()
        out = [f"tree {tree}".encode()]
        for line in lines[1:]:
            if line.startswith(b"parent "):
                parent = line.split()[1].decode()
                out.append(f"parent {done.get(parent, parent)}".encode())
            elif not line.startswith((b" ", *_UNSIGNABLE)):
                out.append(line)
        body = b"\n".join(out) + b"\n\n" + message
        done[commit] = _git(root, "hash-object", "-t", "commit", "-w", "--stdin", data=body).decode().strip()
    return done.get(tip, tip)


def _without(data: bytes, encoded: Sequence[bytes]) -> bytes:
    """``data`` without its lines holding a needle (a commit or tag message that quoted the text)."""
    return b"".join(line for line in data.splitlines(keepends=True) if not _holds(line, encoded))


def _retag(root: Path, sha: str, mapping: dict[str, str], encoded: Sequence[bytes]) -> str:
    """An annotated tag pointing at the rewritten commit (or tag): same name, tagger and message less
    the lines holding the text; its signature cannot survive (it signed the old object)."""
    raw = _git(root, "cat-file", "tag", sha)
    head, _, message = raw.partition(b"\n\n")
    lines = head.split(b"\n")
    target = lines[0].split()[1].decode()
    kind = lines[1].split()[1].decode() if len(lines) > 1 else "commit"
    new_target = _retag(root, target, mapping, encoded) if kind == "tag" else mapping.get(target, target)
    cut = message.find(b"-----BEGIN ")  # an inline PGP or SSH signature ends the message
    message = _without(message if cut < 0 else message[:cut], encoded)
    if new_target == target and message == raw.partition(b"\n\n")[2]:
        return sha
    body = b"\n".join([f"object {new_target}".encode(), *lines[1:]]) + b"\n\n" + message
    return _git(root, "hash-object", "-t", "tag", "-w", "--stdin", data=body).decode().strip()


def _has_ref(root: Path, ref: str) -> bool:
    return (
        subprocess.run(
            ["git", "-C", str(root), "rev-parse", "--verify", "--quiet", ref],
            capture_output=True,
            check=False,
        ).returncode
        == 0
    )


# -- the proof -----------------------------------------------------------------------------------------
def traces(root: Path, found: Sequence[str]) -> list[str]:
    """Every place under ``root`` that holds one of the needles: a file's bytes (``chunks.db``, its
    ``-wal`` and every Markdown, JSON or other file), a loose git object (decompressed), or a git object
    of any pack, reachable or not (through ``git cat-file --batch-all-objects``). Empty: nowhere."""
    if not found:
        raise InvalidInput("nothing to look for: the text is empty")
    encoded = _encoded(found)
    out = []
    git_dir = root / ".git"
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            path = Path(dirpath) / name
            if path.is_symlink():
                continue
            data = path.read_bytes()
            rel = path.relative_to(root).as_posix()
            if _holds(data, encoded):
                out.append(rel)
            elif path.parent.parent == git_dir / "objects" and len(name) == 38:
                try:
                    if _holds(zlib.decompress(data), encoded):
                        out.append(f"{rel} (git object {path.parent.name}{name})")
                except zlib.error:
                    continue
    if git_dir.is_dir():
        for sha, data in _all_blobs(root, ("blob", "commit", "tag")).items():
            if _holds(data, encoded):
                out.append(f".git object {sha}")
    return sorted(dict.fromkeys(out))
