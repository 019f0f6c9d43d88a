"""Git auto-commit of one open vault: what the engine changes becomes commits of exactly its own paths.

Owns the journal of engine changes (``gitsync.Journal``, fed by the ``fsio`` write observer), commit
batches (everything changed inside the outermost batch, in any thread, is one commit), the commit of
what is pending (never during a git operation: the changes stay recorded), and the separate commit of a
person's edits the engine has just read ("edit by hand: ..."). Messages are scrubbed of secrets; a
failure is a warning, never the error of the work itself.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

from vaultmem import fsio, gitsync
from vaultmem.errors import GitBusy, GitError, VaultError
from vaultmem.redact import scrub


class AutoCommit:
    """Built by a vault whose ``[git] auto_commit`` is on (an off one has none, so opening it imports no
    git code). ``lock(git_guard=False)`` is the vault's write lock; ``warnings`` is the vault's list of
    things that did not stop an operation."""

    def __init__(
        self,
        root: Path,
        lock: Callable[..., AbstractContextManager[None]],
        warnings: list[str],
    ) -> None:
        self.git = gitsync.GitRecorder(root)
        # Engine changes awaiting their commit; fsio reports every file the engine writes, moves or removes.
        self.journal = gitsync.Journal(root)
        self._observer: int | None = fsio.observe(root, self.journal.record_paths)
        self._lock = lock
        self._warnings = warnings
        self._batches = 0  # open commit batches: commits wait for the outermost to end
        self._batches_lock = threading.Lock()
        self.notes: list[str] = []  # what git auto-commit did besides committing (a repo created)
        self.commits = 0  # git commits made (engine batches and hand edits)

    def close(self) -> None:
        if self._observer is not None:
            fsio.unobserve(self._observer)
            self._observer = None

    def record(self, message: str) -> None:
        """Record one logical operation: committed at once, or with the rest of the batch when one is
        open (``batch``)."""
        # The message names titles and entities, which come from memory: never a secret in history.
        self.journal.record_message(scrub(message))
        with self._batches_lock:
            batched = self._batches > 0
        if not batched:
            self.commit_pending()

    @contextmanager
    def batch(self, subject: str | None = None) -> Iterator[None]:
        """Everything the engine changes inside (in any thread of this vault) becomes one git commit at
        the end of the outermost batch; its subject is ``subject`` when several operations ran."""
        with self._batches_lock:
            self._batches += 1
        try:
            yield
        finally:
            with self._batches_lock:
                self._batches -= 1
                last = self._batches == 0
            if last and self.journal.pending():
                try:
                    self.commit_pending(subject)
                except VaultError as exc:  # never hide the error of the work itself
                    self._warnings.append(f"git auto-commit failed: {exc}")

    def pending(self) -> bool:
        """True when engine changes wait for their commit."""
        return self.journal.pending()

    def commit_pending(self, subject: str | None = None) -> str | None:
        """Commit what the engine changed and has not committed yet (only its own paths). During a git
        operation nothing is committed and the changes stay recorded for the next commit. Returns the
        new commit, or None."""
        with self._lock(git_guard=False):
            paths, messages, size = self.journal.read()
            if not size:
                return None
            try:
                if self.git.head() is None:
                    # A new history starts with the whole vault as it is (ignored files excepted).
                    result = self.git.commit(gitsync.commit_message(messages, subject), None)
                else:
                    result = self.git.commit(gitsync.commit_message(messages, subject), paths)
            except GitBusy as exc:
                note = f"not committed yet: {exc}"
                if note not in self._warnings:
                    self._warnings.append(note)
                return None
            except GitError as exc:
                self._warnings.append(f"git auto-commit failed: {exc}")
                self.journal.squash()  # kept for the next commit, without growing on every attempt
                return None
            self.journal.consume(size)
            self._after(result)
            return result.sha

    def commit_by_hand(self, paths: list[str]) -> None:
        """Commit a person's edits the engine just read as their own commit ("edit by hand: ..."), before
        anything the engine derives from them, so they never hide inside an engine commit."""
        if not paths:
            return
        try:
            if self.git.head() is None:
                return  # the first engine commit snapshots the whole vault, these edits included
            result = self.git.commit(scrub(gitsync.hand_message(paths)), paths)
        except GitError as exc:  # GitBusy included: the edits stay uncommitted, as the person left them
            self._warnings.append(f"git commit of hand edits failed: {exc}")
            return
        self._after(result)

    def _after(self, result: gitsync.CommitResult) -> None:
        self.notes.extend(result.notes)
        self.commits += result.sha is not None
        for path, kinds in result.held:
            self._warnings.append(
                f"git: {path} not committed: it holds a secret ({', '.join(kinds)}); "
                "`vaultmem check` lists it, `vaultmem check --fix --redact` redacts it"
            )
