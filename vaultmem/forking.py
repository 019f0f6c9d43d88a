"""Whether this process may fork a child that runs vaultmem code (reindex's readers, ingest's writers).

A fork copies only the forking thread, with every lock as it was: a lock another thread held stays held
in the child forever. A child takes Python's import locks (a module imported for the first time),
logging's, and any lock of the code it runs; a thread marked ``fork_safe`` takes none of them.
"""

from __future__ import annotations

import threading
import weakref

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
