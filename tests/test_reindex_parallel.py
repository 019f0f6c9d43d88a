"""reindex parses leaf files in a process per core: the index it writes is the one a single process writes."""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
import sys
import threading
from dataclasses import asdict
from pathlib import Path

import pytest

from tests.helpers import make_vault, topic_records
from vaultmem import forking, index, reindex
from vaultmem.embed import FakeEmbedder
from vaultmem.reindex import ReindexReport
from vaultmem.vault import Vault


def _state(conn: sqlite3.Connection) -> dict[str, object]:
    state: dict[str, object] = {
        table: conn.execute(f"SELECT rowid, body FROM {table} ORDER BY rowid").fetchall()
        for table in ("fts_words", "fts_trigram", "fts_nav_words", "fts_nav_trigram")
    }
    state["rows"] = index.all_rows(conn)
    state["rowids"] = conn.execute("SELECT rowid, id FROM chunks ORDER BY rowid").fetchall()
    # ``seq`` counts on from one load to the next; the order it gives is what a reader sees.
    state["vectors"] = [
        tuple(r) for r in conn.execute("SELECT id, model, content_hash, vec FROM vectors ORDER BY seq")
    ]
    state["jobs"] = conn.execute("SELECT kind, dedupe_key FROM jobs ORDER BY dedupe_key").fetchall()
    state["match"] = conn.execute(
        "SELECT rowid FROM fts_words WHERE fts_words MATCH 'roses' ORDER BY rowid"
    ).fetchall()
    return state


# A process reindexes with forked workers only while it has no other thread (a fork copies locks another
# thread may hold), bar the vault's own HNSW builder (``forking.fork_safe``). In CI a thread other tests
# started had been left (tqdm's monitor, from loading the torch model in test_embed: now stopped there; no
# library thread outlives its owner), so the two-process reindex runs in a fresh process, as
# ``vaultmem reindex`` does, whatever threads the test process holds.
_CHILD = """
import json, sys
from dataclasses import asdict
from vaultmem import reindex
from vaultmem.embed import FakeEmbedder
from vaultmem.vault import Vault
reindex._cores = lambda: 2
reindex.PARALLEL_MIN_LEAVES = 4
with Vault.open(sys.argv[1], embedder=FakeEmbedder()) as vault:
    print(json.dumps(asdict(vault.reindex())))
"""


def _report(report: ReindexReport) -> dict[str, object]:
    return json.loads(json.dumps(asdict(report)))  # tuples read back as lists, as from the child


def test_a_process_per_core_gives_the_same_index(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with make_vault(tmp_path / "v", workers=1) as vault:
        vault.ingest_messages(topic_records(12))
        vault.flush()
        vault.compact()  # summaries: leaves get parents, levels get their own folders
        vault.ingest_messages(topic_records(3, start=100))  # some still pending in _fresh/
        sealed = next(leaf for leaf in vault.ls() if "/_fresh/" not in leaf.path)
        fresh = next(leaf for leaf in vault.ls() if "/_fresh/" in leaf.path)
        root = vault.layout.root
        # A copy under another name (a duplicate id) and a file that is not a leaf.
        shutil.copy(root / sealed.path, root / fresh.path.rsplit("/", 1)[0] / f"copy-{sealed.id}.md")
        (root / fresh.path).with_name(f"2024-01-01-broken-{'0' * 16}.md").write_text("no frontmatter\n")
        monkeypatch.setattr(reindex, "PARALLEL_MIN_LEAVES", 4)

        vault.work()  # vectors, and their sidecars
        monkeypatch.setattr(reindex, "_cores", lambda: 1)
        one = vault.reindex()
        single = _state(vault.conn)
    child = subprocess.run(
        [sys.executable, "-c", _CHILD, str(tmp_path / "v")], capture_output=True, text=True, check=True
    )
    two = json.loads(child.stdout.strip().splitlines()[-1])
    with Vault.open(tmp_path / "v", embedder=FakeEmbedder()) as vault:
        forked = _state(vault.conn)

    assert (one.processes, two["processes"]) == (1, 2)
    assert forked == single
    assert two == {**_report(one), "processes": 2}
    assert len(one.duplicates) == 1 and len(one.skipped) == 1
    assert one.leaves > 50 and one.summaries > 0 and single["vectors"] and single["match"]


# The HNSW builder held mid-build (``vault.flush`` starts it), then a reindex with two cores; the builder
# is released afterwards and joined by ``close``.
_BESIDE_THE_BUILDER = """
import json, sys, threading
from vaultmem import ann, reindex, vectors
from vaultmem.embed import FakeEmbedder
from vaultmem.vault import Vault
from tests.helpers import topic_records
reindex._cores = lambda: 2
reindex.PARALLEL_MIN_LEAVES = 4
ann.GRAPH_MIN = vectors.MATRIX_MIN = 10
started, release = threading.Event(), threading.Event()
real_build = ann.build
def held_build(matrix, threads=None):
    started.set()
    assert release.wait(120)
    return real_build(matrix, 1)
ann.build = held_build
with Vault.init(sys.argv[1], embedder=FakeEmbedder()) as vault:
    vault.ingest_messages(topic_records(12))
    vault.flush()
    assert started.wait(60)
    names = sorted(t.name for t in threading.enumerate())
    report = vault.reindex()
    release.set()
print(json.dumps({"threads": names, "processes": report.processes, "leaves": report.leaves}))
"""


def test_reindex_forks_beside_the_graph_builder_but_not_beside_other_threads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The background HNSW build takes no lock a forked reader needs: a reindex while it runs still
    parses with a process per core. Any other thread (here: one the caller started) keeps it to one."""
    child = subprocess.run(
        [sys.executable, "-c", _BESIDE_THE_BUILDER, str(tmp_path / "v")],
        capture_output=True, text=True, check=True, cwd=Path(__file__).parent.parent, timeout=600,
    )  # fmt: skip
    said = json.loads(child.stdout.strip().splitlines()[-1])
    assert said["threads"] == ["MainThread", "vaultmem-hnsw"]
    assert said["processes"] == 2 and said["leaves"] > 10
    monkeypatch.setattr(reindex, "PARALLEL_MIN_LEAVES", 4)
    other = threading.Event()
    helper = threading.Thread(target=other.wait, name="the caller's own")
    helper.start()
    try:
        assert not forking.alone() and reindex._processes(100, 2) == 1
    finally:
        other.set()
        helper.join()


# The same vault reindexed in fresh processes (forking allowed), with the sidecars read ahead by a forked
# child and with everything read in the one process; ``Ahead`` records whether it forked.
_AHEAD = """
import json, sys
from vaultmem import forking, reindex
from vaultmem.embed import FakeEmbedder
from vaultmem.vault import Vault
reindex._cores = lambda: 1
forked = []
real = forking.Ahead.__init__
def init(self, work):
    if sys.argv[2] == "no":
        forking.can_fork = lambda: False
    real(self, work)
    forked.append(self.forked)
forking.Ahead.__init__ = init
with Vault.open(sys.argv[1], embedder=FakeEmbedder()) as vault:
    report = vault.reindex()
print(json.dumps({"forked": forked, "vectors": report.vectors, "requeued": report.requeued}))
"""


def test_sidecars_read_ahead_by_a_child_load_the_same_vectors(tmp_path: Path) -> None:
    with make_vault(tmp_path / "v", workers=1) as vault:
        vault.ingest_messages(topic_records(12))
        vault.flush()
        vault.compact()
        vault.ingest_messages(topic_records(3, start=100))  # pending: no vector yet, queued again
        vault.work()
        vault.ingest_messages(topic_records(2, start=200))
    states, said = [], []
    for ahead in ("yes", "no", "yes"):
        child = subprocess.run(
            [sys.executable, "-c", _AHEAD, str(tmp_path / "v"), ahead], capture_output=True, text=True, check=True
        )  # fmt: skip
        said.append(json.loads(child.stdout.strip().splitlines()[-1]))
        with Vault.open(tmp_path / "v", embedder=FakeEmbedder()) as vault:
            states.append(_state(vault.conn))
    assert [s["forked"] for s in said] == [[True], [False], [True]]
    assert said[0] == {**said[1], "forked": [True]} and said[0]["vectors"] > 50
    assert states[0] == states[1] == states[2]
