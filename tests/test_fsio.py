from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import read_only
from vaultmem import fsio
from vaultmem.errors import ConflictError, InvalidInput, ReadOnlyVault, UnsafePath


def test_atomic_write_creates_and_guards(tmp_path: Path) -> None:
    target = tmp_path / "a.md"
    digest = fsio.atomic_write(target, b"one", root=tmp_path, expected=None)
    assert target.read_bytes() == b"one"
    with pytest.raises(ConflictError, match="already exists"):
        fsio.atomic_write(target, b"two", root=tmp_path, expected=None)
    fsio.atomic_write(target, b"two", root=tmp_path, expected=digest)
    assert target.read_bytes() == b"two"


def test_atomic_write_refuses_when_file_changed_since_read(tmp_path: Path) -> None:
    target = tmp_path / "a.md"
    read_hash = fsio.atomic_write(target, b"original", root=tmp_path, expected=None)
    target.write_bytes(b"edited by a person")
    with pytest.raises(ConflictError, match="changed on disk"):
        fsio.atomic_write(target, b"engine version", root=tmp_path, expected=read_hash)
    assert target.read_bytes() == b"edited by a person"
    assert not list(tmp_path.glob(f"{fsio.TMP_PREFIX}*"))


def test_batch_durable_writes_all_and_leaves_no_temp(tmp_path: Path) -> None:
    writes = [fsio.PendingWrite(tmp_path / "d" / f"{i}.md", f"text {i}".encode()) for i in range(50)]
    written = fsio.write_batch_durable(tmp_path, writes)
    assert [w.hash for w in written] == [fsio.sha256_bytes(w.data) for w in writes]
    assert all(w.path.read_bytes() == w.data for w in writes)
    assert fsio.stray_temp_files(tmp_path) == []


def test_batch_refuses_to_overwrite(tmp_path: Path) -> None:
    (tmp_path / "x.md").write_bytes(b"keep me")
    with pytest.raises(ConflictError):
        fsio.write_batch_durable(tmp_path, [fsio.PendingWrite(tmp_path / "x.md", b"new")])
    assert (tmp_path / "x.md").read_bytes() == b"keep me"


def test_read_only_directory_gives_clear_error(tmp_path: Path) -> None:
    ro = tmp_path / "ro"
    ro.mkdir()
    with read_only(ro), pytest.raises(ReadOnlyVault, match="cannot write"):
        fsio.atomic_write(ro / "a.md", b"x", root=tmp_path)
    assert not (ro / "a.md").exists()


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"abc\x00def", "binary"),
        (b"caf\xe9", "not valid UTF-8"),
        (b"x" * 2000, "over the"),
    ],
)
def test_read_text_guarded_rejects_bad_input(tmp_path: Path, data: bytes, message: str) -> None:
    path = tmp_path / "f.txt"
    path.write_bytes(data)
    with pytest.raises(InvalidInput, match=message):
        fsio.read_text_guarded(path, max_bytes=1000)


def test_read_text_guarded_strips_bom(tmp_path: Path) -> None:
    path = tmp_path / "f.md"
    path.write_bytes("\ufeffhello".encode())
    text, digest = fsio.read_text_guarded(path, 100)
    assert text == "hello"
    assert digest == fsio.sha256_bytes(path.read_bytes())


def test_ensure_inside_rejects_symlink_escape(tmp_path: Path) -> None:
    root = tmp_path / "vault"
    root.mkdir()
    outside = tmp_path / "secret.txt"
    outside.write_text("x")
    link = root / "link.txt"
    link.symlink_to(outside)
    with pytest.raises(UnsafePath):
        fsio.ensure_inside(root, link)
    assert fsio.ensure_inside(root, root / "ok.txt") == (root / "ok.txt").resolve()


def test_every_kind_of_write_is_refused_through_a_symlinked_folder(tmp_path: Path) -> None:
    root = tmp_path / "vault"
    root.mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    (root / "link").symlink_to(outside)
    (root / "a.md").write_text("a")
    target = root / "link" / "sub" / "x.md"
    attempts = [
        lambda: fsio.atomic_write(target, b"x", root=root),
        lambda: fsio.write_batch_durable(root, [fsio.PendingWrite(target, b"x")]),
        lambda: fsio.make_dirs(root, root / "link" / "sub"),
        lambda: fsio.move_files(root, [(root / "a.md", root / "link" / "a.md")]),
        lambda: fsio.touch(root, root / "link" / "marker"),
        lambda: fsio.file_lock(root, root / "link" / "x.lock", timeout=1),
    ]
    for attempt in attempts:
        with pytest.raises(UnsafePath, match="outside the vault"):
            attempt()
    assert not any(outside.iterdir())
    assert (root / "a.md").read_text() == "a"


def test_move_files_checks_every_pair_before_moving_any(tmp_path: Path) -> None:
    root = tmp_path / "vault"
    (root / "d").mkdir(parents=True)
    (tmp_path / "outside").mkdir()
    (root / "escape").symlink_to(tmp_path / "outside")
    for name in ("a.md", "b.md"):
        (root / name).write_text(name)
    with pytest.raises(UnsafePath):
        fsio.move_files(
            root, [(root / "a.md", root / "d" / "a.md"), (root / "b.md", root / "escape" / "b.md")]
        )
    assert (root / "a.md").exists() and not (root / "d" / "a.md").exists()
    fsio.move_files(root, [(root / "a.md", root / "d" / "a.md")])
    assert (root / "d" / "a.md").read_text() == "a.md"


def test_move_files_syncs_each_directory_once_after_its_renames(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path
    fresh = root / "_fresh"
    fresh.mkdir()
    for i in range(6):
        (fresh / f"{i}.md").write_text(f"leaf {i}")
    synced: list[Path] = []
    told: list[Path] = []

    def sync(path: Path) -> None:
        synced.append(path)
        assert not any((fresh / f"{i}.md").exists() for i in range(6))  # every rename first

    monkeypatch.setattr(fsio, "fsync_dir", sync)
    monkeypatch.setattr(fsio, "changed", lambda paths: told.extend(paths))
    moves = [(fresh / f"{i}.md", root / ("a" if i % 2 else "b") / f"{i}.md") for i in range(6)]
    fsio.move_files(root, moves)
    assert sorted(synced) == sorted([fresh, root / "a", root / "b"])
    assert [(root / ("a" if i % 2 else "b") / f"{i}.md").read_text() for i in range(6)] == [
        f"leaf {i}" for i in range(6)
    ]
    assert told == [p for pair in moves for p in pair]  # observers hear of every move, in order


def test_move_files_that_fails_midway_syncs_what_it_moved(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path
    for name in ("x.md", "y.md"):
        (root / name).write_text(name)
    (root / "d").mkdir()
    (root / "d" / "y.md").write_text("taken")
    synced: list[Path] = []
    told: list[Path] = []
    monkeypatch.setattr(fsio, "fsync_dir", synced.append)
    monkeypatch.setattr(fsio, "changed", lambda paths: told.extend(paths))
    with pytest.raises(ConflictError, match="already exists"):
        fsio.move_files(root, [(root / "x.md", root / "e" / "x.md"), (root / "y.md", root / "d" / "y.md")])
    assert (root / "e" / "x.md").read_text() == "x.md" and (root / "y.md").exists()
    assert sorted(synced) == sorted([root, root / "e"])
    assert told == [root / "x.md", root / "e" / "x.md"]


def test_a_batchs_intent_note_is_made_durable_by_the_batchs_sync_not_its_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The intent note of an ingest batch is not synced on its own (two fsyncs per batch): the batch's
    filesystem sync, which comes before any leaf file takes its name, covers it."""
    import os

    from tests.helpers import chat
    from vaultmem import Vault
    from vaultmem.embed import FakeEmbedder

    vault = Vault.init(tmp_path / "v", embedder=FakeEmbedder())
    intent = vault.layout.intent
    events: list[tuple[str, object]] = []
    real_syncfs, real_fsync, real_replace = fsio._syncfs, os.fsync, os.replace

    def syncfs(root: Path) -> None:
        events.append(("syncfs", sorted(p.name for p in intent.glob("*.json"))))
        real_syncfs(root)

    def fsync(fd: int) -> None:
        events.append(("fsync", os.readlink(f"/proc/self/fd/{fd}")))
        real_fsync(fd)

    def replace(src: object, dst: object) -> None:
        events.append(("replace", str(dst)))
        real_replace(src, dst)  # type: ignore[arg-type]

    monkeypatch.setattr(fsio, "_syncfs", syncfs)
    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    vault.ingest_messages(chat(10))
    sync = next(i for i, (kind, _) in enumerate(events) if kind == "syncfs")
    assert len(events[sync][1]) == 1  # the note is there when the batch syncs ...
    assert not any(kind == "fsync" and str(intent) in str(what) for kind, what in events)  # ... unsynced
    leaves = [i for i, (kind, what) in enumerate(events) if kind == "replace" and "_fresh" in str(what)]
    assert len(leaves) == 10 and min(leaves) > sync  # no leaf file takes its name before the sync
    assert not list(intent.glob("*.json"))
    vault.close()


def test_read_text_stat_reads_a_file_in_one_call_and_still_all_of_a_file_that_grew(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A short read of exactly the size fstat gave is the end: no second read only to see it (10,000
    leaf files in a reindex). A file longer than fstat said (it grew meanwhile) is read to its end."""
    import os

    path = tmp_path / "a.md"
    path.write_text("hello world\n" * 100, encoding="utf-8")
    reads: list[int] = []
    real_read, real_fstat = os.read, os.fstat

    def read(fd: int, n: int) -> bytes:
        reads.append(n)
        return real_read(fd, n)

    monkeypatch.setattr(os, "read", read)
    text, digest, st = fsio.read_text_stat(path, 1 << 20)
    assert text == "hello world\n" * 100 and st.st_size == 1200 and len(reads) == 1
    assert digest == fsio.sha256_bytes(path.read_bytes())

    calls = [0]

    def fstat(fd: int) -> object:  # the first fstat sees the file before its last 200 bytes
        calls[0] += 1
        got = real_fstat(fd)
        if calls[0] == 1:
            return os.stat_result((got.st_mode, 0, 0, 0, 0, 0, got.st_size - 200, 0, 0, 0))
        return got

    monkeypatch.setattr(os, "fstat", fstat)
    reads.clear()
    text, digest, _st = fsio.read_text_stat(path, 1 << 20)
    assert text == "hello world\n" * 100 and len(reads) == 2  # the short read was not the size: on to EOF
