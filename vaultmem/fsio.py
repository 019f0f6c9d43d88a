"""Atomic, guarded, batch-durable file writes.

Owns every byte vaultmem writes into a vault. Rules it enforces:
- a write goes to a temp file in the same directory, is made durable, then ``os.replace``s the target,
  and the directory is fsynced, so a reader sees the old file or the new one, never half of one;
- a file is only overwritten when its current hash matches the hash the caller read (``expected``);
- a batch of new files is made durable with one filesystem sync instead of one fsync per file;
- every write, directory creation, move, removal and lock file resolves its real path first (symlinks
  followed) and is refused with ``UnsafePath`` when that path leaves the vault root, so a symlinked
  ``sources/<name>`` or ``_fresh/`` can never make the engine write elsewhere;
- a full disk (``ENOSPC``, ``EDQUOT``) is a ``DiskFull`` naming the file, never a bare ``OSError``.

It never deletes anything but what its callers name (their own temp files, node files they read, empty
directories), and never follows a path outside the vault. Observers (``observe``) are told which files
under a root were written, moved or removed (git auto-commit records them, so an engine commit stages
only the engine's own paths).
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import errno
import hashlib
import itertools
import os
import secrets
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from filelock import FileLock

from vaultmem.errors import ConflictError, DiskFull, InvalidInput, ReadOnlyVault, UnsafePath
from vaultmem.textbytes import as_utf8

TMP_PREFIX = ".vm-tmp-"

WriteObserver = Callable[[list[Path]], None]
_observers: dict[int, tuple[Path, WriteObserver]] = {}
_observers_lock = threading.Lock()
_tokens = itertools.count(1)


def observe(root: Path, observer: WriteObserver) -> int:
    """Call ``observer`` with the paths under ``root`` that are written, moved (both ends) or removed
    from now on, right after each change. Returns a token for ``unobserve``."""
    with _observers_lock:
        token = next(_tokens)
        _observers[token] = (Path(root).absolute(), observer)
    return token


def unobserve(token: int) -> None:
    with _observers_lock:
        _observers.pop(token, None)


def changed(paths: Iterable[Path]) -> None:
    """Tell the observers that these files were just written, moved or removed."""
    if not _observers:
        return
    items = [Path(p) for p in paths]
    with _observers_lock:
        observers = list(_observers.values())
    for root, observer in observers:
        inside = [p for p in items if p.is_relative_to(root)]
        if inside:
            observer(inside)


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def file_hash(path: Path) -> str | None:
    """Hash of the file's bytes, or None when it does not exist."""
    try:
        return sha256_bytes(path.read_bytes())
    except FileNotFoundError:
        return None


def read_text_guarded(path: Path, max_bytes: int) -> tuple[str, str]:
    """Read a UTF-8 text file (BOM tolerated; UTF-16/32 as Windows tools save it decoded, see
    ``as_utf8``) and return ``(text, hash_of_bytes)`` (the hash of the bytes on disk, so a later
    overwrite compares with what is really there).

    Raises InvalidInput for files that are too large, binary or not UTF-8, so nothing downstream ever
    sees undecodable data.
    """
    text, digest, _st = read_text_stat(path, max_bytes)
    return text, digest


def read_text_stat(path: Path, max_bytes: int) -> tuple[str, str, os.stat_result]:
    """``read_text_guarded`` plus the stat of the file read (taken from the open file after reading, so it
    describes the bytes hashed even if the path is replaced meanwhile)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        if size > max_bytes:
            raise InvalidInput(f"{path}: {size} bytes is over the {max_bytes}-byte limit; split the file")
        chunks = []
        want = max(size + 1, 65536)
        while True:
            chunk = os.read(fd, want)
            if not chunk:
                break
            chunks.append(chunk)
            if len(chunk) < want and sum(map(len, chunks)) == size:
                break  # a short read of the size fstat gave: the end (no read only to see it)
        st = os.fstat(fd)
    finally:
        os.close(fd)
    raw = b"".join(chunks)
    if len(raw) > max_bytes:
        raise InvalidInput(f"{path}: {len(raw)} bytes is over the {max_bytes}-byte limit; split the file")
    data = as_utf8(raw, path)
    if b"\x00" in data[:8192]:
        raise InvalidInput(f"{path}: looks binary (NUL byte); only UTF-8 text can be read")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InvalidInput(f"{path}: not valid UTF-8 at byte {exc.start}; re-save it as UTF-8") from exc
    return text, sha256_bytes(raw), st


def ensure_inside(root: Path, path: Path) -> Path:
    """Resolve ``path`` (following symlinks) and require it to stay inside ``root``."""
    resolved = path.resolve()
    root_resolved = root.resolve()
    if resolved != root_resolved and root_resolved not in resolved.parents:
        raise UnsafePath(
            f"refusing to write {path}: it resolves to {resolved}, outside the vault {root_resolved}"
            " (a symlinked folder?); replace the link with a real folder"
        )
    return resolved


def check_inside(root: Path, paths: Iterable[Path]) -> None:
    """``ensure_inside`` for many paths at once: each distinct directory is resolved once, and a path
    that is itself a symlink is resolved whole."""
    seen: set[Path] = set()
    for path in paths:
        if path.parent not in seen:
            ensure_inside(root, path.parent)
            seen.add(path.parent)
        if path.is_symlink():
            ensure_inside(root, path)


_FULL = (errno.ENOSPC, errno.EDQUOT)


def is_disk_full(exc: BaseException) -> bool:
    return isinstance(exc, OSError) and exc.errno in _FULL


@contextlib.contextmanager
def _space(path: Path) -> Iterator[None]:
    """Turn a full disk into ``DiskFull`` naming the file being written."""
    try:
        yield
    except OSError as exc:
        if exc.errno in _FULL:
            raise DiskFull(f"no space left on the disk writing {path} ({exc.strerror})") from exc
        raise


def make_dirs(root: Path, path: Path) -> None:
    """``mkdir -p`` inside the vault: refused when the directory would resolve outside ``root``."""
    ensure_inside(root, path)
    with _space(path):
        path.mkdir(parents=True, exist_ok=True)


def touch(root: Path, path: Path) -> None:
    """Create an empty marker file inside the vault (kept as it is when it exists)."""
    ensure_inside(root, path)
    with _space(path):
        path.touch()


def remove_file(root: Path, path: Path) -> None:
    """Unlink a file the caller owns or has checked (its directory must be inside the vault; a symlink
    is removed itself, never what it points to)."""
    ensure_inside(root, path.parent)
    path.unlink(missing_ok=True)
    if not path.name.startswith(TMP_PREFIX):
        changed([path])


def remove_empty_dir(root: Path, path: Path) -> bool:
    """Remove a directory when it is empty; False when something is still in it."""
    ensure_inside(root, path.parent)
    try:
        os.rmdir(path)
    except FileNotFoundError:
        return True
    except OSError:
        return False
    fsync_dir(path.parent)
    return True


def reserve_space(root: Path, path: Path, size: int) -> bool:
    """Set ``size`` bytes of disk aside in the engine's file ``path`` (allocated, not just sized), so
    that on a full disk ``free_reserve`` can give back enough room to tidy up (jobs returned to the
    queue). False when there is no room for it now (nothing is kept then)."""
    ensure_inside(root, path)
    try:
        if path.stat().st_size >= size:
            return True
    except FileNotFoundError:
        pass
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    except OSError:
        return False
    try:
        os.posix_fallocate(fd, 0, size)
    except OSError:
        os.close(fd)
        with contextlib.suppress(OSError):
            path.unlink()
        return False
    os.close(fd)
    return True


def free_reserve(root: Path, path: Path) -> bool:
    """Give the space ``reserve_space`` set aside back to the disk; True when there was some."""
    ensure_inside(root, path.parent)
    try:
        path.unlink()
    except FileNotFoundError:
        return False
    return True


def file_lock(root: Path, path: Path, timeout: float) -> FileLock:
    """A ``filelock`` whose lock file is inside the vault (a lock file symlinked elsewhere would be
    created or truncated there)."""
    make_dirs(root, path.parent)
    ensure_inside(root, path)
    return FileLock(str(path), timeout=timeout)


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


_libc: ctypes.CDLL | None = None


def _syncfs(path: Path) -> None:
    """Flush every dirty page of the filesystem holding ``path`` in one call (Linux ``syncfs``)."""
    global _libc
    if _libc is None:
        name = ctypes.util.find_library("c")
        _libc = ctypes.CDLL(name, use_errno=True) if name else None
    syncfs = getattr(_libc, "syncfs", None) if _libc is not None else None
    if syncfs is None:  # not Linux: fall back to a global sync, still one call per batch
        os.sync()
        return
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        if syncfs(fd) != 0:
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err), str(path))
    finally:
        os.close(fd)


def _tmp_path(target: Path) -> Path:
    return target.with_name(f"{TMP_PREFIX}{secrets.token_hex(6)}-{target.name}")


@dataclass(frozen=True)
class Written:
    """A file as written: its hash, and the size and mtime the index stamps it with (taken from the
    written file itself, so a file moved or deleted right after the write cannot break the batch)."""

    hash: str
    size: int
    mtime_ns: int


def _write_tmp(target: Path, data: bytes, *, fsync: bool) -> Path:
    tmp = _tmp_path(target)
    _write_new(tmp, target, data, fsync=fsync)
    return tmp


def _write_new(tmp: Path, target: Path, data: bytes, *, fsync: bool) -> os.stat_result:
    """Create ``tmp`` holding ``data`` (``fsync``: on disk before this returns); its stat."""
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except PermissionError as exc:
        raise ReadOnlyVault(f"cannot write in {target.parent}: {exc.strerror}; check permissions") from exc
    except OSError as exc:
        if exc.errno in (errno.EROFS, errno.EACCES):
            raise ReadOnlyVault(f"cannot write in {target.parent}: {exc.strerror}") from exc
        raise
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        if fsync:
            os.fsync(fd)
        st = os.fstat(fd)
    except BaseException:
        os.close(fd)
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    os.close(fd)
    return st


def atomic_write(
    path: Path, data: bytes, *, root: Path, expected: str | bool | None = False, durable: bool = True
) -> str:
    """Atomically write ``data`` to ``path`` (inside the vault ``root``) and return its hash.

    ``expected`` guards against overwriting someone else's change: ``False`` means no guard (only for
    files the engine alone owns, such as ``.vaultmem/`` state), ``None`` means the file must not exist,
    and a hash means the file must still have exactly that content. ``durable=False``: neither the
    file nor its directory is synced here, for a note that a sync of the whole filesystem that follows
    (``write_batch_durable``) makes durable before anything relies on it.
    """
    ensure_inside(root, path)
    if expected is not False:
        current = file_hash(path)
        if current != expected:
            if expected is None:
                raise ConflictError(f"{path} already exists; refusing to overwrite it")
            raise ConflictError(
                f"{path} changed on disk since it was read; refusing to overwrite it (re-run to pick up the edit)"
            )
    with _space(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = _write_tmp(path, data, fsync=durable)
        try:
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                tmp.unlink()
            raise
        if durable:
            fsync_dir(path.parent)
    changed([path])
    return sha256_bytes(data)


@dataclass(frozen=True)
class PendingWrite:
    """One file of a batch. ``expected``: None = must not exist yet; a hash = must still have it."""

    path: Path
    data: bytes
    expected: str | None = None


def write_batch_durable(root: Path, writes: Iterable[PendingWrite], *, notify: bool = True) -> list[Written]:
    """Write many files so that all of them are durable when this returns.

    Temp files are written without per-file fsync, the whole filesystem is synced once, then every temp
    file is renamed into place and each touched directory is fsynced once. Each item's guard is checked
    first (a new file must not exist; a replaced file must still have the hash that was read), and a
    failed guard is a ConflictError before anything is written. Returns what was written, in order.
    ``notify``: tell the observers (``changed``); a forked writer leaves that to its parent, whose
    observers they are.
    """
    items = list(writes)
    if not items:
        return []
    for parent in {item.path.parent for item in items}:
        ensure_inside(root, parent)
    for item in items:
        if item.expected is not None and item.path.is_symlink():
            ensure_inside(root, item.path)
        current = file_hash(item.path) if item.expected is not None else None
        if item.expected is None and item.path.exists():
            raise ConflictError(f"{item.path} already exists; refusing to overwrite it")
        if item.expected is not None and current != item.expected:
            raise ConflictError(f"{item.path} changed on disk since it was read; refusing to overwrite it")
    tmps: list[tuple[Path, Path]] = []
    stats: list[os.stat_result] = []
    batch = secrets.token_hex(6)  # one random part per batch, a counter per file: names stay unique
    with _space(items[0].path.parent):
        try:
            for parent in dict.fromkeys(item.path.parent for item in items):
                parent.mkdir(parents=True, exist_ok=True)
            for n, item in enumerate(items):
                tmp = item.path.with_name(f"{TMP_PREFIX}{batch}{n:x}-{item.path.name}")
                stats.append(_write_new(tmp, item.path, item.data, fsync=False))  # the inode once renamed
                tmps.append((tmp, item.path))
            _syncfs(root)
            for tmp, target in tmps:
                os.replace(tmp, target)
        except BaseException:
            for tmp, _ in tmps:
                with contextlib.suppress(OSError):
                    tmp.unlink()
            raise
        for parent in sorted({target.parent for _, target in tmps}):
            fsync_dir(parent)
    if notify:
        changed(target for _, target in tmps)
    return [
        Written(sha256_bytes(item.data), st.st_size, st.st_mtime_ns)
        for item, st in zip(items, stats, strict=True)
    ]


def move_files(root: Path, moves: Iterable[tuple[Path, Path]]) -> None:
    """Move files or directories without rewriting them (same filesystem), each durable in both of its
    directories when this returns (or raises: what was moved before the failure is synced too). Every
    end must resolve inside the vault ``root`` (checked for all before any move).

    Each directory is synced once after all the renames, not once per file: a seal moving 400 leaves
    out of ``_fresh/`` into 20 levels syncs 21 directories instead of 800. Nothing relies on the moves
    reaching the disk in order: a step's note lists them all and a replay finishes each on its own
    (``steps.heal``); ``db.set_aside`` moves a damaged index that is rebuilt whatever part of it moved."""
    pairs = list(moves)
    check_inside(root, [p for pair in pairs for p in pair])
    done: list[tuple[Path, Path]] = []
    try:
        for src, dst in pairs:
            _rename(src, dst)
            done.append((src, dst))
    finally:
        for parent in dict.fromkeys(p.parent for pair in done for p in reversed(pair)):
            with _space(parent):
                fsync_dir(parent)
        for src, dst in done:
            _moved(src, dst)


def move_file(root: Path, src: Path, dst: Path) -> None:
    """Move one file or directory (``move_files`` with one move)."""
    move_files(root, [(src, dst)])


def _rename(src: Path, dst: Path) -> None:
    if dst.exists():
        raise ConflictError(f"{dst} already exists; refusing to move {src.name} over it")
    with _space(dst):
        dst.parent.mkdir(parents=True, exist_ok=True)
        os.rename(src, dst)


def _moved(src: Path, dst: Path) -> None:
    """Tell the observers (``changed``) about a move that is done."""
    if dst.is_dir():  # a level directory: every file under it moved
        moved = [p for p in dst.rglob("*") if not p.is_dir()]
        changed([*moved, *(src / p.relative_to(dst) for p in moved)])
    else:
        changed([src, dst])


def stray_temp_files(root: Path) -> list[Path]:
    """Temp files left by a crash between write and rename (never visible as real files)."""
    return sorted(p for p in root.rglob(f"{TMP_PREFIX}*") if p.is_file())
