"""ChatGPT export adapter: ``conversations.json`` (a list of conversations, each a ``mapping`` tree of
nodes with parents and children) becomes one session per conversation.

A conversation shows one branch: the path from the root to ``current_node``. Edited and regenerated
branches stay out unless ``all_branches`` (their turns then carry ``branch: alternate``). System
messages, hidden messages, tool traffic and the model's own notes (thoughts, browsing displays, custom
instructions) are left out; code the model wrote for a tool is kept as a fenced block; attachments are
named. Never reads files and never guesses: a structure it cannot read raises ``InvalidInput``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any

from vaultmem.errors import InvalidInput
from vaultmem.inputs.exports import (
    ExportFile,
    ExportFormat,
    ImportOptions,
    attachments_line,
    load_json,
    obj,
    paragraphs,
    timestamp,
    turn,
)
from vaultmem.model import Message

NAME = "chatgpt"
_MAPPING_RE = re.compile(r'"mapping"\s*:\s*\{')
# Content types that hold what a person or the model said; the rest (thoughts, reasoning_recap,
# tether_browsing_display, user_editable_context, system_error...) is machinery.
_SPOKEN = frozenset({"text", "multimodal_text", "code"})
_ROLES = frozenset({"user", "assistant"})


def sniff(name: str, head: str) -> bool:
    start = head.lstrip()[:1]
    return (
        start in ("[", "{")
        and bool(_MAPPING_RE.search(head))
        and ('"current_node"' in head or '"author"' in head)
    )


def parse(file: ExportFile, options: ImportOptions) -> list[Message]:
    doc = load_json(file)
    if isinstance(doc, Mapping) and "mapping" in doc:
        doc = [doc]  # one conversation saved on its own
    if not isinstance(doc, list):
        raise InvalidInput(f"{file.name}: a ChatGPT export is a list of conversations")
    source = options.source or NAME
    messages: list[Message] = []
    for i, conv in enumerate(doc):
        if not isinstance(conv, Mapping) or not isinstance(conv.get("mapping"), Mapping):
            raise InvalidInput(f"{file.name}: conversation {i} has no 'mapping' of nodes")
        messages.extend(_conversation(conv, source, options))
    return messages


def _conversation(conv: Mapping[str, Any], source: str, options: ImportOptions) -> Iterator[Message]:
    mapping: Mapping[str, Any] = conv["mapping"]
    if not mapping:
        return  # an empty conversation: nothing was said
    session = str(conv.get("conversation_id") or conv.get("id") or "") or f"chatgpt-{min(map(str, mapping))}"
    title = str(conv.get("title") or "")
    shown = _shown_branch(mapping, conv.get("current_node"))
    order = _all_nodes(mapping) if options.all_branches else shown
    on_branch = set(shown)
    for node_id in order:
        node = mapping.get(node_id)
        message = node.get("message") if isinstance(node, Mapping) else None
        if not isinstance(message, Mapping):
            continue  # the root and other empty nodes
        text = _visible_text(message)
        if text is None:
            continue
        role = str((message.get("author") or {}).get("role") or "")
        metadata = obj(message.get("metadata"))
        model = metadata.get("model_slug") or (
            conv.get("default_model_slug") if role == "assistant" else None
        )
        built = turn(
            source=source,
            text=text,
            source_id=str(message.get("id") or node_id),
            session=session,
            role=role,
            ts=timestamp(message.get("create_time")) or timestamp(conv.get("create_time")),
            meta={
                "format": NAME,
                "title": title,
                "model": str(model) if model and role == "assistant" else None,
                "branch": None if node_id in on_branch else "alternate",
            },
        )
        if built is not None:
            yield built


def _visible_text(message: Mapping[str, Any]) -> str | None:
    """The text a reader of the conversation sees for ``message``, or None when it is not shown."""
    role = str((message.get("author") or {}).get("role") or "")
    metadata = obj(message.get("metadata"))
    if role not in _ROLES or metadata.get("is_visually_hidden_from_conversation"):
        return None
    content = message.get("content")
    if not isinstance(content, Mapping) or content.get("content_type") not in _SPOKEN:
        return None
    if content["content_type"] == "code":
        code = str(content.get("text") or "").strip("\n")
        lang = str(content.get("language") or "").replace("unknown", "")
        return f"```{lang}\n{code}\n```" if code.strip() else None
    if message.get("recipient") not in (None, "all"):
        return None  # a prompt to a tool (browser, image generator), not to the person
    texts: list[str] = []
    for part in content.get("parts") or ():
        if isinstance(part, str):
            texts.append(part)
        elif isinstance(part, Mapping):
            if isinstance(part.get("text"), str):  # audio transcriptions and similar
                texts.append(part["text"])
            elif part.get("content_type") == "image_asset_pointer" and not metadata.get("attachments"):
                texts.append("[image]")
    texts.append(attachments_line(metadata.get("attachments"), "name"))
    return paragraphs(texts)


def _shown_branch(mapping: Mapping[str, Any], current: Any) -> list[str]:
    """Node ids from the root to ``current_node`` (or, without one, to the newest leaf of the tree)."""
    if not isinstance(current, str) or current not in mapping:
        current = _newest_leaf(mapping)
    path: list[str] = []
    seen: set[str] = set()
    node_id: Any = current
    while isinstance(node_id, str) and node_id in mapping and node_id not in seen:
        seen.add(node_id)
        path.append(node_id)
        node = mapping[node_id]
        node_id = node.get("parent") if isinstance(node, Mapping) else None
    return path[::-1]


def _newest_leaf(mapping: Mapping[str, Any]) -> str | None:
    best: tuple[float, str] | None = None
    for node_id, node in mapping.items():
        if not isinstance(node, Mapping) or node.get("children"):
            continue
        message = node.get("message")
        when = message.get("create_time") if isinstance(message, Mapping) else None
        key = (float(when) if isinstance(when, int | float) else 0.0, str(node_id))
        if best is None or key > best:
            best = key
    return best[1] if best else None


def _all_nodes(mapping: Mapping[str, Any]) -> list[str]:
    """Every node, depth first from the roots in the order of each node's children."""
    roots = [k for k, n in mapping.items() if not isinstance(n, Mapping) or n.get("parent") not in mapping]
    out: list[str] = []
    seen: set[str] = set()
    stack = list(reversed(roots))
    while stack:
        node_id = stack.pop()
        if node_id in seen:
            continue
        seen.add(node_id)
        out.append(node_id)
        node = mapping.get(node_id)
        children = node.get("children") if isinstance(node, Mapping) else None
        stack.extend(c for c in reversed(children or []) if isinstance(c, str) and c in mapping)
    return out


FORMAT = ExportFormat(NAME, "ChatGPT export (conversations.json)", sniff, parse)
