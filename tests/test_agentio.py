"""The agent-facing Vault methods: remember, supersede, recall, record_turn, operation, node_at."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from vaultmem import agentio, frontmatter
from vaultmem.errors import InvalidInput, NodeNotFound, UnsafePath
from vaultmem.vault import Vault


def log(root: Path) -> list[str]:
    out = subprocess.run(["git", "log", "--format=%s"], cwd=root, capture_output=True, text=True, check=True)
    return out.stdout.splitlines()


def meta(vault: Vault, rel: str) -> dict[str, Any]:
    return frontmatter.split(vault.layout.abs(rel).read_text(encoding="utf-8")).meta


def test_remember_writes_a_leaf_of_the_client_never_dropped(vault: Vault) -> None:
    done = vault.remember("ok thanks", source="claude-desktop", reason="the user said it")
    assert len(done.ids) == 1 and done.added == done.ids and not done.duplicates
    leaf = vault.get(done.ids[0])
    assert leaf.source == "claude-desktop" and leaf.text == "ok thanks"
    assert leaf.status.value == "pending_extraction"  # "ok thanks" alone would be dropped as chatter
    assert leaf.meta == {"via": "api", "reason": "the user said it"}
    assert done.paths[0].startswith("sources/claude-desktop/_fresh/")
    assert vault.check().ok


def test_remember_dedupes_by_content_across_clients(vault: Vault) -> None:
    vault.ingest_messages(
        [{"id": "m1", "role": "user", "content": "Mara prefers trains over flights.", "ts": "2024-05-01"}],
        source="chat",
    )
    first = vault.remember("Mara prefers trains over flights.", source="cursor")
    assert first.added == () and first.duplicates == first.ids
    assert vault.get(first.ids[0]).source == "chat"
    again = vault.remember("  Lyon is where Mara lives now.  ", source="cursor")
    twice = vault.remember("Lyon is where Mara lives now.", source="claude-code")
    assert twice.ids == again.ids and twice.duplicates == again.ids
    assert len(vault.ls(source="cursor")) == 1 and vault.ls(source="claude-code") == []


def test_remember_refuses_empty_oversized_and_unsafe_sources(vault: Vault) -> None:
    with pytest.raises(InvalidInput, match="empty"):
        vault.remember("   ")
    with pytest.raises(InvalidInput, match="at most 1024 tokens"):
        vault.remember("word " * 2000)
    with pytest.raises(InvalidInput, match="16000 characters"):
        vault.remember("x" * 20_000)
    with pytest.raises(UnsafePath):
        vault.remember("a fact", source="../etc")
    assert vault.ls() == []


def test_remember_redacts_secrets(vault: Vault) -> None:
    done = vault.remember(
        "The deploy key is ghp_abcdefghijklmnopqrstuvwxyz0123456789 for the CI", source="agent"
    )
    text = vault.layout.abs(done.paths[0]).read_text(encoding="utf-8")
    assert "ghp_abcdefghijklmnopqrstuvwxyz0123456789" not in text and "[REDACTED:" in text


def test_supersede_keeps_the_old_leaf_and_links_both(vault: Vault) -> None:
    vault.ingest_messages(
        [
            {
                "id": "d1",
                "speaker": "Priya",
                "content": "The Tidepool deadline is 27 March.",
                "ts": "2026-03-01",
            }
        ],
        source="team",
    )
    old = vault.ls(source="team")[0]
    before = vault.layout.abs(old.path).read_text(encoding="utf-8")
    done = vault.supersede(
        old.id, "The Tidepool deadline moved to 3 April.", source="claude-code", reason="Priya"
    )
    assert done.supersedes == old.id and len(done.added) == 1
    new_id = done.ids[0]
    assert meta(vault, done.paths[0])[agentio.SUPERSEDES] == old.id
    assert meta(vault, old.path)[agentio.SUPERSEDED_BY] == new_id
    after = vault.layout.abs(old.path).read_text(encoding="utf-8")
    # The old file is kept byte for byte, the one new key line added before the closing fence.
    assert after.replace(f"superseded_by: {new_id}\n", "") == before
    assert vault.get(old.id).text == "The Tidepool deadline is 27 March."
    assert vault.check().ok
    vault.flush()  # admitting rewrites the status line: the validity keys stay
    assert meta(vault, old.path)[agentio.SUPERSEDED_BY] == new_id
    assert meta(vault, done.paths[0])[agentio.SUPERSEDES] == old.id
    assert vault.check().ok
    # A second update of the same old leaf makes the key a list.
    again = vault.supersede(old.id, "The Tidepool deadline moved again, to 10 April.", source="claude-code")
    assert meta(vault, old.path)[agentio.SUPERSEDED_BY] == [new_id, again.ids[0]]


def test_supersede_refuses_what_it_cannot_version(vault: Vault) -> None:
    vault.ingest_messages(
        [{"id": "a", "role": "user", "content": "Tea at five.", "ts": "2026-03-01"}], source="c"
    )
    leaf = vault.ls()[0]
    with pytest.raises(InvalidInput, match="already"):
        vault.supersede(leaf.id, " Tea  at five. ")
    with pytest.raises(NodeNotFound):
        vault.supersede("0123456789abcdef", "new text")
    with pytest.raises(UnsafePath):
        vault.supersede("../x", "new text")
    with pytest.raises(InvalidInput, match="summary"):
        vault.supersede("s0123456789abcde", "new text")
    with pytest.raises(InvalidInput, match="at most 256 tokens"):
        vault.supersede(leaf.id, "word " * 400)
    assert len(vault.ls()) == 1


def test_supersede_keeps_a_hand_edit_of_the_old_leaf(vault: Vault) -> None:
    vault.ingest_messages(
        [{"id": "a", "role": "user", "content": "Tea at five.", "ts": "2026-03-01"}], source="c"
    )
    leaf = vault.ls()[0]
    path = vault.layout.abs(leaf.path)
    path.write_text(
        path.read_text().replace("---\nTea", "tags: [mine]  # a note\n---\nTea"), encoding="utf-8"
    )
    vault.supersede(leaf.id, "Tea at six now.")
    text = path.read_text(encoding="utf-8")
    assert "tags: [mine]  # a note\n" in text and "superseded_by:" in text
    assert vault.check().ok


def test_operation_is_one_commit_naming_client_and_reason(git_vault: Vault) -> None:
    root = git_vault.layout.root
    git_vault.ingest_messages(
        [{"id": "a", "role": "user", "content": "Tea at five.", "ts": "2026-03-01"}], source="c"
    )
    old = git_vault.ls()[0]
    n = len(log(root))
    git_vault.supersede(old.id, "Tea at six now.", source="cursor", reason="the user changed plans")
    subjects = log(root)
    assert len(subjects) == n + 1
    assert subjects[0] == f"memory: cursor updated {old.id} (the user changed plans)"
    git_vault.remember("Mara cycles to work.", source="cursor", reason="told me")
    assert log(root)[0] == "memory: cursor remembered (told me)"
    n = len(log(root))
    git_vault.remember("Mara cycles to work.", source="cursor")  # a duplicate: nothing to commit
    assert len(log(root)) == n
    status = subprocess.run(["git", "status", "--porcelain"], cwd=root, capture_output=True, text=True)
    assert status.stdout.strip() == ""


def test_operation_commits_what_was_done_before_a_failure(git_vault: Vault) -> None:
    root = git_vault.layout.root
    with pytest.raises(RuntimeError), git_vault.operation("memory: test did two things"):
        git_vault.remember("First fact of the two.", source="t")
        raise RuntimeError("boom")
    assert log(root)[0].startswith("memory: test did two things: interrupted after")
    assert git_vault.ls(source="t")


def test_recall_fits_the_budget_and_reads_messages(vault: Vault) -> None:
    vault.ingest_messages(
        [
            {"id": f"m{i}", "role": "user", "content": f"Fact {i}: the garden roses need water on day {i}."}
            for i in range(40)
        ]
        + [{"id": "k", "role": "user", "content": "The ryokan in Kyoto is booked for 14 April."}],
        source="chat",
        session="s1",
    )
    vault.flush()
    block = vault.recall("when is the Kyoto ryokan?", 60)
    assert 0 < block.tokens <= 60 and "ryokan" in block.text and block.core == ""
    messages = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": [{"type": "text", "text": "Hello!"}]},
        {"role": "user", "content": [{"type": "text", "text": "what about the Kyoto ryokan booking?"}]},
    ]
    from_messages = vault.recall(messages, 80)
    assert from_messages.query == "hi what about the Kyoto ryokan booking?"
    assert "ryokan" in from_messages.text and from_messages.tokens <= 80
    with pytest.raises(InvalidInput):
        vault.recall("x", 0)
    assert vault.recall("", 100).text == ""


def test_recall_puts_core_memory_first(vault: Vault) -> None:
    vault.core_update(
        "user-profile", ["[2026-03] Mara, lives in Lyon, prefers trains", "[2026-02] Speaks French"]
    )
    vault.remember("The ryokan in Kyoto is booked for 14 April.", source="agent")
    block = vault.recall("Kyoto ryokan", 200)
    assert (
        block.text.startswith("## User profile\n- [2026-03] Mara, lives in Lyon") and "ryokan" in block.text
    )
    assert block.core == vault.core_text() and "Speaks French" in block.core
    assert block.tokens <= 200
    tight = vault.recall("Kyoto ryokan", 12)  # core memory cut to whole lines, no room for context
    assert tight.text == "## User profile" and tight.context is None


def test_record_turn_ingests_each_turn_once(vault: Vault) -> None:
    turn = [
        {"role": "user", "content": "I moved to Lyon last week, by the way."},
        {"role": "assistant", "content": [{"type": "text", "text": "Noted: you live in Lyon now."}]},
    ]
    report = vault.record_turn(turn, session="chat-42", source="assistant")
    assert len(report.added) == 2
    again = vault.record_turn(turn, session="chat-42", source="assistant")
    assert again.added == () and again.duplicates == 2
    other = vault.record_turn(
        {"role": "user", "content": "I moved to Lyon last week, by the way."},
        session="chat-43",
        source="assistant",
    )
    assert len(other.added) == 1  # the same words in another conversation are another turn
    leaves = vault.ls(source="assistant")
    assert {x.session for x in leaves} == {"chat-42", "chat-43"}
    assert all(x.source_id and x.source_id.startswith("turn-") for x in leaves)
    with pytest.raises(InvalidInput):
        vault.record_turn(turn, session=" ")


def test_node_at(vault: Vault) -> None:
    done = vault.remember("A fact to find by path.", source="agent")
    assert vault.node_at(done.paths[0]) == done.ids[0]
    assert vault.node_at("sources/agent/_fresh/nothing.md") is None


def test_with_keys_keeps_every_other_byte() -> None:
    text = "---\nid: 0123456789abcdef\ntags: [a, b]   # mine\naliases:\n  - x\n---\nBody line\n\nmore\n"
    out = agentio.with_keys(text, {"supersedes": "1234567890123456"})
    assert out == text.replace("---\nBody", 'supersedes: "1234567890123456"\n---\nBody')
    assert frontmatter.split(out).meta["supersedes"] == "1234567890123456"  # an all-digit id stays a string
    replaced = agentio.with_keys(out, {"supersedes": ["1234567890123456", "abcdefabcdefabcd"]})
    assert frontmatter.split(replaced).meta["supersedes"] == ["1234567890123456", "abcdefabcdefabcd"]
    assert replaced.count("supersedes") == 1


def test_query_of_and_turn_records() -> None:
    assert agentio.query_of("  where?  ") == "where?"
    assert agentio.query_of([{"role": "assistant", "content": "only me"}]) == "only me"
    with pytest.raises(InvalidInput):
        agentio.query_of([3])  # type: ignore[list-item]
    one = agentio.turn_records({"role": "user", "content": "hi"}, "s")
    assert one[0]["id"].startswith("turn-") and one == agentio.turn_records(
        [{"role": "user", "content": "hi"}], "s"
    )
    assert agentio.turn_records({"id": "x", "content": "hi"}, "s")[0]["id"] == "x"
