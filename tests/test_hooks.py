"""Claude Code hooks (recorded payloads, a transcript grown between calls) and `vaultmem export claude-md`."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import run_cli
from vaultmem import hooks
from vaultmem.embed import FakeEmbedder
from vaultmem.errors import ConflictError, InvalidInput
from vaultmem.exportmd import CORE_LINES, MARKER, MAX_LINES, render, write
from vaultmem.frame import CLOSE, OPEN
from vaultmem.tokens import count_tokens
from vaultmem.vault import Vault

REPO = Path(__file__).parent.parent
SESSION = "9f1c2d3e-4b5a-6789-abcd-ef0123456789"

# A Claude Code session as its transcript records it: one JSON object per line (written for the test
# after the format documented by the agent SDK and seen in ~/.claude/projects/*/<session>.jsonl).
LINES: list[dict[str, Any]] = [
    {"type": "summary", "summary": "Fix flaky watcher test", "leafUuid": "x0"},
    {
        "parentUuid": None, "isSidechain": False, "userType": "external", "cwd": "/home/mara/vaultmem",
        "sessionId": SESSION, "version": "2.1.12", "gitBranch": "main", "type": "user",
        "message": {"role": "user", "content": "The watcher test fails on the 2-core CI box; please make it wait on the daemon's state."},
        "uuid": "u-001", "timestamp": "2026-03-02T09:14:00.120Z",
    },
    {
        "parentUuid": "u-001", "isSidechain": False, "sessionId": SESSION, "type": "assistant", "requestId": "req_1",
        "message": {
            "model": "claude-sonnet", "id": "msg_01", "type": "message", "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "It sleeps instead of waiting.", "signature": "sig"},
                {"type": "text", "text": "It sleeps 0.5 s; I will wait for the daemon's batch count instead."},
                {"type": "tool_use", "id": "toolu_01", "name": "Read", "input": {"file_path": "tests/test_watch.py"}},
            ],
            "stop_reason": "tool_use",
        },
        "uuid": "a-001", "timestamp": "2026-03-02T09:14:05.000Z",
    },
    {
        "parentUuid": "a-001", "type": "user", "sessionId": SESSION, "isSidechain": False,
        "message": {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_01", "content": "     1→import os"}]},
        "toolUseResult": {"type": "text"}, "uuid": "u-002", "timestamp": "2026-03-02T09:14:06.000Z",
    },
    {
        "parentUuid": "u-002", "type": "user", "isMeta": True, "sessionId": SESSION,
        "message": {"role": "user", "content": "<command-name>/clear</command-name>"},
        "uuid": "u-003", "timestamp": "2026-03-02T09:15:00.000Z",
    },
    {"type": "file-history-snapshot", "messageId": "m1", "snapshot": {}},
]  # fmt: skip
LATER: list[dict[str, Any]] = [
    {
        "parentUuid": "a-001", "type": "user", "sessionId": SESSION, "isSidechain": False,
        "message": {"role": "user", "content": [{"type": "text", "text": "Also remember: the CI box has only 2 cores and 7 jobs."}]},
        "uuid": "u-004", "timestamp": "2026-03-02T09:20:00.000Z",
    },
    {
        "parentUuid": "u-004", "type": "assistant", "sessionId": SESSION, "isSidechain": False,
        "message": {"role": "assistant", "content": [{"type": "text", "text": "Noted: two cores, seven jobs; tests must wait on states."}]},
        "uuid": "a-002", "timestamp": "2026-03-02T09:20:04.000Z",
    },
]  # fmt: skip


@pytest.fixture
def disk_vault(tmp_path: Path) -> Iterator[Vault]:
    """A vault whose config names the fake embedder, so the CLI in a subprocess uses it too."""
    with Vault.init(tmp_path / "dv", '[embed]\nmodel = "fake"\n') as v:
        yield v


def transcript(tmp_path: Path, lines: list[dict[str, Any]]) -> Path:
    path = tmp_path / "projects" / "-home-mara-vaultmem" / f"{SESSION}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(x) + "\n" for x in lines), encoding="utf-8")
    return path


def payload(event: str, path: Path, **extra: Any) -> dict[str, Any]:
    return {
        "session_id": SESSION,
        "transcript_path": str(path),
        "cwd": "/home/mara/vaultmem",
        "hook_event_name": event,
        "permission_mode": "default",
        **extra,
    }


def cli(args: list[str], stdin: str) -> subprocess.CompletedProcess[str]:
    return run_cli(*args, stdin=stdin)


def texts(vault: Vault) -> list[str]:
    return sorted(x.text for x in vault.ls(source="claude-code"))


def test_a_growing_transcript_is_ingested_once(vault: Vault, tmp_path: Path) -> None:
    path = transcript(tmp_path, LINES)
    first = hooks.ingest_transcript(vault, path, session=SESSION)
    assert (first.lines, first.turns, len(first.added)) == (6, 2, 2)
    assert texts(vault) == [
        "It sleeps 0.5 s; I will wait for the daemon's batch count instead.",
        "The watcher test fails on the 2-core CI box; please make it wait on the daemon's state.",
    ]
    leaf = next(x for x in vault.ls(source="claude-code") if x.role == "user")
    assert leaf.session == SESSION and leaf.source_id == "u-001" and leaf.ts is not None
    again = hooks.ingest_transcript(vault, path, session=SESSION)
    assert (again.lines, again.turns, again.added) == (0, 0, ())  # nothing new: nothing read
    # Claude Code appends the next turn, the last line still being written (no newline yet).
    with path.open("a", encoding="utf-8") as f:
        f.write(json.dumps(LATER[0]) + "\n" + json.dumps(LATER[1])[:40])
    grown = hooks.ingest_transcript(vault, path, session=SESSION)
    assert (grown.lines, grown.turns, len(grown.added)) == (1, 1, 1)
    with path.open("a", encoding="utf-8") as f:
        f.write(json.dumps(LATER[1])[40:] + "\n")
    done = hooks.ingest_transcript(vault, path, session=SESSION)
    assert (done.lines, done.turns, len(done.added)) == (1, 1, 1)
    assert len(texts(vault)) == 4 and len(set(texts(vault))) == 4
    assert vault.check().ok


def test_a_lost_cursor_or_rewritten_transcript_never_doubles(vault: Vault, tmp_path: Path) -> None:
    path = transcript(tmp_path, LINES)
    hooks.ingest_transcript(vault, path, session=SESSION)
    (vault.layout.state / hooks.CURSORS).unlink()
    reread = hooks.ingest_transcript(vault, path, session=SESSION)
    assert reread.lines == 6 and reread.added == ()  # read again, stored once (content-addressed ids)
    # A resumed session copies earlier lines into a rewritten file: the head changed, so it is read
    # from the start, and the copied turns are the same leaves.
    transcript(tmp_path, [LINES[1], *LATER])
    rewritten = hooks.ingest_transcript(vault, path, session=SESSION)
    assert rewritten.lines == 3 and len(rewritten.added) == 2
    assert len(texts(vault)) == 4


def test_damaged_lines_are_skipped(vault: Vault, tmp_path: Path) -> None:
    path = transcript(tmp_path, LINES[:2])
    with path.open("a", encoding="utf-8") as f:
        f.write('{"type": "user", "message": {"role": \n')
        f.write("[1, 2, 3]\n")
    report = hooks.ingest_transcript(vault, path)
    assert report.lines == 4 and report.turns == 1


def test_hook_commands_read_claude_codes_json(disk_vault: Vault, tmp_path: Path) -> None:
    vault = disk_vault
    root = str(vault.layout.root)
    path = transcript(tmp_path, LINES)
    stop = cli(
        ["hook", "stop", "--json", "--vault", root], json.dumps(payload("Stop", path, stop_hook_active=False))
    )
    assert stop.returncode == 0, stop.stderr
    assert json.loads(stop.stdout)["turns"] == 2
    with path.open("a", encoding="utf-8") as f:
        f.write(json.dumps(LATER[0]) + "\n")
    pre = cli(
        ["hook", "pre-compact", "--vault", root],
        json.dumps(payload("PreCompact", path, trigger="auto", custom_instructions=None)),
    )
    assert pre.returncode == 0 and pre.stdout == "" and "1 turns in 1 new lines; 1 new leaves" in pre.stderr
    assert len(texts(vault)) == 3
    bad = cli(["hook", "stop", "--vault", root], "not json")
    assert bad.returncode == 1 and bad.stderr.startswith("vaultmem: error: the hook input is not JSON")
    none = cli(["hook", "stop", "--vault", root], json.dumps({"session_id": "x", "hook_event_name": "Stop"}))
    assert none.returncode == 1 and "no transcript_path" in none.stderr
    missing = cli(["hook", "stop", "--vault", root], json.dumps(payload("Stop", tmp_path / "gone.jsonl")))
    assert missing.returncode == 1 and "no transcript at" in missing.stderr


def test_session_start_injects_memory_as_additional_context(disk_vault: Vault, tmp_path: Path) -> None:
    vault = disk_vault
    vault.ingest_messages(
        [
            {
                "id": "k1",
                "role": "user",
                "content": "The watcher test must wait on the daemon's batch count.",
                "ts": "2026-03-01T10:00:00Z",
            },
            {
                "id": "k2",
                "role": "user",
                "content": "Mara's ryokan in Kyoto is booked for 14 April.",
                "ts": "2026-03-01T10:01:00Z",
            },
        ],
        source="notes",
    )
    vault.flush()
    path = transcript(tmp_path, LINES)
    out = cli(
        ["hook", "session-start", "--budget", "120", "--vault", str(vault.layout.root)],
        json.dumps(payload("SessionStart", path, source="resume", model="claude-sonnet")),
    )
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert set(data) == {"hookSpecificOutput"}
    assert data["hookSpecificOutput"]["hookEventName"] == "SessionStart"
    context = data["hookSpecificOutput"]["additionalContext"]
    assert OPEN in context and context.endswith(CLOSE) and "batch count" in context
    assert count_tokens(context) <= 120  # the line saying what the block is included


def test_session_start_without_a_related_memory_says_what_happened_lately(vault: Vault) -> None:
    vault.remember("Diego moved the Tidepool deadline to 3 April.", source="claude-code")
    vault.flush()  # admitted (what the daemon or `compact` does): today's digest holds it
    out = hooks.session_start(vault, {"hook_event_name": "SessionStart", "cwd": "/tmp/zzyzx-unrelated"}, 300)
    context = out["hookSpecificOutput"]["additionalContext"]
    assert "Tidepool" in context and "(digest)" in context  # today's digest, not a weak match
    empty = hooks.session_start(vault, {"hook_event_name": "SessionStart"}, 300)
    assert empty["hookSpecificOutput"]["hookEventName"] == "SessionStart"


def test_read_payload_checks_its_input() -> None:
    assert hooks.read_payload("", needs_transcript=False) == {}
    with pytest.raises(InvalidInput, match="JSON object"):
        hooks.read_payload("[1]", needs_transcript=False)


# -- export claude-md --------------------------------------------------------------------------------
def test_export_claude_md(vault: Vault, tmp_path: Path) -> None:
    vault.ingest_messages(
        [
            {
                "id": f"m{i}",
                "speaker": "Caroline",
                "content": f"Caroline talked about the Tidepool project, note {i}, with Melanie.",
            }
            for i in range(30)
        ],
        source="chat",
        session="s1",
    )
    vault.remember("Caroline prefers trains </memory> over flights.", source="agent")
    vault.compact()
    project = tmp_path / "project"
    project.mkdir()
    written = Path(write(vault, project))
    assert written == project / "MEMORY.md"
    text = written.read_text(encoding="utf-8")
    lines = text.splitlines()
    assert lines[0].startswith(MARKER) and len(lines) <= MAX_LINES
    assert "## Hot topics" in text and "## Recent days" in text
    link = next(x for x in lines if x.startswith("- [Caroline]("))
    target = link.split("](", 1)[1].split(")", 1)[0]
    assert (project / target).resolve().is_file()  # a relative link into the vault
    assert "</memory>" not in text
    write(vault, written)  # its own file: regenerated
    with pytest.raises(InvalidInput, match="inside the vault"):
        write(vault, vault.layout.root / "MEMORY.md")
    mine = project / "CLAUDE.md"
    mine.write_text("# My instructions\n", encoding="utf-8")
    with pytest.raises(ConflictError, match="not written by"):
        write(vault, mine)
    assert mine.read_text() == "# My instructions\n"


def test_export_claude_md_stays_under_200_lines(tmp_path: Path) -> None:
    big = "[core]\nfile_budget = 20000\ntotal_budget = 40000\n"
    with Vault.init(tmp_path / "big", big, embedder=FakeEmbedder()) as vault:
        vault.onboard()
        profile = vault.layout.root / "core" / "user-profile.md"
        with profile.open("a", encoding="utf-8") as f:  # a person's long list, by hand
            f.writelines(f"- [2026-03] garden bed {i} gets tomatoes\n" for i in range(500))
        assert len(vault.core_text().splitlines()) > 400
        vault.ingest_messages(
            [
                {
                    "id": f"d{d}-{i}",
                    "role": "user",
                    "content": f"Day {d} line {i} about the garden.",
                    "ts": f"2026-03-{d:02d}T10:{i:02d}:00Z",
                }
                for d in range(1, 8)
                for i in range(20)
            ],
            source="chat",
        )
        text = render(vault)
    assert len(text.splitlines()) <= MAX_LINES and "## Core memory" in text
    assert 0 < text.count("gets tomatoes") < CORE_LINES  # the core section is capped (its title, then lines)


def test_export_cli(disk_vault: Vault, tmp_path: Path) -> None:
    vault = disk_vault
    vault.remember("Mara's ryokan is booked for 14 April.", source="agent")
    vault.flush()
    out = tmp_path / "out" / "MEMORY.md"
    out.parent.mkdir()
    done = cli(["export", "claude-md", str(out), "--json", "--vault", str(vault.layout.root)], "")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"path": str(out), "lines": len(out.read_text().splitlines())}
    shown = cli(["export", "claude-md", "-", "--vault", str(vault.layout.root)], "")
    assert shown.stdout.startswith(MARKER) and "ryokan" in shown.stdout
