"""Session notes: the sections, links and core proposals of a real chat; a hand-edited note kept; the
LLM's note and its fallback; the note written through the queue once a session has been idle."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tests.helpers import ChatServer, Reply
from vaultmem.embed import FakeEmbedder
from vaultmem.errors import NodeNotFound
from vaultmem.jobs import JobKind, schedule_session_notes
from vaultmem.model import Leaf
from vaultmem.vault import Vault

NOW = datetime(2026, 3, 9, 18, 0, tzinfo=UTC)
TRIP = [
    ("user", "Mara", "Hi! My name is Mara. I prefer trains over flights whenever there's a choice."),
    ("assistant", None, "Noted. Shall I look for trains from Tokyo to Kyoto on 14 April?"),
    ("user", "Mara", "Yes please. Remember that the ryokan check-in is at 15:00."),
    ("tool", "search_trains", "3 trains found: Nozomi 12:30, 13:00, 13:30"),
    ("assistant", None, "The 12:30 Nozomi arrives at 14:45, in time for check-in."),
    ("user", "Mara", "We decided to take the 12:30 Nozomi. I still need to book the taxi from the station."),
    ("user", "Mara", "Diego asked whether the ryokan has an onsen. Does it?"),
]


def trip(
    session: str = "kyoto-trip", start: datetime = NOW - timedelta(minutes=30)
) -> list[dict[str, object]]:
    return [
        {
            "id": f"{session}-{i}",
            "role": role,
            **({"speaker": speaker} if speaker else {}),
            "content": text,
            "ts": (start + timedelta(minutes=i)).isoformat(),
            "session": session,
        }
        for i, (role, speaker, text) in enumerate(TRIP)
    ]


def make(tmp_path: Path, config: str = "") -> Vault:
    vault = Vault.init(tmp_path / "v", config, embedder=FakeEmbedder())
    vault.clock = lambda: NOW
    return vault


def test_a_session_note_has_its_sections_links_and_proposals(tmp_path: Path) -> None:
    vault = make(tmp_path)
    vault.ingest_messages(trip(), source="chat")
    vault.flush()
    vault.record_episode(
        "find trains to Kyoto", mode="agent", tools=["search_trains"], outcomes=["3 found"], success=True,
        session="kyoto-trip", source="chat",
    )  # fmt: skip
    note = vault.end_session("kyoto-trip")
    assert note.path.startswith("sessions/2026-03/2026-03-09-kyoto-trip-n") and note.messages == 7
    assert note.source == "chat" and note.summariser == "extractive"
    assert "Mara: We decided to take the 12:30 Nozomi." in note.decisions
    assert "Mara: I still need to book the taxi from the station." in note.open_items
    assert "Mara: Does it?" in note.open_items  # the last turn's question, unanswered
    assert "Mara" in note.people and "search_trains" not in " ".join(note.people)
    assert note.tools == ("search_trains (2)",)  # the tool turn and the episode of this session
    assert note.discussed
    text = (vault.layout.root / note.path).read_text(encoding="utf-8")
    for leaf in vault.ls(session="kyoto-trip"):
        assert f"[[{Path(leaf.path).stem}|" in text
    assert "user-profile: Name: Mara" in note.remembered
    assert "user-profile: Mara: I prefer trains over flights whenever there's a choice." in note.remembered
    assert "knowledge: Mara: Remember that the ryokan check-in is at 15:00." in note.remembered
    profile = [t for _, t in vault.core_file("user-profile").entries]
    assert profile == ["Name: Mara", "Mara: I prefer trains over flights whenever there's a choice."]
    assert [h.path for h in vault.search_memory("Nozomi taxi", kinds=["session"])] == [note.path]
    assert [n.path for n in vault.sessions()] == [note.path]
    assert vault.check().ok


def test_ending_again_refreshes_the_note_and_proposes_nothing_twice(tmp_path: Path) -> None:
    vault = make(tmp_path)
    vault.ingest_messages(trip(), source="chat")
    first = vault.end_session("kyoto-trip")
    more = [{"id": "late", "role": "user", "speaker": "Mara", "content": "Let's book the 13:00 instead.",
             "ts": NOW.isoformat(), "session": "kyoto-trip"}]  # fmt: skip
    vault.ingest_messages(more, source="chat")
    second = vault.end_session("kyoto-trip")
    assert second.path == first.path and second.messages == 8
    assert "Mara: Let's book the 13:00 instead." in second.decisions
    assert len(vault.core_file("user-profile").entries) == 2
    assert len(list((vault.layout.root / "sessions").rglob("*.md"))) == 1


def test_a_hand_edited_note_is_kept(tmp_path: Path) -> None:
    vault = make(tmp_path)
    vault.ingest_messages(trip(), source="chat")
    note = vault.end_session("kyoto-trip")
    path = vault.layout.root / note.path
    path.write_text(path.read_text(encoding="utf-8").replace("## Decisions", "My own words.\n\n## Decisions"))
    before = path.read_bytes()
    again = vault.end_session("kyoto-trip")
    assert again.hand_edited and "edited by hand" in again.notes[0]
    assert path.read_bytes() == before


def test_an_unknown_session_is_a_clear_error(vault: Vault) -> None:
    with pytest.raises(NodeNotFound, match="no messages in session"):
        vault.end_session("nope")


def test_the_models_note_and_its_fallback_on_junk(tmp_path: Path, llm_server: ChatServer) -> None:
    good = {
        "discussed": ["Mara planned the train to Kyoto and the ryokan check-in."],
        "decisions": ["Take the 12:30 Nozomi."],
        "open_items": ["Book the taxi from the station."],
        "core": [{"file": "user-profile", "entry": "Prefers trains over flights."}],
    }
    llm_server.replies = [
        Reply("Sure! " + json.dumps(good)),
        Reply(json.dumps({**good, "discussed": ["Mara bought a yellow submarine in Lisbon."]})),
    ]
    config = f'[llm]\nbase_url = "{llm_server.url}"\nmodel = "m"\ntimeout_s = 10.0\n'
    vault = make(tmp_path, config)
    vault.ingest_messages(trip(), source="chat")
    note = vault.end_session("kyoto-trip")
    assert note.summariser == "llm:m" and note.decisions == ("Take the 12:30 Nozomi.",)
    assert "user-profile: Prefers trains over flights." in note.remembered
    assert "<data>" in llm_server.requests[0].json["messages"][1]["content"]
    vault.ingest_messages(trip("other-trip"), source="chat")
    fallback = vault.end_session("other-trip")
    assert fallback.summariser == "extractive" and "yellow submarine" not in " ".join(fallback.discussed)
    assert any(n.startswith("llm: junk reply") for n in fallback.notes)


# --- idle sessions through the queue ---------------------------------------------------------------------


def session_jobs(vault: Vault) -> list[tuple[str, float]]:
    return [
        (j.payload["session"], j.run_after) for j in vault.jobs.list() if j.kind == JobKind.SESSION_END.value
    ]


def test_a_session_note_is_written_through_the_queue_once_the_session_is_idle(tmp_path: Path) -> None:
    vault = make(tmp_path, "[sessions]\nidle_s = 3600.0\n")
    vault.clock = lambda: datetime.now(UTC)
    start = datetime.now(UTC) - timedelta(minutes=10)
    vault.ingest_messages(trip("live", start), source="chat")
    ((session, due),) = session_jobs(vault)
    assert session == "live" and due == pytest.approx(time.time() + 3600, abs=120)
    vault.work()  # not idle yet: the job waits, nothing is written
    assert not vault.sessions() and session_jobs(vault)
    # A message later pushes the note back (a debounce), never forward.
    vault.clock = lambda: datetime.now(UTC) + timedelta(minutes=20)
    vault.ingest_messages(
        [{**trip("live", start)[0], "id": "again", "content": "One more thing."}], source="chat"
    )
    ((_, later),) = session_jobs(vault)
    assert later == pytest.approx(due + 1200, abs=120)
    # A session whose last message came an hour and a half ago: due now, and the pool writes its note.
    vault.clock = lambda: datetime.now(UTC) - timedelta(minutes=90)
    vault.ingest_messages(trip("earlier", datetime.now(UTC) - timedelta(minutes=100)), source="chat")
    report = vault.work()
    assert report.jobs_failed == 0
    notes = vault.sessions()
    assert [n.session for n in notes] == ["earlier"]
    assert [s for s, _ in session_jobs(vault)] == ["live"]
    assert vault.check().ok


def test_imported_history_and_disabled_notes_queue_nothing(tmp_path: Path) -> None:
    vault = make(tmp_path)
    vault.ingest_messages(trip("2019-trip", datetime(2019, 5, 1, tzinfo=UTC)), source="chat")
    assert not session_jobs(vault)  # older than [sessions] max_age_days: an import, not a live chat
    off = Vault.init(tmp_path / "off", "[sessions]\nauto = false\n", embedder=FakeEmbedder())
    off.ingest_messages(trip("now", datetime.now(UTC)), source="chat")
    assert not session_jobs(off)
    off.close()


def test_an_ingest_queues_session_notes_without_importing_the_memory_tiers(tmp_path: Path) -> None:
    """Every ingest batch schedules its sessions' notes (``jobs.schedule_session_notes``); importing the
    memory tiers for it (core memory, its policy, the model client, the checker) cost a first ingest
    ~0.1 s. Called on the leaves again, it queues the same jobs."""
    import subprocess
    import sys

    messages = trip("live", datetime.now(UTC) - timedelta(minutes=5))
    code = (
        "import json, sys; from vaultmem import Vault; from vaultmem.embed import FakeEmbedder;"
        f"v = Vault.init({str(tmp_path / 'v')!r}, embedder=FakeEmbedder());"
        f"v.ingest_messages(json.loads({json.dumps(json.dumps(messages))}), source='chat');"
        "print([j.payload['session'] for j in v.jobs.list() if j.kind == 'session_end']);"
        "print(sorted(m for m in sys.modules if m in ('vaultmem.memtiers', 'vaultmem.coremem',"
        " 'vaultmem.corepolicy', 'vaultmem.check', 'vaultmem.llm', 'vaultmem.memindex')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.splitlines() == ["['live']", "[]"]
    vault = make(tmp_path / "again")
    vault.clock = lambda: datetime.now(UTC)
    c = vault.config

    def schedule(leaves: list[Leaf]) -> int:
        return schedule_session_notes(
            vault.conn,
            leaves,
            now=vault.clock(),
            idle_s=c.sessions_idle_s,
            max_age_days=c.sessions_max_age_days,
        )

    assert schedule([]) == 0
    vault.ingest_messages(messages, source="chat")
    queued = session_jobs(vault)
    vault.conn.execute("DELETE FROM jobs WHERE kind = ?", (JobKind.SESSION_END.value,))
    leaves = [vault.get(i) for (i,) in vault.conn.execute("SELECT id FROM chunks WHERE kind = 'leaf'")]
    assert schedule(leaves) == 1
    assert [s for s, _ in session_jobs(vault)] == [s for s, _ in queued] == ["live"]
    vault.close()
