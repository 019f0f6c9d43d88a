"""Optional decay (issue #20): off by default; when on, a leaf nobody asked about ranks lower, never
below its floor, is never deleted, and asking about it brings it back. Real files and SQLite."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tests.helpers import run_cli
from vaultmem.embed import FakeEmbedder
from vaultmem.errors import InvalidInput
from vaultmem.vault import Vault

NOW = datetime(2026, 6, 1, tzinfo=UTC)


def _vault(tmp_path: Path, config: str = "") -> tuple[Vault, str, str]:
    v = Vault.init(tmp_path / "vault", config, embedder=FakeEmbedder())
    old = v.remember("The spare key is under the blue flowerpot.", ts=NOW - timedelta(days=400)).ids[0]
    new = v.remember("The spare key is under the blue doormat.", ts=NOW - timedelta(days=2)).ids[0]
    v.flush()
    return v, old, new


def test_off_by_default(tmp_path: Path) -> None:
    vault, old, _new = _vault(tmp_path)
    try:
        plain = [h.id for h in vault.search("spare key blue flowerpot", now=NOW)]
        assert plain[0] == old  # its own words win
        assert vault.conn.execute("SELECT count(*) FROM recall").fetchone()[0] == 0  # a query writes nothing
    finally:
        vault.close()


def test_on_a_leaf_nobody_asked_about_ranks_lower_and_comes_back(tmp_path: Path) -> None:
    vault, old, new = _vault(tmp_path, "[decay]\nhalf_life_days = 30.0\nfloor = 0.05\n")
    try:
        hits = vault.search("spare key blue flowerpot", now=NOW)
        assert [h.id for h in hits][:2] == [new, old]  # 400 days unasked: weight 0.05
        assert vault.get(old).text  # never deleted
        # Asking about it today (it was returned) restores its weight for the next query.
        again = vault.search("spare key blue flowerpot", now=NOW)
        assert again[0].id == old
        assert vault.context("spare key", 200, now=NOW).text.count("spare key") == 2
    finally:
        vault.close()


def test_an_as_of_answer_is_not_decayed(tmp_path: Path) -> None:
    """The days leaves were last asked about say nothing of the past: ``as_of`` answers rank undecayed."""
    vault, old, _new = _vault(tmp_path, "[decay]\nhalf_life_days = 30.0\nfloor = 0.05\n")
    try:
        then = (datetime.now(UTC) + timedelta(days=1)).date().isoformat()  # after the leaves were learnt
        hits = vault.search("spare key blue flowerpot", now=NOW, as_of=then)
        assert hits[0].id == old
        items = vault.context("spare key blue flowerpot", 200, mode="flat", now=NOW, as_of=then).items
        assert items[0].hit.id == old
    finally:
        vault.close()


def test_decay_settings_are_checked_and_work_through_the_cli(tmp_path: Path) -> None:
    for bad, said in (("half_life_days = -3.0", "half_life_days"), ("floor = 1.5", "floor")):
        with pytest.raises(InvalidInput, match=f"decay.{said}"):
            Vault.init(tmp_path / f"bad-{said}", f"[decay]\n{bad}\n", embedder=FakeEmbedder())
    config = '[embed]\nmodel = "fake"\n[decay]\nhalf_life_days = 30.0\nfloor = 0.05\n'
    today = datetime.now(UTC)  # the CLI ranks at the wall clock's time
    with Vault.init(tmp_path / "vault", config, embedder=FakeEmbedder()) as vault:
        old = vault.remember(
            "The spare key is under the blue flowerpot.", ts=today - timedelta(days=400)
        ).ids[0]
        new = vault.remember("The spare key is under the blue doormat.", ts=today - timedelta(days=2)).ids[0]
        vault.flush()
    found = run_cli("search", "spare key blue flowerpot", "--json", "--vault", str(tmp_path / "vault"))
    assert found.returncode == 0, found.stderr
    assert [h["id"] for h in json.loads(found.stdout)][:2] == [new, old]
