"""The vault's write lock: one writer at a time across processes, and fair turns between threads.

Owns ``FairRLock`` (a re-entrant lock handed out in arrival order) and ``WriteLock``: the file lock
(``.vaultmem/write.lock``, confined to the vault), the "a writer holds it" marker whose presence at the
next acquisition means a writer died holding it (its temp files are tidied first), and the git guard (the
outermost acquisition refuses while a git operation is under way in the vault's repository).
"""

from __future__ import annotations

import contextlib
import threading
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from filelock import FileLock, Timeout

from vaultmem import fsio
from vaultmem.errors import DiskFull, VaultError, VaultLocked
from vaultmem.layout import Layout

LOCK_TIMEOUT_S = 30.0


class FairRLock:
    """A re-entrant lock handed to waiting threads in arrival order (``threading.RLock`` is not fair: a
    thread that releases and re-acquires in a loop can keep it for as long as it likes)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._queue: deque[int] = deque()
        self._owner: int | None = None
        self._depth = 0

    def acquire(self) -> None:
        me = threading.get_ident()
        with self._cond:
            if self._owner == me:
                self._depth += 1
                return
            self._queue.append(me)
            while self._owner is not None or self._queue[0] != me:
                self._cond.wait()
            self._queue.popleft()
            self._owner, self._depth = me, 1

    @property
    def depth(self) -> int:
        """How many times the calling thread holds the lock (0 when it does not)."""
        return self._depth if self._owner == threading.get_ident() else 0

    def release(self) -> None:
        with self._cond:
            self._depth -= 1
            if self._depth == 0:
                self._owner = None
                self._cond.notify_all()


class WriteLock:
    """The write lock of one open vault. ``git_error`` returns the error to raise while a git operation
    is under way (None when there is none); it is asked at the outermost acquisition only."""

    def __init__(self, layout: Layout, git_error: Callable[[], VaultError | None]) -> None:
        self.layout = layout
        self._git_error = git_error
        self._file = FileLock(str(layout.lock), timeout=LOCK_TIMEOUT_S)
        self._turns = FairRLock()

    @contextmanager
    def hold(self, *, git_guard: bool = True) -> Iterator[None]:
        """Hold the lock (re-entrant within a thread). Threads of this process take turns in arrival
        order, so a long seal pass (many short steps) cannot starve a re-summarise."""
        self._turns.acquire()
        try:
            if self._turns.depth == 1:
                fsio.ensure_inside(self.layout.root, self.layout.lock)  # never a lock file elsewhere
            try:
                self._file.acquire()
            except Timeout as exc:
                raise VaultLocked(
                    f"another process is writing to {self.layout.root} (lock {self.layout.lock}); try again"
                ) from exc
            outermost = self._turns.depth == 1
            try:
                if outermost and git_guard:
                    error = self._git_error()
                    if error is not None:
                        raise error
            except BaseException:
                self._file.release()
                raise
            try:
                if outermost:
                    self._begin_writing()
                yield
            finally:
                if outermost:
                    fsio.remove_file(self.layout.root, self.layout.writing)
                self._file.release()
        finally:
            self._turns.release()

    def held_elsewhere(self) -> bool:
        """True while another holder has the file lock right now: a live writer (the kernel frees a dead
        one's), or another open vault of this process. Never waits."""
        if self._turns.depth:  # this thread holds it
            return False
        fsio.ensure_inside(self.layout.root, self.layout.lock)  # never a lock file elsewhere
        try:
            self._file.acquire(timeout=0)
        except Timeout:
            return True
        self._file.release()
        return False

    def _begin_writing(self) -> None:
        """Mark that a writer holds the lock. A mark that is already there was left by a writer that died
        holding it: its temp files (never real files) are removed first, so ``check`` stays clean."""
        marker = self.layout.writing
        if marker.exists():
            for tmp in fsio.stray_temp_files(self.layout.root):
                if ".git" not in tmp.relative_to(self.layout.root).parts:
                    fsio.remove_file(self.layout.root, tmp)
        with contextlib.suppress(
            OSError, DiskFull
        ):  # a read-only or full disk: the write that follows says so
            fsio.touch(self.layout.root, marker)


def exclusive(layout: Layout) -> FileLock:
    """The bare file lock, for the moments before a vault is open (moving a damaged index aside)."""
    fsio.ensure_inside(layout.root, layout.lock)
    return FileLock(str(layout.lock), timeout=LOCK_TIMEOUT_S)
