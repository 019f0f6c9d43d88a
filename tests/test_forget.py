"""Forget and restore (issue #20): tombstones, out of search/context/digests, ancestors re-summarised,
a byte-identical round trip, one commit each with git on; the CLI. Real files, SQLite and git."""

from __future__ import annotations

import hashlib
import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import run_cli
from vaultmem.embed import FakeEmbedder
from vaultmem.errors import InvalidInput, NodeNotFound
from vaultmem.vault import Vault

SMALL = (
    '[embed]\nmodel = "fake"\n\n[git]\nauto_commit = true\n\n[compact]\nfresh_keep_leaves = 2\n'
    "fresh_keep_tokens = 60\nseal_min_leaves = 4\nseal_min_tokens = 100\n"
)
FACTS = [
    "Priya said the allotment plot is number 14, behind the greenhouse.",
    "The plumber Dario comes on Thursday at 8 to fix the boiler.",
    "Mara's passport expires in October; renewal form is in the blue folder.",
    "The Tidepool beta has 42 testers, most of them on Android.",
    "Kenji prefers the window seat and vegetarian meals on long flights.",
    "Dentist appointment moved to the 12th, 15:30, at the Elm Street practice.",
    "The book club reads Piranesi next, meeting at Ana's flat.",
    "Wifi at the cabin is slow; download maps before the trip.",
    "Our landlord wants the meter readings by the end of the month.",
    "The team offsite is in Lisbon, hotel near the Alfama district.",
]


@pytest.fixture
def gv(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Vault:
    config = tmp_path / "gitconfig"
    config.write_text("")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(config))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    v = Vault.init(tmp_path / "gv", SMALL, embedder=FakeEmbedder())
    records = [
        {
            "id": f"m{i}",
            "role": "user",
            "speaker": "Sam",
            "content": text,
            "ts": f"2024-05-{1 + i // 3:02d}T09:{i:02d}:00Z",
            "session": f"day{i // 3}",
        }
        for i, text in enumerate(FACTS)
    ]
    v.ingest_messages(records, source="notes")
    v.compact()
    return v


def snapshot(root: Path) -> dict[str, str]:
    out = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        if path.is_file() and not rel.startswith((".vaultmem/", ".git/")):
            out[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def _commits(root: Path) -> list[str]:
    log = subprocess.run(["git", "log", "--format=%s"], cwd=root, capture_output=True, text=True, check=True)
    return log.stdout.splitlines()


def _sealed(vault: Vault, words: str) -> str:
    leaf = next(x for x in vault.ls(limit=100) if words in x.text)
    assert "/_fresh/" not in leaf.path  # under a level: its summary must be redone without it
    return leaf.id


def test_forget_then_restore_is_a_byte_identical_round_trip(gv: Vault) -> None:
    root = gv.layout.root
    leaf_id = _sealed(gv, "plumber Dario")
    rel = gv.get(leaf_id).path
    before = snapshot(root)
    commits = len(_commits(root))
    done = gv.forget([leaf_id], reason="asked to")
    assert [t.id for t in done] == [leaf_id]
    assert len(_commits(root)) == commits + 1 and _commits(root)[0].startswith(f"memory: forget {leaf_id}")
    assert not (root / rel).exists()
    tomb = root / ".trash/vaultmem/forgotten" / leaf_id
    assert (tomb / rel.rsplit("/", 1)[-1]).read_bytes() and (tomb / "tombstone.json").is_file()
    assert leaf_id not in [
        h.id for h in gv.search("plumber Dario boiler Thursday", 20, include_superseded=True)
    ]
    assert "Dario" not in gv.context("plumber boiler", 2000).text
    # Nothing derived still holds it: its level, its day's digest and every summary above them.
    for path in list((root / "sources").rglob("_summary.md")) + list((root / "global").rglob("_summary.md")):
        text = path.read_text(encoding="utf-8")
        assert "Dario" not in text and leaf_id not in text, path
    assert gv.check().ok
    assert [t.id for t in gv.forgotten()] == [leaf_id]

    gv.restore(leaf_id)
    assert len(_commits(root)) == commits + 2 and _commits(root)[0].startswith(f"memory: restore {leaf_id}")
    assert snapshot(root) == before  # every file, derived ones included, byte for byte
    assert leaf_id in [h.id for h in gv.search("plumber Dario boiler Thursday", 5)]
    assert gv.check().ok and gv.forgotten() == []
    with pytest.raises(NodeNotFound, match="not forgotten"):
        gv.restore(leaf_id)


# A restore killed with SIGKILL once the leaf and its derived files are back and before their rows are:
# the first reconcile inside the restore kills the process, so only the moment is chosen.
KILLED_RESTORE = """
import os, signal, sys
from vaultmem import reconcile
from vaultmem.embed import FakeEmbedder
from vaultmem.vault import Vault

vault = Vault.open(sys.argv[1], embedder=FakeEmbedder())
def killed(*args, **kwargs):
    os.kill(os.getpid(), signal.SIGKILL)
reconcile.reconcile_paths = killed
vault.restore(sys.argv[2])
"""


def test_a_restore_killed_before_its_rows_is_finished_on_open(gv: Vault) -> None:
    root = gv.layout.root
    leaf_id = _sealed(gv, "plumber Dario")
    before = snapshot(root)
    gv.forget([leaf_id])
    gv.close()
    child = subprocess.run(
        [sys.executable, "-c", KILLED_RESTORE, str(root), leaf_id],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert child.returncode == -signal.SIGKILL, child.stderr
    assert (root / before_path(before, leaf_id)).is_file()  # the leaf file was back before the kill
    with Vault.open(root, embedder=FakeEmbedder()) as vault:
        report = vault.check()
        assert report.ok, report.problems
        assert vault.forgotten() == [] and vault.get(leaf_id).text
        vault.work()
        assert snapshot(root) == before  # the round trip is still byte for byte
        assert leaf_id in [h.id for h in vault.search("plumber Dario boiler Thursday", 5)]


def before_path(files: dict[str, str], leaf_id: str) -> str:
    return next(rel for rel in files if rel.endswith(f"-{leaf_id}.md") and rel.startswith("sources/"))


def test_restore_after_the_tree_moved_on_re_summarises(gv: Vault) -> None:
    leaf_id = _sealed(gv, "plumber Dario")
    gv.forget([leaf_id])
    level = next((gv.layout.root / "sources/notes").glob("0*/_summary.md"))
    # A person edits the level's summary after the forget: the restore must not overwrite it.
    text = level.read_text(encoding="utf-8")
    level.write_text(text.replace("\n---\n", "\n---\nMy own note on top.\n", 1), encoding="utf-8")
    gv.reconcile_paths([gv.layout.rel(level)])
    gv.restore(leaf_id)
    assert "My own note on top." in level.read_text(encoding="utf-8")
    assert gv.get(leaf_id).text.startswith("The plumber Dario")
    assert gv.check().ok


def test_forget_refuses_what_it_cannot(gv: Vault) -> None:
    with pytest.raises(NodeNotFound):
        gv.forget(["0123456789abcdef"])
    with pytest.raises(NodeNotFound):
        gv.forget(["s0123456789abcde"])
    digest = next(h.id for h in gv.search("plumber", kind="summary", k=20) if h.path.startswith("global/"))
    with pytest.raises(InvalidInput, match="gathers links"):
        gv.forget([digest])
    assert gv.forgotten() == []


def test_forgetting_a_level_forgets_its_leaves_and_restore_undoes_it(gv: Vault) -> None:
    """What a person means by forgetting a level: every memory under it goes (one commit), and
    `restore <level id>` brings the level back byte for byte."""
    root = gv.layout.root
    level = gv.get(_sealed(gv, "plumber Dario")).path.rsplit("/", 1)[0]
    level_id = gv.node_at(f"{level}/_summary.md")
    assert level_id is not None
    leaves = sorted(x.id for x in gv.ls(limit=100) if x.path.startswith(level + "/"))
    assert len(leaves) >= 2
    before = snapshot(root)
    commits = len(_commits(root))
    done = gv.forget([level_id], reason="that whole week")
    assert sorted(t.id for t in done) == leaves and {t.level for t in done} == {level_id}
    assert len(_commits(root)) == commits + 1 and _commits(root)[0].startswith(f"memory: forget {level_id}")
    assert not any(h.path.startswith(level + "/") for h in gv.search("plumber Dario boiler", 20, kind="leaf"))
    assert gv.check().ok
    out = run_cli("forgotten", "--json", "--vault", str(root))
    assert {t["level"] for t in json.loads(out.stdout)} == {level_id}
    gv.restore(level_id)
    assert len(_commits(root)) == commits + 2 and _commits(root)[0].startswith(f"memory: restore {level_id}")
    assert snapshot(root) == before
    assert gv.check().ok and gv.forgotten() == []


def test_cli_forget_query_restore(gv: Vault) -> None:
    root = str(gv.layout.root)
    gv.close()
    asked = run_cli("forget", "passport renewal blue folder", "--limit", "1", "--vault", root, stdin="")
    assert asked.returncode == 1 and "--yes" in asked.stderr and "Traceback" not in asked.stderr
    assert json.loads(run_cli("forgotten", "--json", "--vault", root).stdout) == []
    done = run_cli(
        "forget", "passport renewal blue folder", "--limit", "1", "--yes", "--json", "--vault", root
    )
    assert done.returncode == 0, done.stderr
    [tomb] = json.loads(done.stdout)
    listed = json.loads(run_cli("forgotten", "--json", "--vault", root).stdout)
    assert [t["id"] for t in listed] == [tomb["id"]]
    found = json.loads(run_cli("search", "passport", "--json", "--vault", root).stdout)
    assert tomb["id"] not in [h["id"] for h in found]
    back = run_cli("restore", tomb["id"], "--vault", root)
    assert back.returncode == 0 and f"restored {tomb['id']}" in back.stdout
    again = run_cli("restore", tomb["id"], "--vault", root)
    assert again.returncode == 1 and "not forgotten" in again.stderr
    assert run_cli("check", "--vault", root).returncode == 0
