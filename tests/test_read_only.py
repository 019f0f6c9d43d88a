"""A read-only vault (read-only media, an immutable folder) can be read and searched; writes fail in one
line."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from tests.helpers import INBOX_CHAT, read_only, run


def _filled_vault(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    """A vault with the fake embedder and one short chat, made through the CLI."""
    v = tmp_path / "fv"
    assert run(["init", str(v)], capsys)[0] == 0
    config = v / ".vaultmem" / "config.toml"
    config.write_text(config.read_text().replace('model = "default"', 'model = "fake"'))
    chat = tmp_path / "inbox" / "chat.json"
    chat.parent.mkdir()
    chat.write_text(json.dumps(INBOX_CHAT))
    assert run(["ingest", str(chat.parent), "--wait", "--vault", str(v)], capsys)[0] == 0
    return v


def _tree_hash(root: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        digest.update(str(path.relative_to(root)).encode())
        if path.is_file():
            digest.update(path.read_bytes())
    return digest.hexdigest()


@pytest.fixture
def ro_vault(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    fake_vault = _filled_vault(tmp_path, capsys)
    code, _, err = run(["digest", "2024-05-01", "--vault", str(fake_vault)], capsys)
    assert code == 0, err
    code, _, err = run(["compact", "--vault", str(fake_vault)], capsys)  # runs what is queued
    assert code == 0, err
    return fake_vault


def test_reading_commands_work_on_a_read_only_vault(
    ro_vault: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    v = ["--vault", str(ro_vault)]
    leaf_id = json.loads(run(["ls", *v, "--json"], capsys)[1])[0]["id"]
    before = _tree_hash(ro_vault)
    paths = [ro_vault, *ro_vault.rglob("*")]
    reads = [
        (["search", "boiler service", "--json"], "boiler service"),
        (["context", "when is the boiler service"], "Mia: Remember: the boiler service"),
        (["show"], "sources/inbox/"),
        (["show", leaf_id], "boiler service"),
        (["ls"], "Tom"),
        (["stats"], "chunks:         2 leaves"),
        (["tree"], leaf_id),
        (["read", leaf_id], "boiler service"),
        (["topics", "--json"], "Mia"),
        (["topic", "Mia"], "# Mia"),
        (["digest", "2024-05-01"], "2024-05-01"),
        (["check"], "ok: 2 leaves checked, 0 problems"),
    ]
    with read_only(*paths):
        for argv, needle in reads:
            code, out, err = run([*argv, *v], capsys)
            assert code == 0, (argv, err)
            assert needle in out, (argv, out)
            (warning,) = err.strip().splitlines()
            assert "is read-only: reading and searching work, writes are off" in warning, argv
        for argv in (
            ["ingest", str(ro_vault)],
            ["compact"],
            ["reindex"],
            ["check", "--fix"],
            ["jobs", "--run"],
        ):
            code, out, err = run([*argv, *v], capsys)
            assert code == 1, (argv, out, err)
            warning, error = err.strip().splitlines()
            assert error.startswith("vaultmem: error: ") and "is read-only, so this cannot run" in error
            assert "Traceback" not in err
    assert _tree_hash(ro_vault) == before  # nothing was written, not even a lock or a heat row


def test_a_read_only_vault_without_an_index_says_what_to_do(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fake_vault = _filled_vault(tmp_path, capsys)
    for f in (fake_vault / ".vaultmem").glob("chunks.db*"):
        f.unlink()
    with read_only(fake_vault, *fake_vault.rglob("*")):
        code, _, err = run(["search", "boiler", "--vault", str(fake_vault)], capsys)
    assert code == 1
    assert err.strip().splitlines()[-1].startswith("vaultmem: error: ")
    assert "read-only and its index cannot be read" in err and "Traceback" not in err
