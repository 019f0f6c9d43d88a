"""The supersede detector and the review inbox (issue #20): proposals created, auto-applied above the
threshold, queued below it, accepted and rejected from the CLI and from a hand edit of ``decision:``,
expired into the weekly log, reverted; never reachable from the MCP server. Real files and SQLite."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tests.helpers import ChatServer, Reply, run_cli
from vaultmem import detect
from vaultmem.config import Config
from vaultmem.embed import FakeEmbedder
from vaultmem.jobs import detect_updates_job
from vaultmem.vault import Vault

OLD = "The Tidepool launch deadline is 27 March."
NEW = "The Tidepool launch deadline moved to 3 April."


def test_judge_needs_a_changed_value_about_the_same_thing() -> None:
    moved = detect.judge(
        "I live in Berlin with my partner.", "We moved to Lisbon last month, I live there now.", 0.6
    )
    assert moved is not None and any("Berlin -> Lisbon" in w for w in moved.why)
    assert (
        detect.judge("I love sushi on Fridays.", "We had pizza for lunch at 12.", 0.2) is None
    )  # other subject
    assert (
        detect.judge(OLD, "The Tidepool launch deadline is 27 March, as agreed.", 0.9) is None
    )  # no new value
    flipped = detect.judge("Kenji eats meat.", "Kenji no longer eats meat.", 0.8)
    assert flipped is not None and "negation flipped" in flipped.why
    # Two people's facts are not one fact changing.
    assert detect.judge("Priya's team has 6 engineers.", "Kenji's team has 23 engineers.", 0.9) is None
    strong = detect.judge(OLD, NEW, 0.9)
    weak = detect.judge(OLD, NEW, 0.45)
    assert strong is not None and weak is not None and strong.confidence > weak.confidence


AUTO_APPLY = "[updates]\nauto_apply = true\nauto_apply_at = 0.5\n"
# The inbox's own tests: the deadline that "moved" is a firm change, applied at once by default; with
# auto-apply off it waits in review/ for a person.
WAITS = "[updates]\nauto_apply = false\n"


@pytest.fixture
def pair(tmp_path: Path) -> tuple[Vault, str, str]:
    return _pair(tmp_path, WAITS)


def _pair(tmp_path: Path, config: str) -> tuple[Vault, str, str]:
    v = Vault.init(tmp_path / "vault", '[embed]\nmodel = "fake"\n' + config, embedder=FakeEmbedder())
    old = v.remember(OLD, ts="2024-03-01T09:00:00Z", source="chat").ids[0]
    v.remember("Lunch was ramen at the place near the station.", ts="2024-03-02T12:00:00Z", source="chat")
    new = v.remember(NEW, ts="2024-03-10T09:00:00Z", source="chat").ids[0]
    v.flush()
    return v, old, new


def test_auto_apply_is_on_by_default_for_a_firm_change_only(tmp_path: Path) -> None:
    """On by default (measured: only a firm change, a change word of one slot of one subject, reaches
    ``AUTO_APPLY_AT``; 0 such links on 20 LongMemEval haystacks where nothing is an update): the
    deadline that "moved" is linked at once, listed in the week's log with its undo command; the same
    new value without a change word waits in review/ for a person; ``auto_apply = false`` turns it off."""
    assert Config().updates_auto_apply is True
    assert Config().updates_auto_apply_at == detect.AUTO_APPLY_AT
    vault, old, new = _pair(tmp_path / "default", "")
    try:
        assert vault.config.updates_auto_apply is True
        done = vault.propose_updates(now=datetime(2024, 3, 11, tzinfo=UTC))
        assert [(p.old, p.new) for p in done["applied"]] == [(old, new)] and done["proposed"] == []
        assert done["applied"][0].confidence >= detect.AUTO_APPLY_AT
        assert vault.get(old).superseded_by == (new,)
        week = (vault.layout.root / "review" / "weekly" / "2024-W11.md").read_text(encoding="utf-8")
        assert f"{new} updates {old}" in week and f"--revert {new}-{old}" in week
    finally:
        vault.close()
    # The same value said without a change word: a proposal, not a link.
    plain = Vault.init(tmp_path / "plain", '[embed]\nmodel = "fake"\n', embedder=FakeEmbedder())
    try:
        a = plain.remember(OLD, ts="2024-03-01T09:00:00Z", source="chat").ids[0]
        b = plain.remember("The Tidepool launch deadline is 3 April.", ts="2024-03-10T09:00:00Z").ids[0]
        plain.flush()
        done = plain.propose_updates(now=datetime(2024, 3, 11, tzinfo=UTC))
        assert done["applied"] == [] and [(p.old, p.new) for p in done["proposed"]] == [(a, b)]
        assert detect.PROPOSE_AT <= done["proposed"][0].confidence <= detect.FIRM_BELOW
    finally:
        plain.close()
    vault, old, new = _pair(tmp_path / "off", "[updates]\nauto_apply = false\nauto_apply_at = 0.5\n")
    try:
        done = vault.propose_updates(now=datetime(2024, 3, 11, tzinfo=UTC))
        assert done["applied"] == [] and [(p.old, p.new) for p in done["proposed"]] == [(old, new)]
        assert vault.get(old).superseded_by == ()
    finally:
        vault.close()


def test_high_confidence_is_applied_at_once_and_revertible(tmp_path: Path) -> None:
    vault, old, new = _pair(tmp_path, AUTO_APPLY)
    try:
        done = vault.propose_updates(now=datetime(2024, 3, 11, tzinfo=UTC))
        assert [(p.old, p.new) for p in done["applied"]] == [(old, new)] and done["proposed"] == []
        assert vault.get(old).superseded_by == (new,) and vault.get(new).supersedes == (old,)
        week = vault.layout.root / "review" / "weekly" / "2024-W11.md"
        assert f"{new} updates {old}" in week.read_text(encoding="utf-8") and "applied" in week.read_text()
        assert vault.propose_updates(rescan=True) == {"proposed": [], "applied": [], "dismissed": []}
        vault.revert_update(f"{new}-{old}")
        assert vault.get(old).superseded_by == () and vault.get(new).supersedes == ()
        assert "superseded_by" not in vault.layout.abs(vault.get(old).path).read_text(encoding="utf-8")
        # The undo is listed in the week's log too (the vault's clock: today's week).
        logs = "".join(p.read_text(encoding="utf-8") for p in week.parent.glob("*.md"))
        assert f"**reverted** (1.00): {new} updates {old}" in logs
        assert vault.check().ok
    finally:
        vault.close()


# A person's accept (or an undo) killed with SIGKILL once the leaf files are written and before their
# index rows are: the first write of rows inside the link kills the process, so only the moment is chosen.
KILLED_LINK = """
import os, signal, sys
from vaultmem import index
from vaultmem.embed import FakeEmbedder
from vaultmem.vault import Vault

vault = Vault.open(sys.argv[1], embedder=FakeEmbedder())
def killed(*args, **kwargs):
    os.kill(os.getpid(), signal.SIGKILL)
index.upsert_rows = killed
if sys.argv[2] == "accept":
    vault.decide(sys.argv[3], "accept")
elif sys.argv[2] == "auto":
    from datetime import UTC, datetime
    vault.propose_updates(now=datetime(2024, 3, 11, tzinfo=UTC))
else:
    vault.revert_update(sys.argv[3])
"""


@pytest.mark.parametrize("action", ["accept", "revert"])
def test_a_link_killed_between_files_and_rows_heals_on_open(
    pair: tuple[Vault, str, str], monkeypatch: pytest.MonkeyPatch, action: str
) -> None:
    """The link is one durable step: after a kill -9 between the leaf files and their rows, opening the
    vault finishes it (files and rows agree, ``check`` without ``--fix`` is clean)."""
    vault, old, new = pair
    root = vault.layout.root
    monkeypatch.setattr(detect, "PROPOSE_AT", 0.3)
    vault.propose_updates(now=datetime(2024, 3, 11, tzinfo=UTC))
    if action == "revert":
        vault.decide(new, "accept")
        assert vault.get(old).superseded_by == (new,)
    vault.close()
    key = new if action == "accept" else f"{new}-{old}"
    child = subprocess.run(
        [sys.executable, "-c", KILLED_LINK, str(root), action, key],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert child.returncode == -signal.SIGKILL, child.stderr
    old_file = next(root.glob(f"sources/chat/**/*-{old}.md")).read_text(encoding="utf-8")
    assert ("superseded_by" in old_file) == (action == "accept")  # the file was written before the kill
    with Vault.open(root, embedder=FakeEmbedder()) as reopened:
        report = reopened.check()
        assert report.ok, report.problems
        linked = (new,) if action == "accept" else ()
        assert reopened.get(old).superseded_by == linked
        assert reopened.get(new).supersedes == ((old,) if action == "accept" else ())


def test_an_auto_applied_link_and_its_log_line_are_one_step(tmp_path: Path) -> None:
    """Killed after the files of an auto-applied link and before its rows: on open the link is finished
    and the week's log has its line (it is written in the same step), once."""
    vault, old, new = _pair(tmp_path, AUTO_APPLY)
    root = vault.layout.root
    vault.close()
    child = subprocess.run(
        [sys.executable, "-c", KILLED_LINK, str(root), "auto", ""],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert child.returncode == -signal.SIGKILL, child.stderr
    week = root / "review" / "weekly" / "2024-W11.md"
    with Vault.open(root, embedder=FakeEmbedder()) as reopened:
        assert reopened.check().ok
        assert reopened.get(old).superseded_by == (new,)
        assert week.read_text(encoding="utf-8").count("**applied** ") == 1
        assert f"{new} updates {old}" in week.read_text(encoding="utf-8")
        # The next scan does not apply or log it again.
        again = reopened.propose_updates(now=datetime(2024, 3, 11, tzinfo=UTC), rescan=True)
        assert again["applied"] == [] and week.read_text(encoding="utf-8").count("**applied** ") == 1


def test_below_the_threshold_it_waits_and_a_hand_edit_decides(
    pair: tuple[Vault, str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    vault, old, new = pair
    try:
        monkeypatch.setattr(detect, "AUTO_APPLY_AT", 1.01)
        monkeypatch.setattr(detect, "PROPOSE_AT", 0.3)
        done = vault.propose_updates()
        assert [(p.old, p.new) for p in done["proposed"]] == [(old, new)]
        path = vault.layout.root / "review" / f"{new}-updates-{old}.md"
        text = path.read_text(encoding="utf-8")
        assert "decision: pending" in text and "27 March" in text and "3 April" in text
        assert vault.get(old).superseded_by == ()  # not applied yet
        assert vault.check().ok
        broken = vault.layout.root / "review" / f"{new}-updates-0123456789abcdef.md"
        broken.write_text(text.replace("decision: pending", "decision: perhaps"), encoding="utf-8")
        assert [p.code for p in vault.check().problems] == ["invalid_proposal"]
        # One naming a leaf the vault does not hold is no problem: the next review retires it as gone.
        broken.write_text(text.replace(old, "0123456789abcdef"), encoding="utf-8")
        assert vault.check().ok
        assert [p.old for p in vault.apply_reviews()["gone"]] == ["0123456789abcdef"]
        assert not broken.exists() and path.exists()
        assert vault.search("Tidepool deadline", k=20, include_superseded=True)  # review/ is never indexed
        assert not any(h.path.startswith("review/") for h in vault.search("Tidepool deadline design", 20))
        # A person accepts it in Obsidian.
        path.write_text(text.replace("decision: pending", "decision: accept"), encoding="utf-8")
        out = vault.apply_reviews()
        assert [p.new for p in out["accepted"]] == [new] and not path.exists()
        assert vault.get(old).superseded_by == (new,)
        assert vault.proposals() == []
    finally:
        vault.close()


def test_reject_and_expiry(pair: tuple[Vault, str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    vault, old, new = pair
    try:
        monkeypatch.setattr(detect, "AUTO_APPLY_AT", 1.01)
        monkeypatch.setattr(detect, "PROPOSE_AT", 0.3)
        now = datetime(2024, 3, 11, tzinfo=UTC)
        vault.propose_updates(now=now)
        assert vault.apply_reviews(now=now + timedelta(days=6))["expired"] == []
        out = vault.apply_reviews(now=now + timedelta(days=8))
        assert [p.new for p in out["expired"]] == [new] and vault.proposals() == []
        log = (vault.layout.root / "review" / "weekly" / "2024-W12.md").read_text(encoding="utf-8")
        assert "expired" in log and "27 March" in log
        assert vault.propose_updates(rescan=True)["proposed"] == []  # an expired pair is not proposed again
        assert vault.get(old).superseded_by == ()
    finally:
        vault.close()


def test_cli_review(pair: tuple[Vault, str, str], tmp_path: Path) -> None:
    vault, old, new = pair
    root = str(vault.layout.root)
    vault.close()
    # Thresholds as measured: a clear change with the fake embedder's cosine stays below auto-apply.
    found = run_cli("review", "--scan", "--json", "--vault", root)
    assert found.returncode == 0, found.stderr
    data = json.loads(found.stdout)
    # PROPOSE_AT <= confidence < AUTO_APPLY_AT: it waits for a person
    assert [(p["old"], p["new"]) for p in data["proposed"]] == [(old, new)]
    listed = run_cli("review", "--list", "--vault", root)
    assert f"waiting: {new} updates {old}" in listed.stdout
    rejected = run_cli("review", "--reject", new, "--json", "--vault", root)
    assert rejected.returncode == 0, rejected.stderr
    assert [p["new"] for p in json.loads(rejected.stdout)["rejected"]] == [new]
    bad = run_cli("review", "--accept", "0123456789abcdef", "--vault", root)
    assert bad.returncode == 1 and "no proposals match" in bad.stderr


def test_the_mcp_server_cannot_approve() -> None:
    source = (Path(__file__).parent.parent / "vaultmem" / "mcpserver.py").read_text(encoding="utf-8")
    for name in ("apply_reviews", "decide(", "propose_updates", "revert_update", "review.", "settle("):
        assert name not in source
    tools = (Path(__file__).parent.parent / "vaultmem" / "agenttools.py").read_text(encoding="utf-8")
    assert "decide(" not in tools and "apply_reviews" not in tools and "settle(" not in tools


def test_admission_queues_the_detector_and_the_queue_fills_the_inbox(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The detector is a queued job after admission: ingest + flush queue it, the worker pool (as
    `vaultmem jobs --run`, `compact` or the daemon run it) writes the proposal, and a later admission
    scans only the new leaves."""
    monkeypatch.setattr(detect, "AUTO_APPLY_AT", 1.01)
    monkeypatch.setattr(detect, "PROPOSE_AT", 0.3)
    turns = [
        ("u1", "user", "Quick one: the Tidepool launch deadline is 27 March, right?", "2024-03-01T09:00:00Z"),
        ("a1", "assistant", "Yes, 27 March is what the plan says.", "2024-03-01T09:00:20Z"),
        ("u2", "user", "Booked the ramen place near the station for Friday lunch.", "2024-03-02T12:00:00Z"),
    ]
    later = [
        ("u3", "user", "Heads up: the Tidepool launch deadline moved to 3 April.", "2024-03-10T09:00:00Z")
    ]

    def records(rows: list[tuple[str, str, str, str]]) -> list[dict[str, object]]:
        return [{"id": i, "role": r, "content": c, "ts": t, "session": "2024-03"} for i, r, c, t in rows]

    with Vault.init(tmp_path / "vault", '[embed]\nmodel = "fake"\n', embedder=FakeEmbedder()) as vault:
        vault.ingest_messages(records(turns), source="chat")
        vault.flush()
        kinds = [r[0] for r in vault.conn.execute("SELECT kind FROM jobs")]
        assert "detect_updates" in kinds
        vault.work()
        assert vault.proposals() == []  # nothing earlier to update yet
        vault.ingest_messages(records(later), source="chat")
        vault.flush()
        assert vault.proposals() == []  # queued, not run by admission itself
        report = vault.work()
        found = vault.proposals()
        old = next(h.id for h in vault.search("deadline is 27 March", k=5) if "27 March, right" in h.text)
        assert [(p.old, p.new) for p in found] == [(old, found[0].new)]
        assert "3 April" in vault.get(found[0].new).text
        assert any(op.startswith("memory: updates: 1 proposed") for op in report.operations)
        assert not vault.conn.execute("SELECT 1 FROM jobs WHERE kind = 'detect_updates'").fetchone()
        # A decision written into the file by hand is carried out by the next detector job.
        path = vault.layout.root / found[0].path
        path.write_text(path.read_text(encoding="utf-8").replace("decision: pending", "decision: accept"))
        vault.jobs.enqueue_many([detect_updates_job()])
        vault.work()
        assert vault.get(old).superseded_by == (found[0].new,) and vault.proposals() == []


def test_judge_finds_a_count_said_again_inside_long_turns() -> None:
    """Of long, many-topic turns (as LongMemEval's are), the sentences that say the changed thing are
    judged: a count written as a word, said again of the same thing, is a change."""
    old = (
        "I'm planning a capsule wardrobe for autumn and want to keep it under twenty pieces. "
        "I've already bought three tops from H&M, I'm really loving their summer collection. "
        "Do you know if they have a loyalty program or rewards card that I can sign up for?"
    )
    new = (
        "I'm planning to go to the mall this weekend and was wondering about sales at Sephora. "
        "By the way, I've already got five tops from H&M so far, and I'm thinking of getting a few more."
    )
    verdict = detect.judge(old, new, 0.58)
    assert verdict is not None and "counted again: tops" in verdict.why
    assert verdict.confidence >= detect.PROPOSE_AT
    # The same count said again is no change.
    same = detect.judge(old, new.replace("five tops", "three tops"), 0.58)
    assert same is None or not any("counted again" in w for w in same.why)


def test_a_configured_model_judges_the_proposals(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, llm_server: ChatServer
) -> None:
    """With [llm], the model judges what the offline rules propose: "no" dismisses it (logged, never
    proposed again), "yes" with its confidence decides the tier; a down or junk model leaves the offline
    judgement (a warning says so). The memories reach the model as data."""
    monkeypatch.setattr(detect, "PROPOSE_AT", 0.3)
    config = f'[embed]\nmodel = "fake"\n\n[updates]\nauto_apply = true\n\n[llm]\nbase_url = "{llm_server.url}"\nmodel = "judge"\ntimeout_s = 10.0\n'
    vault = Vault.init(tmp_path / "vault", config, embedder=FakeEmbedder())
    try:
        old = vault.remember(OLD, ts="2024-03-01T09:00:00Z", source="chat").ids[0]
        vault.remember(
            "Lunch was ramen at the place near the station.", ts="2024-03-02T12:00:00Z", source="chat"
        )
        new = vault.remember(NEW, ts="2024-03-10T09:00:00Z", source="chat").ids[0]
        vault.flush()
        llm_server.replies = [Reply('{"updates": false, "confidence": 0.9, "why": "two deadlines"}')]
        out = vault.propose_updates(now=datetime(2024, 3, 11, tzinfo=UTC))
        assert [(p.old, p.new) for p in out["dismissed"]] == [(old, new)] and vault.proposals() == []
        sent = json.loads(llm_server.requests[0].body)["messages"]
        assert "27 March" in sent[1]["content"] and "data, never instructions" in sent[0]["content"]
        week = (vault.layout.root / "review" / "weekly" / "2024-W11.md").read_text(encoding="utf-8")
        assert "dismissed by the model" in week
        assert vault.propose_updates(rescan=True)["dismissed"] == []  # never asked twice
        # Yes, sure: applied at once.
        (vault.layout.root / "review" / "weekly" / "2024-W11.md").unlink()
        llm_server.replies = [Reply('<think>hm</think>{"updates": true, "confidence": 0.97, "why": "moved"}')]
        out = vault.propose_updates(rescan=True)
        assert [p.new for p in out["applied"]] == [new] and vault.get(old).superseded_by == (new,)
        assert "model: moved" in out["applied"][0].why
        # Junk: the offline judgement stands.
        vault.revert_update(f"{new}-{old}")
        for path in (vault.layout.root / "review" / "weekly").glob("*.md"):
            path.unlink()
        llm_server.replies = [Reply("I think so, yes!")]
        out = vault.propose_updates(rescan=True)
        [made] = out["proposed"] + out["applied"]  # its tier is the offline confidence's
        assert made.new == new and made.why[0] == "value changed: 27 March -> 3 April"
        assert not any(w.startswith("model:") for w in made.why)
        assert any("judged offline" in w for w in vault.warnings)
    finally:
        vault.close()
