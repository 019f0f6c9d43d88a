"""Markdown files with YAML frontmatter: split, validate, and render without mangling user keys.

A vault file is ``---\\n<yaml mapping>\\n---\\n<body>``. The engine owns a known set of keys per file
kind; every other top-level key belongs to the user and is carried through a rewrite as its original
YAML text, byte for byte, in its original order (so dates, comments-in-values and quoting survive).
Tolerates a UTF-8 BOM and CRLF line ends. Never touches the disk: callers do the I/O via ``fsio``.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from vaultmem import yamlsubset
from vaultmem.errors import FrontmatterError
from vaultmem.redact import redact, scrub

if TYPE_CHECKING:
    import yaml


# PyYAML is imported on first use (most frontmatter is in ``yamlsubset``'s subset, and a process that
# reads none, a `vaultmem search`, never imports it).
@functools.cache
def _loader() -> Any:
    import yaml

    return getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@functools.cache
def _dumper() -> Any:
    """Block style for mappings, flow style for lists: ``reasons: [money, date]`` stays one line."""
    import yaml

    class _Dumper(getattr(yaml, "CSafeDumper", yaml.SafeDumper)):  # type: ignore[misc]
        pass

    _Dumper.add_representer(list, _flow_list)
    _Dumper.add_representer(tuple, _flow_list)
    return _Dumper


def _flow_list(dumper: yaml.SafeDumper, data: list[Any]) -> yaml.Node:
    return dumper.represent_sequence("tag:yaml.org,2002:seq", data, flow_style=True)


_FENCE_RE = re.compile(r"^---[ \t]*$", re.MULTILINE)
_TOP_KEY_RE = re.compile(r"^([^\s#\-][^:]*?|\"[^\"]*\"|'[^']*'):(?:\s|$)")


@dataclass(frozen=True)
class MdDoc:
    """A parsed file: the frontmatter mapping, the raw YAML text of each top-level key, and the body."""

    meta: dict[str, Any]
    raw_blocks: tuple[tuple[str, str], ...]
    body: str


def normalise_newlines(text: str) -> str:
    if text.startswith("\ufeff"):
        text = text[1:]
    return text.replace("\r\n", "\n").replace("\r", "\n")


def split(text: str, *, where: str = "file", blocks: bool = True) -> MdDoc:
    """Parse a Markdown document. A file without frontmatter has an empty mapping. ``blocks=False``
    leaves out the raw text of each key (``raw_blocks``), which only a rewrite needs.

    Raises FrontmatterError for YAML that does not parse or is not a mapping.
    """
    text = normalise_newlines(text)
    if not text.startswith("---\n") and text.rstrip("\n") != "---":
        return MdDoc({}, (), text)
    closing = _FENCE_RE.search(text, 4)
    if closing is None:
        raise FrontmatterError(f"{where}: frontmatter starts with '---' but never closes; add a '---' line")
    raw = text[4 : closing.start()]
    body = text[closing.end() :]
    if body.startswith("\n"):
        body = body[1:]
    meta = yamlsubset.load(raw)
    if meta is None and raw.strip():
        import yaml

        try:
            meta = yaml.load(raw, Loader=_loader())
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            line = f" at line {mark.line + 2}" if mark is not None else ""
            raise FrontmatterError(f"{where}: malformed YAML frontmatter{line}; fix or remove it") from exc
    if meta is None:
        meta = {}
    if not isinstance(meta, dict):
        raise FrontmatterError(f"{where}: frontmatter must be a mapping of keys, got {type(meta).__name__}")
    meta = {str(k): v for k, v in meta.items()}
    return MdDoc(meta, _raw_blocks(raw) if blocks else (), body)


def _raw_blocks(raw: str) -> tuple[tuple[str, str], ...]:
    """Cut the YAML text into one chunk per top-level key (continuation lines stay with their key)."""
    blocks: list[tuple[str, list[str]]] = []
    for line in raw.splitlines(keepends=True):
        match = _TOP_KEY_RE.match(line)
        if match:
            key = match.group(1).strip().strip("\"'")
            blocks.append((key, [line]))
        elif blocks:
            blocks[-1][1].append(line)
        # Lines before the first key (comments) are dropped only if there is no key at all.
    return tuple((key, "".join(lines)) for key, lines in blocks)


def dump_mapping(values: Mapping[str, Any]) -> str:
    """Render engine-owned keys as YAML in the given order (flow style for lists keeps them short)."""
    if not values:
        return ""
    fast = yamlsubset.dump(values)
    if fast is not None:
        return fast
    import yaml

    text: str = yaml.dump(
        dict(values),
        Dumper=_dumper(),
        sort_keys=False,
        allow_unicode=True,
        default_flow_style=False,
        width=10_000,
    )
    return text


def render(engine: Mapping[str, Any], body: str, *, keep: MdDoc | None = None, owned: frozenset[str]) -> str:
    """Render a document: engine keys first (values from ``engine``, None values omitted), then every
    key of ``keep`` the engine does not own, as the user wrote it."""
    parts = ["---\n", dump_mapping({k: v for k, v in engine.items() if v is not None})]
    if keep is not None:
        for key, raw in keep.raw_blocks:
            if key not in owned and key not in engine:
                parts.append(raw if raw.endswith("\n") else raw + "\n")
    parts.append("---\n")
    parts.append(body if body.endswith("\n") or not body else body + "\n")
    return "".join(parts)


def replace_line(data: bytes, key: str, old: str, new: str) -> bytes | None:
    """Change only the frontmatter line ``key: old`` to ``key: new``, leaving every other byte as it is.

    For a file the engine wrote and indexed (so the line is the engine's own); None when the line is not
    in the frontmatter exactly once (the caller re-renders the file instead)."""
    if not data.startswith(b"---\n"):
        return None
    end = data.find(b"\n---", 3)
    if end < 0:
        return None
    lines = data[: end + 1].split(b"\n")
    line = f"{key}: {old}".encode()
    at = [i for i, text in enumerate(lines) if text == line]
    if len(at) != 1:  # counted as lines: two such lines in a row share a newline
        return None
    lines[at[0]] = f"{key}: {new}".encode()
    return b"\n".join(lines) + data[end + 1 :]


def user_keys(doc: MdDoc, owned: frozenset[str]) -> dict[str, Any]:
    return {k: v for k, v in doc.meta.items() if k not in owned}


def _scrub_value(value: Any) -> Any:
    if isinstance(value, str):
        return scrub(value)
    if isinstance(value, list):
        return [_scrub_value(v) for v in value]
    if isinstance(value, dict):
        return {k: _scrub_value(v) for k, v in value.items()}
    return value


def redact_document(text: str, *, where: str = "file") -> tuple[str, tuple[str, ...]]:
    """``text`` (a Markdown file) with every secret replaced, and the kinds found.

    The body is redacted in place. A frontmatter key whose YAML text holds no secret is kept byte for
    byte; one that does is written again from its value with the secrets replaced (rewriting the raw
    text could turn ``key: ghp_...`` into a YAML list). A leaf's ``redactions`` list gains the kinds.
    Raises FrontmatterError for a file whose frontmatter does not parse (nothing can be rewritten)."""
    doc = split(text, where=where)
    body = redact(doc.body)
    kinds: dict[str, None] = dict.fromkeys(body.kinds)
    if not doc.raw_blocks:
        return body.text, tuple(kinds)
    blocks = []
    for key, raw in doc.raw_blocks:
        found = redact(raw).kinds
        if found:
            kinds.update(dict.fromkeys(found))
            raw = dump_mapping({key: _scrub_value(doc.meta.get(key))})
        blocks.append((key, raw if raw.endswith("\n") else raw + "\n"))
    if doc.meta.get("kind") == "leaf" and kinds:
        listed = doc.meta.get("redactions")
        earlier = [str(k) for k in listed] if isinstance(listed, list) else []
        line = dump_mapping({"redactions": list(dict.fromkeys([*earlier, *kinds]))})
        blocks = [(k, r) for k, r in blocks if k != "redactions"] + [("redactions", line)]
    return "---\n" + "".join(r for _, r in blocks) + "---\n" + body.text, tuple(kinds)
