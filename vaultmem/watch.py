"""Filesystem events into batches of vault paths: the watchdog observer, the filter, the debouncer.

Owns turning what editors, sync tools and git do (save in place, write a temp file and rename it, back
up and replace, delete, move folders) into sorted batches of vault-relative paths that have been quiet
for a moment. It never reads a file's contents and never touches the index: the daemon does that with
``Vault.reconcile_paths``, which decides by hash whether a path changed at all. Ignored: ``.vaultmem/``,
``.git/``, ``.obsidian/``, hidden and temp files (the engine's ``.vm-tmp-*``), conflict copies.
"""

from __future__ import annotations

import errno
import os
import threading
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field

from watchdog.events import FileSystemEvent, FileSystemEventHandler
from watchdog.observers import Observer
from watchdog.observers.api import BaseObserver
from watchdog.observers.polling import PollingObserver

from vaultmem.layout import Layout, is_ignored

# watchdog warns (harmlessly: it re-registers the watch) when a watched folder is moved inside the tree,
# which the compactor does on every condensation.
warnings.filterwarnings("ignore", message="Callback with id", category=RuntimeWarning, module="watchdog")

QUIET_S = 0.3  # autosave comes in bursts: a path is handled once it has been quiet this long
MAX_HOLD_S = 2.0  # ...or at the latest this long after its first event (a file saved every 100 ms)
POLL_FALLBACK_S = 2.0
LIMIT_ERRNOS = (errno.ENOSPC, errno.EMFILE)


class Debouncer:
    """Paths with their first and last event time; ``take`` hands out those that went quiet."""

    def __init__(
        self,
        quiet_s: float = QUIET_S,
        max_hold_s: float = MAX_HOLD_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.quiet_s = quiet_s
        self.max_hold_s = max_hold_s
        self.clock = clock
        self._pending: dict[str, tuple[float, float]] = {}  # rel -> (first, last)
        self._cond = threading.Condition()

    def add(self, rels: list[str]) -> None:
        now = self.clock()
        with self._cond:
            for rel in rels:
                first, _ = self._pending.get(rel, (now, now))
                self._pending[rel] = (first, now)
            self._cond.notify_all()

    def __len__(self) -> int:
        with self._cond:
            return len(self._pending)

    def take(self, timeout: float) -> list[str]:
        """Wait up to ``timeout`` for paths to go quiet and return them (sorted); [] on timeout."""
        deadline = self.clock() + timeout
        with self._cond:
            while True:
                now = self.clock()
                ready = [
                    rel
                    for rel, (first, last) in self._pending.items()
                    if now - last >= self.quiet_s or now - first >= self.max_hold_s
                ]
                if ready:
                    for rel in ready:
                        del self._pending[rel]
                    return sorted(ready)
                if now >= deadline:
                    return []
                wait = deadline - now
                if self._pending:
                    wait = min(wait, self.quiet_s / 2)
                self._cond.wait(wait)

    def drain(self) -> list[str]:
        """Everything pending, quiet or not (on shutdown: no event is lost)."""
        with self._cond:
            out = sorted(self._pending)
            self._pending.clear()
            return out


def expand(layout: Layout, rels: list[str], indexed_under: Callable[[str], list[str]]) -> list[str]:
    """Paths of a batch as Markdown file paths: a directory stands for the files under it on disk and
    the indexed paths under it (a folder moved out or deleted); files are kept as they are."""
    out: set[str] = set()
    for rel in rels:
        if rel.endswith(".md"):
            out.add(rel)
            continue
        path = layout.abs(rel)
        if path.is_dir() and not path.is_symlink():
            for dirpath, dirnames, filenames in os.walk(path):
                base = os.path.relpath(dirpath, layout.root).replace(os.sep, "/")
                dirnames[:] = [d for d in dirnames if not is_ignored(f"{base}/{d}")]
                out.update(f"{base}/{n}" for n in filenames if n.endswith(".md"))
        out.update(indexed_under(rel))
    return sorted(r for r in out if not is_ignored(r))


@dataclass
class EventStats:
    events: int = 0
    last_event: float | None = None  # wall clock
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)


class _Handler(FileSystemEventHandler):
    def __init__(self, layout: Layout, debouncer: Debouncer, stats: EventStats) -> None:
        self.root = os.fspath(layout.root)
        self.debouncer = debouncer
        self.stats = stats

    def _rel(self, raw: bytes | str) -> str | None:
        path = os.fsdecode(raw)
        if path != self.root and not path.startswith(self.root + os.sep):
            return None  # moved out of the vault: only the source side matters
        rel = os.path.relpath(path, self.root).replace(os.sep, "/")
        if rel == "." or is_ignored(rel):
            return None
        return rel

    def on_any_event(self, event: FileSystemEvent) -> None:
        if event.event_type in ("opened", "closed_no_write"):
            return
        if event.is_directory and event.event_type in ("modified", "closed"):
            return  # a folder's entries changed: each entry reports its own event
        rels = []
        for raw in (event.src_path, getattr(event, "dest_path", "")):
            if not raw:
                continue
            rel = self._rel(raw)
            if rel is not None and (event.is_directory or rel.endswith(".md")):
                rels.append(rel)
        if not rels:
            return
        with self.stats.lock:
            self.stats.events += 1
            self.stats.last_event = time.time()
        self.debouncer.add(rels)


class Watcher:
    """A watchdog observer over the vault feeding a ``Debouncer``. When the OS refuses more watches
    (the inotify limit), it falls back to polling and says so in ``warnings``."""

    def __init__(self, layout: Layout, debouncer: Debouncer, *, poll_s: float = POLL_FALLBACK_S) -> None:
        self.layout = layout
        self.debouncer = debouncer
        self.poll_s = poll_s
        self.stats = EventStats()
        self.warnings: list[str] = []
        self.polling = False
        self._observer: BaseObserver | None = None

    def start(self, observer: BaseObserver | None = None) -> None:
        handler = _Handler(self.layout, self.debouncer, self.stats)
        obs = observer if observer is not None else Observer()
        try:
            obs.schedule(handler, os.fspath(self.layout.root), recursive=True)
            obs.start()
        except OSError as exc:
            if exc.errno not in LIMIT_ERRNOS:
                raise
            self._stop(obs)
            self.warnings.append(
                "inotify watch limit reached: raise fs.inotify.max_user_watches (sysctl); "
                f"falling back to polling every {self.poll_s:g} s"
            )
            self.polling = True
            obs = PollingObserver(timeout=self.poll_s)
            obs.schedule(handler, os.fspath(self.layout.root), recursive=True)
            obs.start()
        self._observer = obs

    @staticmethod
    def _stop(obs: BaseObserver) -> None:
        emitters = list(obs.emitters)  # stop() forgets them without waiting for them
        try:
            obs.stop()
            if obs.is_alive():
                obs.join(timeout=5)
        except RuntimeError:
            pass  # never started
        for emitter in emitters:
            if emitter.is_alive():
                emitter.join(timeout=5)  # a polling walk in progress must not outlive the watcher

    def alive(self) -> bool:
        return self._observer is not None and self._observer.is_alive()

    def stop(self) -> None:
        if self._observer is not None:
            self._stop(self._observer)
            self._observer = None
