"""Embedding backends on this machine: throughput, query latency, cold start and agreement with torch.

    .venv/bin/python bench/embed.py [LOCOMO_JSON] [--n 2000] [--rounds 3] [--threads N]
                                    [--cold-runs 3] [--onnx-dir DIR] [--no-onnx]

LOCOMO_JSON (read only) supplies turn texts as the corpus and QA questions as queries; without it a
seeded generator writes varied conversational sentences. The reference is sentence-transformers on
torch, batch 64; "numpy b64" is the second reference (top-10 agreement and largest per-component
difference). "vaultmem onnx" rows are the engine's ONNX Runtime graph (`embed._onnx_graph`). The other ONNX rows come from our own `torch.onnx.export` of the BERT encoder plus
`onnxruntime.quantization.quantize_dynamic` (the sentence-transformers ONNX route needs `optimum`,
whose install would downgrade transformers in this venv). They need the `onnx` package for
quantisation; pass --no-onnx to skip them.

Throughput is measured in interleaved rounds and reported as best and median, because the CPU is
shared with other work; the best round is the closest to an idle machine. The CPU column (process
CPU time per text) is steadier under contention, but only comparable across backends with
`--threads 1`: with more threads it also counts spin-waiting. Prints tables, asserts nothing.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from vaultmem.embed import (  # noqa: E402
    Embedder,
    NumpyBertEmbedder,
    SentenceTransformerEmbedder,
    Vectors,
    _Bf16Bert,
    bf16_available,
    default_model_path,
)

DEFAULT_LOCOMO = Path("/work/shared/datasets/locomo/locomo_dev.json")
QUERIES = 50
TOP_K = 10


# --- data ------------------------------------------------------------------------------------------


def locomo_texts(path: Path, n: int) -> tuple[list[str], list[str]]:
    data = json.loads(path.read_text(encoding="utf-8"))
    turns = [
        turn["text"]
        for sample in data
        for key, session in sample["conversation"].items()
        if key.startswith("session_") and isinstance(session, list)
        for turn in session
        if turn.get("text")
    ]
    questions = [qa["question"] for sample in data for qa in sample.get("qa", []) if qa.get("question")]
    rng = random.Random(7)
    return turns[:n], rng.sample(questions, min(QUERIES, len(questions)))


def generated_texts(n: int) -> tuple[list[str], list[str]]:
    rng = random.Random(7)
    people = ["Mel", "Caroline", "Jon", "Priya", "my sister", "our neighbour", "the kids", "Grandpa"]
    acts = [
        "went hiking near the lake",
        "started a pottery class",
        "adopted a rescue dog named Biscuit",
        "finally fixed the leaking kitchen tap",
        "ran a half marathon in the rain",
        "painted a sunrise over the harbour",
        "moved into a flat with a tiny balcony",
        "got a new job at the library",
        "planted tomatoes and basil in the garden",
        "booked flights to Lisbon for the summer",
    ]
    whens = ["last weekend", "yesterday", "in May", "two weeks ago", "on Friday night", "this morning"]
    moods = [
        "It was exhausting but worth it.",
        "Honestly I'm still a bit nervous about it.",
        "We laughed the whole time!",
        "Not sure it was a good idea, to be honest.",
        "",
        "Can't wait to tell you more when we meet.",
    ]
    openers = ["Hey!", "Guess what,", "So,", "Oh by the way,", "", "Quick update:"]
    texts = []
    for _ in range(n):
        sentence = f"{rng.choice(openers)} {rng.choice(people)} {rng.choice(acts)} {rng.choice(whens)}."
        texts.append(" ".join(f"{sentence} {rng.choice(moods)}".split()))
    queries = [f"When did {rng.choice(people)} {rng.choice(acts).split(' ', 1)[1]}?" for _ in range(QUERIES)]
    return texts, queries


# --- our ONNX export (kept here: it is a measurement, not a vaultmem backend) ----------------------


def export_onnx(model_dir: Path, out_dir: Path) -> dict[str, Path]:
    """Export encoder + mean pooling once (needs torch), then write the int8 variants."""
    import warnings

    out_dir.mkdir(parents=True, exist_ok=True)
    fp32 = out_dir / "model.onnx"
    if not fp32.exists():
        import torch
        from transformers import AutoModel

        bert = AutoModel.from_pretrained(str(model_dir), attn_implementation="eager").eval()

        class MeanPooled(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.bert = bert

            def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
                out = self.bert(
                    input_ids=input_ids,
                    attention_mask=attention_mask,
                    token_type_ids=torch.zeros_like(input_ids),
                ).last_hidden_state
                mask = attention_mask.unsqueeze(-1).to(out.dtype)
                pooled: torch.Tensor = (out * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
                return pooled

        ids = torch.tensor([[101, 7592, 2088, 102], [101, 7592, 102, 0]])
        mask = torch.tensor([[1, 1, 1, 1], [1, 1, 1, 0]])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(
                MeanPooled(),
                (ids, mask),
                str(fp32),
                input_names=["input_ids", "attention_mask"],
                output_names=["embedding"],
                dynamic_axes={"input_ids": {0: "b", 1: "l"}, "attention_mask": {0: "b", 1: "l"}},
                opset_version=17,
                dynamo=False,
            )
    from onnxruntime.quantization import QuantType, quantize_dynamic

    matmuls = [
        f"/bert/encoder/layer.{i}/{part}/dense/MatMul"
        for i in range(6)
        for part in ("intermediate", "output")
    ]
    variants: dict[str, dict[str, Any]] = {
        "int8 per-tensor": {},
        "int8 per-channel": {
            "per_channel": True,
            "op_types_to_quantize": ["MatMul"],
            "extra_options": {"MatMulConstBOnly": True},
        },
        "int8 attn-only": {  # feed-forward kept in fp32: the best quality int8 gets here
            "per_channel": True,
            "op_types_to_quantize": ["MatMul"],
            "extra_options": {"MatMulConstBOnly": True},
            "nodes_to_exclude": matmuls,
        },
    }
    paths = {"fp32": fp32}
    for name, options in variants.items():
        path = out_dir / f"model-{name.replace(' ', '-')}.onnx"
        if not path.exists():
            quantize_dynamic(str(fp32), str(path), weight_type=QuantType.QInt8, **options)
        paths[name] = path
    return paths


class OrtEmbedder:
    """Same tokenisation and length-sorted batching as NumpyBertEmbedder, onnxruntime forward."""

    dim = 384

    def __init__(self, onnx_path: Path, model_dir: Path, batch_size: int = 64, threads: int = 0) -> None:
        import onnxruntime as ort
        from tokenizers import Tokenizer

        self.model_id = f"onnx:{onnx_path.name}"
        self.batch_size = batch_size
        self.tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
        self.tokenizer.no_padding()
        self.tokenizer.enable_truncation(max_length=256)
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.intra_op_num_threads = threads  # 0: one per physical core
        self.session = ort.InferenceSession(str(onnx_path), options, providers=["CPUExecutionProvider"])

    def embed(self, texts: Sequence[str]) -> Vectors:
        encodings = self.tokenizer.encode_batch(list(texts))
        lengths = np.array([len(e.ids) for e in encodings])
        order = np.argsort(-lengths, kind="stable")
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        for start in range(0, len(order), self.batch_size):
            batch = order[start : start + self.batch_size]
            longest = int(lengths[batch[0]])
            ids = np.zeros((len(batch), longest), dtype=np.int64)
            mask = np.zeros_like(ids)
            for row, index in enumerate(batch):
                ids[row, : lengths[index]] = encodings[index].ids
                mask[row, : lengths[index]] = 1
            out[batch] = self.session.run(None, {"input_ids": ids, "attention_mask": mask})[0]
        out /= np.linalg.norm(out, axis=1, keepdims=True)
        return out


# --- measurements ----------------------------------------------------------------------------------


def top_k(queries: Vectors, corpus: Vectors) -> list[set[int]]:
    scores = queries @ corpus.T
    return [set(np.argpartition(-row, TOP_K)[:TOP_K].tolist()) for row in scores]


def p50_query_ms(embedder: Embedder, queries: Sequence[str]) -> float:
    embedder.embed([queries[0]])
    times = []
    for query in queries:
        start = time.perf_counter()
        embedder.embed([query])
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


COLD_SNIPPETS = {
    "numpy": "from vaultmem.embed import load_embedder; load_embedder(backend='numpy').embed([Q])",
    "torch": "from vaultmem.embed import load_embedder; load_embedder(backend='torch').embed([Q])",
}


def cold_start(backend: str, onnx_path: Path | None) -> float:
    """Seconds from spawning a fresh interpreter to the first query vector, interpreter start included."""
    if backend in COLD_SNIPPETS:
        code = COLD_SNIPPETS[backend].replace("Q", repr("what did Caroline paint last summer?"))
        argv = [sys.executable, "-c", f"import sys; sys.path.insert(0, {str(ROOT)!r}); {code}"]
    else:
        argv = [sys.executable, __file__, "--cold-onnx", str(onnx_path)]
    start = time.perf_counter()
    subprocess.run(argv, check=True, capture_output=True, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    return time.perf_counter() - start


def cold_onnx(onnx_path: Path) -> None:
    OrtEmbedder(onnx_path, default_model_path()).embed(["what did Caroline paint last summer?"])
    assert "torch" not in sys.modules


def fmt_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    cells = [list(map(str, header))] + [
        [f"{c:.4f}" if isinstance(c, float) else str(c) for c in r] for r in rows
    ]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    lines = ["| " + " | ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) + " |" for row in cells]
    lines.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "locomo", nargs="?", type=Path, default=DEFAULT_LOCOMO if DEFAULT_LOCOMO.exists() else None
    )
    parser.add_argument("--n", type=int, default=2000, help="corpus size (default 2000)")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved throughput rounds (default 3)")
    parser.add_argument("--cold-runs", type=int, default=3, help="fresh processes per backend (default 3)")
    parser.add_argument("--threads", type=int, default=0, help="cap every runtime's threads (default: all)")
    parser.add_argument("--onnx-dir", type=Path, help="where to cache ONNX exports (default: a temp dir)")
    parser.add_argument("--no-onnx", action="store_true", help="skip the ONNX rows")
    parser.add_argument(
        "--only",
        help="comma-separated name prefixes of the backends to run (the torch reference always runs),"
        " e.g. 'numpy b64,onnx fp32'",
    )
    parser.add_argument("--cold-onnx", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.cold_onnx:
        cold_onnx(args.cold_onnx)
        return

    corpus, queries = locomo_texts(args.locomo, args.n) if args.locomo else generated_texts(args.n)
    model_dir = default_model_path()
    print(f"corpus: {len(corpus)} texts from {args.locomo or 'the generator'}; {len(queries)} queries")
    print(f"cpu: {os.cpu_count()} cores; load average at start {os.getloadavg()[0]:.2f}")
    if args.threads:
        import threadpoolctl
        import torch

        limits = threadpoolctl.threadpool_limits(args.threads)  # NumPy's BLAS
        torch.set_num_threads(args.threads)
        print(f"threads capped at {args.threads} ({limits.get_original_num_threads()})")

    factories: dict[str, Callable[[], Embedder]] = {
        "torch b64 (reference)": lambda: SentenceTransformerEmbedder(str(model_dir), batch_size=64),
        "torch b256": lambda: SentenceTransformerEmbedder(str(model_dir), batch_size=256),
        "numpy b32": lambda: NumpyBertEmbedder(model_dir, batch_size=32, workers=1, runtime="numpy"),
        "numpy b64": lambda: NumpyBertEmbedder(model_dir, batch_size=64, workers=1, runtime="numpy"),
        "numpy b128": lambda: NumpyBertEmbedder(model_dir, batch_size=128, workers=1, runtime="numpy"),
        f"numpy b64, {os.cpu_count()} processes": lambda: NumpyBertEmbedder(
            model_dir, batch_size=64, runtime="numpy"
        ),
        # vaultmem's ONNX Runtime graph (``embed._onnx_graph``), one thread per process
        "vaultmem onnx b64": lambda: NumpyBertEmbedder(model_dir, batch_size=64, workers=1, runtime="onnx"),
        # The default: a process per core shares the batches of a large call (``embed.PARALLEL_MIN``).
        f"vaultmem onnx b64, {os.cpu_count()} processes (fp32 default)": lambda: NumpyBertEmbedder(
            model_dir, batch_size=64, runtime="onnx"
        ),
    }
    if bf16_available():
        # the "bf16" runtime (``embed._Bf16Bert``; the default where the CPU has bfloat16 instructions):
        # out/down in bfloat16, q/k/v and up in float32, by torch
        factories["vaultmem bf16 b64"] = lambda: NumpyBertEmbedder(
            model_dir, batch_size=64, workers=1, runtime="bf16"
        )
        factories[f"vaultmem bf16 b64, {os.cpu_count()} processes (default with bf16)"] = lambda: (
            NumpyBertEmbedder(model_dir, batch_size=64, runtime="bf16")
        )
        # session 11's form: all four linear layers in bfloat16 (one process)
        factories["vaultmem bf16 all-linears b64"] = lambda: _all_linears_bf16(model_dir)
    onnx_paths: dict[str, Path] = {}
    scratch = None
    if not args.no_onnx:
        onnx_dir = args.onnx_dir or Path(scratch := tempfile.mkdtemp(prefix="vaultmem-onnx-"))
        start = time.perf_counter()
        onnx_paths = export_onnx(model_dir, onnx_dir)
        print(f"onnx export + quantisation: {time.perf_counter() - start:.1f} s into {onnx_dir}")
        for name, path in onnx_paths.items():
            factories[f"onnx {name} b64"] = functools.partial(
                OrtEmbedder, path, model_dir, threads=args.threads
            )
    if args.only:
        prefixes = [p.strip() for p in args.only.split(",") if p.strip()]
        factories = {
            name: make
            for name, make in factories.items()
            if name.startswith("torch b64") or any(name.startswith(p) for p in prefixes)
        }
    try:
        run(args, corpus, queries, factories, onnx_paths)
    finally:
        if scratch:
            shutil.rmtree(scratch, ignore_errors=True)


def _all_linears_bf16(model_dir: Path) -> NumpyBertEmbedder:
    """The "bf16" runtime as session 11 shipped it: q/k/v in bfloat16 too (one process)."""

    class AllLinears(_Bf16Bert):
        FLOAT32 = frozenset()

    embedder = NumpyBertEmbedder(model_dir, batch_size=64, workers=1, runtime="bf16")
    embedder._bf16 = AllLinears(embedder._load())
    return embedder


def run(
    args: argparse.Namespace,
    corpus: list[str],
    queries: list[str],
    factories: dict[str, Callable[[], Embedder]],
    onnx_paths: dict[str, Path],
) -> None:
    embedders = {name: make() for name, make in factories.items()}
    for embedder in embedders.values():
        embedder.embed(corpus[:8])  # load weights, warm up

    seconds: dict[str, list[float]] = {name: [] for name in embedders}
    cpu: dict[str, list[float]] = {name: [] for name in embedders}
    vectors: dict[str, Vectors] = {}
    for _ in range(args.rounds):
        for name, embedder in embedders.items():
            start, start_cpu = time.perf_counter(), time.process_time()
            vectors[name] = embedder.embed(corpus)
            seconds[name].append(time.perf_counter() - start)
            cpu[name].append(time.process_time() - start_cpu)

    p50: dict[str, float] = {}
    for _ in range(2):
        for name, embedder in embedders.items():
            p50[name] = min(p50.get(name, float("inf")), p50_query_ms(embedder, queries))

    reference = "torch b64 (reference)"
    ref_top = top_k(embedders[reference].embed(queries), vectors[reference])
    numpy_name = "numpy b64" if "numpy b64" in embedders else None
    numpy_top = top_k(embedders[numpy_name].embed(queries), vectors[numpy_name]) if numpy_name else None
    rows = []
    for name, embedder in embedders.items():
        cosines = np.sum(vectors[name] * vectors[reference], axis=1)
        own_top = top_k(embedder.embed(queries), vectors[name])
        agreement = statistics.mean(len(a & b) / TOP_K for a, b in zip(ref_top, own_top, strict=True))
        numpy_agreement = (
            f"{statistics.mean(len(a & b) / TOP_K for a, b in zip(numpy_top, own_top, strict=True)):.3f}"
            if numpy_top is not None
            else "-"
        )
        max_diff = (
            f"{np.abs(vectors[name] - vectors[numpy_name]).max():.1e}" if numpy_name is not None else "-"
        )
        rows.append(
            [
                name,
                round(len(corpus) / min(seconds[name])),
                round(len(corpus) / statistics.median(seconds[name])),
                f"{min(cpu[name]) / len(corpus) * 1000:.2f}",
                f"{p50[name]:.1f}",
                f"{cosines.mean():.6f}",
                f"{cosines.min():.6f}",
                f"{agreement:.3f}",
                numpy_agreement,
                max_diff,
            ]
        )
    print()
    header = [
        "backend",
        "texts/s best",
        "texts/s median",
        "cpu ms/text",
        "query p50 ms",
        "mean cos",
        "min cos",
        "top-10 agree",
        "top-10 agree (numpy b64)",
        "max abs diff (numpy b64)",
    ]
    print(fmt_table(header, rows))
    if not args.cold_runs:
        return

    cold_backends = ["numpy", "torch"]
    if "int8 per-channel" in onnx_paths:
        cold_backends.append("onnx-int8")
    cold: dict[str, list[float]] = {b: [] for b in cold_backends}
    for _ in range(args.cold_runs):
        for backend in cold_backends:
            cold[backend].append(cold_start(backend, onnx_paths.get("int8 per-channel")))
    print()
    print("cold start: fresh interpreter -> import -> load -> first query vector")
    print(
        fmt_table(
            ["backend", "median s", "best s"],
            [[b, f"{statistics.median(t):.2f}", f"{min(t):.2f}"] for b, t in cold.items()],
        )
    )
    print(f"\nload average at end {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
