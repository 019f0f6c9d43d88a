"""The HNSW graph over a vector matrix file: candidates for a large vault's vector search.

Owns the graph file (``.vaultmem/vectors-<key>.hnsw`` and its ``.hnsw.json`` header): an HNSW graph
(usearch, inner product) over the rows of one matrix file, in the same row order, so a graph key is a
row of that matrix. Derived like the matrix: the header names the matrix it was built from (model, dim,
epoch, seq, count and a hash of its ids); a graph of any other matrix is never opened, and a damaged one,
or no usearch, means no graph (search scores exactly or by sign bits instead). A new process maps the
graph (``view``) rather than reading it.

The graph only proposes candidates: callers re-score them exactly against the matrix (``VectorCache``).
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from vaultmem.interrupts import interrupts_held

# Measured for #22 on 100,000 hashed 384-dim vectors (bench/scale.py's, harder for a graph than real
# sentence embeddings), loaded 2-core machine, per query for 100 candidates: brute force 48.7 ms, sign bits
# about 11 ms, this graph 2.1 ms at recall@100 0.9994 (recall@10 1.0) after exact re-scoring; building it
# took 119 s on two threads. Connectivity 16, 64 while building, 256 while searching.
CONNECTIVITY = 16
EXPANSION_ADD = 64
EXPANSION_SEARCH = 256
# Below this many rows a matrix file gets no graph: exact scoring (or sign bits above
# ``vectors.APPROX_ABOVE``) costs a few milliseconds, less than keeping a graph current costs writers.
GRAPH_MIN = 50_000


@dataclass(frozen=True)
class GraphFile:
    """Where one model's graph lives, beside its matrix file."""

    data: Path
    header: Path

    @classmethod
    def beside(cls, matrix: Path) -> GraphFile:
        return cls(matrix.with_suffix(".hnsw"), matrix.with_suffix(".hnsw.json"))


def matrix_key(model: str, dim: int, epoch: str, seq: int, ids: Sequence[str]) -> dict[str, Any]:
    """What names one matrix file's content: a graph built from it carries the same."""
    digest = hashlib.sha256("\n".join(ids).encode("utf-8")).hexdigest()
    return {"model": model, "dim": dim, "epoch": epoch, "seq": seq, "count": len(ids), "ids": digest}


def _usearch_index() -> Any:
    """``usearch.index.Index``, imported safely for ONNX Runtime (``embed``) loaded after it.

    usearch's Linux wheel carries its own static copy of the C++ runtime. Once it is loaded, importing
    ONNX Runtime, whose module links the system's libstdc++, crashed the process (SIGSEGV in
    ``std::codecvt``, usearch 2.26 with onnxruntime 1.32): a search of a large vault (which opens the
    graph) followed by a batch embed or the query runtime in the same process (a server, the daemon, the
    Python API). Loading the system libstdc++ first, with its symbols global, avoids it; where there is
    none (macOS, a static build) nothing changes."""
    global _stdcxx
    if _stdcxx is None and sys.platform.startswith("linux"):
        import ctypes

        try:
            _stdcxx = ctypes.CDLL("libstdc++.so.6", mode=os.RTLD_GLOBAL)
        except OSError:
            _stdcxx = False
    with interrupts_held():  # native code loading on the main thread (``interrupts``)
        from usearch.index import Index

    return Index


_stdcxx: Any = None  # the system C++ runtime, loaded once before usearch (``_usearch_index``)


def available() -> bool:
    try:
        _usearch_index()
    except ImportError:  # pragma: no cover - a dependency; without it search scores without a graph
        return False
    return True


class Graph:
    """An opened (memory-mapped) graph over the first ``count`` rows of a matrix."""

    def __init__(self, index: Any, count: int) -> None:
        self._index = index
        self.count = count

    def search(self, query: npt.NDArray[np.float32], n: int) -> npt.NDArray[np.intp]:
        """Rows proposed as the ``n`` nearest to ``query`` (unordered; fewer when the graph is small)."""
        n = min(n, self.count)
        if n <= 0:
            return np.zeros(0, dtype=np.intp)
        found = self._index.search(np.ascontiguousarray(query, dtype=np.float32), n)
        return np.asarray(found.keys, dtype=np.intp)


def open_graph(files: GraphFile, key: dict[str, Any]) -> Graph | None:
    """The graph at ``files`` when it was built from the matrix named by ``key``; else None (none, of
    another matrix, damaged, or no usearch)."""
    try:
        header = json.loads(files.header.read_text(encoding="utf-8"))
        if not isinstance(header, dict) or header.get("matrix") != key:
            return None
        index = _usearch_index().restore(str(files.data), view=True, expansion_search=EXPANSION_SEARCH)
        if index is None or len(index) != key["count"] or index.ndim != key["dim"]:
            return None
        return Graph(index, key["count"])
    except (OSError, ValueError, TypeError, KeyError, RuntimeError, ImportError):
        return None


def graph_behind(files: GraphFile, key: dict[str, Any]) -> bool:
    """True when the matrix named by ``key`` is large enough for a graph and has none of its own."""
    if key["count"] < GRAPH_MIN or not available():
        return False
    try:
        header = json.loads(files.header.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return True
    return not isinstance(header, dict) or header.get("matrix") != key or not files.data.is_file()


def build(matrix: npt.NDArray[np.float32], threads: int | None = None) -> bytes:
    """The serialised graph over every row of ``matrix`` (row number = key)."""
    index = _usearch_index()(
        ndim=matrix.shape[1],
        metric="ip",
        dtype="f32",
        connectivity=CONNECTIVITY,
        expansion_add=EXPANSION_ADD,
        expansion_search=EXPANSION_SEARCH,
    )
    if len(matrix):
        index.add(
            np.arange(len(matrix), dtype=np.uint64),
            np.ascontiguousarray(matrix, dtype=np.float32),
            threads=threads or os.cpu_count() or 1,
        )
    data = index.save()
    assert isinstance(data, (bytes, bytearray, memoryview))
    return bytes(data)


def header_bytes(key: dict[str, Any]) -> bytes:
    return json.dumps(
        {
            "matrix": key,
            "connectivity": CONNECTIVITY,
            "expansion_add": EXPANSION_ADD,
        }
    ).encode("utf-8")
