"""No write leaves the vault: a symlinked folder or lock file pointing outside is refused in one line.

Each test puts a symlink where a person (or a sync tool) might have left one, runs the command a person
would run, and checks that the outside directory is untouched and the error is one clear line.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.helpers import CONFIG, run, topic_records

MIA = [
    {
        "id": "wa-101",
        "speaker": "Mia",
        "content": "Remember: the boiler service is booked for 12 May, the engineer comes at 8.",
        "ts": "2024-05-01T09:00:00Z",
    },
    {
        "id": "wa-102",
        "speaker": "Tom",
        "content": "I prefer the mornings, before 10am if possible. 周四上午最好。",
        "ts": "2024-05-01T09:01:00Z",
    },
]


def _vault(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    v = tmp_path / "v"
    assert run(["init", str(v)], capsys)[0] == 0
    config = '[embed]\nmodel = "fake"\n' + CONFIG.format(fanout=50, workers=1)
    (v / ".vaultmem" / "config.toml").write_text(config, encoding="utf-8")
    return v


def _export(tmp_path: Path, records: list[dict[str, object]] = MIA) -> Path:
    path = tmp_path / "whatsapp-export.json"
    path.write_text(json.dumps(records, ensure_ascii=False), encoding="utf-8")
    return path


def _tree(path: Path) -> dict[str, bytes]:
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


def _one_line_refusal(code: int, err: str) -> None:
    assert code == 1, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith("vaultmem: error: refusing to write") and "outside the vault" in lines[0]


@pytest.mark.parametrize("linked", ["sources/chat", "sources/chat/_fresh"])
def test_ingest_into_a_symlinked_folder_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], linked: str
) -> None:
    v = _vault(tmp_path, capsys)
    outside = tmp_path / "dropbox"
    outside.mkdir()
    (outside / "keep.md").write_text("# mine\n", encoding="utf-8")
    (v / linked).parent.mkdir(parents=True, exist_ok=True)
    (v / linked).symlink_to(outside)
    before = _tree(outside)
    code, _out, err = run(
        ["ingest", str(_export(tmp_path)), "--source", "chat", "--wait", "--vault", str(v)], capsys
    )
    _one_line_refusal(code, err)
    assert _tree(outside) == before and sorted(p.name for p in outside.iterdir()) == ["keep.md"]
    code, out, _ = run(["ls", "--vault", str(v), "--json"], capsys)
    assert json.loads(out) == []  # nothing indexed either
    assert not list((v / ".vaultmem" / "intent").glob("*.json"))  # no half batch left to heal
    code, out, _ = run(["check", "--vault", str(v), "--json"], capsys)
    assert [p["code"] for p in json.loads(out)["problems"]] == ["outside_link"]


def test_a_symlinked_lock_file_is_never_created_or_truncated(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    v = _vault(tmp_path, capsys)
    precious = tmp_path / "thesis.txt"
    precious.write_text("three years of work\n", encoding="utf-8")
    lock = v / ".vaultmem" / "write.lock"
    lock.unlink(missing_ok=True)
    lock.symlink_to(precious)
    code, _out, err = run(["ingest", str(_export(tmp_path)), "--source", "chat", "--vault", str(v)], capsys)
    _one_line_refusal(code, err)
    assert precious.read_text(encoding="utf-8") == "three years of work\n"


def test_sidecar_lock_folder_symlinked_outside_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    v = _vault(tmp_path, capsys)
    assert run(["ingest", str(_export(tmp_path)), "--source", "chat", "--vault", str(v)], capsys)[0] == 0
    outside = tmp_path / "locks-elsewhere"
    outside.mkdir()
    locks = v / ".vaultmem" / "locks"
    if locks.exists():
        for p in locks.iterdir():
            p.unlink()
        locks.rmdir()
    locks.symlink_to(outside)
    code, _out, err = run(["jobs", "--run", "--vault", str(v)], capsys)
    assert code == 0, err  # a failed job is reported by `jobs`, it does not stop the command
    assert not any(outside.iterdir())
    code, out, _ = run(["jobs", "--vault", str(v), "--json"], capsys)
    errors = [j["last_error"] or "" for j in json.loads(out)["jobs"]]
    assert errors and all("outside the vault" in e for e in errors)


def test_compaction_never_moves_leaves_into_a_symlinked_level(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:

    v = _vault(tmp_path, capsys)
    first = _export(tmp_path, topic_records(10))
    assert run(["ingest", str(first), "--vault", str(v), "--source", "chat", "--wait"], capsys)[0] == 0
    assert run(["compact", "--vault", str(v)], capsys)[0] == 0
    levels = sorted(p for p in (v / "sources" / "chat").iterdir() if p.name[:2].isdigit())
    assert levels
    # A person moved every level to another disk and left symlinks behind.
    outside = tmp_path / "other-disk"
    outside.mkdir()
    for level in levels:
        os.rename(level, outside / level.name)
        level.symlink_to(outside / level.name)
    before = _tree(outside)
    more = _export(tmp_path, topic_records(10, start=40))
    assert run(["ingest", str(more), "--vault", str(v), "--source", "chat", "--wait"], capsys)[0] == 0
    run(["compact", "--vault", str(v)], capsys)
    assert _tree(outside) == before  # no leaf merged in, no summary marked stale, no sidecar written
    _code, out, _ = run(["check", "--vault", str(v), "--json"], capsys)
    assert {p["code"] for p in json.loads(out)["problems"]} >= {"outside_link"}


def test_digest_into_a_symlinked_global_folder_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    v = _vault(tmp_path, capsys)
    assert (
        run(["ingest", str(_export(tmp_path)), "--vault", str(v), "--source", "chat", "--wait"], capsys)[0]
        == 0
    )
    outside = tmp_path / "shared-global"
    outside.mkdir()
    (v / "global").rmdir()
    (v / "global").symlink_to(outside)
    code, _out, err = run(["digest", "2024-05-01", "--vault", str(v)], capsys)
    _one_line_refusal(code, err)
    assert not any(outside.iterdir())
