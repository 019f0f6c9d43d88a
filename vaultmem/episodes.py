"""Episode files (``episodes/YYYY-MM/*.md``): one task an agent carried out. Pure: no I/O.

The frontmatter holds the structured fields (``request``, ``mode``, ``tools``, ``steps`` with each
call's arguments and outcome, ``success``, optional ``session``/``source``/``recipe``); the body says the
same for a person. Every string is redacted before it is written. The id is ``e`` + 11 hex digits of a
hash of the time, request and steps, and is the end of the file name (never 16 hex digits, so no leaf
file name can be mistaken for one).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from vaultmem import frontmatter
from vaultmem.errors import FrontmatterError, InvalidInput
from vaultmem.layout import slug
from vaultmem.model import format_ts, parse_ts
from vaultmem.redact import scrub

EPISODES_DIR = "episodes"
KIND = "episode"
SCHEMA_VERSION = 1
ID_RE = re.compile(r"^e[0-9a-f]{11}$")
OWNED = frozenset(
    {
        "kind",
        "id",
        "schema_version",
        "ts",
        "request",
        "mode",
        "tools",
        "steps",
        "success",
        "session",
        "source",
        "recipe",
    }
)
MAX_REQUEST_CHARS = 4000
MAX_STEPS = 200
_MODE_RE = re.compile(r"^[\w.-]{1,40}$")


@dataclass(frozen=True)
class Step:
    """One tool call: the tool's name, its arguments (a mapping, a string or nothing), what came of it."""

    tool: str
    args: Any = None
    outcome: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {"tool": self.tool, "args": self.args, "outcome": self.outcome}

    @property
    def readable(self) -> str:
        args = ""
        if isinstance(self.args, Mapping):
            args = " " + json.dumps(self.args, ensure_ascii=False, sort_keys=True)
        elif isinstance(self.args, str) and self.args:
            args = f" {self.args}"
        outcome = f" → {self.outcome}" if self.outcome else ""
        return f"`{self.tool}`{args}{outcome}"


@dataclass(frozen=True)
class Episode:
    id: str
    path: str
    request: str
    mode: str
    steps: tuple[Step, ...]
    success: bool
    ts: datetime | None
    session: str | None = None
    source: str | None = None
    recipe: str | None = None

    @property
    def tools(self) -> tuple[str, ...]:
        return tuple(s.tool for s in self.steps)

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "path": self.path,
            "request": self.request,
            "mode": self.mode,
            "tools": list(self.tools),
            "steps": [s.as_dict() for s in self.steps],
            "success": self.success,
            "ts": format_ts(self.ts),
            "session": self.session,
            "source": self.source,
            "recipe": self.recipe,
        }


def _scrubbed(value: Any) -> Any:
    if isinstance(value, str):
        return scrub(value)
    if isinstance(value, Mapping):
        return {scrub(str(k)): _scrubbed(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_scrubbed(v) for v in value]
    if value is None or isinstance(value, bool | int | float):
        return value
    return scrub(str(value))


def steps_from(
    tools: Sequence[str | Mapping[str, Any]], outcomes: Sequence[str] | str | None
) -> tuple[Step, ...]:
    """Steps from what a caller of ``record_episode`` gives: tool names or ``{"name"/"tool", "args"}``
    mappings, and the outcomes (one per tool, in order; fewer is fine). Redacted."""
    if isinstance(tools, str | bytes) or not isinstance(tools, Sequence):
        raise InvalidInput("tools must be a list of tool names or {'name': ..., 'args': ...} objects")
    if isinstance(outcomes, str):
        outcomes = [outcomes] if len(tools) <= 1 else [outcomes] + [""] * (len(tools) - 1)
    outcome_list = list(outcomes or [])
    if not all(isinstance(o, str) for o in outcome_list):
        raise InvalidInput("outcomes must be strings, one per tool call")
    if len(outcome_list) > max(len(tools), 1):
        raise InvalidInput(f"{len(outcome_list)} outcomes for {len(tools)} tool calls; give one per call")
    if len(tools) > MAX_STEPS:
        raise InvalidInput(f"{len(tools)} tool calls: at most {MAX_STEPS} are recorded per episode")
    steps = []
    for n, tool in enumerate(tools):
        args: Any = None
        if isinstance(tool, Mapping):
            name = tool.get("name", tool.get("tool"))
            args = tool.get("args", tool.get("arguments"))
            if isinstance(args, str):
                try:  # OpenAI tool calls carry their arguments as a JSON string
                    decoded = json.loads(args)
                    args = decoded if isinstance(decoded, dict) else args
                except ValueError:
                    pass
        else:
            name = tool
        if not isinstance(name, str) or not name.strip():
            raise InvalidInput(f"tool call {n + 1} has no name")
        outcome = outcome_list[n] if n < len(outcome_list) else ""
        steps.append(
            Step(scrub(" ".join(name.split()))[:120], _scrubbed(args), scrub(" ".join(outcome.split())))
        )
    if not tools and outcome_list:
        steps.append(Step("(no tool)", None, scrub(" ".join(outcome_list[0].split()))))
    return tuple(steps)


def check_request(request: str, mode: str) -> tuple[str, str]:
    if not isinstance(request, str) or not request.strip():
        raise InvalidInput("the episode's request is empty; give the user's request as text")
    if len(request) > MAX_REQUEST_CHARS:
        raise InvalidInput(f"the request is {len(request)} characters; at most {MAX_REQUEST_CHARS}")
    if not isinstance(mode, str) or not _MODE_RE.match(mode):
        raise InvalidInput(f"mode {mode!r} must be a short word such as 'agent', 'ask' or 'plan'")
    return scrub(" ".join(request.split())), mode


def episode_id(ts: datetime, request: str, steps: Sequence[Step]) -> str:
    data = json.dumps([format_ts(ts), request, [s.as_dict() for s in steps]], sort_keys=True, default=str)
    return "e" + hashlib.sha256(data.encode("utf-8")).hexdigest()[:11]


def rel_path(episode_id: str, ts: datetime, request: str) -> str:
    name = slug(request, words=6, max_len=48) or "episode"
    return f"{EPISODES_DIR}/{ts:%Y-%m}/{ts:%Y-%m-%d}-{name}-{episode_id}.md"


def render(ep: Episode, keep: frontmatter.MdDoc | None = None) -> str:
    engine: dict[str, Any] = {
        "kind": KIND,
        "id": ep.id,
        "schema_version": SCHEMA_VERSION,
        "ts": format_ts(ep.ts),
        "request": ep.request,
        "mode": ep.mode,
        "tools": list(ep.tools),
        "steps": [s.as_dict() for s in ep.steps],
        "success": ep.success,
        "session": ep.session,
        "source": ep.source,
        "recipe": ep.recipe,
    }
    outcome = "Succeeded" if ep.success else "Failed"
    lines = [f"# {ep.request}", "", f"{outcome} · mode {ep.mode} · {format_ts(ep.ts) or 'undated'}", ""]
    if ep.recipe:
        lines += [f"Followed the recipe [[{ep.recipe}]].", ""]
    lines += ["## Steps", ""]
    lines += [f"{n}. {s.readable}" for n, s in enumerate(ep.steps, 1)] or ["(no tool calls)"]
    return frontmatter.render(engine, "\n".join(lines) + "\n", keep=keep, owned=OWNED)


def parse(text: str, rel: str) -> Episode | None:
    """The episode in a file; None when it is not one (no ``kind: episode``: a person's note).
    FrontmatterError when it says it is one but a field is wrong."""
    doc = frontmatter.split(text, where=rel)
    meta = doc.meta
    if meta.get("kind") != KIND:
        return None
    request = meta.get("request")
    if not isinstance(request, str) or not request.strip():
        raise FrontmatterError(f"{rel}: an episode needs a request (text)")
    success = meta.get("success")
    if not isinstance(success, bool):
        raise FrontmatterError(f"{rel}: success must be true or false, got {success!r}")
    mode = meta.get("mode", "agent")
    raw_steps = meta.get("steps")
    steps: list[Step] = []
    if isinstance(raw_steps, list):
        for item in raw_steps:
            if not isinstance(item, Mapping) or not isinstance(item.get("tool"), str):
                raise FrontmatterError(f"{rel}: every step needs a tool (a name)")
            steps.append(
                Step(scrub(item["tool"]), _scrubbed(item.get("args")), scrub(str(item.get("outcome") or "")))
            )
    elif isinstance(meta.get("tools"), list):
        steps = [Step(scrub(str(t))) for t in meta["tools"]]
    episode_id = meta.get("id")
    if not isinstance(episode_id, str) or not ID_RE.match(episode_id):
        stem = rel.rsplit("/", 1)[-1].removesuffix(".md")
        tail = stem.rsplit("-", 1)[-1]
        episode_id = tail if ID_RE.match(tail) else "e" + hashlib.sha256(rel.encode()).hexdigest()[:11]

    def text_or_none(key: str) -> str | None:
        value = meta.get(key)
        return scrub(str(value)) if value not in (None, "") else None

    return Episode(
        id=episode_id,
        path=rel,
        request=scrub(" ".join(request.split())),
        mode=scrub(str(mode)),
        steps=tuple(steps),
        success=success,
        ts=parse_ts(meta.get("ts")),
        session=text_or_none("session"),
        source=text_or_none("source"),
        recipe=text_or_none("recipe"),
    )
