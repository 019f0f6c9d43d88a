"""The leaf file format: one verbatim chunk per Markdown file, provenance in frontmatter.

Owns the mapping between a ``Leaf`` value and its file text, and the leaf file name. The file name
embeds the leaf id, so names never collide and a leaf is never renamed. The engine owns the keys in
``LEAF_KEYS``; any other key is the user's and survives every rewrite verbatim. Pure: no I/O.

Reading is where a person's secret stops: ``parse_leaf`` returns the leaf as the engine may use it
(body, speaker, session, ids and provenance redacted), so a secret typed into a leaf by hand never
reaches the index or anything derived from it, while the file itself stays as the person wrote it
(``keep_body`` gives an engine rewrite of the frontmatter the file's own body back).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from vaultmem import frontmatter
from vaultmem.entities import KINDS, canonical
from vaultmem.errors import FrontmatterError
from vaultmem.layout import slug
from vaultmem.model import LEAF_ID_RE, InputKind, Leaf, Status, format_ts, parse_order, parse_ts, safe_name
from vaultmem.redact import Redaction, has_secret, redact, redact_field
from vaultmem.tokens import count_tokens
from vaultmem.validity import parse as parse_validity

LEAF_KEYS = frozenset(
    {
        "id",
        "kind",
        "source",
        "input",
        "session",
        "source_id",
        "message_ids",
        "seq",
        "order",
        "role",
        "speaker",
        "ts",
        "status",
        "score",
        "reasons",
        "tokens",
        "content_hash",
        "redactions",
        "provenance",
        "entities",
    }
)


def content_hash(text: str) -> str:
    """Hash of a node's body text as stored (stripped); keys the embedding sidecars."""
    return hashlib.sha256(text.strip().encode("utf-8")).hexdigest()[:16]


def leaf_filename(leaf_id: str, text: str, ts_iso: str | None, speaker: str | None) -> str:
    day = ts_iso[:10] if ts_iso else "undated"
    label = slug(f"{speaker or ''} {text}")
    return f"{day}-{label}-{leaf_id}.md" if label else f"{day}-{leaf_id}.md"


def id_from_filename(name: str) -> str | None:
    stem = name[:-3] if name.endswith(".md") else name
    candidate = stem.rsplit("-", 1)[-1]
    return candidate if LEAF_ID_RE.match(candidate) else None


def engine_meta(leaf: Leaf) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "id": leaf.id,
        "kind": "leaf",
        "source": leaf.source,
        "input": leaf.kind.value,
        "session": leaf.session,
        "source_id": leaf.source_id,
        "message_ids": list(leaf.message_ids),
        "seq": leaf.seq,
        "order": leaf.order,
        "role": leaf.role,
        "speaker": leaf.speaker,
        "ts": format_ts(leaf.ts),
        "ingested": format_ts(leaf.ingested),
        "status": leaf.status.value,
        # Right after the status: extract writes both at once, editing two lines of the file in place.
        "entities": list(leaf.entities) or None,
        "score": leaf.score,
        "reasons": list(leaf.reasons),
        "tokens": leaf.tokens,
        "content_hash": leaf.content_hash,
        "redactions": list(leaf.redactions) or None,
        "provenance": dict(leaf.meta) or None,
    }
    if leaf.ingested is None:  # unknown here: a value the file has is kept (not an owned key)
        del meta["ingested"]
    return meta


def render_leaf(leaf: Leaf, keep: frontmatter.MdDoc | None = None) -> str:
    return frontmatter.render(engine_meta(leaf), leaf.text.strip() + "\n", keep=keep, owned=LEAF_KEYS)


def _str_or_none(value: Any) -> str | None:
    return None if value is None else str(value)


class _Cleaner:
    """Redacts the fields of one file and remembers the kinds it found."""

    def __init__(self) -> None:
        self.kinds: dict[str, None] = {}

    def text(self, value: str) -> str:
        result: Redaction = redact(value)
        self.kinds.update(dict.fromkeys(result.kinds))
        return result.text

    def field(self, value: str) -> str:
        """A short value files repeat (speaker, session, provenance): ``redact_field``."""
        result: Redaction = redact_field(value)
        self.kinds.update(dict.fromkeys(result.kinds))
        return result.text

    def opt(self, value: Any) -> str | None:
        return None if value is None else self.field(str(value))


def keep_body(doc: frontmatter.MdDoc, text: str) -> str:
    """The body to write when the engine re-renders a leaf whose text is ``text``: the file's own body
    (its exact bytes, a secret typed by hand included: the file is the person's) when ``text`` is what
    the engine read from it, else ``text``."""
    body = doc.body.strip()
    if body == text.strip() or redact(body).text.strip() == text.strip():
        return doc.body
    return text.strip() + "\n"


def _str_list(value: Any, key: str, where: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise FrontmatterError(f"{where}: '{key}' must be a list")
    return tuple(str(v) for v in value)


def parse_leaf(text: str, rel_path: str, *, blocks: bool = True) -> tuple[Leaf, frontmatter.MdDoc]:
    """Read a leaf file. Raises FrontmatterError when it is not a valid leaf. ``blocks=False``: the doc
    returned has no raw key blocks (for a reader that never rewrites the file)."""
    doc = frontmatter.split(text, where=rel_path, blocks=blocks)
    meta = doc.meta
    leaf_id = meta.get("id")
    if not isinstance(leaf_id, str) or not LEAF_ID_RE.match(leaf_id):
        raise FrontmatterError(f"{rel_path}: leaf 'id' missing or not 16 hex characters")
    if id_from_filename(rel_path.rsplit("/", 1)[-1]) != leaf_id:
        raise FrontmatterError(f"{rel_path}: file name does not end with the leaf id {leaf_id}")
    try:
        source = safe_name(str(meta.get("source", "")))
        status = Status(str(meta.get("status", Status.PENDING.value)))
        kind = InputKind(str(meta.get("input", InputKind.CHAT.value)))
        seq = int(meta.get("seq", 0))
        score = float(meta.get("score", 0.0))
    except (ValueError, TypeError) as exc:
        raise FrontmatterError(f"{rel_path}: invalid leaf frontmatter: {exc}") from exc
    order = parse_order(meta.get("order"), rel_path)
    provenance = meta.get("provenance") or {}
    if not isinstance(provenance, dict):
        raise FrontmatterError(f"{rel_path}: 'provenance' must be a mapping")
    valid = parse_validity(meta, rel_path)
    clean = _Cleaner()
    body = clean.text(doc.body.strip())
    source_id = clean.opt(meta.get("source_id"))
    session = clean.opt(meta.get("session"))
    role = clean.opt(meta.get("role"))
    speaker = clean.opt(meta.get("speaker"))
    ts = parse_ts(meta.get("ts"))
    message_ids = tuple(clean.field(m) for m in _str_list(meta.get("message_ids"), "message_ids", rel_path))
    reasons = _str_list(meta.get("reasons"), "reasons", rel_path)
    entities = entity_keys(_str_list(meta.get("entities"), "entities", rel_path))
    provenance_clean = {str(k): clean.field(str(v)) for k, v in provenance.items()}
    # The kinds the file lists, then any a hand edit added (the index knows the text was redacted):
    # every field is cleaned above, so ``clean.kinds`` is complete here.
    listed = _str_list(meta.get("redactions"), "redactions", rel_path)
    leaf = Leaf(
        id=leaf_id,
        source=source,
        text=body,
        path=rel_path,
        kind=kind,
        seq=seq,
        source_id=source_id,
        session=session,
        role=role,
        speaker=speaker,
        ts=ts,
        message_ids=message_ids,
        status=status,
        score=score,
        reasons=reasons,
        tokens=count_tokens(body),
        content_hash=content_hash(body),
        redactions=tuple(dict.fromkeys([*listed, *clean.kinds])),
        order=order,
        entities=entities,
        meta=provenance_clean,
        valid_from=valid.valid_from,
        valid_to=valid.valid_to,
        supersedes=valid.supersedes,
        superseded_by=valid.superseded_by,
        ingested=valid.ingested,
    )
    return leaf, doc


def entity_keys(values: tuple[str, ...]) -> tuple[str, ...]:
    """Entity keys as a person may have written them: "Kyoto trip" (no kind) counts as a project,
    "Person:Caroline" is made canonical. Duplicates go; the file keeps exactly what was written."""
    if not values:
        return ()
    out: dict[str, None] = {}
    for value in values:
        if has_secret(value):
            continue  # a key is a topic's folder name: a secret typed here must not become one
        kind, _, name = value.partition(":")
        try:
            key = (
                canonical(kind.strip().lower(), name)
                if kind.strip().lower() in KINDS and name.strip()
                else ""
            )
            key = key or canonical("project", value)
        except ValueError:
            continue
        out.setdefault(key, None)
    return tuple(out)


def leaf_json(leaf: Leaf) -> dict[str, Any]:
    """The public JSON shape of a leaf (CLI ``--json``, API consumers)."""
    data = engine_meta(leaf)
    data["text"] = leaf.text
    data["path"] = leaf.path
    data["provenance"] = leaf.provenance
    plain: dict[str, Any] = json.loads(json.dumps(data, default=str))
    return plain
