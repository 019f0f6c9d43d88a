"""What the agent tools do, over the public ``Vault`` API: how memory is shown to a model, and the edits
an agent may make. No MCP here: the MCP server (``mcpserver``) wires these to its tools, and any other
adapter (OpenAI function calling, a plain loop) can call them the same way.

Owns the rendering of recalled memory for a model: every piece of memory text inside the ``<memory>``
frame, ``frame.neutralise``d, under a provenance line (id, kind, time, source, path, and the validity
keys ``supersedes`` / ``superseded_by`` when a leaf has them); the paths an agent may name (relative to
the vault, confined to it); and the editor's operations (edit with a hash precondition, move, forget
with a copy in ``.trash/``), each one ``Vault.operation`` whose commit names the client and the reason.
Raises ``VaultError``s; never prints.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

from vaultmem import agentio, fsio, index
from vaultmem.errors import InvalidInput, UnsafePath, VaultError
from vaultmem.frame import CLOSE, OPEN, neutralise
from vaultmem.layout import TOMBSTONES, note_of
from vaultmem.model import LEAF_ID_RE, SUMMARY_ID_RE, Leaf, format_ts
from vaultmem.redact import scrub
from vaultmem.tokens import count_tokens

if TYPE_CHECKING:
    from vaultmem.search import Hit
    from vaultmem.vault import Vault

READ_NODE_MAX_CHILDREN = 50
BROWSE_MAX_NODES = 80
BROWSE_MAX_LEAVES = 12  # leaves listed per level before "... N more"
NOTE_SUFFIXES = (".md", ".txt")


# -- how memory is shown to a model -----------------------------------------------------------------
def _when(ts: str | None) -> str:
    return ts or "undated"


def provenance_line(
    n: int | None, node_id: str, kind: str, ts: str | None, source: str, path: str, extra: Sequence[str] = ()
) -> str:
    """``[n] id · kind · time · source · path`` (+ extras): where a piece of memory comes from."""
    head = f"[{n}] " if n is not None else ""
    parts = [f"id {node_id}", kind, _when(ts), f"source {source}", f"path {path}", *extra]
    return neutralise(head + " · ".join(p for p in parts if p))


def document_origin(meta: Mapping[str, Any]) -> str:
    """Where a document leaf's text is in its file: ``from Plugins/Canvas.md › Use it › Keyboard`` (a
    note's vault path, else the ingested file's path); "" for a leaf that is not a document section."""
    where = meta.get("note") or meta.get("file")
    if not where or "heading_path" not in meta:
        return ""
    heading = str(meta.get("heading_path") or "").replace(" > ", " › ")
    return f"from {where}" + (f" › {heading}" if heading else "")


def framed(sections: Sequence[str], empty: str) -> str:
    """Pieces of memory (each already neutralised) inside the frame, or ``empty`` when there are none."""
    if not sections:
        return empty
    return f"{OPEN}\n" + "\n\n".join(sections) + f"\n{CLOSE}"


def validity(vault: Vault, rel: str) -> list[str]:
    """What a leaf's file says of its versions (``supersedes`` / ``superseded_by``, issue #20's keys)."""
    from vaultmem import frontmatter

    try:
        data = vault.layout.abs(rel).read_bytes()
        if b"supersede" not in data:  # most leaves: no YAML to parse
            return []
        meta = frontmatter.split(data.decode("utf-8"), where=rel).meta
    except (OSError, UnicodeDecodeError, VaultError):
        return []
    out = []
    for key, label in ((agentio.SUPERSEDED_BY, "superseded by"), (agentio.SUPERSEDES, "supersedes")):
        ids = agentio.id_list(meta.get(key))
        if ids:
            out.append(f"{label} {', '.join(ids)}")
    return out


def search_text(
    vault: Vault,
    query: str,
    limit: int = 8,
    *,
    source: str | None = None,
    since: str | None = None,
    until: str | None = None,
    as_of: str | None = None,
    include_superseded: bool = False,
) -> str:
    """``Vault.search``, each hit framed with its provenance."""
    hits = vault.search(
        query,
        limit,
        source=source,
        since=since,
        until=until,
        as_of=as_of,
        include_superseded=include_superseded,
    )
    return render_hits(vault, hits)


def render_hits(vault: Vault, hits: Sequence[Hit]) -> str:
    sections = []
    for n, hit in enumerate(hits, 1):
        extra = [
            *(["weak match"] if hit.weak else []),
            *(validity(vault, hit.path) if hit.kind == "leaf" else []),
            document_origin(hit.extra) if hit.kind == "leaf" else "",
        ]
        who = hit.speaker or hit.role
        body = " ".join(hit.text.split())
        text = neutralise(f"{who}: {body}" if who and hit.kind == "leaf" else body)
        sections.append(
            provenance_line(n, hit.id, hit.kind, hit.ts, hit.source, hit.path, extra) + "\n" + text
        )
    return framed(sections, "no memories match")


def context_text(
    vault: Vault,
    query: str,
    budget: int = 1024,
    source: str | None = None,
    *,
    as_of: str | None = None,
    include_superseded: bool = False,
) -> str:
    """``Vault.context`` with the provenance of each item inside the frame, the whole within ``budget``:
    when the sources do not fit beside the text, the lowest-ranked items go (re-rendered, never cut)."""
    from vaultmem.context import assemble

    ctx = vault.context(query, budget, source=source, as_of=as_of, include_superseded=include_superseded)
    if not ctx.items:
        return "nothing relevant remembered"

    def block(n: int) -> str:
        items = ctx.items[:n]
        text = ctx.text if n == len(ctx.items) else assemble(query, [i.hit for i in items], 1 << 30).text
        # Compact, in the order the lines read (time): id, time, folder (the file in it ends in -<id>.md).
        lines = [
            neutralise(
                f"- {i.hit.id} {_when(i.hit.ts)} {i.hit.path.rsplit('/', 1)[0]}/"
                + (
                    f" ({origin})"
                    if i.hit.kind == "leaf" and (origin := document_origin(i.hit.extra))
                    else ""
                )
            )
            for i in sorted(items, key=lambda i: (i.hit.ts or "", i.hit.path))
        ]
        weak = "\n(nothing closely related: weak matches only)" if all(i.hit.weak for i in items) else ""
        return (
            text[: -len(CLOSE)]
            + "sources (id, time, folder; `read` an id for the whole memory):\n"
            + "\n".join(lines)
            + f"\n{CLOSE}{weak}"
        )

    low, high = 0, len(ctx.items)  # the most top-ranked items whose block fits
    while low < high:
        mid = (low + high + 1) // 2
        if count_tokens(block(mid)) <= budget:
            low = mid
        else:
            high = mid - 1
    if low == 0:
        raise InvalidInput(
            f"a budget of {budget} tokens is too small for one memory with its source; give more"
        )
    return block(low)


# -- paths an agent may name ------------------------------------------------------------------------
def vault_file(vault: Vault, ref: str) -> tuple[str, Path]:
    """A vault-relative path an agent gave, confined to the vault: no absolute paths, no ``..``, no hidden
    or engine folders, no symlink leading out. Returns ``(rel, absolute path)``."""
    raw = ref.strip()
    if not raw or "\x00" in raw or "\\" in raw:
        raise UnsafePath(f"invalid path {ref!r}: use a path relative to the vault, with '/'")
    pure = PurePosixPath(raw)
    if pure.is_absolute() or raw.startswith("~") or (len(raw) > 1 and raw[1] == ":"):
        raise UnsafePath(
            f"{ref!r} is an absolute path; give a path relative to the vault (sources/..., notes/...)"
        )
    if any(part in ("..", ".") for part in pure.parts) or any(p.startswith(".") for p in pure.parts):
        raise UnsafePath(f"{ref!r} leaves the vault or names a hidden or engine folder; refused")
    path = fsio.ensure_inside(vault.layout.root, vault.layout.root / pure)
    return pure.as_posix(), path


# -- what the tools do ------------------------------------------------------------------------------
def read_text(vault: Vault, ref: str) -> str:
    """A node by id or path (a leaf with its provenance, a level with its children), or a note."""
    from vaultmem.leaffile import content_hash

    ref = ref.strip()
    if LEAF_ID_RE.match(ref) or SUMMARY_ID_RE.match(ref):
        node = vault.fetch([ref])[0]
    else:
        rel, path = vault_file(vault, ref)
        node_id = vault.node_at(rel)
        if node_id is None:
            return read_note(vault, rel, path)
        node = vault.fetch([node_id])[0]
    if isinstance(node, Leaf):
        extra = [f"session {node.session}" if node.session else "", f"status {node.status.value}"]
        extra += [f"{k} {v}" for k, v in node.meta.items() if v]
        extra += validity(vault, node.path)
        extra.append(f"hash {content_hash(node.text)}")
        who = node.speaker or node.role
        head = provenance_line(None, node.id, "leaf", format_ts(node.ts), node.source, node.path, extra)
        return framed([head + "\n" + neutralise(f"{who}: {node.text}" if who else node.text)], "")
    span = " – ".join(dict.fromkeys(t[:10] for t in (_iso(node.earliest), _iso(node.latest)) if t))
    extra = [f"title {node.title}", f"{node.descendants} leaves", span, f"hash {content_hash(node.text)}"]
    if node.stale:
        extra.append("stale (re-summarised at the next compact)")
    head = provenance_line(None, node.id, "summary", _iso(node.earliest), node.source, node.path, extra)
    kids = vault.drill_down(node.id)
    lines = [child_line(k) for k in kids[:READ_NODE_MAX_CHILDREN]]
    if len(kids) > READ_NODE_MAX_CHILDREN:
        lines.append(f"... {len(kids) - READ_NODE_MAX_CHILDREN} more (browse it)")
    children = "children:\n" + "\n".join(lines) if lines else "children: none"
    return framed([head + "\n" + neutralise(node.searchable) + "\n\n" + neutralise(children)], "")


def _iso(dt: datetime | None) -> str | None:
    return format_ts(dt)


def read_note(vault: Vault, rel: str, path: Path) -> str:
    """A Markdown file of the vault that is not a node (a note, a memory-tool file)."""
    if not path.is_file() or path.suffix.lower() not in NOTE_SUFFIXES:
        raise InvalidInput(f"no memory and no note at {rel}; `search` or `browse` find what the vault holds")
    text, _digest = fsio.read_text_guarded(path, vault.config.max_file_bytes)
    mtime = datetime.fromtimestamp(path.stat().st_mtime, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    head = provenance_line(None, "-", "note", mtime, rel.split("/", 1)[0], rel)
    # A note is a person's file: a secret they typed in it is not handed to a model.
    return framed([head + "\n" + neutralise(scrub(text.strip()))], "")


def child_line(node: Any) -> str:
    if node.kind == "summary":
        span = f"{(node.ts or '')[:10]}..{(node.ts_end or '')[:10]}"
        return f"- {node.id} level · {node.title} · {node.descendants} leaves · {span}"
    return f"- {node.id} leaf · {(node.ts or 'undated')[:10]} · {node.line()[:120]}"


def browse_text(vault: Vault, node_id: str | None = None, depth: int = 1) -> str:
    """The tree from a level (every source's top for None), ``depth`` levels unfolded."""
    lines: list[str] = []

    def walk(kids: Sequence[Any], level: int, unfold: int) -> None:
        leaves = 0
        for n, kid in enumerate(kids):
            if len(lines) >= BROWSE_MAX_NODES:
                lines.append("  " * level + "- ... more: browse a level for the rest")
                return
            if kid.kind == "leaf":
                leaves += 1
                if leaves > BROWSE_MAX_LEAVES:
                    rest = sum(1 for k in kids[n:] if k.kind == "leaf")
                    lines.append("  " * level + f"- ... {rest} more leaves")
                    return
            lines.append("  " * level + child_line(kid))
            if kid.kind == "summary" and unfold > 1:
                walk(vault.drill_down(kid.id), level + 1, unfold - 1)

    kids = vault.drill_down(node_id)
    if node_id is None:  # every source's top: one heading per source
        by_source: dict[str, list[Any]] = {}
        for kid in kids:
            by_source.setdefault(kid.path.split("/")[1], []).append(kid)
        for source, group in by_source.items():
            lines.append(f"source {source}:")
            walk(group, 1, depth)
    else:
        walk(kids, 0, depth)
    if not lines:
        return "no children" if node_id else "the vault is empty"
    return framed([neutralise("\n".join(lines))], "")


def recent_text(vault: Vault, day: str | None = None, period: str = "day") -> str:
    """The digest of a day (or its week or month) and the memories it lists. A read: a digest not
    written yet is built in memory, never written (its job, queued with the day's leaves, writes it)."""
    nodes = vault.global_digest(day, period=period, write=False)
    if not nodes:
        return f"nothing was remembered then ({day or 'today'})"
    node = nodes[0]
    links = [f"- {c.label}" for c in node.children][:60]
    head = provenance_line(
        None, node.id, f"digest of a {period}", _iso(node.earliest), node.source, node.path
    )
    body = neutralise(node.searchable + ("\n\nmemories:\n" + "\n".join(links) if links else ""))
    return framed([head + "\n" + body], "")


def topic_text(vault: Vault, name: str) -> str:
    """What the vault knows about one entity: its topic summary, key facts and latest leaves."""
    view = vault.topic(name)
    e = view.entity
    head = neutralise(
        f"topic {e.name} · {e.key} · {e.leaves} leaves in {e.sources} sources · seen"
        f" {(e.first_seen or '-')[:10]}..{(e.last_seen or '-')[:10]}"
        + (f" · path {e.topic}" if e.topic else "")
    )
    sections = [head + ("\n" + neutralise(view.summary) if view.summary else "")]
    for title, leaves in (("key facts", view.facts), ("latest", view.recent)):
        for leaf in leaves:
            who = leaf.speaker or leaf.role
            line = provenance_line(None, leaf.id, title, format_ts(leaf.ts), leaf.source, leaf.path)
            sections.append(line + "\n" + neutralise(f"{who}: {leaf.text}" if who else leaf.text))
    return framed(sections, "")


def edit(vault: Vault, node_id: str, text: str, expected: str, client: str, reason: str | None) -> str:
    """``Vault.update_content``, only while the node's text still has the hash ``expected`` (what
    ``read`` showed): an agent never overwrites a change it has not seen."""
    from vaultmem.errors import ConflictError
    from vaultmem.leaffile import content_hash

    agentio.check_text(text, max_tokens=vault.config.chunk_max_tokens)
    with vault.operation(agentio.commit_message(client, f"edited {node_id}", reason)):
        current = content_hash(vault.fetch([node_id])[0].text)
        if expected.strip() != current:
            raise ConflictError(
                f"{node_id} changed since it was read (hash {current}, not {expected.strip()}); read it again"
            )
        vault.update_content(node_id, text)
        path = vault.fetch([node_id])[0].path
    return json.dumps({"id": node_id, "path": path, "hash": content_hash(text)})


def move(vault: Vault, leaf_id: str, to: str, client: str, reason: str | None) -> str:
    """Move a leaf into another level of its source, as a person would in a file manager (the file
    moves, its bytes and id stay), then the index follows (``reconcile_paths``: both levels go stale)."""
    if not to.startswith("s"):
        raise InvalidInput(f"{to} is not a level: move a leaf into a level (a summary id, s + 15 hex)")
    with vault.operation(agentio.commit_message(client, f"moved {leaf_id} into {to}", reason)):
        leaf = vault.get(leaf_id)
        if not index.has_file(leaf.path):
            raise InvalidInput(
                f"{leaf_id} is a section of the note {note_of(leaf.path)}, written by hand and indexed where"
                " it is: it cannot be moved; edit the note itself and the index follows"
            )
        level = vault.summary(to)
        if level.source != leaf.source or not level.path.startswith("sources/"):
            raise InvalidInput(f"{to} is not a level of the source {leaf.source}; a leaf stays in its source")
        if level.depth != 1:
            raise InvalidInput(
                f"{to} holds levels, not leaves (depth {level.depth}); pick one of its children"
            )
        name = leaf.path.rsplit("/", 1)[-1]
        new = f"{level.directory}/{name}"
        if new == leaf.path:
            return json.dumps({"id": leaf_id, "path": new, "moved": False})
        fsio.move_file(vault.layout.root, vault.layout.abs(leaf.path), vault.layout.abs(new))
        vault.reconcile_paths([leaf.path, new], by_hand=False)
    return json.dumps({"id": leaf_id, "path": new, "moved": True})


def forget(vault: Vault, node_id: str, client: str, reason: str | None) -> str:
    """A leaf: ``Vault.forget`` (its tombstone in ``.trash/vaultmem/forgotten/<id>/``; a person brings it
    back with ``vaultmem restore``; its ancestors are re-summarised by the queue). A level:
    ``Vault.delete``, after a copy of its folder is put in ``.trash/vaultmem/<time>/`` (Obsidian's trash
    folder, which vaultmem never reads)."""
    from vaultmem.layout import SUMMARY_NAME

    with vault.operation(agentio.commit_message(client, f"forgot {node_id}", reason)):
        if not node_id.startswith("s"):
            [tomb] = vault.forget([node_id], reason=reason, settle=False)
            kept = f"{TOMBSTONES}/{node_id}/{tomb.name}"
            return json.dumps({"removed": [node_id], "copy": kept, "restore": f"vaultmem restore {node_id}"})
        node = vault.fetch([node_id])[0]
        is_level = node.path.endswith("/" + SUMMARY_NAME)
        rel = node.path.rsplit("/", 1)[0] if is_level else node.path
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S%fZ")
        copy = vault.layout.root / ".trash" / "vaultmem" / stamp / rel
        fsio.make_dirs(vault.layout.root, copy.parent)  # refused if .trash/ leads out of the vault
        if is_level:
            shutil.copytree(vault.layout.abs(rel), copy)
        else:
            shutil.copy2(vault.layout.abs(rel), copy)
        removed = vault.delete(node_id)
    return json.dumps({"removed": removed, "copy": vault.layout.rel(copy)})
