"""Compaction embeds the calls of a seal batch's new levels together (``Remembering.prepare``, the NumPy
embedder sharing their batches with its workers), and the tree it writes is the one it wrote when each
level embedded its own texts as it came: same summaries, same titles, same vectors, row for row."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest

from tests.helpers import CONFIG, RecordingEmbedder, topic_records
from vaultmem import embed
from vaultmem.embed import Embedder, FakeEmbedder, NumpyBertEmbedder, Remembering, default_model_path
from vaultmem.vault import Vault


class _Calls(RecordingEmbedder):
    """The recording fake embedder at MiniLM's width."""

    def __init__(self) -> None:
        super().__init__(384)


def _tree(root: Path, embedder: Embedder, fanout: int = 50) -> dict[str, object]:
    """Compact a chat of 160 turns; the summary files' bytes and every summary's vector."""
    with Vault.init(root, CONFIG.format(fanout=fanout, workers=1), embedder=embedder) as vault:
        vault.ingest_messages(topic_records(40))
        vault.flush()
        report = vault.compact()
        assert report.jobs_failed == 0 and report.levels >= 6
        files = {
            str(p.relative_to(root)): p.read_bytes()
            for p in sorted((root / "sources").rglob("*.md"))
            if "/_fresh/" not in str(p) and p.name.startswith("_")
        }
        conn = sqlite3.connect(root / ".vaultmem" / "chunks.db")
        vectors = dict(
            conn.execute(
                "SELECT c.path, v.vec FROM chunks c JOIN vectors v ON v.id = c.id WHERE c.kind = 'summary'"
            )
        )
        conn.close()
    assert files and len(vectors) >= report.levels
    return {"files": files, "vectors": vectors}


def test_gathered_calls_write_the_tree_the_calls_one_by_one_wrote(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(embed, "PARALLEL_MIN", 32)  # this small chat's batches are gathered too
    # Each seal pass remembers on its own (the vault's shared memory would have the day digests embed
    # some of the seal's texts first: ``test_one_remembering_serves_every_seal_digest_and_resummary``).
    monkeypatch.setattr(Vault, "remembering", property(lambda self: Remembering(self.embedder)))
    gathered = _Calls()
    now = _tree(tmp_path / "now", gathered)
    together = gathered.gathered_sizes
    assert together and max(len(g) for g in together) >= 6  # several levels' calls at once
    with monkeypatch.context() as m:
        m.setattr(Remembering, "prepare", lambda self, calls: None)  # each level embeds as it comes
        alone = _Calls()
        before = _tree(tmp_path / "before", alone)
    assert not alone.gathered_sizes
    assert now == before
    # The texts embedded together were no longer asked for one level at a time, and nothing was
    # embedded twice (the rest: the leaves at ingest, the summaries' vectors, the parents).
    assert sum(gathered.alone_sizes) + sum(map(sum, gathered.gathered_sizes)) == sum(alone.alone_sizes)
    assert sum(map(sum, gathered.gathered_sizes)) >= 150


def test_a_seal_batchs_gathered_calls_run_without_the_write_lock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The seal pass asks for its batch's embedding ahead of the step (``EmbedAhead``): the gathered
    calls run while this thread does not hold the write lock, so other jobs can write meanwhile; the
    step then finds them remembered (nothing embedded twice: the first test's count)."""
    monkeypatch.setattr(embed, "PARALLEL_MIN", 32)
    holding: list[int] = []
    vaults: list[Vault] = []

    class Noting(_Calls):
        def embed_calls(self, calls: Sequence[Sequence[str]]) -> list[npt.NDArray[np.float32]]:
            holding.append(vaults[0]._write_lock._turns.depth)
            return super().embed_calls(calls)

    original = Vault.init

    def init(*args: object, **kwargs: object) -> Vault:
        vault = original(*args, **kwargs)  # type: ignore[arg-type]
        vaults.append(vault)
        return vault

    monkeypatch.setattr(Vault, "init", init)
    _tree(tmp_path / "now", Noting())
    assert holding and holding == [0] * len(holding)


def test_condensation_gathers_its_new_parents_calls_and_writes_the_same_tree(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The new parents of one condensation step are summarised one by one; their embedding calls are
    embedded together first (as a seal batch's levels' are), and the tree is the one written without."""
    from vaultmem import summarise
    from vaultmem.compact import Planner

    monkeypatch.setattr(embed, "PARALLEL_MIN", 2)
    # The parents' lines are remembered from the seals (a chat leaf's sentence is embedded as its line reads),
    # which leaves this small tree's condensation next to nothing to gather: embed them bare here, as before.
    monkeypatch.setattr(
        summarise, "_vector_texts", lambda candidates: [c.sentence for c in candidates if c.vector is None]
    )
    condensing: list[bool] = []
    original = Planner._condense_peers

    def condense(self: Planner, *args: object) -> object:
        condensing.append(True)
        try:
            return original(self, *args)  # type: ignore[arg-type]
        finally:
            condensing.pop()

    monkeypatch.setattr(Planner, "_condense_peers", condense)
    in_condensation: list[list[int]] = []

    class Noting(_Calls):
        def embed_calls(self, calls: Sequence[Sequence[str]]) -> list[npt.NDArray[np.float32]]:
            if condensing:
                in_condensation.append([len(c) for c in calls])
            return super().embed_calls(calls)

    now = _tree(tmp_path / "now", Noting(), fanout=3)
    assert in_condensation and max(len(g) for g in in_condensation) >= 2  # parents' calls embedded together
    with monkeypatch.context() as m:
        m.setattr(Remembering, "prepare", lambda self, calls: None)  # each parent embeds as it comes
        before = _tree(tmp_path / "before", _Calls(), fanout=3)
    assert now == before


@pytest.mark.slow
def test_gathered_calls_keep_every_vector_and_summary_with_minilm(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The real model on two processes: a batch is the same batch wherever it runs, so the rows are
    bit for bit the ones each level's own call gave."""
    monkeypatch.setattr(embed, "PARALLEL_MIN", 32)  # this small chat's batches are gathered, shared too
    monkeypatch.setattr(Vault, "remembering", property(lambda self: Remembering(self.embedder)))  # per pass
    gathered: list[int] = []

    class Gathering(NumpyBertEmbedder):
        def embed_calls(self, calls: Sequence[Sequence[str]]) -> list[npt.NDArray[np.float32]]:
            gathered.append(len(calls))
            return super().embed_calls(calls)

    now = _tree(tmp_path / "now", Gathering(default_model_path(), workers=2))
    assert gathered and max(gathered) >= 6  # several levels' calls embedded together
    original = Remembering.prepare
    try:
        Remembering.prepare = lambda self, calls: None  # type: ignore[method-assign]
        before = _tree(tmp_path / "before", NumpyBertEmbedder(default_model_path(), workers=2))
    finally:
        Remembering.prepare = original  # type: ignore[method-assign]
    assert now["files"] == before["files"]
    assert now["vectors"] == before["vectors"]  # the float32 bytes


def test_one_remembering_serves_every_seal_digest_and_resummary_of_the_vault(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The day digests and re-summaries summarise sentences the seal already embedded: through the
    vault's one ``Remembering`` they are not embedded again, and the tree is the one written when each
    pass and each summary embedded on its own."""
    shared = _Calls()
    now = _tree(tmp_path / "now", shared, fanout=3)
    with monkeypatch.context() as m:
        m.setattr(Vault, "remembering", property(lambda self: Remembering(self.embedder)))  # one per use
        alone = _Calls()
        before = _tree(tmp_path / "before", alone, fanout=3)
    assert now == before
    embedded_now = sum(shared.alone_sizes) + sum(map(sum, shared.gathered_sizes))
    embedded_before = sum(alone.alone_sizes) + sum(map(sum, alone.gathered_sizes))
    assert embedded_now < 0.7 * embedded_before, (embedded_now, embedded_before)


def test_a_call_waits_for_the_rows_another_threads_prepare_is_embedding(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A seal's and the day digests' gathered calls share sentences: a text one thread is embedding in
    ``prepare`` is not sent to the model again by another thread's call, which gets the same row."""
    import threading

    monkeypatch.setattr(embed, "PARALLEL_MIN", 2)
    started, release = threading.Event(), threading.Event()

    class Slow(_Calls):
        def embed_calls(self, calls: Sequence[Sequence[str]]) -> list[npt.NDArray[np.float32]]:
            started.set()
            assert release.wait(30)
            return super().embed_calls(calls)

    inner = Slow()
    remembering = Remembering(inner)
    preparing = threading.Thread(target=remembering.prepare, args=([["a b c", "d e f"], ["g h i"]],))
    preparing.start()
    assert started.wait(30)
    rows: list[npt.NDArray[np.float32]] = []
    asking = threading.Thread(target=lambda: rows.append(remembering.embed(["d e f", "x y z"])))
    asking.start()
    asking.join(0.5)
    assert asking.is_alive()  # waiting for "d e f" (it would have embedded it at once)
    release.set()
    preparing.join(30)
    asking.join(30)
    assert inner.gathered_sizes == [[2, 1]] and inner.alone_sizes == [
        1
    ]  # only "x y z" went to the model again
    assert np.array_equal(rows[0], FakeEmbedder(384).embed(["d e f", "x y z"]))
    assert remembering.computed == 4


def test_a_failed_prepare_lets_the_waiting_call_embed_the_text_itself(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(embed, "PARALLEL_MIN", 2)

    class Failing(_Calls):
        def embed_calls(self, calls: Sequence[Sequence[str]]) -> list[npt.NDArray[np.float32]]:
            raise RuntimeError("worker gone")

    inner = Failing()
    remembering = Remembering(inner)
    with pytest.raises(RuntimeError):
        remembering.prepare([["a b c"], ["d e f"]])
    assert np.array_equal(remembering.embed(["a b c"]), FakeEmbedder(384).embed(["a b c"]))
    assert inner.alone_sizes == [1]
