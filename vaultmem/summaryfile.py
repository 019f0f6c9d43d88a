"""The summary file format: ``_summary.md``, one per sealed level, written by the compactor.

Owns the mapping between a ``SummaryNode`` and its file text. The body has up to three parts:

    ## Pinned                 (only after a hand edit: the person's text, never rewritten by the engine)
    <the summary>             the generated text (``content_hash`` in the frontmatter is its hash)
    ## Children               engine-owned list of links, regenerated on every write

A generated part whose hash no longer matches ``content_hash`` was edited by a person; the next
re-summarisation keeps that text under ``## Pinned`` instead of overwriting it. Keys outside
``SUMMARY_KEYS`` are the user's and survive every rewrite verbatim. Pure: no I/O.

A summary is the engine's own file, so ``parse_summary`` returns it redacted (title, aliases, pinned and
generated text, link labels): a secret a person types into one is never indexed or passed on, and is
written redacted the next time the engine rewrites that file (the engine never writes a secret).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from vaultmem import frontmatter
from vaultmem.errors import FrontmatterError
from vaultmem.model import LEAF_ID_RE, SUMMARY_ID_RE, format_ts, parse_order, parse_ts, safe_name
from vaultmem.redact import scrub
from vaultmem.tokens import count_tokens

SUMMARY_KEYS = frozenset(
    {
        "id",
        "kind",
        "source",
        "depth",
        "order",
        "title",
        "aliases",
        "descendants",
        "earliest",
        "latest",
        "tokens",
        "stale",
        "pinned",
        "summariser",
        "content_hash",
        "title_hash",
        "children_hash",
        "entity",
        "archived",
        "period",
        "document",
        "note_path",
        "note_sections",
    }
)
PINNED_HEADING = "## Pinned"
SUMMARY_HEADING = "## Summary"
CHILDREN_HEADING = "## Children"
RELATED_HEADING = "## Related"
_CHILDREN_RE = re.compile(r"^## Children[ \t]*$", re.MULTILINE)
_RELATED_RE = re.compile(r"^## Related[ \t]*$", re.MULTILINE)
_SUMMARY_RE = re.compile(r"^## Summary[ \t]*$", re.MULTILINE)


@dataclass(frozen=True)
class ChildLink:
    label: str
    target: str  # relative to the summary's directory, e.g. ``03-japan/_summary.md`` or a leaf file name
    # A wikilink ``[[stem|label]]`` names a leaf by its file name alone, which never changes: Obsidian
    # resolves it wherever the leaf lives, so topic and digest links survive compaction moving leaves.
    wiki: bool = False
    # After a leaf's wikilink: ``[superseded]`` on an old value, ``[current]`` on the value that replaced
    # one (issue #20), so a topic shows which of its leaves still holds.
    mark: str = ""
    # A section of a note indexed in place has no file to name: its link names the note's heading
    # (``[[Travel/Kyoto trip#Ryokan|...]]``) and its leaf id follows as an Obsidian comment
    # (``%%d39090de9df50170%%``, hidden when the page is read), so the id survives the round trip.
    leaf: str = ""

    @property
    def linked_id(self) -> str | None:
        """The leaf id this link stands for: the recorded one, else the id in a leaf file's name."""
        if self.leaf:
            return self.leaf
        if not self.wiki:
            return None
        stem = self.target[:-3] if self.target.endswith(".md") else self.target
        candidate = stem.rsplit("-", 1)[-1]
        return candidate if LEAF_ID_RE.match(candidate) else None


@dataclass(frozen=True)
class SummaryNode:
    id: str
    source: str
    path: str  # vault-relative path of the _summary.md file
    depth: int  # 1 = over leaves, 2 = over depth-1 summaries, ...
    title: str
    text: str  # the generated summary
    pinned: str = ""  # a person's text kept from a hand edit
    children: tuple[ChildLink, ...] = ()
    descendants: int = 0  # leaves under this node
    earliest: datetime | None = None
    latest: datetime | None = None
    stale: bool = False
    summariser: str = "extractive"
    content_hash: str = ""  # hash of ``text`` as the engine wrote it
    title_hash: str = ""  # hash of the title as the engine wrote it ("": this title is the engine's)
    children_hash: str = ""  # ``children_fingerprint`` of the children it was written from ("" = unknown)
    order: str | None = None  # reading position among its siblings (a decimal number), when set
    entity: str | None = None  # topic trees: the entity key the topic follows
    archived: bool = False  # topic trees: gone cold; kept, no longer routed into
    period: str | None = None  # the global tree: "day" | "week" | "month"
    document: str | None = (
        None  # documents: the file (``Plugins/Canvas.md``) or folder (``Plugins/``) mirrored
    )
    # A note written by hand, indexed where it is (keys ``note_path``, ``note_sections``): its vault
    # path, and its sections' ids as ``"<leaf id> <chunk number> <heading path>"`` lines (what keeps ids
    # across ``reindex``).
    note: str | None = None
    sections: tuple[str, ...] = ()
    user_aliases: tuple[str, ...] = field(default=(), compare=False)
    # ``## Related``: the most similar levels elsewhere in the vault (engine-owned; never children).
    related: tuple[ChildLink, ...] = ()

    @property
    def searchable(self) -> str:
        """What search, embeddings and context see: the pinned text first, then the summary."""
        return f"{self.pinned}\n\n{self.text}".strip() if self.pinned else self.text.strip()

    @property
    def tokens(self) -> int:
        return count_tokens(self.searchable)

    @property
    def hand_edited(self) -> bool:
        """The generated part differs from what the engine wrote (a person changed it)."""
        return bool(self.content_hash) and text_hash(self.text) != self.content_hash

    @property
    def title_edited(self) -> bool:
        """The title differs from the one the engine wrote (a person renamed the level)."""
        return bool(self.title_hash) and text_hash(self.title) != self.title_hash

    @property
    def directory(self) -> str:
        return self.path.rsplit("/", 1)[0]


def text_hash(text: str) -> str:
    return hashlib.sha256(text.strip().encode("utf-8")).hexdigest()[:16]


def children_fingerprint(children: Iterable[tuple[str, str]]) -> str:
    """What a summary was written from: a hash over its children's ``(id, content hash)`` pairs, in any
    order. A summary whose recorded fingerprint equals its children's current one is not stale, however
    its files got there (a ``git revert`` that restored both, a hand move and back)."""
    lines = sorted(f"{node_id}\x1f{digest}" for node_id, digest in children)
    return hashlib.sha256("\n".join(lines).encode("utf-8")).hexdigest()[:16]


def keep_hand_edit(node: SummaryNode) -> str:
    """The pinned text of ``node``'s next rewrite: a hand-edited generated part joins what was pinned."""
    if not (node.hand_edited and node.text.strip()):
        return node.pinned
    return f"{node.pinned}\n\n{node.text}".strip() if node.pinned else node.text.strip()


def summary_id(source: str, seed: str) -> str:
    """A new summary's id: ``s`` + 15 hex, from its source and a seed (the first child ids, a dir name)."""
    return "s" + hashlib.sha256(f"{source}\x1f{seed}".encode()).hexdigest()[:15]


def clean_title(title: str) -> str:
    """A title safe as an Obsidian alias and a link label: one line, no link or heading syntax."""
    cleaned = re.sub(r"[\[\]|#:\n\r\t]+", " ", title).strip()
    return re.sub(r"\s+", " ", cleaned)[:60].strip() or "memories"


def engine_meta(node: SummaryNode) -> dict[str, Any]:
    aliases = [node.title, *(a for a in node.user_aliases if a != node.title)]
    return {
        "id": node.id,
        "kind": "summary",
        "source": node.source,
        "depth": node.depth,
        "order": node.order,
        "title": node.title,
        "aliases": aliases,
        "descendants": node.descendants,
        "earliest": format_ts(node.earliest),
        "latest": format_ts(node.latest),
        "tokens": node.tokens,
        "stale": node.stale,
        "pinned": True if node.pinned else None,
        "summariser": node.summariser,
        "content_hash": node.content_hash,
        "title_hash": node.title_hash or text_hash(node.title),
        "children_hash": node.children_hash or None,
        "entity": node.entity,
        "archived": True if node.archived else None,
        "period": node.period,
        "document": node.document,
        "note_path": node.note,
        "note_sections": list(node.sections) if node.note else None,
    }


def render_body(node: SummaryNode) -> str:
    parts = []
    if node.pinned:
        parts.append(f"{PINNED_HEADING}\n\n{node.pinned.strip()}\n\n{SUMMARY_HEADING}\n\n")
    parts.append(node.text.strip() + "\n\n")
    parts.append(CHILDREN_HEADING + "\n\n")
    parts.extend(_render_link(c) for c in node.children)
    if node.related:
        parts.append("\n" + RELATED_HEADING + "\n\n")
        parts.extend(_render_link(c) for c in node.related)
    return "".join(parts)


def _render_link(c: ChildLink) -> str:
    leaf = f" %%{c.leaf}%%" if c.leaf else ""
    mark = f" {c.mark}" if c.mark in MARKS else ""
    if c.wiki:
        return f"- [[{c.target}|{_label(c.label).replace('|', '/')}]]{mark}{leaf}\n"
    return f"- [{_label(c.label)}]({_link(c.target)}){mark}{leaf}\n"


def render_summary(node: SummaryNode, keep: frontmatter.MdDoc | None = None) -> str:
    return frontmatter.render(engine_meta(node), render_body(node), keep=keep, owned=SUMMARY_KEYS)


def _label(text: str) -> str:
    return re.sub(r"[\[\]\s]+", " ", text).strip() or "untitled"


def _link(target: str) -> str:
    # Obsidian and CommonMark both render <...> destinations with spaces and parentheses intact.
    return f"<{target}>" if re.search(r"[\s()<>]", target) else target


MARKS = ("[superseded]", "[current]")  # validity.SUPERSEDED_MARK, validity.CURRENT_MARK
_MARK = r"(?:\s+(?P<mark>\[(?:superseded|current)\]))?"  # a leaf's version mark, after its link
_LEAF_NOTE = r"(?:\s*%%(?P<leaf>[0-9a-f]{16})%%)?\s*$"  # a note section's leaf id, after its link
_LINK_RE = re.compile(r"^- \[(?P<label>[^\]]*)\]\((?P<target><[^>]*>|[^)]*)\)" + _MARK + _LEAF_NOTE)
# ``[[stem|label]]``, or ``[[Travel/Kyoto trip#Lodging#Ryokan|label]]`` (a heading of a note).
_WIKI_RE = re.compile(r"^- \[\[(?P<target>[^\]|]+)(?:\|(?P<label>[^\]]*))?\]\]" + _MARK + _LEAF_NOTE)


def split_body(body: str) -> tuple[str, str, tuple[ChildLink, ...], tuple[ChildLink, ...]]:
    """(pinned, generated text, children, related) of a summary body. Tolerates a body a person
    rearranged."""
    # The last ``## Related`` section runs to the end, or to a ``## Children`` heading after it.
    related_matches = list(_RELATED_RE.finditer(body))
    cut = related_matches[-1] if related_matches else None
    main, related = body, ""
    if cut is not None:
        after = _CHILDREN_RE.search(body, cut.end())
        end = after.start() if after else len(body)
        main, related = body[: cut.start()] + body[end:], body[cut.end() : end]
    matches = list(_CHILDREN_RE.finditer(main))
    match = matches[-1] if matches else None
    head, links = (main[: match.start()], main[match.end() :]) if match else (main, "")
    pinned = ""
    text = head
    if head.lstrip().startswith(PINNED_HEADING):
        rest = head.lstrip()[len(PINNED_HEADING) :]
        summary_at = _SUMMARY_RE.search(rest)
        if summary_at:
            pinned, text = rest[: summary_at.start()], rest[summary_at.end() :]
        else:
            pinned, text = rest, ""
    return pinned.strip(), text.strip(), _links(links), _links(related)


def _links(section: str) -> tuple[ChildLink, ...]:
    out = []
    for line in section.splitlines():
        found = _LINK_RE.match(line.strip())
        if found:
            target = found.group("target")
            out.append(
                ChildLink(
                    found.group("label"),
                    target.strip("<>"),
                    mark=found.group("mark") or "",
                    leaf=found.group("leaf") or "",
                )
            )
            continue
        wiki = _WIKI_RE.match(line.strip())
        if wiki:
            stem = wiki.group("target").strip()
            out.append(
                ChildLink(
                    wiki.group("label") or stem,
                    stem,
                    wiki=True,
                    mark=wiki.group("mark") or "",
                    leaf=wiki.group("leaf") or "",
                )
            )
    return tuple(out)


def parse_summary(text: str, rel_path: str) -> tuple[SummaryNode, frontmatter.MdDoc]:
    """Read a summary file. Raises FrontmatterError when it is not a valid one."""
    doc = frontmatter.split(text, where=rel_path)
    meta = doc.meta
    node_id = meta.get("id")
    if not isinstance(node_id, str) or not SUMMARY_ID_RE.match(node_id):
        raise FrontmatterError(f"{rel_path}: summary 'id' missing or not 's' + 15 hex characters")
    try:
        source = safe_name(str(meta.get("source", "")))
        depth = int(meta.get("depth", 1))
        descendants = int(meta.get("descendants", 0))
    except (ValueError, TypeError) as exc:
        raise FrontmatterError(f"{rel_path}: invalid summary frontmatter: {exc}") from exc
    if depth < 1:
        raise FrontmatterError(f"{rel_path}: 'depth' must be 1 or more")
    order = parse_order(meta.get("order"), rel_path)
    pinned, body_text, children, related = split_body(doc.body)
    sections = meta.get("note_sections")
    pinned, body_text = scrub(pinned), scrub(body_text)
    children = tuple(replace(c, label=scrub(c.label)) for c in children)
    related = tuple(replace(c, label=scrub(c.label)) for c in related)
    title = clean_title(scrub(str(meta.get("title") or "")))
    aliases = meta.get("aliases")
    user_aliases = (
        tuple(clean for a in aliases if (clean := scrub(str(a))) != title)
        if isinstance(aliases, list)
        else ()
    )
    node = SummaryNode(
        id=node_id,
        source=source,
        path=rel_path,
        depth=depth,
        title=title,
        text=body_text,
        pinned=pinned,
        children=children,
        descendants=descendants,
        earliest=parse_ts(meta.get("earliest")),
        latest=parse_ts(meta.get("latest")),
        stale=meta.get("stale") is True,
        summariser=str(meta.get("summariser") or "unknown"),
        content_hash=str(meta.get("content_hash") or ""),
        title_hash=str(meta.get("title_hash") or ""),
        children_hash=str(meta.get("children_hash") or ""),
        order=order,
        entity=scrub(str(meta["entity"])) if meta.get("entity") else None,
        archived=meta.get("archived") is True,
        period=str(meta["period"]) if meta.get("period") else None,
        document=scrub(str(meta["document"])) if meta.get("document") else None,
        # Both keys or neither: a note indexed in place (``note_path`` alone is no key of the engine's).
        note=str(meta["note_path"]) if meta.get("note_path") and isinstance(sections, list) else None,
        sections=tuple(str(x) for x in sections) if isinstance(sections, list) else (),
        user_aliases=user_aliases,
        related=related,
    )
    return node, doc


def set_stale_line(data: bytes, stale: bool) -> bytes | None:
    """Flip only the ``stale:`` line of a summary's frontmatter, every other byte unchanged.

    The file itself when it already says so; None when the line is not there exactly once (the caller
    re-renders the file instead)."""
    old, new = ("false", "true") if stale else ("true", "false")
    flipped = frontmatter.replace_line(data, "stale", old, new)
    if flipped is None and frontmatter.replace_line(data, "stale", new, new) is not None:
        return data  # one line, saying so already
    return flipped


def summary_json(node: SummaryNode) -> dict[str, Any]:
    """The public JSON shape of a summary (CLI ``--json``, API consumers)."""
    data = engine_meta(node)
    data.update(
        path=node.path,
        text=node.text,
        pinned=node.pinned or None,
        hand_edited=node.hand_edited,
        title_edited=node.title_edited,
        children=[
            {"label": c.label, "target": c.target, "wiki": c.wiki, **({"leaf": c.leaf} if c.leaf else {})}
            for c in node.children
        ],
        related=[{"label": c.label, "target": c.target} for c in node.related],
    )
    return data
