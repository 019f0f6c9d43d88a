"""Validity (issue #20): valid_from / valid_to / supersedes / superseded_by in files, index, search,
context, ``--as-of``, ``--include-superseded``, reindex and check. Real files, real SQLite."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.helpers import run_cli
from vaultmem import validity
from vaultmem.embed import FakeEmbedder
from vaultmem.errors import FrontmatterError
from vaultmem.vault import Vault

CHAT = [
    {
        "id": "m1",
        "role": "user",
        "speaker": "Mara",
        "content": "The Tidepool launch deadline is 27 March, please keep that in mind.",
        "ts": "2024-03-01T09:00:00Z",
        "session": "planning",
    },
    {
        "id": "m2",
        "role": "assistant",
        "content": "Noted. I will plan the release notes around it.",
        "ts": "2024-03-01T09:01:00Z",
        "session": "planning",
    },
    {
        "id": "m3",
        "role": "user",
        "speaker": "Mara",
        "content": "Lunch was ramen at the place near the station, very good broth.",
        "ts": "2024-03-02T12:00:00Z",
        "session": "lunch",
    },
]


@pytest.fixture
def updated(tmp_path: Path) -> tuple[Vault, str, str]:
    v = Vault.init(tmp_path / "vault", embedder=FakeEmbedder())
    src = tmp_path / "chat.jsonl"
    src.write_text("\n".join(json.dumps(r) for r in CHAT) + "\n", encoding="utf-8")
    v.clock = lambda: datetime(2024, 3, 2, 18, 0, tzinfo=UTC)  # the chat was imported that evening
    v.ingest_path(src, source="chat")
    v.flush()
    old = next(h for h in v.search("Tidepool launch deadline", kind="leaf") if "27 March" in h.text)
    v.clock = lambda: datetime(2024, 3, 10, 9, 0, tzinfo=UTC)
    done = v.supersede(old.id, "Mara: the Tidepool launch deadline moved to 3 April.", source="chat")
    return v, old.id, done.ids[0]


def _ids(hits: list) -> list[str]:  # type: ignore[type-arg]
    return [h.id for h in hits]


def test_superseded_leaf_ranks_right_below_its_successor_and_says_so(
    updated: tuple[Vault, str, str],
) -> None:
    vault, old, new = updated
    try:
        # A query with the old value's own words: without versions the old leaf would come first.
        hits = vault.search("deadline 27 March keep that in mind")
        order = _ids(hits)
        assert order.index(new) == order.index(old) - 1
        by_id = {h.id: h for h in hits}
        assert by_id[old].provenance["superseded_by"] == new
        assert by_id[new].provenance["supersedes"] == old
        assert by_id[old].score < by_id[new].score
        raw = vault.search("deadline 27 March keep that in mind", include_superseded=True)
        assert _ids(raw)[0] == old  # as found: the old one matches the words best
        assert {h.id: h for h in raw}[old].provenance["superseded_by"] == new  # still marked
    finally:
        vault.close()


def test_successor_is_brought_in_when_only_the_old_value_matches(updated: tuple[Vault, str, str]) -> None:
    vault, old, new = updated
    try:
        hits = vault.search("keep that in mind", k=2)
        assert _ids(hits)[:2] == [new, old]
        ctx = vault.context("keep that in mind", 200)
        assert "[current] Mara: the Tidepool launch deadline moved to 3 April" in ctx.text
        assert "[superseded] The Tidepool launch deadline is 27 March" in ctx.text
    finally:
        vault.close()


def test_as_of_answers_as_the_vault_stood_then(updated: tuple[Vault, str, str]) -> None:
    vault, old, new = updated
    try:
        before = vault.search("Tidepool launch deadline", as_of="2024-03-05")
        assert old in _ids(before) and new not in _ids(before)
        assert "superseded_by" not in {h.id: h for h in before}[old].provenance  # not yet replaced then
        ctx = vault.context("Tidepool launch deadline", 300, as_of="2024-03-05")
        assert "27 March" in ctx.text and "3 April" not in ctx.text
        assert "[superseded]" not in ctx.text
        after = vault.search("Tidepool launch deadline")
        assert _ids(after).index(new) < _ids(after).index(old)
        with pytest.raises(Exception, match="as-of"):
            vault.search("deadline", as_of="next week-ish")
    finally:
        vault.close()


def test_as_of_counts_from_when_the_vault_learned_it(tmp_path: Path) -> None:
    """A chat said on 1 March but imported on 20 March was not in the vault on 10 March: ``as_of`` reads
    the leaf's ``ingested`` (written into its file, so a reindex keeps it) as well as its time."""
    src = tmp_path / "chat.jsonl"
    src.write_text("\n".join(json.dumps(r) for r in CHAT) + "\n", encoding="utf-8")
    with Vault.init(tmp_path / "vault", embedder=FakeEmbedder()) as vault:
        vault.clock = lambda: datetime(2024, 3, 20, 8, 30, tzinfo=UTC)
        vault.ingest_path(src, source="chat")
        vault.flush()
        hit = next(h for h in vault.search("Tidepool launch deadline") if "27 March" in h.text)
        assert 'ingested: "2024-03-20T08:30:00Z"' in vault.layout.abs(hit.path).read_text(encoding="utf-8")
        assert vault.search("Tidepool launch deadline", as_of="2024-03-10") == []
        assert hit.id in _ids(vault.search("Tidepool launch deadline", as_of="2024-03-21"))
        vault.reindex()
        assert vault.search("Tidepool launch deadline", as_of="2024-03-10") == []
        assert vault.get(hit.id).ingested == datetime(2024, 3, 20, 8, 30, tzinfo=UTC)
        out = run_cli(
            "search",
            "Tidepool launch deadline",
            "--as-of",
            "2024-03-10",
            "--json",
            "--vault",
            str(vault.layout.root),
        )
        assert out.returncode == 0, out.stderr
        assert json.loads(out.stdout) == []


def _set_keys(vault: Vault, leaf_id: str, lines: str) -> Path:
    path = vault.layout.abs(vault.get(leaf_id).path)
    text = path.read_text(encoding="utf-8")
    head, sep, body = text[4:].partition("\n---\n")
    path.write_text("---\n" + head + "\n" + lines.rstrip("\n") + sep + body, encoding="utf-8")
    return path


def test_hand_set_validity_window(tmp_path: Path) -> None:
    vault = Vault.init(tmp_path / "vault", embedder=FakeEmbedder())
    try:
        vault.clock = lambda: datetime(2024, 1, 1, 8, 0, tzinfo=UTC)  # remembered on New Year's morning
        a = vault.remember("Office wifi password hint: the name of the cat.", ts="2024-01-01T00:00:00Z")
        b = vault.remember("The office is on Baker Street, second floor.", ts="2024-01-01T00:00:00Z")
        rel = vault.get(b.ids[0]).path
        # A person writes a window in Obsidian: the office moved away on 1 June 2024.
        _set_keys(vault, b.ids[0], "valid_from: 2024-01-01\nvalid_to: 2024-06-01  # we moved\n")
        vault.reconcile_paths([rel])
        leaf = vault.get(b.ids[0])
        assert leaf.valid_to is not None and leaf.valid_to.isoformat().startswith("2024-06-01")
        assert b.ids[0] not in _ids(vault.search("office Baker Street"))  # expired now
        assert b.ids[0] in _ids(vault.search("office Baker Street", include_superseded=True))
        assert b.ids[0] in _ids(vault.search("office Baker Street", as_of="2024-05-31"))
        assert b.ids[0] not in _ids(vault.search("office Baker Street", as_of="2024-06-01"))
        assert a.ids[0] in _ids(vault.search("office"))  # leaves without a window are unaffected
        text = vault.layout.abs(rel).read_text(encoding="utf-8")
        assert "valid_to: 2024-06-01  # we moved\n" in text  # the person's bytes are kept
        assert vault.check().ok
    finally:
        vault.close()


def test_reindex_rebuilds_validity_from_files_and_check_covers_it(updated: tuple[Vault, str, str]) -> None:
    vault, old, new = updated
    root = vault.layout.root
    vault.close()
    for name in ("chunks.db", "chunks.db-wal", "chunks.db-shm"):
        (root / ".vaultmem" / name).unlink(missing_ok=True)
    vault = Vault.open(root, embedder=FakeEmbedder())
    try:
        vault.reindex()
        assert vault.get(old).superseded_by == (new,)
        assert vault.get(new).supersedes == (old,)
        order = _ids(vault.search("deadline 27 March keep that in mind"))
        assert order.index(new) == order.index(old) - 1
        assert vault.check().ok
        # A hand edit the index has not read: check sees the row disagree with the file.
        _set_keys(vault, new, "valid_from: 2024-04-01\n")
        report = vault.check()
        assert any(p.code == "stale_row" and p.path == vault.get(new).path for p in report.problems)
        vault.check(fix=True)
        assert vault.get(new).valid_from is not None
        # A link to a leaf the vault does not hold, and a date that is no date.
        _set_keys(vault, old, "supersedes: 0123456789abcdef\n")
        vault.check(fix=True)
        assert any(p.code == "dangling_version" for p in vault.check().problems)
        _set_keys(vault, old, "valid_to: someday\n")
        bad = vault.check().problems
        assert any(p.code == "invalid_file" and "valid_to" in p.message for p in bad)
    finally:
        vault.close()


def test_cli_as_of_and_include_superseded(updated: tuple[Vault, str, str]) -> None:
    vault, old, new = updated
    root = str(vault.layout.root)
    vault.close()
    found = run_cli("search", "deadline 27 March keep that in mind", "--json", "--vault", root)
    assert found.returncode == 0, found.stderr
    ids = [h["id"] for h in json.loads(found.stdout)]
    assert ids.index(new) == ids.index(old) - 1
    plain = run_cli("search", "deadline 27 March keep that in mind", "--vault", root)
    assert f"(superseded by {new})" in plain.stdout
    raw = run_cli("search", "deadline 27 March", "--include-superseded", "--json", "--vault", root)
    assert json.loads(raw.stdout)[0]["id"] == old
    then = run_cli("context", "Tidepool launch deadline", "--as-of", "2024-03-05", "--vault", root)
    assert then.returncode == 0, then.stderr
    assert "27 March" in then.stdout and "3 April" not in then.stdout
    bad = run_cli("search", "deadline", "--as-of", "soon", "--vault", root)
    assert bad.returncode == 1 and "as-of" in bad.stderr and "Traceback" not in bad.stderr


DUE = "The Tidepool release is due on 12 May 2024."
DUE_LATER = "The Tidepool release is now due on 19 May 2024."


def _core_versions(vault: Vault) -> None:
    """Core memory with a version: 12 May learnt on 2 March, replaced by 19 May on 10 March."""
    vault.clock = lambda: datetime(2024, 3, 2, 18, 0, tzinfo=UTC)
    vault.core_update("projects", [DUE])
    vault.clock = lambda: datetime(2024, 3, 10, 9, 0, tzinfo=UTC)
    vault.core_update("projects", [DUE_LATER])


def test_recall_as_of_gives_core_memory_and_leaves_as_they_stood(updated: tuple[Vault, str, str]) -> None:
    """Issue #20: ``recall(as_of=)`` is one answer as the vault stood then: the core block and the leaves
    both before the update; without it both give the current value; ``include_superseded`` reaches the
    leaves (the old value ranked as found, first for its own words)."""
    vault, old, new = updated
    with vault:
        _core_versions(vault)
        then = vault.recall("Tidepool launch deadline", 600, as_of="2024-03-05")
        assert DUE in then.core and DUE_LATER not in then.core
        assert "27 March" in then.text and "3 April" not in then.text and DUE_LATER not in then.text
        now = vault.recall("Tidepool launch deadline", 600)
        assert DUE_LATER in now.core and DUE not in now.core
        assert "3 April" in now.text and "[current]" in now.text
        query = "deadline 27 March keep that in mind"
        ranked = [i.hit.id for i in vault.recall(query, 600, mode="flat").context.items]
        assert ranked.index(new) < ranked.index(old)
        found = [
            i.hit.id for i in vault.recall(query, 600, mode="flat", include_superseded=True).context.items
        ]
        assert found[0] == old


def test_cli_recall_as_of(updated: tuple[Vault, str, str]) -> None:
    vault, old, new = updated
    root = str(vault.layout.root)
    with vault:
        _core_versions(vault)
    then = run_cli("recall", "Tidepool launch deadline", "--as-of", "2024-03-05", "--json", "--vault", root)
    assert then.returncode == 0, then.stderr
    data = json.loads(then.stdout)
    assert DUE in data["core"] and DUE_LATER not in data["core"]
    assert "27 March" in data["text"] and "3 April" not in data["text"]
    now = run_cli("recall", "Tidepool launch deadline", "--vault", root)
    assert now.returncode == 0, now.stderr
    assert DUE_LATER in now.stdout and DUE not in now.stdout and "3 April" in now.stdout
    # --include-superseded is honoured by every command that offers it (search is tested above).
    query = "deadline 27 March keep that in mind"
    for command in ("context", "recall"):
        args = [command, query, "--mode", "flat", "--json", "--vault", root]
        plain = [i["id"] for i in json.loads(run_cli(*args).stdout)["items"]]
        raw = [i["id"] for i in json.loads(run_cli(*args, "--include-superseded").stdout)["items"]]
        assert plain.index(new) < plain.index(old) and raw[0] == old, command


def test_parse_rejects_what_is_not_validity() -> None:
    with pytest.raises(FrontmatterError, match="valid_to"):
        validity.parse({"valid_from": "2024-05-01", "valid_to": "2024-04-01"})
    with pytest.raises(FrontmatterError, match="supersedes"):
        validity.parse({"supersedes": "../etc"})
    with pytest.raises(FrontmatterError, match="valid_from"):
        validity.parse({"valid_from": True})
    v = validity.parse(
        {"supersedes": ["0123456789abcdef", "0123456789abcdef"], "superseded_by": "fedcba9876543210"}
    )
    assert v.supersedes == ("0123456789abcdef",) and v.superseded_by == ("fedcba9876543210",)


@given(
    st.datetimes(datetime(1900, 1, 1), datetime(2200, 1, 1), timezones=st.just(UTC)),
    st.lists(st.from_regex(r"[0-9a-f]{16}", fullmatch=True), max_size=3),
)
def test_row_values_round_trip(moment, ids) -> None:  # type: ignore[no-untyped-def]
    moment = moment.replace(microsecond=0)
    v = validity.Validity(moment, None, tuple(dict.fromkeys(ids)), (), moment)
    start, _end, sup, _by, learned = validity.row_values(v)
    again = validity.parse({"valid_from": start, "supersedes": json.loads(sup), "ingested": learned})
    assert again == v


SMALL_LEVELS = (
    '[embed]\nmodel = "fake"\n\n[compact]\nfresh_keep_leaves = 1\n'
    "fresh_keep_tokens = 30\nseal_min_leaves = 3\nseal_min_tokens = 40\n"
)


def test_summaries_and_digests_mark_what_was_replaced(tmp_path: Path) -> None:
    """A level summary and the day's digest over an old value, once linked to the value that replaced it,
    are written again and read ``[superseded] ...`` / ``[current] ...`` (as a context block does)."""
    week = [
        (
            "Mara",
            "The Tidepool launch deadline is 27 March, please keep that in mind.",
            "2024-03-01T09:00:00Z",
        ),
        ("Sam", "The plumber Dario comes on Thursday at 8 to fix the boiler.", "2024-03-01T09:05:00Z"),
        ("Mara", "Lunch was ramen at the place near the station, very good broth.", "2024-03-01T12:00:00Z"),
        ("Mara", "Heads up: the Tidepool launch deadline moved to 3 April.", "2024-03-01T16:00:00Z"),
        ("Sam", "Book club reads Piranesi next, meeting at Ana's flat.", "2024-03-01T18:00:00Z"),
    ]
    records = [
        {"id": f"m{i}", "role": "user", "speaker": who, "content": text, "ts": ts, "session": "2024-03-01"}
        for i, (who, text, ts) in enumerate(week)
    ]
    with Vault.init(tmp_path / "vault", SMALL_LEVELS, embedder=FakeEmbedder()) as vault:
        vault.ingest_messages(records, source="chat")
        vault.compact()
        leaves = {h.text: h.id for h in vault.search("Tidepool launch deadline", k=10, kind="leaf")}
        old = next(i for t, i in leaves.items() if "27 March" in t)
        new = next(i for t, i in leaves.items() if "3 April" in t)
        level = vault.get(old).path.rsplit("/", 1)[0]
        assert not level.endswith("_fresh"), "the old value must be sealed into a level for this test"
        summary = vault.layout.abs(f"{level}/_summary.md")
        day = vault.layout.root / "global" / "2024-03" / "2024-W09" / "2024-03-01" / "_summary.md"
        before = summary.read_text(encoding="utf-8")
        assert "[superseded]" not in before and "[superseded]" not in day.read_text(encoding="utf-8")
        with vault.operation("test: link"):
            vault._link(old, vault.get(old).path, new, vault.get(new).path)
        vault.work()
        after = summary.read_text(encoding="utf-8")
        assert after != before
        assert "[superseded] " in after and "27 March" in after.split("[superseded] ", 1)[1].split("\n")[0]
        digest = day.read_text(encoding="utf-8")
        assert "[superseded] " in digest or "[current] " in digest
        assert vault.check().ok
        # Reverting the link writes them again, unmarked.
        vault.revert_update(f"{new}-{old}")
        vault.work()
        assert "[superseded]" not in summary.read_text(encoding="utf-8")


def test_core_entries_carry_validity_and_keep_what_they_replaced(tmp_path: Path) -> None:
    """Core memory entries: a window written in a comment on the line keeps an entry out of the prompt
    block outside it, and an update that changes an entry's value archives the old one as superseded."""
    with Vault.init(tmp_path / "vault", embedder=FakeEmbedder()) as vault:
        vault.clock = lambda: datetime(2026, 3, 9, 10, 0, tzinfo=UTC)
        vault.core_update("projects", ["The Tidepool release is due on 12 May 2026."])
        vault.core_update("projects", ["The Tidepool release is now due on 19 May 2026."])
        block = vault.core_block().text
        assert "19 May" in block and "12 May" not in block
        archive = (vault.layout.root / "core" / "_archive" / "projects.md").read_text(encoding="utf-8")
        assert (
            "12 May 2026. <!-- left 2026-03-09: superseded by [2026-03] The Tidepool release is now"
            in archive
        )
        # A person gives an entry a window in Obsidian: the block shows it only while it holds.
        path = vault.layout.root / "core" / "projects.md"
        text = path.read_text(encoding="utf-8")
        path.write_text(
            text.rstrip("\n") + "\n- [2026-03] Office closed for the move. <!-- valid_to: 2026-03-20 -->\n",
            encoding="utf-8",
        )
        assert "Office closed for the move." in vault.core_block().text
        vault.clock = lambda: datetime(2026, 3, 21, 9, 0, tzinfo=UTC)
        later = vault.core_block()
        assert "Office closed" not in later.text and "19 May" in later.text
        assert "Office closed for the move." in path.read_text(encoding="utf-8")  # the file keeps it
