"""Document operations on real files and SQLite: reading order, append/insert/delete/update/summarise,
crash replay, and chat sessions read as trees and rendered as message lists."""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.helpers import make_vault, topic_records
from vaultmem import docmem, index, leaffile, order, sessions, steps
from vaultmem.embed import FakeEmbedder
from vaultmem.errors import FrontmatterError, InvalidInput, NodeNotFound
from vaultmem.layout import SIDECAR_NAME
from vaultmem.summaryfile import parse_summary
from vaultmem.tokens import count_tokens
from vaultmem.vault import Vault


def _build(path: Path, fanout: int) -> Path:
    """A compacted vault: four topics with disjoint words, so each level holds one topic."""
    with make_vault(path, fanout=fanout) as vault:
        vault.ingest_messages(topic_records(40 if fanout < 50 else 12))
        vault.flush()
        vault.compact()
    return path


@pytest.fixture(scope="session")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Built once per run and copied per test (compaction is the slow part)."""
    return _build(tmp_path_factory.mktemp("docmem") / "v", 50)


@pytest.fixture(scope="session")
def condensed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Levels condensed under parents (depth 2 and more)."""
    return _build(tmp_path_factory.mktemp("docmem") / "v", 4)


def copy_of(template: Path, tmp: Path) -> Vault:
    target = tmp / "v"
    shutil.copytree(template, target)
    return Vault.open(target, embedder=FakeEmbedder())


@pytest.fixture
def vault(template: Path, tmp_path: Path) -> Iterator[Vault]:
    with copy_of(template, tmp_path) as v:
        yield v


def level_ids(vault: Vault, depth: int = 1) -> list[str]:
    rows = vault.conn.execute(
        "SELECT id FROM chunks WHERE kind = 'summary' AND depth = ? AND path LIKE 'sources/%' ORDER BY path",
        (depth,),
    )
    return [r["id"] for r in rows]


def children(vault: Vault, level_id: str) -> list[str]:
    """Ids of the nodes directly in a level, in reading order."""
    path = vault.conn.execute("SELECT path FROM chunks WHERE id = ?", (level_id,)).fetchone()[0]
    return [r["id"] for r in order.sibling_order(docmem.siblings(vault.conn, path.rsplit("/", 1)[0]))]


def row(vault: Vault, node_id: str) -> Any:
    return vault.conn.execute("SELECT * FROM chunks WHERE id = ?", (node_id,)).fetchone()


def assert_consistent(vault: Vault) -> None:
    """check passes and a rebuild from the files gives exactly the same rows (order included)."""
    report = vault.check()
    assert report.ok, report.problems
    before = index.all_rows(vault.conn)
    vault.reindex()
    assert index.all_rows(vault.conn) == before
    assert not steps.pending_notes(vault.layout)


def stale(vault: Vault, node_id: str) -> bool:
    return bool(row(vault, node_id)["status"] == "stale")


# -- reading order -------------------------------------------------------------------------------------
def test_sibling_order_explicit_then_implicit_positions_ties_by_path() -> None:
    rows = [
        {"path": "d/c.md", "ts": "2024-01-03", "seq": 0, "ord": None},
        {"path": "d/a.md", "ts": "2024-01-01", "seq": 0, "ord": None},
        {"path": "d/x.md", "ts": "2030-01-01", "seq": 0, "ord": "1.5"},
        {"path": "d/b.md", "ts": "2024-01-01", "seq": 1, "ord": None},
        {"path": "d/0.md", "ts": None, "seq": 0, "ord": "2"},  # ties with b (implicit 2): by path
        {"path": "d/y.md", "ts": "2000-01-01", "seq": 0, "ord": "-1"},
    ]
    assert [r["path"] for r in order.sibling_order(rows)] == [
        "d/y.md",
        "d/a.md",
        "d/x.md",
        "d/0.md",
        "d/b.md",
        "d/c.md",
    ]
    keyed = order.effective_orders(rows)
    assert [str(v) for v, _ in keyed] == ["-1", "1", "1.5", "2", "2", "3"]


def test_two_hundred_inserts_into_one_gap_stay_exact_and_distinct() -> None:
    low, high = Decimal(1), Decimal(2)
    made = []
    for _ in range(200):
        high = order.order_between(low, high)
        made.append(high)
        assert low < high
    assert len(set(made)) == 200 and made == sorted(made, reverse=True)
    text = order.format_order(made[-1])
    assert Decimal(text) == made[-1] and "E" not in text.upper()


@given(st.lists(st.integers(min_value=0, max_value=10_000), min_size=1, max_size=60), st.integers(0, 5))
def test_inserting_at_random_places_keeps_the_intended_order(positions: list[int], start: int) -> None:
    values = [Decimal(n + 1) for n in range(start)]  # implicit positions of existing siblings
    intended = list(range(start))
    orders: dict[int, Decimal] = dict(enumerate(values))
    for n, pick in enumerate(positions, start=start):
        at = pick % (len(intended) + 1)
        if at == len(intended):
            value = order.order_after(orders[intended[-1]]) if intended else Decimal(1)
        else:
            value = order.order_between(orders[intended[at - 1]] if at else Decimal(0), orders[intended[at]])
        orders[n] = value
        intended.insert(at, n)
    rows = [
        {"path": f"d/{n:04d}.md", "ts": None, "seq": 0, "ord": order.format_order(v)}
        for n, v in orders.items()
    ]
    assert [int(r["path"][2:6]) for r in order.sibling_order(rows)] == intended


def test_order_key_round_trips_through_leaf_and_summary_files_and_is_validated() -> None:
    leaf = leaffile.parse_leaf(
        '---\nid: 3f9a1c2b4d5e6f70\nsource: chat\norder: "3.25"\nstatus: admitted\n---\nHi.\n',
        "sources/chat/_fresh/2024-hi-3f9a1c2b4d5e6f70.md",
    )[0]
    assert leaf.order == "3.25"
    assert '\norder: "3.25"\n' in leaffile.render_leaf(leaf)
    assert leaffile.parse_leaf(leaffile.render_leaf(leaf), leaf.path)[0] == leaf
    unquoted = leaffile.parse_leaf(
        "---\nid: 3f9a1c2b4d5e6f70\nsource: chat\norder: 7\n---\nHi.\n", leaf.path
    )[0]
    assert unquoted.order == "7"
    for bad in ("NaN", '"1_000"', "two", "true", "[1]", '"1e99999"', ".inf"):
        with pytest.raises(FrontmatterError, match="order"):
            leaffile.parse_leaf(
                f"---\nid: 3f9a1c2b4d5e6f70\nsource: chat\norder: {bad}\n---\nHi.\n", leaf.path
            )
    summary_text = (
        '---\nid: s3c5e0a91d2b7f48\nkind: summary\nsource: chat\ndepth: 1\norder: "0.5"\n---\nText.\n'
    )
    node, _ = parse_summary(summary_text, "sources/chat/01-x/_summary.md")
    assert node.order == "0.5"


# -- append_child ---------------------------------------------------------------------------------------------
def test_append_child_writes_a_leaf_last_in_reading_order_queues_it_and_stales_the_level(
    vault: Vault,
) -> None:
    level = level_ids(vault)[0]
    before = children(vault, level)
    new_id = vault.append_child(level, "The roses need compost in spring.", role="assistant", speaker="Ava")
    assert children(vault, level) == [*before, new_id]
    r = row(vault, new_id)
    assert r["parent"] == level and r["ord"] == str(len(before) + 1) and r["role"] == "assistant"
    assert r["status"] == "pending_extraction" and r["source_id"].startswith("docmem:")
    first = index.get_leaf(vault.conn, before[0])
    assert r["session"] == index.get_leaf(vault.conn, before[-1]).session and r["source"] == first.source
    text = (vault.layout.root / r["path"]).read_text()
    assert f'\norder: "{len(before) + 1}"\n' in text and text.endswith("The roses need compost in spring.\n")
    assert stale(vault, level)
    assert any(j.payload == {"id": new_id} for j in vault.jobs.list() if j.kind == "admit")
    vault.flush()
    assert vault.get(new_id).status.value == "sealed"  # admitted, inside a level
    assert vault.conn.execute("SELECT count(*) FROM vectors WHERE id = ?", (new_id,)).fetchone()[0] == 1
    assert_consistent(vault)


def test_append_child_with_an_embedder_is_admitted_at_once_with_its_vector(vault: Vault) -> None:
    level = level_ids(vault)[0]
    embedder = FakeEmbedder()
    plan = docmem.plan_append_child(
        vault.conn, vault.layout, level, docmem.NewLeaf("Tulips by the hedge."), embedder=embedder
    )
    docmem.run(vault.conn, vault.layout, plan, model=embedder.model_id, dim=embedder.dim)
    new_id = plan.ids[0]
    assert row(vault, new_id)["status"] == "sealed"
    rel = row(vault, new_id)["path"]
    sidecar = json.loads((vault.layout.root / rel).parent.joinpath(SIDECAR_NAME).read_text())
    assert sidecar["entries"][rel.rsplit("/", 1)[1]]["hash"] == row(vault, new_id)["content_hash"]
    assert not [j for j in vault.jobs.list() if j.kind == "admit"]
    assert_consistent(vault)


def test_append_child_refuses_a_leaf_parent_and_unknown_ids(vault: Vault) -> None:
    leaf = children(vault, level_ids(vault)[0])[0]
    with pytest.raises(InvalidInput, match="needs a level"):
        vault.append_child(leaf, "x")
    with pytest.raises(NodeNotFound):
        vault.append_child("s" + "0" * 15, "x")
    with pytest.raises(InvalidInput, match="empty"):
        vault.append_child(level_ids(vault)[0], "   ")


def test_secrets_are_redacted_before_a_docmem_leaf_is_written(vault: Vault) -> None:
    new_id = vault.append_child(
        level_ids(vault)[0], "my key is sk-abcdefghijklmnopqrstuvwxyz0123456789ABCD ok"
    )
    text = (vault.layout.root / row(vault, new_id)["path"]).read_text()
    assert "sk-abcdefghij" not in text and "[REDACTED:" in text
    assert_consistent(vault)


# -- insert_between -----------------------------------------------------------------------------------------
def test_insert_between_puts_the_leaf_a_fifth_of_the_way_and_renumbers_nothing(vault: Vault) -> None:
    level = level_ids(vault)[0]
    kids = children(vault, level)
    files = {k: (vault.layout.root / row(vault, k)["path"]).read_bytes() for k in kids}
    new_id = vault.insert_between(kids[1], kids[2], "Watering the seedlings at dawn.")
    assert children(vault, level) == [kids[0], kids[1], new_id, *kids[2:]]
    assert row(vault, new_id)["ord"] == "2.2"  # implicit 2 and 3
    assert row(vault, new_id)["ts"] == row(vault, kids[1])["ts"]  # keeps its place in the conversation
    assert {k: (vault.layout.root / row(vault, k)["path"]).read_bytes() for k in kids} == files
    again = vault.insert_between(new_id, kids[2], "And again.")
    assert row(vault, again)["ord"] == "2.36"
    assert children(vault, level) == [kids[0], kids[1], new_id, again, *kids[2:]]
    assert_consistent(vault)


def test_insert_between_refuses_nodes_that_are_not_adjacent_siblings(vault: Vault) -> None:
    first, second = level_ids(vault)[:2]
    a, b = children(vault, first)[:2], children(vault, second)[:2]
    with pytest.raises(InvalidInput, match="not siblings"):
        vault.insert_between(a[0], b[0], "x")
    with pytest.raises(InvalidInput, match="not adjacent"):
        vault.insert_between(a[0], children(vault, first)[2], "x")
    with pytest.raises(InvalidInput, match="not adjacent"):
        vault.insert_between(a[1], a[0], "x")  # the wrong way round
    assert vault.check().ok


def test_two_hundred_inserts_into_one_gap_of_a_real_level(vault: Vault) -> None:
    level = level_ids(vault)[0]
    kids = children(vault, level)
    made: list[str] = []
    right = kids[1]
    for n in range(200):
        right = vault.insert_between(kids[0], right, f"Note {n} about the hedge.")
        made.append(right)
    assert children(vault, level) == [kids[0], *reversed(made), *kids[1:]]
    orders = [Decimal(row(vault, i)["ord"]) for i in made]
    assert len(set(orders)) == 200 and all(Decimal(1) < o < Decimal(2) for o in orders)
    assert_consistent(vault)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(st.tuples(st.sampled_from(["insert", "append", "delete"]), st.integers(0, 1000)), max_size=10)
)
def test_reading_order_always_equals_the_intended_list(template: Path, edits: list[tuple[str, int]]) -> None:
    with tempfile.TemporaryDirectory() as tmp, copy_of(template, Path(tmp)) as vault:
        level = level_ids(vault)[0]
        intended = children(vault, level)
        for n, (what, pick) in enumerate(edits):
            if what == "append" or len(intended) < 2:
                intended.append(vault.append_child(level, f"appended {n}"))
            elif what == "insert":
                at = pick % (len(intended) - 1)
                intended.insert(at + 1, vault.insert_between(intended[at], intended[at + 1], f"inserted {n}"))
            else:
                victim = intended.pop(pick % len(intended))
                assert vault.delete(victim) == [victim]
            assert children(vault, level) == intended
        assert vault.check().ok


# -- delete ---------------------------------------------------------------------------------------------------
def test_delete_a_leaf_removes_file_row_vector_and_sidecar_entry_and_keeps_the_order(vault: Vault) -> None:
    level = level_ids(vault)[0]
    kids = children(vault, level)
    inserted = vault.insert_between(kids[0], kids[1], "A note placed by hand.")
    victim = kids[0]
    rel = row(vault, victim)["path"]
    assert vault.delete(victim) == [victim]
    assert not (vault.layout.root / rel).exists() and row(vault, victim) is None
    assert vault.conn.execute("SELECT count(*) FROM vectors WHERE id = ?", (victim,)).fetchone()[0] == 0
    sidecar = json.loads((vault.layout.root / rel).parent.joinpath(SIDECAR_NAME).read_text())
    assert rel.rsplit("/", 1)[1] not in sidecar["entries"]
    hits = vault.conn.execute("SELECT count(*) FROM fts_words WHERE rowid NOT IN (SELECT rowid FROM chunks)")
    assert hits.fetchone()[0] == 0
    # The inserted note stays before the rest: their implicit positions shifted, so they were pinned.
    assert children(vault, level) == [inserted, *kids[1:]]
    assert stale(vault, level)
    assert_consistent(vault)


def test_delete_a_level_takes_its_whole_subtree(condensed: Path, tmp_path: Path) -> None:
    with copy_of(condensed, tmp_path) as vault:
        parent = level_ids(vault, depth=2)[0]
        directory = row(vault, parent)["path"].rsplit("/", 1)[0]
        under = [
            r["id"]
            for r in vault.conn.execute(
                "SELECT id FROM chunks WHERE path >= ? AND path < ?", index.prefix_range(directory + "/")
            )
        ]
        leaves = sum(1 for i in under if not i.startswith("s"))
        assert leaves > 0 and len(under) > leaves + 1
        deleted = vault.delete(parent)
        assert deleted[0] == parent and sorted(deleted) == sorted(under)
        assert not (vault.layout.root / directory).exists()
        assert (
            vault.conn.execute(
                "SELECT count(*) FROM chunks WHERE path >= ? AND path < ?",
                index.prefix_range(directory + "/"),
            ).fetchone()[0]
            == 0
        )
        assert_consistent(vault)


def test_delete_refuses_a_level_holding_a_persons_file(vault: Vault) -> None:
    level = level_ids(vault)[0]
    directory = vault.layout.root / row(vault, level)["path"].rsplit("/", 1)[0]
    (directory / "my-notes.txt").write_text("mine")
    files = sorted(p.name for p in directory.iterdir())
    with pytest.raises(InvalidInput, match=r"my-notes\.txt"):
        vault.delete(level)
    assert sorted(p.name for p in directory.iterdir()) == files and row(vault, level) is not None
    assert not stale(vault, level)
    assert vault.check().ok


def test_delete_refuses_a_leaf_file_a_person_broke(vault: Vault) -> None:
    victim = children(vault, level_ids(vault)[0])[0]
    path = vault.layout.root / row(vault, victim)["path"]
    path.write_text("---\nid: [broken\n---\nmine\n")
    with pytest.raises(InvalidInput, match="fix the file"):
        vault.delete(victim)
    assert path.read_text() == "---\nid: [broken\n---\nmine\n"


# -- update_content ---------------------------------------------------------------------------------------------
def test_update_content_of_a_leaf_keeps_id_provenance_and_user_keys_and_re_embeds(vault: Vault) -> None:
    level = level_ids(vault)[0]
    victim = children(vault, level)[0]
    before = vault.get(victim)
    path = vault.layout.root / before.path
    path.write_text(path.read_text().replace("---\n", "---\ntags: [garden, 'my own']  # mine\n", 1))
    vault.check(fix=True)
    old_vector = vault.conn.execute("SELECT content_hash FROM vectors WHERE id = ?", (victim,)).fetchone()[0]
    vault.update_content(victim, "The greenhouse roof leaks when it rains.")
    after = vault.get(victim)
    assert after.id == victim and after.path == before.path
    assert after.provenance == before.provenance and after.ts == before.ts and after.status == before.status
    assert after.text == "The greenhouse roof leaks when it rains." and after.tokens == count_tokens(
        after.text
    )
    assert after.content_hash == leaffile.content_hash(after.text) != before.content_hash
    assert "\ntags: [garden, 'my own']  # mine\n" in path.read_text()
    assert stale(vault, level)
    vault.flush()
    new_vector = vault.conn.execute("SELECT content_hash FROM vectors WHERE id = ?", (victim,)).fetchone()[0]
    assert new_vector == after.content_hash != old_vector
    assert_consistent(vault)


def test_update_content_of_a_summary_is_kept_as_pinned_text(vault: Vault) -> None:
    level = level_ids(vault)[0]
    rel = row(vault, level)["path"]
    agent_text = "Everything about Mara's garden, written by the agent."
    vault.update_content(level, agent_text)
    node, _ = parse_summary((vault.layout.root / rel).read_text(), rel)
    assert node.text == agent_text and node.hand_edited and not node.stale
    assert row(vault, level)["text"] == agent_text
    assert_consistent(vault)
    from vaultmem.stale import mark_stale

    mark_stale(vault.conn, vault.layout, [level], 1 << 20)
    vault.work()
    node, _ = parse_summary((vault.layout.root / rel).read_text(), rel)
    assert node.pinned == agent_text and agent_text not in node.text
    assert vault.check().ok


# -- add_summary ----------------------------------------------------------------------------------------------
def test_add_summary_moves_contiguous_leaves_into_a_new_level_where_they_were(vault: Vault) -> None:
    level = level_ids(vault)[0]
    kids = children(vault, level)
    covered = kids[2:5]
    data = {k: (vault.layout.root / row(vault, k)["path"]).read_bytes() for k in covered}
    names = {k: row(vault, k)["path"].rsplit("/", 1)[1] for k in covered}
    new_id = vault.add_summary(list(reversed(covered)), "Three notes on roses.", title="Roses in May")
    assert children(vault, level) == [*kids[:2], new_id, *kids[5:]]
    assert children(vault, new_id) == covered
    summary = row(vault, new_id)
    directory = summary["path"].rsplit("/", 1)[0]
    assert directory.rsplit("/", 1)[1].endswith("-roses-in-may") and summary["parent"] == level
    assert summary["ord"] == "3" and summary["depth"] == 1
    node, _ = parse_summary((vault.layout.root / summary["path"]).read_text(), summary["path"])
    assert node.summariser == "agent" and not node.hand_edited and node.descendants == 3
    assert [c.target for c in node.children] == [names[k] for k in covered]
    for k in covered:
        moved = row(vault, k)
        assert moved["path"] == f"{directory}/{names[k]}" and moved["parent"] == new_id
        assert (vault.layout.root / moved["path"]).read_bytes() == data[k]  # a rename, bytes unchanged
    enclosing = row(vault, level)
    assert enclosing["status"] == "stale" and enclosing["depth"] == 2  # now over a level
    assert_consistent(vault)
    vault.flush()  # the new summary gets its vector
    assert vault.conn.execute("SELECT count(*) FROM vectors WHERE id = ?", (new_id,)).fetchone()[0] == 1
    # Deleting it takes its leaves along, and the enclosing level is over leaves only again.
    assert sorted(vault.delete(new_id)) == sorted([new_id, *covered])
    assert row(vault, level)["depth"] == 1 and children(vault, level) == [*kids[:2], *kids[5:]]
    assert_consistent(vault)


def test_add_summary_refuses_leaves_that_are_not_contiguous_siblings(vault: Vault) -> None:
    first, second = level_ids(vault)[:2]
    a, b = children(vault, first), children(vault, second)
    with pytest.raises(InvalidInput, match="contiguous"):
        vault.add_summary([a[0], a[2]], "x")
    with pytest.raises(InvalidInput, match="sibling"):
        vault.add_summary([a[0], b[0]], "x")
    with pytest.raises(InvalidInput, match="leaves only"):
        vault.add_summary([first], "x")
    with pytest.raises(InvalidInput, match="distinct"):
        vault.add_summary([a[0], a[0]], "x")
    with pytest.raises(InvalidInput, match="distinct"):
        vault.add_summary([], "x")
    assert vault.check().ok and not stale(vault, first)


def test_add_summary_over_fresh_leaves_makes_a_level_at_the_top_of_the_source(vault: Vault) -> None:
    fresh = [leaf.id for leaf in vault.ls(status="admitted")]
    ordered = [r["id"] for r in order.sibling_order(docmem.siblings(vault.conn, "sources/chat/_fresh"))]
    assert sorted(fresh) == sorted(ordered)
    new_id = vault.add_summary(ordered[:3], "The newest three turns.")
    summary = row(vault, new_id)
    assert summary["path"].count("/") == 3 and summary["parent"] is None and summary["ord"] is None
    assert all(vault.get(i).status.value == "sealed" for i in ordered[:3])
    assert_consistent(vault)


# -- crash replay ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("operation", ["add_summary", "delete", "insert"])
def test_replaying_a_docmem_note_twice_is_idempotent(vault: Vault, operation: str) -> None:
    level = level_ids(vault)[0]
    kids = children(vault, level)
    if operation == "add_summary":
        # An ordered leaf and an unordered one: the latter is written with its order, then moved.
        placed = vault.insert_between(kids[0], kids[1], "placed")
        plan = docmem.plan_add_summary(vault.conn, vault.layout, [placed, kids[1]], "Two notes.")
        assert {w.path for w in plan.op.writes} & {src for src, _ in plan.op.moves}
    elif operation == "delete":
        vault.insert_between(kids[0], kids[1], "placed")  # so the delete pins siblings too
        plan = docmem.plan_delete(vault.conn, vault.layout, children(vault, level)[0])
    else:
        plan = docmem.plan_insert_between(
            vault.conn, vault.layout, kids[0], kids[1], docmem.NewLeaf("between")
        )
    # The crash: the note is durable, nothing else happened. Two opens replay it.
    vault.layout.treeops.mkdir(parents=True, exist_ok=True)
    (vault.layout.treeops / "crashed.json").write_bytes(plan.op.to_json())
    embedder = FakeEmbedder()
    first = steps.heal(vault.conn, vault.layout, embedder.model_id, embedder.dim)
    assert len(first) == 1 and not first[0].skipped
    files = {p: p.read_bytes() for p in vault.layout.root.joinpath("sources").rglob("*") if p.is_file()}
    rows = index.all_rows(vault.conn)
    (vault.layout.treeops / "crashed.json").write_bytes(plan.op.to_json())
    second = steps.heal(vault.conn, vault.layout, embedder.model_id, embedder.dim)
    assert len(second) == 1
    assert {
        p: p.read_bytes() for p in vault.layout.root.joinpath("sources").rglob("*") if p.is_file()
    } == files
    assert index.all_rows(vault.conn) == rows
    if operation == "add_summary":
        assert children(vault, plan.ids[0]) == [placed, kids[1]]
        assert children(vault, level) == [kids[0], plan.ids[0], *kids[2:]]
    elif operation == "insert":
        assert children(vault, level) == [kids[0], plan.ids[0], *kids[1:]]
    else:
        assert row(vault, plan.ids[0]) is None
    assert_consistent(vault)


def test_an_old_note_without_removals_still_reads() -> None:
    old = json.dumps(
        {"kind": "seal", "source": "chat", "message": "m", "writes": [], "moves": [], "stale": []}
    )
    op = steps.TreeOp.from_json(old.encode())
    assert op.removes == () and op.rmdirs == ()


# -- sessions as trees ----------------------------------------------------------------------------------------
CHAT = [
    {"id": "c1", "role": "user", "speaker": "Mara", "content": "Can you remember my ryokan booking?"},
    {"id": "c2", "role": "assistant", "content": "Yes: Kyoto, 14 to 16 April, check-in at 15:00."},
    {"id": "c3", "role": "user", "speaker": "Mara Lee", "content": "Also the shinkansen leaves at 9:12."},
    {"id": "c4", "role": "assistant", "content": "Noted the shinkansen time."},
    {
        "id": "c5",
        "role": "user",
        "speaker": "Mara",
        "content": "First paragraph about the onsen and the dinner plans for the first night.\n\n"
        "Second paragraph about the temple visits planned for the second day of the trip.",
    },
    {"id": "c6", "role": "assistant", "content": "Great, enjoy the onsen."},
]


def chat_vault(path: Path) -> Vault:
    vault = Vault.init(path, "[ingest]\nchunk_max_tokens = 24\n", embedder=FakeEmbedder())
    records = [{**r, "ts": f"2024-04-01T10:0{n}:00Z"} for n, r in enumerate(CHAT)]
    vault.ingest_messages(records, source="trip", session="kyoto")
    vault.ingest_messages(
        [
            {
                "id": "o1",
                "role": "user",
                "content": "Another conversation entirely.",
                "ts": "2024-04-01T10:03:30Z",
            }
        ],
        source="trip",
        session="other",
    )
    vault.flush()
    return vault


def test_message_list_joins_chunks_names_plain_speakers_and_renders_summaries_as_tool_calls(
    tmp_path: Path,
) -> None:
    with chat_vault(tmp_path / "v") as vault:
        messages = vault.build_message_list("kyoto")
        assert [m["role"] for m in messages] == [
            "user",
            "assistant",
            "user",
            "assistant",
            "user",
            "assistant",
        ]
        assert messages[0] == {"role": "user", "content": CHAT[0]["content"], "name": "Mara"}
        assert "name" not in messages[2] and "name" not in messages[1]
        assert vault.conn.execute("SELECT count(*) FROM chunks WHERE source_id = 'c5'").fetchone()[0] == 2
        assert messages[4]["content"] == CHAT[4]["content"]  # two chunks, one message
        session = sessions.session_tree(vault.conn, "kyoto")
        leaf_ids = [i for node in session.children for i in node.ids]
        # Summarise turns 2-4 (three leaves) where they live; the summary stands for them.
        summary_id = vault.add_summary(leaf_ids[1:4], "Booking details: ryokan dates and the train time.")
        messages = vault.build_message_list("kyoto")
        assert [m["role"] for m in messages] == ["user", "assistant", "tool", "user", "assistant"]
        call = messages[1]
        assert call["content"] is None and call["tool_calls"][0]["id"] == f"call_{summary_id}"
        function = call["tool_calls"][0]["function"]
        assert function["name"] == "recall_memory_summary"
        assert json.loads(function["arguments"]) == {
            "summary_id": summary_id,
            "covers": 3,
            "from": "2024-04-01T10:01:00Z",
            "to": "2024-04-01T10:03:00Z",
        }
        assert messages[2] == {
            "role": "tool",
            "tool_call_id": f"call_{summary_id}",
            "content": "Booking details: ryokan dates and the train time.",
        }
        tree = vault.session_tree("kyoto")
        assert [n.kind for n in tree.children] == ["message", "summary", "message", "message"]
        assert tree.children[1].covers == 3 and tree.children[2].covers == 2
        assert vault.build_message_list("nobody") == []
        assert vault.check().ok


def test_a_level_mixing_sessions_does_not_stand_for_either(tmp_path: Path) -> None:
    with chat_vault(tmp_path / "v") as vault:
        fresh = [r["id"] for r in order.sibling_order(docmem.siblings(vault.conn, "sources/trip/_fresh"))]
        # In time order the other session's turn sits between c4 and c5.
        other = next(i for i in fresh if vault.get(i).session == "other")
        at = fresh.index(other)
        vault.add_summary(fresh[at - 1 : at + 1], "Mixed.")
        messages = vault.build_message_list("kyoto")
        assert all(m["role"] != "tool" for m in messages) and len(messages) == 6


def test_a_step_a_full_disk_cut_is_finished_by_the_daemons_pool_before_its_next_job(
    vault: Vault, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A step's note left in ``treeops/`` by a full disk (the step was cut midway, the daemon goes on):
    while the disk is still full the pool waits again and the note stays; once space returns the pool
    replays it before claiming another job, instead of leaving it for the next open."""
    import errno

    from vaultmem import db, pool
    from vaultmem.errors import DiskFull

    monkeypatch.setattr(pool, "DISK_FULL_WAIT_S", 0.0)
    level = level_ids(vault)[0]
    kids = children(vault, level)
    plan = docmem.plan_insert_between(vault.conn, vault.layout, kids[0], kids[1], docmem.NewLeaf("between"))
    vault.layout.treeops.mkdir(parents=True, exist_ok=True)
    (vault.layout.treeops / "cut.json").write_bytes(plan.op.to_json())
    workers = pool.Pool(vault.job_env())
    workers._out_of_space(DiskFull("the disk is full"), until_idle=False)
    conn = db.connect(vault.layout.db)
    try:
        real_heal = steps.heal

        def still_full(*args: Any, **kwargs: Any) -> list[steps.Applied]:
            raise OSError(errno.ENOSPC, "No space left on device")

        monkeypatch.setattr(steps, "heal", still_full)
        assert not workers._finish_cut_steps(conn, until_idle=False)
        assert steps.pending_notes(vault.layout) and workers._cut_steps
        monkeypatch.setattr(steps, "heal", real_heal)
        assert workers._finish_cut_steps(conn, until_idle=False)
    finally:
        conn.close()
    assert not steps.pending_notes(vault.layout) and not workers._cut_steps
    assert children(vault, level) == [kids[0], plan.ids[0], *kids[1:]]
    assert_consistent(vault)
