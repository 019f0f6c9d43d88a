"""Turns of a coding agent's transcript: what the person asked, and what the agent answered with the
tools it used (one line per call and per result) folded into the answer.

Shared by the Claude Code and Codex adapters, whose logs are streams of events rather than messages.
Pure: gets events already read, returns ``Message``s.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from vaultmem.inputs.exports import turn
from vaultmem.model import Message


@dataclass
class _Open:
    role: str
    source_id: str
    ts: datetime | None
    lines: list[str] = field(default_factory=list)
    model: str | None = None


@dataclass
class TurnBuilder:
    """Collects events into turns. A person's prompt closes the open turn and opens their own; the
    agent's text, tool calls and tool results all belong to the agent's turn (opened by the first)."""

    source: str
    session: str
    meta: dict[str, str | None]
    messages: list[Message] = field(default_factory=list)
    _open: _Open | None = None

    def user(self, text: str, source_id: str, ts: datetime | None) -> None:
        self.close()
        self._open = _Open("user", source_id, ts, [text])

    def agent(self, line: str, source_id: str, ts: datetime | None, model: str | None = None) -> None:
        if self._open is None or self._open.role != "assistant":
            self.close()
            self._open = _Open("assistant", source_id, ts)
        self._open.lines.append(line)
        self._open.model = model or self._open.model

    def close(self) -> None:
        done, self._open = self._open, None
        if done is None:
            return
        built = turn(
            source=self.source,
            text="\n".join(done.lines),
            source_id=done.source_id,
            session=self.session,
            role=done.role,
            ts=done.ts,
            meta={**self.meta, "model": done.model},
        )
        if built is not None:
            self.messages.append(built)

    def finish(self) -> list[Message]:
        self.close()
        return self.messages
