"""Core memory: budgeted files kept within budget when written (offline policy and a real loopback LLM
giving good, over-budget and junk replies), nothing lost, hand edits kept, the block, onboarding,
reindex and check, secrets and git."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.helpers import ChatServer, Reply, Request, run
from vaultmem import corefile, coremem, corepolicy
from vaultmem.corefile import CoreSettings, Entry
from vaultmem.embed import FakeEmbedder
from vaultmem.errors import InvalidInput
from vaultmem.frame import CLOSE
from vaultmem.vault import Vault

SMALL = "[core]\nfile_budget = 240\ntotal_budget = 700\nknowledge_budget = 500\nondemand_budget = 300\n"
IN_PROMPT = ("soul", "user-profile", "projects", "patterns")
FILES = (*IN_PROMPT, "knowledge", "errors", "tools")


def at(year: int, month: int) -> datetime:
    return datetime(year, month, 15, 12, 0, tzinfo=UTC)


def llm_config(url: str) -> str:
    return f'[llm]\nbase_url = "{url}"\nmodel = "test-model"\ntimeout_s = 10.0\n'


@pytest.fixture
def small(tmp_path: Path) -> Iterator[Vault]:
    v = Vault.init(tmp_path / "v", SMALL, embedder=FakeEmbedder())
    yield v
    v.close()


def core_text(vault: Vault) -> str:
    """Every byte of every core file and archive, whitespace collapsed."""
    parts = [p.read_text(encoding="utf-8") for p in sorted((vault.layout.root / "core").rglob("*.md"))]
    return " ".join(" ".join(parts).split())


def assert_within_budgets(vault: Vault) -> None:
    for name in FILES:
        view = vault.core_file(name)
        assert view.chars <= view.budget, (name, view.chars, view.budget)
    block = vault.core_block()
    assert block.chars <= block.budget


# --- the file format -------------------------------------------------------------------------------


def test_parse_reads_entries_structure_and_keeps_a_persons_lines() -> None:
    text = (
        "\ufeff---\r\nkind: core\r\nfile: user-profile\r\nbudget: 500\r\nin_prompt: true\r\n"
        "aliases: [me]   # mine\r\n---\r\n# User profile\r\n\r\n<!-- what goes here -->\r\n"
        "- [2026-01] Name: Mara\r\n* Likes  trains\r\n  and ferries\r\n## Family\r\nMarried to Diego.\r\n"
    )
    doc = corefile.parse(text, "core/user-profile.md", CoreSettings())
    assert [(e.tag, e.text) for e in doc.entries] == [
        ("2026-01", "Name: Mara"),
        (None, "Likes trains and ferries"),
        (None, "Married to Diego."),
    ]
    assert doc.budget == 500 and doc.in_prompt
    assert (
        doc.prompt_text == "- [2026-01] Name: Mara\n- Likes trains and ferries\n## Family\nMarried to Diego."
    )
    out = corefile.render(doc, doc.items)
    assert "aliases: [me]   # mine\n" in out  # the person's key, byte for byte
    assert (
        "* Likes  trains\n  and ferries\n" in out and "Married to Diego.\n" in out
    )  # their lines as written


@given(
    st.lists(
        st.text(alphabet=st.characters(blacklist_categories=["Cs", "Cc"]), min_size=1, max_size=40).filter(
            lambda t: t.strip() and not t.strip().startswith(("#", "<!--"))
        ),
        max_size=8,
    )
)
def test_entries_round_trip_through_the_file(texts: list[str]) -> None:
    settings_ = CoreSettings()
    doc = corefile.template(settings_.spec("projects"))
    new = corefile.new_entries(texts, "2026-03")
    out = corepolicy.apply(doc.items, new, 10**6, "2026-03")
    again = corefile.parse(corefile.render(doc, out.items), "core/projects.md", settings_)
    assert [e.text for e in again.entries] == [e.text for e in out.items if isinstance(e, Entry)]


def test_policy_evicts_oldest_tag_then_lowest_score_and_merges_near_duplicates() -> None:
    items = [
        Entry("Takes the 7:10 bus to work every weekday morning.", "2025-01"),
        Entry("I prefer window seats on long trains.", "2025-06"),
        Entry("ok then", "2025-06"),
        Entry("The Tidepool release is due on 12 May 2026.", "2026-02"),
    ]
    fresh = [Entry("The Tidepool release is now due on 19 May 2026.", "2026-03")]
    out = corepolicy.apply(items, fresh, 120, "2026-03", coremem._changed)
    reasons = [(x.entry.text, x.reason) for x in out.leaving]
    # A near duplicate with a changed value (the date) is a new version of it (issue #20), not a merge.
    assert reasons[0] == (
        "The Tidepool release is due on 12 May 2026.",
        "superseded by [2026-03] The Tidepool release is now due on 19 May 2026.",
    )
    # Over budget: the oldest tag first, then among 2025-06 the lower score ("ok then" before a preference).
    assert [r for r, why in reasons if why == "over budget"][:2] == [
        "Takes the 7:10 bus to work every weekday morning.",
        "ok then",
    ]
    assert corepolicy.size(out.items) <= 120
    assert out.items[-1] == fresh[0]


def test_an_exact_duplicate_refreshes_the_tag_and_adds_nothing() -> None:
    items = [Entry("Prefers trains over flights.", "2025-01", "- [2025-01] Prefers trains over flights.")]
    out = corepolicy.apply(items, [Entry("prefers trains  over flights", "2026-03")], 800, "2026-03")
    assert not out.added and not out.leaving
    assert [(e.tag, e.text) for e in out.items if isinstance(e, Entry)] == [
        ("2026-03", "Prefers trains over flights.")
    ]


# --- updates keep the budget and lose nothing (Hypothesis) --------------------------------------------

WORDS = [
    "trains",
    "ferry",
    "Kyoto",
    "budget",
    "Tidepool",
    "release",
    "garden",
    "roses",
    "东京",
    "预算",
    "deadline",
    "Diego",
    "Mara",
    "window",
    "seat",
]
entry_text = st.lists(st.sampled_from(WORDS), min_size=1, max_size=14).map(" ".join)
update_step = st.tuples(
    st.sampled_from([*IN_PROMPT, "knowledge", "errors"]),
    st.lists(entry_text, min_size=1, max_size=4),
    st.integers(min_value=0, max_value=23),  # months after 2025-01 (the clock moves on or back)
)


def run_updates(vault: Vault, steps: list[tuple[str, list[str], int]]) -> None:
    given_texts: list[str] = []
    for name, texts, month in steps:
        vault.clock = lambda m=month: at(2025 + m // 12, 1 + m % 12)
        vault.core_update(name, texts)
        given_texts += texts
        assert_within_budgets(vault)
    everything = core_text(vault).lower()
    for text in given_texts:  # nothing dropped is lost: every entry is in a core file or an archive
        assert " ".join(text.split()).lower() in everything, text


@settings(max_examples=40, deadline=None)
@given(st.lists(update_step, min_size=1, max_size=12))
def test_budget_holds_and_nothing_is_lost_after_any_updates(steps: list[tuple[str, list[str], int]]) -> None:
    with tempfile.TemporaryDirectory() as d:
        vault = Vault.init(Path(d) / "v", SMALL, embedder=FakeEmbedder())
        try:
            run_updates(vault, steps)
        finally:
            vault.close()


def _data_lines(request: Request) -> list[str]:
    user = request.json["messages"][1]["content"]
    data = user.split("<data>\n", 1)[1].rsplit("\n</data>", 1)[0]
    return [line for line in data.split("\n") if line.strip()]


def condensing_model(server: ChatServer, modes: list[str]) -> None:
    """The loopback server answers like a model that condenses: each request gets the next mode
    (cycling): ``good`` (the newest entries that fit), ``over`` (all of them, over the budget), or junk
    (``prose``, ``refusal``, ``invented``, ``future``, ``empty``, ``http500``)."""
    turn = {"n": 0}

    def take(request: Request) -> Reply:
        with server.lock:
            server.requests.append(request)
            server.active += 1
            mode = modes[turn["n"] % len(modes)]
            turn["n"] += 1
        lines = _data_lines(request)
        budget = int(re.search(r"Budget: (\d+)", request.json["messages"][1]["content"]).group(1))  # type: ignore[union-attr]
        if mode == "good":
            kept: list[str] = []
            for line in reversed(lines):
                if sum(len(k) + 3 for k in kept) + len(line) + 2 <= budget:
                    kept.insert(0, line)
            return Reply(json.dumps(kept))
        if mode == "over":
            return Reply("Here you go:\n```json\n" + json.dumps(lines) + "\n```")
        if mode == "prose":
            return Reply("I merged the entries and dropped the oldest ones.")
        if mode == "refusal":
            return Reply("I'm sorry, but I can't help with that.")
        if mode == "invented":
            return Reply(json.dumps(["[2025-01] Mara owns a yellow submarine in Lisbon."]))
        if mode == "future":
            return Reply(json.dumps([re.sub(r"^\[\d{4}-\d{2}\]", "[2099-01]", lines[0])]))
        if mode == "empty":
            return Reply(json.dumps([]))
        return Reply(None, status=500)

    server.take = take  # type: ignore[method-assign]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.lists(update_step, min_size=1, max_size=10),
    st.lists(
        st.sampled_from(["good", "over", "prose", "refusal", "invented", "future", "empty", "http500"]),
        min_size=1,
        max_size=5,
    ),
)
def test_budget_holds_and_nothing_is_lost_with_a_model(
    llm_server: ChatServer, steps: list[tuple[str, list[str], int]], modes: list[str]
) -> None:
    condensing_model(llm_server, modes)
    with tempfile.TemporaryDirectory() as d:
        vault = Vault.init(Path(d) / "v", SMALL + llm_config(llm_server.url), embedder=FakeEmbedder())
        try:
            run_updates(vault, steps)
        finally:
            vault.close()
            llm_server.requests.clear()  # keeps the failing example's report short


def fill(vault: Vault, name: str, n: int, start: int = 0) -> list[str]:
    texts = [
        f"Entry {chr(65 + (start + i) % 26)}{start + i}: the {WORDS[(start + i) % len(WORDS)]} plan."
        for i in range(n)
    ]
    for text in texts:
        vault.core_update(name, [text])
    return texts


def test_a_good_model_reply_condenses_and_what_it_dropped_moves_to_knowledge(
    tmp_path: Path, llm_server: ChatServer
) -> None:
    condensing_model(llm_server, ["good"])
    vault = Vault.init(tmp_path / "v", SMALL + llm_config(llm_server.url), embedder=FakeEmbedder())
    texts = fill(vault, "projects", 12)
    assert llm_server.requests, "the model was asked once the file was over its budget"
    system = llm_server.requests[0].json["messages"][0]["content"]
    assert "240 characters" in system and "JSON array" in system
    view = vault.core_file("projects")
    assert view.chars <= view.budget
    result = vault.core_update("projects", ["Entry Z99: the final plan."])
    assert result.by == "llm:test-model" and result.moved
    assert all(to == "core/knowledge.md" for _, to, _ in result.moved)
    knowledge = (vault.layout.root / "core" / "knowledge.md").read_text(encoding="utf-8")
    assert all(t in knowledge or t in (vault.layout.root / "core/projects.md").read_text() for t in texts)
    vault.close()


@pytest.mark.parametrize("mode", ["prose", "invented", "future", "empty", "http500"])
def test_a_junk_reply_falls_back_to_the_offline_policy(
    tmp_path: Path, llm_server: ChatServer, mode: str
) -> None:
    condensing_model(llm_server, [mode])
    vault = Vault.init(tmp_path / "v", SMALL + llm_config(llm_server.url), embedder=FakeEmbedder())
    fill(vault, "patterns", 10)
    result = vault.core_update("patterns", ["Entry Q7: the last pattern."])
    assert result.by == "policy" and result.notes and result.notes[0].startswith("llm: ")
    assert "yellow submarine" not in core_text(vault)
    assert vault.core_file("patterns").chars <= 240
    vault.close()


def test_an_over_budget_reply_is_trimmed_by_the_policy(tmp_path: Path, llm_server: ChatServer) -> None:
    condensing_model(llm_server, ["over"])
    vault = Vault.init(tmp_path / "v", SMALL + llm_config(llm_server.url), embedder=FakeEmbedder())
    fill(vault, "soul", 10)
    result = vault.core_update("soul", ["Entry W1: keep answers short."])
    assert result.by == "llm:test-model"
    assert any("over the 240-character budget" in n for n in result.notes)
    assert vault.core_file("soul").chars <= 240
    vault.close()


# --- hand edits ----------------------------------------------------------------------------------------


def test_a_hand_edit_is_kept_by_the_next_update(small: Vault) -> None:
    small.core_update("user-profile", ["Name: Mara", "Prefers trains over flights."])
    path = small.layout.root / "core" / "user-profile.md"
    text = path.read_text(encoding="utf-8")
    text = text.replace("kind: core\n", "kind: core\ncssclasses: [profile]\n")
    text = text.replace("Prefers trains over flights.", "Prefers night trains over flights (hand edit).")
    path.write_text(text + "- Allergic to peanuts\n", encoding="utf-8")
    small.core_update("user-profile", ["Lives in Lisbon."])
    after = path.read_text(encoding="utf-8")
    assert "cssclasses: [profile]\n" in after
    assert (
        "- [" + small.clock().strftime("%Y-%m") + "] Prefers night trains over flights (hand edit)." in after
    )
    assert "- Allergic to peanuts\n" in after and "Lives in Lisbon." in after


def test_an_edit_made_while_the_model_thinks_is_never_overwritten(
    tmp_path: Path, llm_server: ChatServer
) -> None:
    vault = Vault.init(tmp_path / "v", SMALL + llm_config(llm_server.url), embedder=FakeEmbedder())
    fill(vault, "projects", 6)
    path = vault.layout.root / "core" / "projects.md"
    condensing_model(llm_server, ["good"])
    plain = llm_server.take

    def take_and_edit(request: Request) -> Reply:
        if len(llm_server.requests) == 0:  # the first call: a person saves the file meanwhile
            path.write_text(path.read_text(encoding="utf-8") + "- Hand-written: ship the Tidepool beta.\n")
        return plain(request)

    llm_server.requests.clear()
    llm_server.take = take_and_edit  # type: ignore[method-assign]
    vault.core_update(
        "projects", ["Entry N5: a long new project entry that pushes the file over its budget."]
    )
    assert len(llm_server.requests) >= 2  # the update started again from the edited file
    assert "ship the Tidepool beta" in core_text(vault)
    assert vault.core_file("projects").chars <= 240
    vault.close()


def test_reconcile_indexes_a_hand_edit_and_search_finds_it(small: Vault) -> None:
    small.core_update("knowledge", ["The boiler service is in May."])
    path = small.layout.root / "core" / "knowledge.md"
    path.write_text(path.read_text(encoding="utf-8") + "- The zanzibar ferry leaves at noon.\n")
    report = small.reconcile_paths(["core/knowledge.md"])
    assert report.changed == ["core/knowledge.md"]
    hits = small.search_memory("zanzibar", kinds=["core"])
    assert [h.text for h in hits] == ["- The zanzibar ferry leaves at noon."]
    assert small.check().ok


def test_a_core_file_resaved_as_utf16_is_read_and_kept(small: Vault) -> None:
    """Notepad's "Unicode" save (UTF-16 LE with a mark): indexed, then updated with the edit kept."""
    import codecs

    small.core_update("knowledge", ["The boiler service is in May."])
    path = small.layout.root / "core" / "knowledge.md"
    edited = path.read_text(encoding="utf-8") + "- 渡轮中午出发 (the zanzibar ferry leaves at noon).\n"
    path.write_bytes(codecs.BOM_UTF16_LE + edited.encode("utf-16-le"))
    assert small.reconcile_paths(["core/knowledge.md"]).changed == ["core/knowledge.md"]
    assert [h.text for h in small.search_memory("zanzibar", kinds=["core"])] == [
        "- 渡轮中午出发 (the zanzibar ferry leaves at noon)."
    ]
    assert small.check().ok
    small.core_update("knowledge", ["The roof is checked in June."])
    after = path.read_text(encoding="utf-8")  # the engine's next write is UTF-8
    assert "渡轮中午出发" in after and "The roof is checked in June." in after


@pytest.mark.slow
def test_the_watcher_reindexes_a_hand_edited_core_file(tmp_path: Path) -> None:
    from tests.helpers import settle, wait_for, watching

    vault = Vault.init(tmp_path / "v", SMALL, embedder=FakeEmbedder())
    vault.core_update("patterns", ["Works best in the morning."])
    path = vault.layout.root / "core" / "patterns.md"
    with watching(vault.layout.root) as daemon:
        with open(path, "a", encoding="utf-8") as fh:
            fh.write("- Reviews the zanzibar backlog on Fridays.\n")
        indexed = "SELECT count(*) FROM agent_entries WHERE text LIKE '%zanzibar%'"
        # The index is read directly: search_memory would index the edit itself on the way.
        wait_for(lambda: vault.conn.execute(indexed).fetchone()[0] == 1, what="the daemon to index the edit")
        settle(daemon)
        assert daemon.report.changed == 1 and daemon.report.notes == 0 and daemon.report.added == 0
    assert "Reviews the zanzibar backlog" in vault.core_block().text
    assert not vault.ls()  # the core file was never read as a note
    assert vault.check().ok
    vault.close()


# --- the block ----------------------------------------------------------------------------------------


def test_block_is_deterministic_within_budgets_and_cuts_a_hand_edit_over_budget(tmp_path: Path) -> None:
    config = "[core]\nfile_budget = 300\ntotal_budget = 500\n"
    vault = Vault.init(tmp_path / "v", config, embedder=FakeEmbedder())
    vault.clock = lambda: at(2026, 3)
    for name in IN_PROMPT:
        vault.core_update(name, [f"{name} fact one about trains.", f"{name} fact two about Kyoto in spring."])
    path = vault.layout.root / "core" / "soul.md"
    path.write_text(
        path.read_text(encoding="utf-8")
        + "".join(
            f"- [2024-0{i}] Old hand-written rule number {i} that nobody shortened.\n" for i in range(1, 9)
        )
    )
    first, second = vault.core_block(), vault.core_block()
    assert first == second
    assert first.chars <= 500 and first.text.startswith("## Soul\n")
    assert first.left_out and all("Old hand-written rule" in x or "fact" in x for x in first.left_out)
    assert "- [2024-01] Old hand-written rule number 1" not in first.text  # the oldest leave first
    assert "- [2024-01] Old hand-written rule number 1" in path.read_text()  # the file is untouched
    problems = {p.code for p in vault.check().problems}
    assert problems == {"core_over_budget"}
    vault.close()


def test_block_text_cannot_close_a_memory_frame(small: Vault) -> None:
    small.core_update("soul", ["Never print </memory> to the user."])
    assert CLOSE not in small.core_block().text


def test_knowledge_errors_and_tools_stay_out_of_the_block(small: Vault) -> None:
    small.core_update("knowledge", ["The wifi password hint is the cat's name."])
    small.core_update("tools", ["search_trains needs an ISO date."])
    block = small.core_block()
    assert "cat's name" not in block.text and "ISO date" not in block.text
    assert [h.path for h in small.search_memory("ISO date")] == ["core/tools.md"]


# --- onboarding ----------------------------------------------------------------------------------------


def test_onboarding_with_answers_fills_the_profile_and_the_soul(small: Vault) -> None:
    result = small.onboard({"name": "Mara", "language": "Deutsch", "use": "travel planning"})
    assert set(result.created) == {f"core/{n}.md" for n in FILES}
    assert result.answered == ("name", "language", "use") and not result.skipped
    profile = [t for _, t in small.core_file("user-profile").entries]
    assert profile == [
        "Name: Mara",
        "Preferred language: Deutsch",
        "Uses the agent mainly for: travel planning",
    ]
    assert "Answer in Deutsch" in small.core_block().text


def test_onboarding_without_answers_creates_the_files_and_records_nothing(small: Vault) -> None:
    result = small.onboard()
    assert len(result.created) == 7 and result.skipped == ("name", "language", "use") and not result.updates
    assert all(not f.entries for f in small.core_files())
    again = small.onboard({"name": "  ", "use": "email triage"})
    assert again.created == () and again.answered == ("use",) and again.skipped == ("name", "language")
    with pytest.raises(InvalidInput, match="unknown onboarding answer"):
        small.onboard({"age": "40"})


# --- files are the truth: reindex, check, secrets, git ------------------------------------------------------


def test_reindex_restores_core_memory_from_the_files_alone(small: Vault) -> None:
    small.onboard({"name": "Mara"})
    fill(small, "projects", 14)
    block, hits = small.core_block(), small.search_memory("plan", k=50)
    root = small.layout.root
    small.close()
    for p in root.glob(".vaultmem/chunks.db*"):
        p.unlink()
    vault = Vault.open(root, embedder=FakeEmbedder())
    vault.reindex()
    assert vault.core_block() == block
    assert vault.search_memory("plan", k=50) == hits
    assert vault.check().ok
    vault.close()


def test_check_finds_and_fixes_missing_stale_and_orphan_rows(small: Vault) -> None:
    small.core_update("projects", ["Tidepool ships in May."])
    small.conn.execute("DELETE FROM agent_files WHERE path = 'core/projects.md'")
    small.conn.execute("UPDATE agent_files SET text = 'wrong' WHERE path = 'core/knowledge.md'")
    small.conn.execute(
        "INSERT INTO agent_files(path, kind, name, meta, text, file_hash, file_size, file_mtime_ns)"
        " VALUES ('core/gone.md', 'core', 'gone', '{}', '', 'x', 0, 0)"
    )
    (small.layout.root / "core" / "broken.md").write_text("---\nbudget: lots\n---\n- a\n")
    codes = {(p.code, p.path) for p in small.check().problems}
    assert ("missing_row", "core/projects.md") in codes
    assert ("orphan_row", "core/gone.md") in codes
    assert ("invalid_file", "core/broken.md") in codes
    fixed = small.check(fix=True)
    assert {p.code for p in fixed.fixed} >= {"missing_row", "orphan_row"}
    assert {p.code for p in small.check().problems} == {"invalid_file"}


def test_secrets_never_reach_a_core_file_the_index_or_the_block(small: Vault) -> None:
    secret = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"
    small.core_update("tools", [f"The deploy token is {secret}"])
    assert secret not in core_text(small)
    path = small.layout.root / "core" / "soul.md"
    small.core_update("soul", ["Be brief."])
    path.write_text(path.read_text() + f"- my key is {secret}\n")  # typed by hand
    small.reconcile_paths(["core/soul.md"])
    assert secret in path.read_text()  # the person's file keeps it
    assert secret not in small.core_block().text
    rows = small.conn.execute("SELECT text FROM agent_entries").fetchall()
    assert not any(secret in r[0] for r in rows)
    assert "secret_in_file" in {p.code for p in small.check().problems}


def test_git_records_every_core_change(tmp_path: Path) -> None:
    vault = Vault.init(tmp_path / "v", SMALL + "[git]\nauto_commit = true\n", embedder=FakeEmbedder())
    vault.core_update("user-profile", ["Name: Mara"])
    fill(vault, "user-profile", 8, start=3)
    log = subprocess.run(
        ["git", "-C", str(vault.layout.root), "log", "--format=%s"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    assert log[-1] == "memory: core user-profile: 1 added"
    assert any("moved to core/knowledge.md" in line for line in log)
    status = subprocess.run(
        ["git", "-C", str(vault.layout.root), "status", "--porcelain"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "core/" not in status
    vault.close()


def git_log(root: Path) -> list[str]:
    out = subprocess.run(
        ["git", "-C", str(root), "log", "--format=%s"], capture_output=True, text=True, check=True
    )
    return out.stdout.splitlines()


def test_a_hand_edit_is_committed_as_its_own_before_the_update_built_on_it(tmp_path: Path) -> None:
    vault = Vault.init(tmp_path / "v", SMALL + "[git]\nauto_commit = true\n", embedder=FakeEmbedder())
    vault.core_update("projects", ["Tidepool v2 ships in May."])
    path = vault.layout.root / "core" / "projects.md"
    path.write_text(path.read_text(encoding="utf-8") + "- [2026-01] Harbour app paused until June.\n")
    vault.core_update("projects", ["Tidepool beta testers: twelve."])
    log = git_log(vault.layout.root)
    assert log[:2] == ["memory: core projects: 1 added", "edit by hand: core/projects.md"], log
    shown = subprocess.run(
        ["git", "-C", str(vault.layout.root), "show", "HEAD~1:core/projects.md"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    assert "Harbour app paused" in shown and "beta testers" not in shown
    # An edit found by a read (the index catching up without a daemon) is committed as the person's too.
    path.write_text(path.read_text(encoding="utf-8").replace("twelve", "fifteen"))
    assert "fifteen" in vault.core_block().text
    assert git_log(vault.layout.root)[0] == "edit by hand: core/projects.md"
    vault.close()


def test_bad_names_and_empty_updates_are_refused(small: Vault) -> None:
    with pytest.raises(InvalidInput, match="not a core file name"):
        small.core_update("../etc/passwd", ["x"])
    with pytest.raises(InvalidInput, match="nothing to add"):
        small.core_update("soul", ["   "])


BERLIN = "Lives in Berlin with her partner Jonas, works from home."
LISBON = "Moved to Lisbon in April; lives there now with Jonas, works from home."
TEA = "Prefers tea over coffee in the morning."


def _profile(tmp_path: Path, config: str) -> tuple[Vault, list[datetime]]:
    clock = [datetime(2026, 3, 5, 10, tzinfo=UTC)]
    vault = Vault.init(tmp_path / "v", config, embedder=FakeEmbedder())
    vault.clock = lambda: clock[0]
    vault.core_update("user-profile", [BERLIN, TEA])
    clock[0] = datetime(2026, 5, 2, 10, tzinfo=UTC)
    return vault, clock


def test_a_core_entry_updated_by_another_entry_becomes_a_version_and_as_of_answers_then(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue #20 for core memory: an update that changes a value of another entry (not a near twin:
    found across entries by the supersede detector) replaces it above the auto-apply confidence; the
    new line says ``valid_from``/``supersedes``, the old one leaves for the archive with
    ``valid_to``/``superseded_by``; the block carries only the current value, ``as_of`` the old one."""
    config = "[updates]\nauto_apply = true\nauto_apply_at = 0.75\n"
    vault, _clock = _profile(tmp_path, config)
    with vault:
        assert not corepolicy.near(Entry(BERLIN), Entry(LISBON))  # found across entries, not merged
        done = vault.core_update("user-profile", [LISBON])
        assert done.moved and "superseded by" in done.moved[0][2]
        old_id, new_id = corefile.entry_id(BERLIN), corefile.entry_id(LISBON)
        profile = (vault.layout.root / "core" / "user-profile.md").read_text(encoding="utf-8")
        assert f"{LISBON} <!-- valid_from: 2026-05-02; supersedes: {old_id} -->" in profile
        assert BERLIN not in profile
        archive = (vault.layout.root / "core" / "_archive" / "user-profile.md").read_text(encoding="utf-8")
        assert f"valid_to: 2026-05-02; superseded_by: {new_id} -->" in archive and BERLIN in archive
        now = vault.core_block().text
        assert LISBON in now and BERLIN not in now and TEA in now
        then = vault.core_block(as_of="2026-04-01").text
        assert BERLIN in then and LISBON not in then and TEA in then
        assert vault.core_text(as_of="2026-02-01") == ""  # nothing was learnt yet
        assert vault.check().ok
    code, out, _err = run(["core", "--as-of", "2026-04-01", "--vault", str(tmp_path / "v")], capsys)
    assert code == 0 and BERLIN in out and LISBON not in out


PEANUTS = "Allergic to peanuts; carries an epinephrine pen on every trip abroad and on long hikes."
CELLO = "Plays cello in an amateur orchestra on Thursday evenings; concerts in June and December."


def test_as_of_rebuilds_the_block_across_an_update_and_a_budget_move(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue #20: an entry the budget moves to knowledge.md records the day it left the prompt (and keeps
    its version keys), so ``as_of`` answers the block as it stood before the update, between the update
    and the move, and after the move, through the Python API and the CLI."""
    vault, clock = _profile(tmp_path, SMALL + "[updates]\nauto_apply = true\nauto_apply_at = 0.75\n")
    with vault:
        vault.core_update("user-profile", [LISBON])  # 2026-05-02: a new version of BERLIN
        clock[0] = datetime(2026, 7, 10, 10, tzinfo=UTC)
        done = vault.core_update("user-profile", [PEANUTS, CELLO])  # over the 240-character budget
        assert {e for e, to, _ in done.moved} == {TEA, LISBON}
        assert all(to == "core/knowledge.md" for _, to, _ in done.moved)
        knowledge = (vault.layout.root / "core" / "knowledge.md").read_text(encoding="utf-8")
        old_id = corefile.entry_id(BERLIN)
        assert (
            f"{LISBON} <!-- valid_from: 2026-05-02; supersedes: {old_id}; from_file: user-profile;"
            " left_prompt: 2026-07-10 -->" in knowledge
        )
        assert f"{TEA} <!-- valid_from: 2026-03-05; from_file: user-profile; left_prompt: 2026-07-10 -->" in (
            knowledge
        )

        def shown(when: str | None) -> set[str]:
            text = vault.core_block(as_of=when).text
            named = (("B", BERLIN), ("L", LISBON), ("T", TEA), ("P", PEANUTS), ("C", CELLO))
            return {n for n, e in named if e in text}

        assert shown("2026-04-01") == {"B", "T"}  # before the update
        assert shown("2026-06-01") == {"L", "T"}  # after it, before the move
        assert shown("2026-06-30") == {"L", "T"}  # the month before the move
        # An added entry carries the day it was learnt (valid_from), not only its tag's month: on 5 July
        # the two entries of 10 July were not known yet.
        assert shown("2026-07-05") == {"L", "T"}
        assert shown("2026-03-01") == set()  # BERLIN and TEA were learnt on 5 March
        assert shown("2026-07-10") == {"P", "C"} == shown(None)  # after the move: as now
        assert vault.check().ok
        vault.reindex()  # the files alone say it
        assert shown("2026-06-01") == {"L", "T"} and vault.check().ok
    code, out, _err = run(["core", "--as-of", "2026-06-01", "--vault", str(tmp_path / "v")], capsys)
    assert code == 0 and LISBON in out and TEA in out and BERLIN not in out and PEANUTS not in out


def test_an_archived_entry_keeps_its_version_and_move_keys() -> None:
    """knowledge.md's own overflow goes to its archive: the line keeps ``from_file``/``left_prompt`` and
    its version keys, so ``as_of`` still finds where it was before it left the prompt."""
    entry = corefile.moved(
        corefile.versioned(Entry(LISBON, "2026-05"), valid_from="2026-05-02", supersedes="0123456789"),
        "user-profile",
        "2026-07-10",
    )
    gone = corefile.archived(entry, "2026-09-01", "over budget")
    assert gone.raw is not None and gone.raw.endswith(
        "<!-- left 2026-09-01: over budget; valid_from: 2026-05-02; supersedes: 0123456789;"
        " from_file: user-profile; left_prompt: 2026-07-10 -->"
    )
    origin = gone.left_prompt()
    assert (
        origin is not None and origin[0] == "user-profile" and origin[1] == datetime(2026, 7, 10, tzinfo=UTC)
    )
    assert gone.held_at(datetime(2026, 6, 1, tzinfo=UTC)) and not gone.held_at(
        datetime(2026, 4, 1, tzinfo=UTC)
    )
    assert Entry("Moved from: home office", raw="- Moved from: home office").left_prompt() is None


def test_below_auto_apply_a_core_update_is_reported_and_a_hand_written_superseded_by_applies_it(
    tmp_path: Path,
) -> None:
    """Auto-apply off (the default): both entries stay and the update says which entry the new one may
    replace (its proposal in ``review/``); a person writing ``superseded_by: <id>`` on the old line
    takes it out of the prompt."""
    vault, _clock = _profile(tmp_path, "")
    with vault:
        done = vault.core_update("user-profile", [LISBON])
        new_id, old_id = corefile.entry_id(LISBON), corefile.entry_id(BERLIN)
        waiting = f"review/core-user-profile-{new_id}-updates-{old_id}.md"
        assert any(BERLIN[:40] in n and waiting in n for n in done.notes)
        assert BERLIN in vault.core_block().text and LISBON in vault.core_block().text
        path = vault.layout.root / "core" / "user-profile.md"
        text = path.read_text(encoding="utf-8")
        path.write_text(text.replace(BERLIN, f"{BERLIN} <!-- superseded_by: {new_id} -->"), encoding="utf-8")
        block = vault.core_block()
        assert BERLIN not in block.text and LISBON in block.text
        assert any(BERLIN in line for line in block.left_out)
        assert BERLIN in path.read_text(encoding="utf-8")  # the file keeps it


def test_a_core_proposal_waits_in_review_and_accept_versions_the_entries(tmp_path: Path) -> None:
    """Issue #20: a core update between the proposal and the auto-apply confidence is a review file like
    a leaf proposal (old entry, new entry, why, link to the file); accepting it (Python API) versions the
    entries as auto-apply does; ``reindex`` keeps it (the file is the truth) and ``check`` reads it."""
    vault, _clock = _profile(tmp_path, "")
    with vault:
        vault.core_update("user-profile", [LISBON])
        old_id, new_id = corefile.entry_id(BERLIN), corefile.entry_id(LISBON)
        [p] = vault.proposals()
        assert (p.file, p.old, p.new) == ("user-profile", old_id, new_id) and p.why
        text = (vault.layout.root / p.path).read_text(encoding="utf-8")
        assert "kind: core-proposal" in text and BERLIN in text and LISBON in text
        assert "(../core/user-profile.md)" in text and text.split("---\n")[1].endswith("decision: pending\n")
        vault.reindex()
        assert [x.path for x in vault.proposals()] == [p.path] and vault.check().ok
        done = vault.decide(new_id, "accept")
        assert [x.new for x in done["accepted"]] == [new_id] and not vault.proposals()
        profile = (vault.layout.root / "core" / "user-profile.md").read_text(encoding="utf-8")
        assert f"{LISBON} <!-- valid_from: 2026-05-02; supersedes: {old_id} -->" in profile
        assert BERLIN not in profile
        archive = (vault.layout.root / "core" / "_archive" / "user-profile.md").read_text(encoding="utf-8")
        assert f"valid_to: 2026-05-02; superseded_by: {new_id} -->" in archive
        assert BERLIN not in vault.core_block().text and BERLIN in vault.core_block(as_of="2026-04-01").text
        week = next((vault.layout.root / "review" / "weekly").glob("*.md")).read_text(encoding="utf-8")
        assert "**accepted**" in week and f"{new_id} updates {old_id}" in week
        assert vault.check().ok


def test_an_accepted_or_auto_applied_core_update_is_revertible_from_the_cli(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue #20: "applied at once ... revertible" holds for core entries too. ``vaultmem review
    --revert NEW-OLD`` (the ids the weekly log's undo hint names) puts the old entry back from the
    archive right before its successor, the successor loses ``supersedes``, the archive loses the line,
    and the log says so; the same for an update applied at once; an unknown pair is refused."""
    root = str(tmp_path / "v")
    old_id, new_id = corefile.entry_id(BERLIN), corefile.entry_id(LISBON)
    profile = tmp_path / "v" / "core" / "user-profile.md"
    archive = tmp_path / "v" / "core" / "_archive" / "user-profile.md"
    for config in ("", "[updates]\nauto_apply = true\nauto_apply_at = 0.75\n"):
        vault, _clock = _profile(tmp_path, config)
        with vault:
            vault.core_update("user-profile", [LISBON])
            if not config:
                vault.decide(new_id, "accept")
            week = next((vault.layout.root / "review" / "weekly").glob("*.md"), None)
        assert BERLIN not in profile.read_text(encoding="utf-8") and BERLIN in archive.read_text(
            encoding="utf-8"
        )
        # Accepted or applied at once, the week's log names the update with its undo command.
        assert week is not None
        assert f"vaultmem review --revert {new_id}-{old_id}" in week.read_text(encoding="utf-8")
        assert ("**accepted**" if not config else "**applied**") in week.read_text(encoding="utf-8")
        code, _out, err = run(["review", "--revert", f"{new_id}-{old_id}", "--vault", root], capsys)
        assert code == 0, err
        text = profile.read_text(encoding="utf-8")
        assert f"- [2026-03] {BERLIN} <!-- valid_from: 2026-03-05 -->\n- [2026-05] {LISBON}" in text
        assert "supersedes" not in text
        assert BERLIN not in archive.read_text(encoding="utf-8")
        with Vault.open(tmp_path / "v", embedder=FakeEmbedder()) as vault:
            block = vault.core_block().text
            assert BERLIN in block and LISBON in block and vault.check().ok
            weekly = (vault.layout.root / "review" / "weekly").glob("*.md")
            log = "".join(w.read_text(encoding="utf-8") for w in weekly)  # the CLI's clock is today
            assert f"**reverted** (1.00): {new_id} updates {old_id}" in log
        code, _out, err = run(["review", "--revert", f"{new_id}-{old_id}", "--vault", root], capsys)
        assert code == 1 and "supersedes" in err
        shutil.rmtree(tmp_path / "v")


def test_a_closed_core_proposal_leaves_no_words_of_its_entries_in_review(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A core entry's words live in its file and archive only: the week's log names a closed core
    proposal by ids and file, and a proposal whose entry a person deleted (the way to forget a core
    fact) is closed as ``gone`` at the next review run, not kept pending for a week with the words."""

    def review_text(root: Path) -> str:
        return "".join(p.read_text(encoding="utf-8") for p in (root / "review").rglob("*.md"))

    vault, _clock = _profile(tmp_path, "")
    root = tmp_path / "v"
    with vault:
        vault.core_update("user-profile", [LISBON])
        [p] = vault.proposals()
        assert "Lisbon" in review_text(root)
        vault.decide(p.new, "accept")
        log = review_text(root)
        assert "**accepted**" in log and "core/user-profile.md" in log
        assert "Berlin" not in log and "Lisbon" not in log
    vault, _clock = _profile(tmp_path / "b", "")
    root = tmp_path / "b" / "v"
    with vault:
        vault.core_update("user-profile", [LISBON])
        assert [x.new for x in vault.proposals()] == [corefile.entry_id(LISBON)]
    profile = root / "core" / "user-profile.md"
    profile.write_text(
        "".join(
            ln for ln in profile.read_text(encoding="utf-8").splitlines(keepends=True) if "Lisbon" not in ln
        ),
        encoding="utf-8",
    )
    code, out, err = run(["review", "--list", "--json", "--vault", str(root)], capsys)
    assert code == 0, err
    assert [x["new"] for x in json.loads(out)["gone"]] == [corefile.entry_id(LISBON)]
    assert "Lisbon" not in review_text(root) and "**gone**" in review_text(root)


def test_a_core_proposal_rejected_from_the_cli_or_decided_by_a_hand_edit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``vaultmem review --reject`` keeps both entries and closes the proposal; a person's edit of
    ``decision: accept`` in the file is carried out by the next review run; a broken file is a ``check``
    problem."""
    root = str(tmp_path / "v")
    with Vault.init(tmp_path / "v", "", embedder=FakeEmbedder()) as vault:  # today's clock: the CLI's
        vault.core_update("user-profile", [BERLIN, TEA])
        vault.core_update("user-profile", [LISBON])
        [p] = vault.proposals()
    code, out, err = run(["review", "--reject", p.new, "--json", "--vault", root], capsys)
    assert code == 0, err
    data = json.loads(out)
    assert [x["file"] for x in data["rejected"]] == ["user-profile"] and data["waiting"] == []
    profile = (tmp_path / "v" / "core" / "user-profile.md").read_text(encoding="utf-8")
    assert BERLIN in profile and LISBON in profile and "supersedes" not in profile
    # The same pair is not proposed again; another update of the entry is.
    with Vault.open(tmp_path / "v", embedder=FakeEmbedder()) as vault:
        porto = "Moved to Porto in June; lives there now with Jonas, works from home."
        vault.core_update("user-profile", [porto])
        waiting = [x for x in vault.proposals() if x.new == corefile.entry_id(porto)]
        assert waiting, vault.proposals()
        target = vault.layout.root / waiting[0].path
        target.write_text(target.read_text(encoding="utf-8").replace("decision: pending", "decision: accept"))
    code, out, err = run(["review", "--list", "--json", "--vault", root], capsys)
    assert code == 0, err
    assert [x["new"] for x in json.loads(out)["accepted"]] == [corefile.entry_id(porto)]
    profile = (tmp_path / "v" / "core" / "user-profile.md").read_text(encoding="utf-8")
    assert f"supersedes: {waiting[0].old}" in profile
    broken = tmp_path / "v" / "review" / f"core-user-profile-{'a' * 10}-updates-{'b' * 10}.md"
    broken.write_text("---\nkind: core-proposal\nfile: ../x\nold: bbbbbbbbbb\nnew: aaaaaaaaaa\n---\n")
    with Vault.open(tmp_path / "v", embedder=FakeEmbedder()) as vault:
        assert [x.code for x in vault.check().problems] == ["invalid_proposal"]


class Condenser:
    """A deterministic summariser standing in for the model (not what is under test): it condenses each
    entry by dropping what follows its first comma or semicolon."""

    model = "fake-condenser"

    def __init__(self) -> None:
        self.calls = 0

    def ask(self, system: str, user: str, max_tokens: int = 1024) -> str:
        self.calls += 1
        data = user.split("<data>\n", 1)[1].split("\n</data>", 1)[0]
        lines = [re.split(r"[,;]", line, maxsplit=1)[0].strip() for line in data.splitlines()]
        return json.dumps(lines)


def test_a_model_condensed_update_keeps_the_version_keys(tmp_path: Path) -> None:
    """Issue #20: an over-budget update the model condenses still versions the replaced entry: the new
    entry (rewritten by the model) carries ``valid_from``/``supersedes``, and the archive's
    ``superseded_by`` names the id of the line actually written."""
    config = SMALL + "[updates]\nauto_apply = true\nauto_apply_at = 0.75\n"
    clock = [datetime(2026, 3, 5, 10, tzinfo=UTC)]
    vault = Vault.init(tmp_path / "v", config, embedder=FakeEmbedder())
    vault.clock = lambda: clock[0]
    with vault:
        vault.core_update(
            "user-profile", [BERLIN, TEA, "Runs 10 km on Sundays along the river, with friends."]
        )
        clock[0] = datetime(2026, 5, 2, 10, tzinfo=UTC)
        model = Condenser()
        vault._chat_model, vault._chat_model_built = model, True  # type: ignore[assignment]
        done = vault.core_update("user-profile", [LISBON, "Cycles to work, 8 km each way, all year round."])
        assert model.calls == 1 and done.by.startswith("llm:")
        old_id = corefile.entry_id(BERLIN)
        profile = (vault.layout.root / "core" / "user-profile.md").read_text(encoding="utf-8")
        [line] = [ln for ln in profile.splitlines() if "Moved to Lisbon" in ln]
        assert f"valid_from: 2026-05-02; supersedes: {old_id}" in line and "works from home" not in line
        written = corefile.entry_id(line.split("] ", 1)[1].split(" <!--")[0])
        archive = (vault.layout.root / "core" / "_archive" / "user-profile.md").read_text(encoding="utf-8")
        assert f"superseded_by: {written}" in archive and BERLIN in archive
        assert "Lisbon" in vault.core_block().text and "Berlin" not in vault.core_block().text
        assert "Berlin" in vault.core_block(as_of="2026-04-01").text


def test_an_entry_learnt_again_keeps_its_day_and_its_links() -> None:
    """A duplicate re-tags an entry with the newer month; the day it was first learnt (``valid_from``)
    and a version link it is part of stay on its line (before, the re-tag dropped them)."""
    entry = corefile.versioned(Entry(LISBON, "2026-05"), valid_from="2026-05-02", supersedes="0123456789")
    again = entry.retagged("2026-08")
    assert again.tag == "2026-08" and again.supersedes == ("0123456789",)
    assert again.line == f"- [2026-08] {LISBON} <!-- valid_from: 2026-05-02; supersedes: 0123456789 -->"
    assert again.held_at(datetime(2026, 5, 3, tzinfo=UTC))  # its day, not its new tag's month
    assert not again.held_at(datetime(2026, 5, 1, tzinfo=UTC))
    assert Entry(TEA, "2026-03").retagged("2026-04").line == f"- [2026-04] {TEA}"
    fresh = corefile.learnt([Entry(TEA, "2026-07"), Entry(CELLO, "2026-01")], "2026-07-10")
    assert [x.line for x in fresh] == [
        f"- [2026-07] {TEA} <!-- valid_from: 2026-07-10 -->",
        f"- [2026-01] {CELLO}",
    ]


BOOK_CLUB = "Runs the Tuesday book club at the library."


def test_a_core_update_applied_at_once_is_logged_and_its_revert_keeps_the_budget(tmp_path: Path) -> None:
    """An update applied at once (auto-apply is on by default) writes an ``applied`` line with its undo
    command in the week's log, as a leaf's does; undoing it puts the old entry back and applies the
    file's budget again: what no longer fits moves to knowledge.md (before, the file stayed over budget
    until the next update)."""
    vault, clock = _profile(tmp_path, SMALL + "[updates]\nauto_apply_at = 0.75\n")
    old_id, new_id = corefile.entry_id(BERLIN), corefile.entry_id(LISBON)
    root = tmp_path / "v"
    with vault:
        assert vault.config.updates_auto_apply is True
        vault.core_update("user-profile", [LISBON])  # 2026-05-02: applied at once
        done = vault.core_update("user-profile", [BOOK_CLUB])
        assert done.moved == () and done.chars <= done.budget
        [week] = (root / "review" / "weekly").glob("*.md")
        log = week.read_text(encoding="utf-8")
        assert "**applied** (" in log
        assert f"{new_id} updates {old_id}: entries of `core/user-profile.md`" in log
        assert f"(undo: `vaultmem review --revert {new_id}-{old_id}`)" in log
        assert "Berlin" not in log and "Lisbon" not in log  # a core entry's words stay in its file
        assert vault.proposals() == []
        clock[0] = datetime(2026, 5, 9, 10, tzinfo=UTC)
        vault.revert_update(f"{new_id}-{old_id}")
        profile = (root / "core" / "user-profile.md").read_text(encoding="utf-8")
        knowledge = (root / "core" / "knowledge.md").read_text(encoding="utf-8")
        assert BERLIN in profile and LISBON in profile and BOOK_CLUB in profile
        assert (
            TEA not in profile and f"{TEA} <!-- valid_from: 2026-03-05; from_file: user-profile;" in knowledge
        )
        assert not vault.core_file("user-profile").over_budget
        assert BERLIN not in (root / "core" / "_archive" / "user-profile.md").read_text(encoding="utf-8")
        assert "**reverted**" in "".join(
            p.read_text(encoding="utf-8") for p in (root / "review" / "weekly").glob("*.md")
        )
        block = vault.core_block().text
        assert BERLIN in block and TEA not in block and vault.check().ok


def test_an_accepted_core_update_keeps_the_day_its_successor_was_learnt(tmp_path: Path) -> None:
    """Accepting a core proposal days later versions the entries; the successor keeps ``valid_from`` of
    the day it was learnt (``as_of`` in between shows it), not the day of the accept."""
    vault, clock = _profile(tmp_path, "")
    old_id = corefile.entry_id(BERLIN)
    with vault:
        vault.core_update("user-profile", [LISBON])  # learnt 2026-05-02, a proposal below 0.9
        [p] = vault.proposals()
        clock[0] = datetime(2026, 5, 20, 10, tzinfo=UTC)
        vault.decide(p.new, "accept")
        profile = (tmp_path / "v" / "core" / "user-profile.md").read_text(encoding="utf-8")
        assert f"{LISBON} <!-- valid_from: 2026-05-02; supersedes: {old_id} -->" in profile
        assert LISBON in vault.core_block(as_of="2026-05-10").text
        assert vault.check().ok
