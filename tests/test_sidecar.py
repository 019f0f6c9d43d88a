"""_embeddings.json: round trips, locking, corrupt and foreign sidecars, no re-embedding."""

from __future__ import annotations

import json
import shutil
import threading
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from tests.helpers import chat
from vaultmem import Vault, sidecar
from vaultmem.embed import FakeEmbedder
from vaultmem.layout import Layout
from vaultmem.search import Filters


class CountingEmbedder(FakeEmbedder):
    def __init__(self) -> None:
        super().__init__()
        self.calls: list[int] = []

    def embed(self, texts):  # type: ignore[no-untyped-def]
        self.calls.append(len(texts))
        return super().embed(texts)


@given(arrays(np.float32, st.integers(1, 64), elements=st.floats(-1e6, 1e6, width=32)))
def test_vector_encoding_round_trip(vector: np.ndarray) -> None:
    assert np.array_equal(sidecar.decode_vector(sidecar.encode_vector(vector), len(vector)), vector)


def test_encoding_is_little_endian_float32() -> None:
    assert sidecar.encode_vector(np.array([1.0], dtype=np.float32)) == "AACAPw=="


def test_update_keeps_other_entries(tmp_path: Path) -> None:
    d = tmp_path / "dir"
    d.mkdir()
    a = sidecar.Entry.of("h1", np.ones(4, dtype=np.float32))
    b = sidecar.Entry.of("h2", np.zeros(4, dtype=np.float32))
    sidecar.update(Layout(tmp_path), d, "m", 4, {"a.md": a})
    sidecar.update(Layout(tmp_path), d, "m", 4, {"b.md": b})
    read = sidecar.read(d, "m", 4)
    assert set(read.entries) == {"a.md", "b.md"}
    assert read.entries["a.md"].hash == "h1"
    data = json.loads((d / "_embeddings.json").read_text())
    assert (
        data["format"] == "vaultmem-embeddings/1"
        and data["dim"] == 4
        and data["encoding"] == "base64-float32-le"
    )


def test_concurrent_updates_lose_nothing(tmp_path: Path) -> None:
    d = tmp_path / "dir"
    d.mkdir()

    def put(i: int) -> None:
        sidecar.update(
            Layout(tmp_path),
            d,
            "m",
            2,
            {f"{i}.md": sidecar.Entry.of(str(i), np.full(2, i, dtype=np.float32))},
        )

    threads = [threading.Thread(target=put, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert set(sidecar.read(d, "m", 2).entries) == {f"{i}.md" for i in range(16)}


def test_corrupt_and_foreign_sidecars_are_flagged(tmp_path: Path) -> None:
    (tmp_path / "_embeddings.json").write_text("{not json")
    assert "corrupt" in (sidecar.read(tmp_path, "m", 4).problem or "")
    sidecar.update(
        Layout(tmp_path),
        tmp_path,
        "other-model",
        4,
        {"x.md": sidecar.Entry.of("h", np.ones(4, dtype=np.float32))},
    )
    assert "other-model" in (sidecar.read(tmp_path, "m", 4).problem or "")


def test_flush_embeds_once_and_reindex_reuses(tmp_path: Path) -> None:
    emb = CountingEmbedder()
    with Vault.init(tmp_path / "v", embedder=emb) as vault:
        vault.ingest_messages(chat(20), source="chat")
        report = vault.flush()
        assert report.embedded == 20 and sum(emb.calls) == 20
        assert all(leaf.status.value == "admitted" for leaf in vault.ls())
        assert (vault.layout.fresh_dir("chat") / "_embeddings.json").exists()
        emb.calls.clear()
        result = vault.reindex()
        assert result.vectors == 20 and result.requeued == 0
        assert vault.flush().embedded == 0 and emb.calls == []
        assert vault.check().ok


def test_copied_folder_is_not_reembedded(tmp_path: Path) -> None:
    emb = CountingEmbedder()
    with Vault.init(tmp_path / "a", embedder=emb) as a:
        a.ingest_messages(chat(8), source="chat")
        a.flush()
        src = a.layout.source_dir("chat")
    emb2 = CountingEmbedder()
    with Vault.init(tmp_path / "b", embedder=emb2) as b:
        shutil.copytree(src, b.layout.source_dir("chat"))
        b.reindex()
        assert b.flush().embedded == 0
        assert emb2.calls == []
        assert len(b.search("garden roses", k=3)) == 3


def test_corrupt_sidecar_is_rebuilt_from_texts(tmp_path: Path) -> None:
    with Vault.init(tmp_path / "v", embedder=FakeEmbedder()) as vault:
        vault.ingest_messages(chat(5), source="chat")
        vault.flush()
        car = vault.layout.fresh_dir("chat") / "_embeddings.json"
        car.write_text("garbage")
        vault.ingest_messages(chat(2, prefix="Later"), source="chat")
        report = vault.flush()
        assert any("corrupt" in n for n in report.notes)
        assert len(sidecar.read(car.parent, "fake-hash-64", 64).entries) == 7  # nothing dropped


def test_user_keys_survive_admission(tmp_path: Path) -> None:
    with Vault.init(tmp_path / "v", embedder=FakeEmbedder()) as vault:
        vault.ingest_messages(chat(1), source="chat")
        leaf = vault.ls()[0]
        path = vault.layout.root / leaf.path
        path.write_text(
            path.read_text()
            .replace("---\n", "---\ntags:\n  - garden   # mine\n", 1)
            .replace("kind: leaf", "kind: leaf", 1)
        )
        vault.check(fix=True)
        vault.flush()
        text = path.read_text()
        assert "status: admitted" in text and "tags:\n  - garden   # mine\n" in text


def test_leaf_edited_during_extraction_is_not_overwritten(tmp_path: Path) -> None:
    with Vault.init(tmp_path / "v", embedder=FakeEmbedder()) as vault:
        vault.ingest_messages(chat(2), source="chat")
        leaf = vault.ls()[0]
        path = vault.layout.root / leaf.path
        edited = path.read_text().replace("garden", "orchard")
        path.write_text(edited)  # a person edits before the index knows
        report = vault.flush()
        # The edit is read first, then admitted: the person's text stays, only the status line changes.
        text = path.read_text()
        assert "orchard" in text and "garden" not in text and "status: admitted" in text
        assert report.jobs_failed == 0 and vault.get(leaf.id).status.value == "admitted"
        assert "orchard" in vault.get(leaf.id).text
        assert vault.check().ok


def test_untouched_entries_are_carried_over_verbatim(tmp_path: Path) -> None:
    sidecar.update(
        Layout(tmp_path), tmp_path, "m", 3, {"a.md": sidecar.Entry.of("h1", np.array([1, 2, 3], np.float32))}
    )
    before = json.loads((tmp_path / "_embeddings.json").read_text())["entries"]["a.md"]
    sidecar.update(
        Layout(tmp_path), tmp_path, "m", 3, {"b.md": sidecar.Entry.of("h2", np.array([4, 5, 6], np.float32))}
    )
    after = sidecar.read(tmp_path, "m", 3)
    assert json.loads((tmp_path / "_embeddings.json").read_text())["entries"]["a.md"] == before
    assert after.entries["a.md"].vector(3).tolist() == [1.0, 2.0, 3.0]


def test_entry_of_the_wrong_size_marks_the_sidecar_corrupt(tmp_path: Path) -> None:
    sidecar.update(
        Layout(tmp_path), tmp_path, "m", 3, {"a.md": sidecar.Entry.of("h", np.ones(3, np.float32))}
    )
    data = json.loads((tmp_path / "_embeddings.json").read_text())
    data["entries"]["a.md"]["vector"] = sidecar.encode_vector(np.ones(2, np.float32))
    (tmp_path / "_embeddings.json").write_text(json.dumps(data))
    problem = sidecar.read(tmp_path, "m", 3).problem
    assert problem is not None and problem.startswith("corrupt")


def test_status_edit_equals_a_full_render(tmp_path: Path) -> None:
    from dataclasses import replace

    from vaultmem.leaffile import render_leaf
    from vaultmem.model import Status

    with Vault.init(tmp_path / "v", embedder=FakeEmbedder()) as vault:
        vault.ingest_messages(chat(3), source="chat")
        before = vault.ls()
        vault.flush()
        for leaf in before:
            found = vault.get(leaf.id).entities  # written in the same in-place edit as the status
            expected = render_leaf(replace(leaf, status=Status.ADMITTED, entities=found))
            assert (vault.layout.root / leaf.path).read_text() == expected


def test_crlf_leaf_is_admitted_through_the_full_render(tmp_path: Path) -> None:
    with Vault.init(tmp_path / "v", embedder=FakeEmbedder()) as vault:
        vault.ingest_messages(chat(1), source="chat")
        path = vault.layout.root / vault.ls()[0].path
        path.write_bytes(path.read_bytes().replace(b"\n", b"\r\n"))
        vault.check(fix=True)
        assert vault.flush().admitted == 1
        assert "status: admitted" in path.read_text()
        assert vault.check().ok


def test_switching_models_reembeds_and_rebuilds_sidecars(tmp_path: Path) -> None:
    with Vault.init(tmp_path / "v", embedder=FakeEmbedder(dim=64)) as vault:
        vault.ingest_messages(chat(4), source="chat")
        vault.flush()
    other = FakeEmbedder(dim=32)
    assert other.model_id != FakeEmbedder(dim=64).model_id
    with Vault.open(tmp_path / "v", embedder=other) as vault:
        assert vault.search("garden roses", k=2)  # lexical hits until the vault is re-embedded
        report = vault.flush()
        assert report.embedded == 4
        assert any("written for model" in n for n in report.notes)
        car = sidecar.read(vault.layout.fresh_dir("chat"), other.model_id, 32)
        assert car.problem is None and len(car.entries) == 4
        assert vault.searcher.semantic("garden roses", Filters(), 2)


def test_directory_members_are_matched_exactly_not_by_like_pattern(tmp_path: Path) -> None:
    from vaultmem.admit import _nodes_in_dir

    with Vault.init(tmp_path / "v", embedder=FakeEmbedder()) as vault:
        vault.ingest_messages(chat(3), source="chat")
        moved = vault.layout.root / vault.ls()[0].path
        sibling = (
            vault.layout.source_dir("chat") / "Xfresh"
        )  # "_" in "_fresh" would match "X" as a LIKE wildcard
        sibling.mkdir()
        moved.rename(sibling / moved.name)
        vault.check(fix=True)
        names = {node.path for node in _nodes_in_dir(vault.conn, "sources/chat/_fresh")}
        assert len(names) == 2 and all(p.startswith("sources/chat/_fresh/") for p in names)


def test_update_many_writes_each_sidecar_as_update_would_with_one_sync_for_all(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Several directories' sidecars in one durable batch: entries put and removed as ``update`` does, a
    sidecar left empty removed, an unreadable one left alone when only pruned (``only_if_readable``) and
    replaced when given entries; one filesystem sync and no file fsync for the lot."""
    import os

    from vaultmem import fsio

    layout = Layout(tmp_path)
    a, b, c, d, e = (tmp_path / name for name in "abcde")
    for directory in (a, b, c, d):
        directory.mkdir()
    one, two = (sidecar.Entry.of(h, np.full(4, i, dtype=np.float32)) for i, h in enumerate(("h1", "h2")))
    sidecar.update(layout, a, "m", 4, {"x.md": one, "y.md": two})
    sidecar.update(layout, b, "m", 4, {"x.md": one})
    (c / "_embeddings.json").write_text("{torn", encoding="utf-8")
    (d / "_embeddings.json").write_text("{torn", encoding="utf-8")
    syncs: list[Path] = []
    fsyncs: list[str] = []
    real_syncfs, real_fsync = fsio._syncfs, os.fsync

    def syncfs(root: Path) -> None:
        syncs.append(root)
        real_syncfs(root)

    def fsync(fd: int) -> None:
        fsyncs.append(os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    monkeypatch.setattr(fsio, "_syncfs", syncfs)
    monkeypatch.setattr(os, "fsync", fsync)
    sidecar.update_many(
        layout,
        "m",
        4,
        {
            a: sidecar.Change(put={"z.md": two}, remove=frozenset({"x.md"})),
            b: sidecar.Change(remove=frozenset({"x.md"}), only_if_readable=True),
            c: sidecar.Change(remove=frozenset({"x.md"}), only_if_readable=True),
            d: sidecar.Change(put={"x.md": one}),
            e: sidecar.Change(put={"x.md": one}),
        },
    )
    assert set(sidecar.read(a, "m", 4).entries) == {"y.md", "z.md"}
    assert sidecar.read(a, "m", 4).entries["z.md"].hash == "h2"
    assert not (b / "_embeddings.json").exists()  # its last entry went
    assert (c / "_embeddings.json").read_text(encoding="utf-8") == "{torn"  # never rewritten to prune
    assert set(sidecar.read(d, "m", 4).entries) == {"x.md"} and sidecar.read(d, "m", 4).problem is None
    assert set(sidecar.read(e, "m", 4).entries) == {"x.md"}  # a new one
    assert len(syncs) == 1
    assert not any(Path(p).is_file() or "_embeddings" in p for p in fsyncs)  # only directories synced
    assert not list(tmp_path.rglob(f"{fsio.TMP_PREFIX}*"))


def test_update_many_refuses_a_sidecar_changed_since_it_was_read_and_writes_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The guard of each sidecar is checked before any is written: a conflict leaves every one as it was."""
    from vaultmem.errors import ConflictError

    layout = Layout(tmp_path)
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    one = sidecar.Entry.of("h1", np.ones(4, dtype=np.float32))
    sidecar.update(layout, a, "m", 4, {"x.md": one})
    sidecar.update(layout, b, "m", 4, {"x.md": one})
    before = {p: (p / "_embeddings.json").read_bytes() for p in (a, b)}
    real_read = sidecar.read

    def read(directory: Path, model: str, dim: int) -> sidecar.Sidecar:
        got = real_read(directory, model, dim)
        if directory == b:  # someone else writes b's sidecar between its read and the batch
            (b / "_embeddings.json").write_bytes(before[b] + b" ")
        return got

    monkeypatch.setattr(sidecar, "read", read)
    with pytest.raises(ConflictError):
        sidecar.update_many(
            layout, "m", 4, {a: sidecar.Change(put={"y.md": one}), b: sidecar.Change(put={"y.md": one})}
        )
    assert (a / "_embeddings.json").read_bytes() == before[a]


@pytest.mark.parametrize("dim", [384, 6, 5, 1])
def test_vectors_decoded_together_equal_each_decoded_alone(dim: int) -> None:
    """A reindex decodes a directory's vectors in one call (no padding: dim a multiple of 3) or one by
    one (padding): the same float32 rows either way, and a bad text fails as decoding it alone does."""
    rng = np.random.default_rng(dim)
    rows = [rng.standard_normal(dim).astype(np.float32) for _ in range(7)]
    texts = [sidecar.encode_vector(v) for v in rows]
    together = sidecar.decode_vectors(texts, dim)
    assert all(a.dtype == np.float32 and a.shape == (dim,) for a in together)
    assert [a.tobytes() for a in together] == [sidecar.decode_vector(t, dim).tobytes() for t in texts]
    assert sidecar.decode_vectors([], dim) == []
    bad = [*texts[:3], "!" + texts[3][1:], *texts[4:]]
    with pytest.raises(ValueError) as alone:
        sidecar.decode_vector(bad[3], dim)
    with pytest.raises(ValueError) as batch:
        sidecar.decode_vectors(bad, dim)
    assert str(batch.value) == str(alone.value)


def test_a_sidecar_written_after_it_was_read_ahead_is_read_again(tmp_path: Path) -> None:
    from vaultmem import admit

    vault = Vault.init(tmp_path / "v", embedder=FakeEmbedder())
    vault.ingest_messages(chat(4), source="chat")
    vault.flush()
    model, dim = vault.embedder.model_id, vault.embedder.dim
    leaf = vault.ls()[0]
    dirs = admit.leaf_dirs(row["path"] for row in vault.conn.execute("SELECT path FROM chunks"))
    ahead = admit.read_sidecars(vault.layout, dirs, model, dim)
    assert admit.vectors_from_sidecars(vault.conn, vault.layout, model, dim, ahead)[0] == 4
    vec = lambda i: vault.conn.execute("SELECT vec FROM vectors WHERE id = ?", (i,)).fetchone()[0]  # noqa: E731
    kept = vec(leaf.id)
    # The leaf's vector rewritten in its sidecar after the read ahead: the new one is loaded.
    other = np.ones(dim, dtype=np.float32) / np.sqrt(dim)
    name = leaf.path.rsplit("/", 1)[1]
    directory = vault.layout.abs(leaf.path).parent
    sidecar.update(vault.layout, directory, model, dim, {name: sidecar.Entry.of(leaf.content_hash, other)})
    admit.vectors_from_sidecars(vault.conn, vault.layout, model, dim, ahead)
    got = vec(leaf.id)
    assert got != kept, "not read again"
    assert np.array_equal(np.frombuffer(got, dtype="<f4"), other)
    # Read ahead again, it is taken as read (the file is not read a second time).
    ahead = admit.read_sidecars(vault.layout, dirs, model, dim)
    calls: list[Path] = []
    real = sidecar.read
    sidecar.read = lambda d, m, n: calls.append(d) or real(d, m, n)  # type: ignore[assignment,func-returns-value]
    try:
        assert admit.vectors_from_sidecars(vault.conn, vault.layout, model, dim, ahead)[0] == 4
        assert calls == []
        admit.vectors_from_sidecars(vault.conn, vault.layout, model, dim)
        assert calls == [directory]
    finally:
        sidecar.read = real  # type: ignore[assignment]
    assert vec(leaf.id) == got
    vault.close()
