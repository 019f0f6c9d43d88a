"""Sentence and key-phrase vectors pooled from the leaf's own forward pass, against embedding them alone.

    python bench/spanpool.py DATASET_PATH --keep DIR [--limit N] [--embed-cache FILE.npz] [--out FILE.json]
                             [--rerun-layers 1,2 [--rerun-limit N]] [--min-cover 0.5,..]

The flush runs every leaf ("Speaker: text") through MiniLM; its last hidden states, mean-pooled over one
sentence's tokens (or one key phrase's), would give compaction a vector for each depth-1 sentence and
title phrase with no forward pass of their own (issue #22: depth-1 sentences are 54% of a first-run
compaction's tokens, key phrases 18%). This bench measures whether such vectors can stand in for the
ones the summariser gets today (each sentence embedded alone, as "Speaker: sentence"):

- **fidelity**: every depth-1 candidate sentence of every leaf, pooled from the leaf's states in two
  forms, ``span`` (its own tokens) and ``span+ctx`` (its tokens with the leaf's [CLS], speaker prefix and
  [SEP]: the tokens its standalone text has), against the sentence embedded alone (NumPy float32, one
  process): cosine mean, 5th percentile, minimum; the leaf's own vector as the floor (what a sentence
  that inherits its leaf's vector gets). Tokens the model reads: the leaves vs the sentences alone (an
  extra pass over each leaf at compaction would read the former instead of the latter).
- ``--rerun-layers M,..``: the last M of the 6 layers run again on each sentence's tokens alone ([CLS],
  prefix, sentence, [SEP], from the leaf's states below them), the first 6-M with the whole leaf in
  view: how much of the gap the last layers carry (costs M/6 of a sentence's forward pass, and the
  leaf's states at layer 6-M kept from the flush). On the first ``--rerun-limit`` conversations.
- **what the summariser makes of them**: every level of the compacted vaults in DIR (``bench/summaries.py
  --keep DIR`` built them; opened as with ``--reuse``) summarised again from the same children by the
  shipped extractive summariser, and by the same summariser whose sentence vectors (``span sentences``)
  and also key-phrase vectors (``span sentences+phrases``: each phrase pooled over its occurrences in
  the level's sentences, averaged) come from the leaves' states, and without sentence vectors at all
  (each sentence ranked by its child's vector: the floor), in one run; ``bench/summaries.py``'s
  metrics (fact recall at 0.70, ROUGE-L, title own-other and names level, per depth). A sentence of a
  summary above depth 1 is the same "Speaker: sentence" text, so it gets the same span vector.
  ``--min-cover C,..``: also rows where only sentences holding at least C of their leaf's tokens take the
  span vector (the others embedded alone); the fidelity table gives the cosine by that share.

Vaults in DIR are opened, never rebuilt: copy them first (``Vault.open`` may bring the index up to date).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

sys.path.insert(0, str(Path(__file__).parent))
from _common import table
from retrieval import CachingEmbedder, load_locomo
from summaries import DEFAULT_THRESHOLD, evaluate, locomo_facts, report

from vaultmem import Vault
from vaultmem.embed import NumpyBertEmbedder, _Bert, _gelu, _layer_norm, default_model_path, load_embedder
from vaultmem.summarise import _SPEAKER_PREFIX_RE, Child, ExtractiveSummariser, Summary, _candidates

Array = npt.NDArray[np.float32]


def _layers(bert: _Bert, x: Array, mask: Array, layers: Sequence[Any]) -> Array:
    """``layers`` of the encoder over hidden states ``x`` (batch, length, hidden): NumpyBertEmbedder's
    ``_forward`` without its pooling."""
    batch, length, hidden = x.shape
    head_dim = hidden // bert.heads
    flat = x.reshape(batch * length, hidden)
    key_bias = ((mask - 1.0) * np.float32(1e9))[:, None, None, :]
    for layer in layers:
        qkv = flat @ layer.qkv_w + layer.qkv_b
        q, k, v = qkv.reshape(batch, length, 3, bert.heads, head_dim).transpose(2, 0, 3, 1, 4)
        scores = q @ k.transpose(0, 1, 3, 2) + key_bias
        scores -= scores.max(axis=-1, keepdims=True)
        scores = np.exp(scores)
        scores /= scores.sum(axis=-1, keepdims=True)
        context = (scores @ v).transpose(0, 2, 1, 3).reshape(batch * length, hidden)
        flat = _layer_norm(context @ layer.out_w + layer.out_b + flat, layer.ln1_g, layer.ln1_b, bert.eps)
        inner = _gelu(flat @ layer.up_w + layer.up_b)
        flat = _layer_norm(inner @ layer.down_w + layer.down_b + flat, layer.ln2_g, layer.ln2_b, bert.eps)
    out: Array = flat.reshape(batch, length, hidden)
    return out


def _inputs(bert: _Bert, ids: npt.NDArray[np.int64]) -> Array:
    batch, length = ids.shape
    x = bert.word[ids] + bert.position[:length] + bert.token_type
    out: Array = _layer_norm(x.reshape(batch * length, -1), bert.ln_g, bert.ln_b, bert.eps).reshape(
        batch, length, -1
    )
    return out


def _unit(v: npt.NDArray[Any]) -> Array:
    out: Array = (v / max(float(np.linalg.norm(v)), 1e-12)).astype(np.float32)
    return out


class Leaves:
    """The leaves of some vaults with their last hidden states, and where each candidate sentence lies."""

    def __init__(self, embedder: NumpyBertEmbedder) -> None:
        self.embedder = embedder
        self.bert = embedder._load()
        self.lower = bool(embedder._st_settings.get("do_lower_case"))
        self.states: dict[str, tuple[Any, Array]] = {}  # leaf key -> (encoding, states)
        self.sentence: dict[str, dict[str, Array]] = {"span": {}, "span+ctx": {}, "leaf": {}}
        self.where: dict[str, tuple[str, int]] = {}  # phrase text of a sentence -> (leaf, its offset)
        self.spans: dict[str, tuple[str, list[int]]] = {}  # display -> (leaf, its span+ctx tokens)
        self.cover: dict[str, float] = {}  # display -> share of its leaf's tokens the sentence holds
        self.leaf_tokens = 0
        self.texts: dict[str, str] = {}  # leaf key -> the text embedded
        self._below: tuple[tuple[str, int], Array] = (("", 0), np.zeros((0, 0, 0), np.float32))

    def tokens_in(self, encoding: Any, start: int, end: int) -> list[int]:
        return [
            t
            for t, (a, b) in enumerate(encoding.offsets)
            if b > a and a < end and b > start and not encoding.special_tokens_mask[t]
        ]

    def add(self, name: str, rows: Sequence[tuple[str, str, str | None]]) -> None:
        """Leaves ``rows`` (id, text, speaker) of vault ``name``: one batched pass, states kept."""
        texts = [f"{s}: {t}" if s else t for _, t, s in rows]
        encodings = self.bert.tokenizer.encode_batch([t.lower() for t in texts] if self.lower else texts)
        order = np.argsort([-len(e.ids) for e in encodings], kind="stable")
        for lo in range(0, len(order), 32):
            batch = order[lo : lo + 32]
            longest = max(len(encodings[i].ids) for i in batch)
            ids = np.zeros((len(batch), longest), dtype=np.int64)
            mask = np.zeros((len(batch), longest), dtype=np.float32)
            for r, i in enumerate(batch):
                ids[r, : len(encodings[i].ids)] = encodings[i].ids
                mask[r, : len(encodings[i].ids)] = 1.0
            states = _layers(self.bert, _inputs(self.bert, ids), mask, self.bert.layers)
            for r, i in enumerate(batch):
                n = len(encodings[i].ids)
                self.states[f"{name}/{rows[i][0]}"] = (encodings[i], states[r, :n])
                self.texts[f"{name}/{rows[i][0]}"] = texts[i]
                self.leaf_tokens += n
        for (leaf_id, text, speaker), full in zip(rows, texts, strict=True):
            key = f"{name}/{leaf_id}"
            encoding, states = self.states[key]
            prefix = len(full) - len(text)
            before = self.tokens_in(encoding, 0, prefix) if prefix else []
            candidates, _ = _candidates([Child(text, None, speaker=speaker)])
            pos = 0
            for c in candidates:
                at = text.find(c.sentence, pos)
                at = at if at >= 0 else text.find(c.sentence)
                if at < 0:
                    continue
                pos = at + len(c.sentence)
                own = self.tokens_in(encoding, prefix + at, prefix + at + len(c.sentence))
                if not own:  # cut off by the model's length limit
                    continue
                display = c.display if speaker else c.sentence
                if display not in self.sentence["span"]:
                    ctx = sorted({0, len(encoding.ids) - 1, *before, *own})
                    self.sentence["span"][display] = _unit(states[own].mean(axis=0))
                    self.sentence["span+ctx"][display] = _unit(states[ctx].mean(axis=0))
                    self.sentence["leaf"][display] = _unit(states.mean(axis=0))
                    self.spans[display] = (key, ctx)
                    self.cover[display] = len(own) / max(1, len(encoding.ids) - 2)
                m = _SPEAKER_PREFIX_RE.match(c.sentence)
                self.where.setdefault(
                    c.sentence[m.end() :] if m else c.sentence, (key, prefix + at + (m.end() if m else 0))
                )

    def rerun(self, display: str, last: int) -> Array:
        """``display``'s vector with the last ``last`` layers run on its own tokens only."""
        key, ctx = self.spans[display]
        if self._below[0] != (key, last):  # sentences come leaf by leaf: the leaf's lower layers once
            encoding, _ = self.states[key]
            ids = np.array([encoding.ids], dtype=np.int64)
            lower = self.bert.layers[: 6 - last]
            below = _layers(self.bert, _inputs(self.bert, ids), np.ones(ids.shape, np.float32), lower)
            self._below = ((key, last), below)
        sub = self._below[1][:, ctx]
        out = _layers(self.bert, sub, np.ones((1, len(ctx)), np.float32), self.bert.layers[6 - last :])
        return _unit(out[0].mean(axis=0))

    def phrase(self, phrase: str, texts: Sequence[str]) -> Array | None:
        """``phrase`` pooled over its occurrences in ``texts`` (phrase texts of sentences), averaged."""
        pattern = re.compile(
            r"(?<!\w)" + r"\s+".join(re.escape(w) for w in phrase.split()) + r"(?!\w)", re.IGNORECASE
        )
        found = []
        for text in texts:
            key, base = self.where[text]
            encoding, states = self.states[key]
            for m in pattern.finditer(text):
                own = self.tokens_in(encoding, base + m.start(), base + m.end())
                if own:
                    found.append(states[own].mean(axis=0))
        return _unit(np.mean(found, axis=0)) if found else None


class SpanSummariser(ExtractiveSummariser):
    """The shipped extractive summariser, its sentence (and key phrase) vectors taken from ``leaves``
    where they are known, the standalone ones (``embedder``) otherwise."""

    def __init__(
        self, embedder: CachingEmbedder, leaves: Leaves, form: str, phrases: bool, min_cover: float = 0.0
    ) -> None:
        super().__init__(self._vectors)
        self.real, self.leaves, self.form, self.phrases = embedder, leaves, form, phrases
        self.min_cover = min_cover
        cover = f", sentences holding >= {min_cover:g} of their leaf" if min_cover else ""
        self.name = f"{form} sentences{'+phrases' if phrases else ''}{cover}"
        self.counts = {"sentences": 0, "sentences alone": 0, "phrases": 0, "phrases alone": 0}
        self._children: list[Child] = []

    def summarise(self, children: Sequence[Child], depth: int, **told: Any) -> Summary:
        self._children = list(children)
        return super().summarise(children, depth, **told)

    def _vectors(self, texts: list[str]) -> Array:
        out: Array = np.array(self.real.embed(texts), dtype=np.float32)
        known = self.leaves.sentence[self.form]
        if any(t in known for t in texts):  # a call of sentences
            for j, text in enumerate(texts):
                span = text in known and self.leaves.cover[text] >= self.min_cover
                if span:
                    out[j] = known[text]
                self.counts["sentences" if span else "sentences alone"] += 1
            return out
        if not self.phrases:
            return out
        candidates, _ = self._picked_candidates(self._children)
        phrase_texts, _ = self._phrase_texts(self._children, candidates)
        located = [t for t in phrase_texts or [] if t in self.leaves.where]
        for j, phrase in enumerate(texts):
            pooled = self.leaves.phrase(phrase, located)
            if pooled is not None:
                out[j] = pooled
            self.counts["phrases" if pooled is not None else "phrases alone"] += 1
        return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dataset", type=Path)
    parser.add_argument(
        "--keep", type=Path, required=True, help="compacted vaults (bench/summaries.py --keep)"
    )
    parser.add_argument("--limit", type=int, default=None, help="only the first N conversations")
    parser.add_argument("--embed-cache", type=Path, default=None, help="memo of text -> vector (.npz)")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument(
        "--rerun-layers", type=lambda v: [int(x) for x in v.split(",") if x], default=[], help="e.g. 1,2"
    )
    parser.add_argument(
        "--min-cover",
        type=lambda v: [float(x) for x in v.split(",") if x],
        default=[],
        help="also span vectors only for sentences holding at least this share of their leaf, e.g. 0.5",
    )
    parser.add_argument("--rerun-limit", type=int, default=2, help="conversations for --rerun-layers")
    args = parser.parse_args()
    data = json.loads(args.dataset.read_text(encoding="utf-8"))
    items = load_locomo(data)[: args.limit] if args.limit else load_locomo(data)
    facts = locomo_facts(data)
    reference = NumpyBertEmbedder(default_model_path(), runtime="numpy", workers=1)
    leaves = Leaves(reference)
    rerun_keys: list[str] = []
    for n, item in enumerate(items):
        name = re.sub(r"[^A-Za-z0-9_-]", "_", item.key)
        path = args.keep / name
        if not path.exists():
            raise SystemExit(f"{path}: no vault (build it with bench/summaries.py --keep {args.keep})")
        vault = Vault.open(path)
        rows = [
            (r["id"], r["text"], r["speaker"])
            for r in vault.conn.execute(
                "SELECT id, text, speaker FROM chunks WHERE kind = 'leaf' AND path LIKE 'sources/%'"
                " ORDER BY ts, path"
            )
        ]
        vault.close()
        before = set(leaves.spans)
        leaves.add(name, rows)
        if n < args.rerun_limit:
            rerun_keys += [d for d in leaves.spans if d not in before]
        print(f"  {item.key}: {len(rows)} leaves, {len(leaves.spans)} sentences", file=sys.stderr)
    displays = list(leaves.spans)
    some = list(leaves.texts)[:16]  # this bench's forward pass is the embedder's: pooled, the same rows
    pooled = np.stack([_unit(leaves.states[k][1].mean(axis=0)) for k in some])
    check = float(np.abs(pooled - reference.embed([leaves.texts[k] for k in some])).max())
    alone = reference.embed(displays)
    sentence_tokens = sum(
        len(e.ids)
        for e in leaves.bert.tokenizer.encode_batch(
            [d.lower() for d in displays] if leaves.lower else displays
        )
    )
    rows_out: list[list[object]] = []
    fidelity: dict[str, dict[str, float]] = {}

    def row(label: str, matrix: npt.NDArray[Any], ref: npt.NDArray[Any]) -> None:
        cos = (matrix * ref).sum(axis=1)
        fidelity[label] = {
            "n": len(cos),
            "mean": float(cos.mean()),
            "p5": float(np.percentile(cos, 5)),
            "min": float(cos.min()),
        }
        rows_out.append(
            [label, len(cos), f"{cos.mean():.4f}", f"{np.percentile(cos, 5):.4f}", f"{cos.min():.4f}"]
        )

    for form in ("leaf", "span", "span+ctx"):
        row(
            form if form != "leaf" else "the leaf's own vector",
            np.stack([leaves.sentence[form][d] for d in displays]),
            alone,
        )
    index = {d: i for i, d in enumerate(displays)}
    ctx_matrix = np.stack([leaves.sentence["span+ctx"][d] for d in displays])
    cover = np.array([leaves.cover[d] for d in displays])
    for lo, hi in ((0.0, 0.34), (0.34, 0.67), (0.67, 1.01)):
        inside = (cover >= lo) & (cover < hi)
        if inside.any():
            row(
                f"span+ctx, sentence holds {lo:.2f}-{min(hi, 1.0):.2f} of its leaf",
                ctx_matrix[inside],
                alone[inside],
            )
    for last in args.rerun_layers:
        matrix = np.stack([leaves.rerun(d, last) for d in rerun_keys])
        row(
            f"last {last} layer(s) per sentence ({args.rerun_limit} conv.)",
            matrix,
            alone[[index[d] for d in rerun_keys]],
        )
    print(f"check: {len(some)} leaves pooled here against the embedder's rows, max |diff| {check:.1e}")
    print(table(["sentence vector", "sentences", "cos mean", "cos p5", "cos min"], rows_out))
    print(
        f"tokens the model reads: leaves {leaves.leaf_tokens:,} (each leaf once), depth-1 sentences alone "
        f"{sentence_tokens:,} ({len(displays):,} distinct)"
    )
    embedder = CachingEmbedder(load_embedder("default"))
    embedder.load(args.embed_cache)
    shipped = ExtractiveSummariser(embedder.embed)
    spans = [
        SpanSummariser(embedder, leaves, "span+ctx", False),
        SpanSummariser(embedder, leaves, "span+ctx", True),
        *(SpanSummariser(embedder, leaves, "span+ctx", False, c) for c in args.min_cover),
    ]
    result = evaluate(
        items,
        facts,
        embedder,
        [shipped, *spans, ExtractiveSummariser()],
        args.keep,
        DEFAULT_THRESHOLD,
        None,
        lambda m: print(m, file=sys.stderr),
        True,
    )
    result["dataset"] = "locomo"
    result["fidelity"] = fidelity
    result["tokens"] = {"leaves": leaves.leaf_tokens, "sentences": sentence_tokens, "distinct": len(displays)}
    result["span_counts"] = {s.name: s.counts for s in spans}
    embedder.save(args.embed_cache)
    print(report(result, DEFAULT_THRESHOLD))
    for s in spans:
        print(f"{s.name}: {s.counts}")
    if args.out:
        args.out.write_text(json.dumps(result, indent=2, default=float))


if __name__ == "__main__":
    main()
