"""End to end with the real all-MiniLM-L6-v2 model (marked slow): ingest, embed, search, reindex, CLI."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.helpers import EXAMPLES_CONFIG, ingest_examples, pin_runtime
from vaultmem import Vault, embed
from vaultmem.embed import load_embedder

# The timeout guards against a hang, not a slow machine: a full compaction with the real model took 61 s
# alone and went past the suite's 300 s while two suites shared the 2 cores.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]

TURNS = [
    ("1", "Mara", "We finally adopted a rescue greyhound called Pixel last weekend."),
    ("2", "Mara", "The quarterly invoice INV-88213 still has not been paid by the client."),
    ("3", "Diego", "I booked the ryokan in Kyoto; check-in is at three in the afternoon."),
    ("4", "Chen Jing", "雾凇拼音装好了，候选词一页只有七个。"),
    ("5", "Diego", "My favourite breakfast is a pastel de nata with strong black coffee."),
]


@pytest.fixture(scope="module")
def real_vault(tmp_path_factory: pytest.TempPathFactory) -> Vault:
    vault = Vault.init(tmp_path_factory.mktemp("real") / "v", embedder=load_embedder())
    vault.ingest_messages(
        [{"id": i, "speaker": who, "content": text, "session": "s1"} for i, who, text in TURNS], source="chat"
    )
    report = vault.flush()
    assert report.embedded == len(TURNS)
    return vault


def top(vault: Vault, query: str) -> str:
    return vault.search(query, k=1)[0].message_ids[0]


def test_semantic_match_without_shared_words(real_vault: Vault) -> None:
    assert top(real_vault, "which dog did they get from the shelter?") == "1"
    assert top(real_vault, "hotel reservation in Japan") == "3"


def test_lexical_match_on_an_identifier(real_vault: Vault) -> None:
    assert top(real_vault, "INV-88213") == "2"


def test_chinese_query(real_vault: Vault) -> None:
    assert top(real_vault, "雾凇拼音") == "4"


def test_reindex_reuses_every_vector(real_vault: Vault) -> None:
    report = real_vault.reindex()
    assert report.vectors == len(TURNS) and report.requeued == 0
    assert real_vault.flush().embedded == 0
    assert top(real_vault, "what does Diego like to eat in the morning") == "5"


def test_cli_search_end_to_end(tmp_path: Path) -> None:
    inbox = tmp_path / "chat.json"
    inbox.write_text(json.dumps([{"id": i, "speaker": w, "content": t} for i, w, t in TURNS]))
    vault = tmp_path / "v"
    env = {**os.environ, "VAULTMEM_VAULT": str(vault)}
    cli = [sys.executable, "-m", "vaultmem.cli"]
    subprocess.run([*cli, "init", str(vault)], check=True, env=env, capture_output=True)
    pin_runtime(vault)  # the same runtime on every CPU (``pin_runtime``)
    out = subprocess.run(
        [*cli, "ingest", str(inbox), "--wait", "--json"], check=True, env=env, capture_output=True
    )
    assert json.loads(out.stdout)["embedded"] == len(TURNS)
    out = subprocess.run(
        [*cli, "search", "a pet from the rescue", "--k", "2", "--json"],
        check=True,
        env=env,
        capture_output=True,
    )
    hits = json.loads(out.stdout)
    assert hits[0]["provenance"]["message_ids"] == ["1"]
    probe = "import sys, vaultmem.cli; vaultmem.cli.main(sys.argv[1:]); assert 'torch' not in sys.modules"
    out = subprocess.run(
        [sys.executable, "-c", probe, "search", "greyhound"], env=env, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    assert "Pixel" in out.stdout


def test_topics_digest_and_time_questions_on_the_sample_inputs_with_the_real_model(tmp_path: Path) -> None:
    """The sample vault's inputs, built from scratch with the real model: topics and digests follow."""
    with Vault.init(tmp_path / "v", EXAMPLES_CONFIG, embedder=load_embedder()) as vault:
        ingest_examples(vault)
        report = vault.compact()
        assert report.jobs_failed == 0 and report.topics > 0
        kyoto = vault.topic("Kyoto", 3)
        assert kyoto.entity.key == "place:kyoto" and kyoto.entity.topic == "topics/place-kyoto/_summary.md"
        assert kyoto.summary.startswith("Latest (2026-03-09") and all("Kyoto" in x.text for x in kyoto.recent)
        (day,) = vault.global_digest("2026-03-09")
        assert day.period == "day" and day.descendants > 0 and all(c.wiki for c in day.children)
        hits = vault.search("what did we plan on 9 March 2026?", 3)
        assert all(h.ts is not None and h.ts.startswith("2026-03-09") for h in hits)
        assert vault.check().ok


def _cli_vectors(tmp_path: Path, name: str, runtime: str, inbox: Path) -> dict[str, np.ndarray]:
    """The vectors a CLI subprocess stores for ``inbox``'s turns in a new vault pinned to ``runtime``,
    by the leaf's text."""
    vault = tmp_path / name
    cli = [sys.executable, "-m", "vaultmem.cli"]
    subprocess.run([*cli, "init", str(vault)], check=True, capture_output=True)
    pin_runtime(vault, runtime)
    out = subprocess.run(
        [*cli, "ingest", str(inbox), "--wait", "--json", "--vault", str(vault)],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stderr
    conn = sqlite3.connect(vault / ".vaultmem" / "chunks.db")
    rows = conn.execute(
        "SELECT c.text, v.vec FROM chunks c JOIN vectors v ON v.id = c.id WHERE c.kind = 'leaf'"
    )
    found = {text: np.frombuffer(blob, dtype="<f4") for text, blob in rows}
    conn.close()
    return found


@pytest.mark.parametrize("runtime", ["fp32", "bf16"])
def test_the_cli_embeds_in_the_runtime_its_vault_names_whatever_the_cpu(tmp_path: Path, runtime: str) -> None:
    """A CLI subprocess is out of reach of the conftest's float32 patch: it embeds in the runtime its
    vault's config names (``pin_runtime``). Each runtime runs here on purpose, against NumPy float32 on
    the same turns: "fp32" (ONNX Runtime where installed) to float rounding, "bf16" (where the CPU has
    bfloat16 instructions) measurably apart yet within its documented distance. A batch of 48 turns
    is one call above ``embed.ONNX_MIN``: the runtime runs it, not NumPy."""
    if runtime == "bf16":
        if not embed.bf16_available():
            pytest.skip("torch is not installed: there is no bf16 runtime to run")
        if not embed.bf16_cpu(Path("/proc/cpuinfo")):  # the real flags: the conftest hides them in-process
            pytest.skip(
                "this CPU has no bfloat16 instructions (avx512_bf16, amx_bf16): auto never picks bf16 here"
            )
    inbox = tmp_path / "chat.json"
    turns = [
        {"id": str(n), "speaker": "Mara" if n % 2 else "Diego", "content": f"{text} (note {n})"}
        for n, text in enumerate([t for _, _, t in TURNS] * 8)
    ][:48]
    assert len(turns) > embed.ONNX_MIN
    inbox.write_text(json.dumps(turns), encoding="utf-8")
    reference = _cli_vectors(tmp_path, "numpy", "numpy", inbox)
    pinned = _cli_vectors(tmp_path, runtime, runtime, inbox)
    assert pinned.keys() == reference.keys() and len(pinned) == len(turns)
    apart = max(float(np.abs(pinned[t] - reference[t]).max()) for t in reference)
    cosine = min(float(pinned[t] @ reference[t]) for t in reference)
    if runtime == "fp32":
        assert apart < 1e-5, apart  # bf16's rows are ~1e-3 apart: an unpinned CLI on a bf16 CPU fails here
    else:
        assert 1e-5 < apart < 2e-2 and cosine > 0.9999, (apart, cosine)
