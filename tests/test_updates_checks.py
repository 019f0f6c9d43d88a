"""Issue #20's "How it is checked" items the other files leave open, through the CLI and the Python API:
a proposal accepted from the CLI, auto-applied by `review --scan`, rejected by a hand edit of
``decision:``; proposals and validity rebuilt by ``reindex`` from the files alone; a model that is down
leaves the offline judgement. Real files, SQLite and sockets."""

from __future__ import annotations

import json
import socket
from datetime import UTC, datetime
from pathlib import Path

from tests.helpers import run_cli
from tests.test_review import _pair
from vaultmem import detect
from vaultmem.embed import FakeEmbedder
from vaultmem.vault import Vault


def test_cli_accept_and_auto_apply(tmp_path: Path) -> None:
    vault, old, new = _pair(tmp_path / "a", "[updates]\nauto_apply = false\n")
    root = str(vault.layout.root)
    vault.close()
    assert run_cli("review", "--scan", "--vault", root).returncode == 0
    accepted = run_cli("review", "--accept", new, "--json", "--vault", root)
    assert accepted.returncode == 0, accepted.stderr
    assert [p["new"] for p in json.loads(accepted.stdout)["accepted"]] == [new]
    with Vault.open(Path(root), embedder=FakeEmbedder()) as again:
        assert again.get(old).superseded_by == (new,) and again.proposals() == []
    # With auto-apply on below this pair's confidence, the scan links it at once (listed, revertible).
    vault, old, new = _pair(tmp_path / "b", "[updates]\nauto_apply = true\nauto_apply_at = 0.5\n")
    root = str(vault.layout.root)
    vault.close()
    scanned = run_cli("review", "--scan", "--json", "--vault", root)
    assert scanned.returncode == 0, scanned.stderr
    assert [(p["old"], p["new"]) for p in json.loads(scanned.stdout)["applied"]] == [(old, new)]
    reverted = run_cli("review", "--revert", f"{new}-{old}", "--vault", root)
    assert reverted.returncode == 0, reverted.stderr
    with Vault.open(Path(root), embedder=FakeEmbedder()) as again:
        assert again.get(old).superseded_by == ()


def test_a_hand_edited_reject_and_reindex_from_the_files_alone(tmp_path: Path) -> None:
    vault, old, new = _pair(tmp_path, "[updates]\nauto_apply = false\n")
    root = vault.layout.root
    try:
        [proposal] = vault.propose_updates(now=datetime(2024, 3, 11, tzinfo=UTC))["proposed"]
        assert (proposal.old, proposal.new) == (old, new)
    finally:
        vault.close()
    for name in ("chunks.db", "chunks.db-wal", "chunks.db-shm"):
        (root / ".vaultmem" / name).unlink(missing_ok=True)
    with Vault.open(root, embedder=FakeEmbedder()) as vault:
        vault.reindex()
        assert [(p.old, p.new) for p in vault.proposals()] == [(old, new)]  # review/ is the truth
        assert vault.check().ok
        path = root / "review" / f"{new}-updates-{old}.md"
        path.write_text(
            path.read_text(encoding="utf-8").replace("decision: pending", "decision: reject"),
            encoding="utf-8",
        )
        out = vault.apply_reviews()
        assert [p.new for p in out["rejected"]] == [new] and not path.exists()
        assert vault.get(old).superseded_by == () and vault.proposals() == []
        assert vault.propose_updates(rescan=True)["proposed"] == []  # a rejected pair is not proposed again
        assert vault.check().ok


def test_a_model_that_is_down_leaves_the_offline_judgement(tmp_path: Path) -> None:
    """No LLM endpoint answers on this machine; the fallback is what runs: a refused connection leaves
    the offline confidence to choose the tier, and a warning says the pairs were judged offline."""
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]  # closed again: nothing listens there
    config = f'[llm]\nbase_url = "http://127.0.0.1:{port}/v1"\nmodel = "judge"\ntimeout_s = 5.0\n'
    vault, old, new = _pair(tmp_path, config)
    try:
        out = vault.propose_updates(now=datetime(2024, 3, 11, tzinfo=UTC))
        [made] = out["proposed"] + out["applied"]
        assert (made.old, made.new) == (old, new) and out["dismissed"] == []
        assert made.confidence >= detect.PROPOSE_AT
        assert not any(w.startswith("model:") for w in made.why)
        assert any("judged offline" in w for w in vault.warnings)
    finally:
        vault.close()
