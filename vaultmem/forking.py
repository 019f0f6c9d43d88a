"""Whether this process may fork a child that runs vaultmem code (reindex's readers, ingest's writers).

A fork copies only the forking thread, with every lock as it was: a lock another thread held stays held
in the child forever. A child takes Python's import locks (a module imported for the first time),
logging's, and any lock of the code it runs; a thread marked ``fork_safe`` takes none of them.
"""

from __future__ import annotations

import gc
import os
import pickle
import threading
import weakref
from collections.abc import Callable
from typing import Generic, TypeVar, cast

T = TypeVar("T")

# Threads a forked child may be copied beside (``fork_safe``).
_FORK_SAFE: weakref.WeakSet[threading.Thread] = weakref.WeakSet()


def fork_safe(thread: threading.Thread) -> None:
    """Let a child be forked while ``thread`` runs: a thread that imports nothing while it runs, logs
    nothing, and holds no lock a child takes (``Vault``'s HNSW builder: its imports are done before it
    starts, and it holds only the graph's own locks, which children never take)."""
    _FORK_SAFE.add(thread)


def alone() -> bool:
    """No thread but this one and threads marked ``fork_safe`` (a pool's workers, a watcher, a
    dashboard's helpers each may hold a lock a forked child would wait for forever)."""
    me = threading.current_thread()
    return all(t is me or t in _FORK_SAFE for t in threading.enumerate())


def can_fork() -> bool:
    """The platform forks and no thread but this one (and threads marked ``fork_safe``) runs."""
    import multiprocessing

    return "fork" in multiprocessing.get_all_start_methods() and alone()


class Ahead(Generic[T]):
    """``work`` started in a forked child, its result taken later (``result``): the child's CPU overlaps
    what this process does meanwhile. Without fork (``can_fork`` false) ``work`` runs here, at
    ``result``. Use as a context manager: leaving it without taking the result ends the child (its
    pipe closed, then waited for), so no child outlives the block.

    The child runs ``work`` with the garbage collector off (a collection would copy every page shared
    with this process), sends back its pickled result or the exception that stopped it, and ends with
    ``os._exit`` (no atexit hook, no buffer of this process's flushed twice). A child killed midway
    leaves what ``work`` had done: work that writes must be safe to stop anywhere (reindex's sidecar
    reader writes nothing; ingest's file writer leaves what a crash leaves, which its batch's intent note
    heals). ``what`` names the child in the error raised when it ends without a result."""

    def __init__(self, work: Callable[[], T], what: str = "a forked helper process") -> None:
        self._work = work
        self._what = what
        self._pid: int | None = None
        self._read: int | None = None
        if can_fork():
            read_end, write_end = os.pipe()
            pid = os.fork()
            if pid == 0:  # pragma: no cover - the child (coverage does not follow a fork)
                code = 1
                try:
                    os.close(read_end)
                    gc.disable()
                    outcome: tuple[str, object]
                    try:
                        outcome = ("ok", work())
                    except BaseException as exc:  # every failure goes back to the parent
                        outcome = ("error", exc)
                    try:
                        data = pickle.dumps(outcome)
                    except Exception:  # an exception that does not pickle: its text does
                        data = pickle.dumps(("error", OSError(f"{type(outcome[1]).__name__}: {outcome[1]}")))
                    with open(write_end, "wb") as pipe:
                        pipe.write(data)
                    code = 0
                finally:
                    os._exit(code)
            os.close(write_end)
            self._pid, self._read = pid, read_end

    @property
    def forked(self) -> bool:
        return self._pid is not None

    def result(self) -> T:
        """The work's result (its exception raised here); once."""
        if self._read is None:
            return self._work()
        read_end, self._read = self._read, None
        try:
            with open(read_end, "rb") as pipe:
                data = pipe.read()
        finally:
            self._wait()
        try:
            kind, value = pickle.loads(data)
        except Exception as exc:  # nothing (the child was killed) or not unpicklable
            raise OSError(f"{self._what} ended without a result") from exc
        if kind != "ok":
            raise value
        return cast(T, value)

    def _wait(self) -> None:
        pid, self._pid = self._pid, None
        if pid is not None:
            os.waitpid(pid, 0)

    def __enter__(self) -> Ahead[T]:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._read is not None:  # not taken: the child's write fails on the closed pipe, it ends
            os.close(self._read)
            self._read = None
        self._wait()
