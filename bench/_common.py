"""Helpers shared by the bench scripts: generated messages and table printing."""

from __future__ import annotations

import os
import random
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

TOPICS = [
    "the Atlas migration to Postgres 16",
    "the hiking trip to Sintra",
    "the budget of ${n} for Q3",
    "a crash in v0.{n}.2 when the payload is empty",
    "my preference for trains over flights",
    "the dentist appointment on {d} May",
    "the new espresso machine",
    "Chen Jing's review of the parser",
    "the rent of €1,150 due on the 1st",
    "the ryokan booking in Kyoto",
    "deploying the webhook fix",
]
OPENERS = [
    "Quick update:",
    "Remember that",
    "I think",
    "FYI,",
    "We talked about",
    "Can you check",
    "Good news:",
    "Reminder:",
    "Honestly,",
    "So",
]


def generated_messages(n: int, seed: int = 7, sessions_of: int = 50) -> list[dict[str, object]]:
    rng = random.Random(seed)
    out: list[dict[str, object]] = []
    for i in range(n):
        topic = rng.choice(TOPICS).format(n=rng.randint(1, 99), d=rng.randint(1, 28))
        text = f"{rng.choice(OPENERS)} {topic}. " + " ".join(
            rng.choice(
                ["it", "went", "well", "and", "we", "should", "follow", "up", "next", "week", "on", "this"]
            )
            for _ in range(rng.randint(4, 30))
        )
        out.append(
            {
                "id": f"m{i:06d}",
                "role": "user" if i % 2 == 0 else "assistant",
                "content": text,
                "ts": f"2026-03-{1 + (i // 400) % 28:02d}T{(i // 20) % 24:02d}:{i % 60:02d}:00Z",
                "session": f"s{i // sessions_of:04d}",
            }
        )
    return out


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    cells = [[str(h) for h in headers]] + [
        [f"{c:,.1f}" if isinstance(c, float) else str(c) for c in r] for r in rows
    ]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = [" | ".join(c.rjust(w) for c, w in zip(row, widths, strict=True)) for row in cells]
    lines.insert(1, "-+-".join("-" * w for w in widths))
    return "\n".join(lines)


def run_in_tree(code: str, tree: Path, cwd: str) -> str:
    """The standard output of ``python -c code`` in a new process that imports vaultmem from ``tree``."""
    return subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, "PYTHONPATH": str(tree)},
        cwd=cwd,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
