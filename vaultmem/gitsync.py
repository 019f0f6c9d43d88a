"""Optional git history for a vault (config ``git.auto_commit``), and the git operations that pause writes.

Owns the vault's own repository (``<vault>/.git``, created even when the vault sits inside another work
tree), the two ignore files that keep engine state and temp files out of it, recovery from a stale
``.git/index.lock`` left by a killed git, the journal of engine changes not yet committed
(``.vaultmem/git-pending``), and ``operation_in_progress``: whether a git operation (a revert or merge
stopped on a conflict, a rebase, a bisect, a detached HEAD, a live ``index.lock``) is under way in the
repository holding the vault, during which nothing in vaultmem writes. Every git call is pinned to the
vault's repository, whatever ``GIT_DIR``/``GIT_WORK_TREE``/``GIT_INDEX_FILE`` the process inherited (a git
hook sets them).

A commit stages exactly the paths it is given (the engine passes the paths it wrote, moved or removed;
a person's hand edits are committed separately, under their own message), built in a temporary index
from HEAD, so whatever else is changed or staged in the work tree stays out of it. It never writes to the
vault's files (git only touches ``.git/``; this module only the ignore files), never writes git config
(identity and hook settings go on the command line), never runs the user's hooks, never commits ignored
files, and never resets, checks out, pushes or pulls. A failed commit raises ``GitError`` and leaves the
vault exactly as it was; during a git operation it raises ``GitBusy`` and commits nothing.

It never commits a secret: every file about to be committed with content git has not seen in this
commit's own deletions (a moved file is not read again) is screened (``secret_kinds``); one that holds
a secret (a person typed it into a leaf or a note) is left out of the commit (it keeps its committed
version), and ``CommitResult.held`` names it.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

from vaultmem import fsio
from vaultmem.errors import GitBusy, GitError, UnsafePath
from vaultmem.layout import SIDECAR_NAME, STATE_DIR
from vaultmem.redact import redact

if TYPE_CHECKING:
    from git import Repo

GIT_AUTHOR = ("vaultmem", "vaultmem@localhost")
# Same bytes as Vault.init writes: engine state stays out of history, only the config is versioned.
STATE_GITIGNORE = b"*\n!.gitignore\n!config.toml\n"
ROOT_IGNORES = (f"{fsio.TMP_PREFIX}*", ".obsidian/workspace*")
_POLL_S = 0.02
_NO_GIT = "git is not installed or not on PATH; install git or set git.auto_commit = false"
STALE_LOCK_S = 10.0  # an index.lock older than this was left by a killed git
LOCK_WAIT_S = 2.0  # a younger one belongs to a running git: wait this long for it to go
HAND_PREFIX = "edit by hand: "
MAX_BODY_LINES = 200
# Under .vaultmem/ only these are versioned (STATE_GITIGNORE); everything else there is engine state.
_VERSIONED_STATE = frozenset({f"{STATE_DIR}/.gitignore", f"{STATE_DIR}/config.toml"})
_HEX = frozenset("0123456789abcdef")
_EMPTY_TREE = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"  # what `git diff` compares a first commit with


# -- git operations in progress --------------------------------------------------------------------------
@dataclass(frozen=True)
class GitOperation:
    """A git operation under way in the repository holding the vault: vaultmem writes nothing meanwhile."""

    name: str  # "revert", "merge", "cherry-pick", "rebase", "bisect", "detached HEAD", "git command"
    marker: str  # what shows it, e.g. ".git/REVERT_HEAD" (vault-relative when inside the vault)
    advice: str  # how a person ends it
    age_s: float = 0.0  # for a live index.lock: how long it has been held

    def describe(self) -> str:
        if self.name == "git command":
            return f"another git process holds {self.marker} (for {self.age_s:.0f}s)"
        if self.name == "detached HEAD":
            return f"the vault's repository has a detached HEAD ({self.marker})"
        return f"a git {self.name} is in progress ({self.marker})"

    def error(self, root: Path) -> GitBusy:
        return GitBusy(
            f"{self.describe()} in {root}: vaultmem writes nothing until it ends; {self.advice}, then retry"
        )

    def as_dict(self) -> dict[str, Any]:
        return {"operation": self.name, "marker": self.marker, "advice": self.advice}


# (marker in the git dir, operation, how to end it); checked in this order (a rebase also detaches HEAD)
_MARKERS = (
    ("rebase-merge", "rebase", "finish it (`git rebase --continue`) or abort it (`git rebase --abort`)"),
    (
        "rebase-apply",
        "rebase",
        "finish it (`git rebase --continue` or `git am --continue`) or abort it (`--abort`)",
    ),
    ("MERGE_HEAD", "merge", "finish it (resolve, then `git commit`) or abort it (`git merge --abort`)"),
    ("REVERT_HEAD", "revert", "finish it (`git revert --continue`) or abort it (`git revert --abort`)"),
    (
        "CHERRY_PICK_HEAD",
        "cherry-pick",
        "finish it (`git cherry-pick --continue`) or abort it (`git cherry-pick --abort`)",
    ),
    (
        "sequencer",
        "revert or cherry-pick",
        "let it finish, or end it (`git revert --continue` / `--abort`, or `git cherry-pick ...`)",
    ),
    ("BISECT_LOG", "bisect", "end it with `git bisect reset`"),
)


def find_git_dir(root: Path) -> Path | None:
    """The git directory of the repository whose work tree holds ``root``: the vault's own ``.git``
    (a directory, or a ``gitdir:`` file as in worktrees and submodules), else the nearest enclosing one."""
    for directory in (root, *root.parents):
        dot = directory / ".git"
        if dot.is_dir():
            return dot
        if dot.is_file():
            try:
                line = dot.read_text(encoding="utf-8").strip()
            except (OSError, UnicodeDecodeError):
                return None
            if not line.startswith("gitdir:"):
                return None
            target = Path(line.removeprefix("gitdir:").strip())
            target = target if target.is_absolute() else directory / target
            return target if target.is_dir() else None
    return None


def operation_in_progress(
    root: Path,
    *,
    lock_wait_s: float = LOCK_WAIT_S,
    stale_lock_s: float = STALE_LOCK_S,
    git_dir: Path | None = None,
) -> GitOperation | None:
    """The git operation under way in the repository holding ``root``, or None. Stat calls only (no git
    process): cheap enough to ask before every write. A live ``index.lock`` is waited for up to
    ``lock_wait_s`` (a short git command finishes); one older than ``stale_lock_s`` was left by a killed git
    and does not count."""
    root = Path(root).absolute()
    git_dir = git_dir or find_git_dir(root)
    if git_dir is None:
        return None

    def shown(path: Path) -> str:
        return path.relative_to(root).as_posix() if path.is_relative_to(root) else str(path)

    for name, operation, advice in _MARKERS:
        marker = git_dir / name
        if marker.exists():
            return GitOperation(operation, shown(marker), advice)
    try:
        head = (git_dir / "HEAD").read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        head = ""
    if len(head) >= 40 and set(head) <= _HEX:  # a commit id instead of "ref: refs/heads/<branch>"
        return GitOperation(
            "detached HEAD",
            shown(git_dir / "HEAD"),
            "switch back to a branch (`git switch <branch>`; `git switch -` returns to the last one)",
        )
    lock = git_dir / "index.lock"
    deadline = time.monotonic() + lock_wait_s
    while True:
        try:
            age = time.time() - lock.stat().st_mtime
        except FileNotFoundError:
            return None
        if age >= stale_lock_s:
            return None  # a killed git's lock; the next commit removes it
        if time.monotonic() >= deadline:
            return GitOperation(
                "git command",
                shown(lock),
                "wait for it to finish, or delete it if no git is running",
                age_s=max(0.0, age),
            )
        time.sleep(_POLL_S)


def repo_stamp(root: Path, git_dir: Path | None = None) -> tuple[object, ...] | None:
    """A cheap fingerprint of the repository's state (HEAD, the ref it names, the index): it changes when
    any git command moves HEAD or rewrites the index (a commit, revert, checkout, merge, reset, stash)."""
    git_dir = git_dir or find_git_dir(Path(root).absolute())
    if git_dir is None:
        return None
    parts: list[object] = []
    try:
        head = (git_dir / "HEAD").read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        head = ""
    parts.append(head)
    targets = [git_dir / "index", git_dir / "packed-refs"]
    if head.startswith("ref:"):
        targets.append(git_dir / head.removeprefix("ref:").strip())
    for path in targets:
        try:
            st = path.stat()
            parts.append((st.st_mtime_ns, st.st_size, st.st_ino))
        except OSError:
            parts.append(None)
    return tuple(parts)


# -- the journal of engine changes not yet committed ----------------------------------------------------
class Journal:
    """What the engine changed since its last commit: the vault-relative paths it wrote, moved or removed
    and the one-line messages of its operations, appended as JSON lines to ``.vaultmem/git-pending`` as
    they happen. A commit takes all of it and consumes what it read, so a commit put off by a git
    operation, a failed commit or a killed process is made by the next one, and only engine paths are
    ever staged. Appends are serialised in the process; across processes the vault's write lock does it
    (every engine write holds it)."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root).absolute()
        self.path = self.root / STATE_DIR / "git-pending"
        self._lock = threading.Lock()

    def record_paths(self, paths: Iterable[Path]) -> None:
        rels = []
        for path in paths:
            try:
                rel = Path(path).absolute().relative_to(self.root).as_posix()
            except ValueError:
                continue
            parts = rel.split("/")
            if ".git" in parts or (parts[0] == STATE_DIR and rel not in _VERSIONED_STATE):
                continue
            rels.append(rel)
        if rels:
            self._append({"paths": rels})

    def record_message(self, message: str) -> None:
        if message.strip():
            self._append({"message": message.strip()})

    def _append(self, record: dict[str, Any]) -> None:
        line = (json.dumps(record, ensure_ascii=False) + "\n").encode("utf-8")
        with self._lock:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            try:
                os.write(fd, line)
            finally:
                os.close(fd)

    def read(self) -> tuple[list[str], list[str], int]:
        """(paths, messages, bytes read): each path and message once, in first-seen order."""
        with self._lock:
            try:
                data = self.path.read_bytes()
            except FileNotFoundError:
                return [], [], 0
        end = data.rfind(b"\n") + 1  # a line still being appended by another thread waits its turn
        paths: dict[str, None] = {}
        messages: dict[str, None] = {}
        for raw in data[:end].splitlines():
            try:
                record = json.loads(raw)
            except ValueError:
                continue  # torn by a crash: its paths are re-found when the engine touches them again
            if not isinstance(record, dict):
                continue
            paths.update((str(p), None) for p in record.get("paths", []) if isinstance(p, str))
            if isinstance(record.get("message"), str):
                messages[record["message"]] = None
        return list(paths), list(messages), end

    def pending(self) -> bool:
        try:
            return self.path.stat().st_size > 0
        except FileNotFoundError:
            return False

    def squash(self) -> None:
        """Rewrite the journal as one record of what it holds (each path and message once), so a commit
        that keeps failing (git missing, a broken repository) never lets it grow without bound."""
        paths, messages, size = self.read()
        if not size:
            return
        lines: list[dict[str, object]] = [{"paths": paths}] if paths else []
        lines += [{"message": m} for m in messages[-MAX_BODY_LINES:]]
        with self._lock:
            try:
                rest = self.path.read_bytes()[size:]
            except FileNotFoundError:
                return
            data = b"".join((json.dumps(x, ensure_ascii=False) + "\n").encode("utf-8") for x in lines)
            fsio.atomic_write(self.path, data + rest, root=self.root)

    def consume(self, size: int) -> None:
        """Drop the first ``size`` bytes (what a commit read); lines appended since then stay."""
        with self._lock:
            try:
                data = self.path.read_bytes()
            except FileNotFoundError:
                return
            rest = data[size:]
            if rest:
                fsio.atomic_write(self.path, rest, root=self.root)
            else:
                self.path.unlink(missing_ok=True)


def commit_message(messages: Sequence[str], subject: str | None = None) -> str:
    """One commit for a run of operations: the single operation's own line, or a subject line (``subject``
    and how many operations, else the first line and how many more) over a body listing each once."""
    unique = list(dict.fromkeys(m.strip() for m in messages if m.strip()))
    # Bookkeeping ("mark 3 summaries stale") never names a commit that did more than that.
    unique.sort(key=lambda m: m.startswith("memory: mark ") and " stale" in m)
    if not unique:
        return subject or "memory: record engine changes an interrupted run left uncommitted"
    if len(unique) == 1:
        return unique[0]
    head = f"{subject}: {len(unique)} operations" if subject else f"{unique[0]} (+{len(unique) - 1} more)"
    lines = [f"- {m.removeprefix('memory: ')}" for m in unique[:MAX_BODY_LINES]]
    if len(unique) > MAX_BODY_LINES:
        lines.append(f"- ... and {len(unique) - MAX_BODY_LINES} more")
    return head + "\n\n" + "\n".join(lines)


def hand_message(paths: Sequence[str]) -> str:
    """The message of a commit recording a person's edits, so they never hide in an engine commit."""
    ordered = sorted(dict.fromkeys(paths))
    if len(ordered) == 1:
        return HAND_PREFIX + ordered[0]
    head = f"{HAND_PREFIX}{len(ordered)} files ({ordered[0]}, ...)"
    lines = [f"- {p}" for p in ordered[:MAX_BODY_LINES]]
    if len(ordered) > MAX_BODY_LINES:
        lines.append(f"- ... and {len(ordered) - MAX_BODY_LINES} more")
    return head + "\n\n" + "\n".join(lines)


@dataclass(frozen=True)
class CommitInfo:
    """A commit of the vault's history as a reader sees it: when, what, which files, the patch."""

    sha: str
    when: str  # the commit time, ISO 8601 with its offset
    subject: str
    files: tuple[str, ...]  # ``A path``, ``M path``, ``D path``, ``R old -> new`` (git's letters)
    diff: str  # the patch (moves as renames), cut at ``max_diff_bytes``
    truncated: bool  # the patch was longer than what ``diff`` holds

    def as_dict(self) -> dict[str, object]:
        return {**vars(self), "files": list(self.files)}


@dataclass(frozen=True)
class CommitResult:
    sha: str | None  # None when there was nothing to commit
    message: str
    files: int  # paths changed in the commit (a move counts its old and its new path)
    notes: tuple[str, ...] = ()
    held: tuple[tuple[str, tuple[str, ...]], ...] = ()  # (path, secret kinds) left uncommitted


def secret_kinds(path: Path) -> tuple[str, ...]:
    """The kinds of secret in the file at ``path`` (text files; () when none, binary or unreadable).
    Embedding sidecars hold base64 vectors, which look random by design: they are the engine's."""
    if path.name == SIDECAR_NAME:
        return ()
    try:
        data = path.read_bytes()
    except OSError:
        return ()
    if b"\x00" in data[:8192]:
        return ()
    return redact(data.decode("utf-8", errors="replace")).kinds


class GitRecorder:
    """Records vault operations as commits in the vault's own git repository."""

    def __init__(
        self,
        root: Path,
        *,
        stale_lock_s: float = 10.0,
        lock_wait_s: float = 2.0,
        screen: Callable[[Path], tuple[str, ...]] = secret_kinds,
    ) -> None:
        self.root = Path(root).absolute()
        self.stale_lock_s = stale_lock_s
        self.lock_wait_s = lock_wait_s
        self.screen = screen  # the secret kinds in a file about to be committed

    # -- public ------------------------------------------------------------------------------------
    def ensure_repo(self) -> list[str]:
        """Make the vault the top of its own repository and install the ignore rules; say what changed."""
        if not self.root.is_dir():
            raise GitError(f"{self.root} is not a directory; create the vault first (`vaultmem init`)")
        notes: list[str] = []
        with self._git_errors("init"):
            repo = self._open()
            if repo is None:
                from git import Git

                Git(self.root).init("-q", env=self._pinned_env(self.root / ".git"))
                notes.append(f"created a git repository at {self.root}")
                repo = self._open()
            if repo is None:
                raise GitError(
                    f"{self.root}/.git is not a usable git repository (`git status` there says why); "
                    "repair it or move it aside"
                )
            repo.close()
        notes += self._ensure_ignores()
        return notes

    def commit(self, message: str, paths: Sequence[str] | None = None) -> CommitResult:
        """Commit exactly ``paths`` (vault-relative: written, moved away or removed) if anything changed.
        ``None`` records the whole work tree (only for a history's first snapshot). Raises ``GitBusy``,
        committing nothing, while a git operation is under way in the repository."""
        if not message.strip():
            raise ValueError("a commit message must not be empty")
        wanted = None if paths is None else list(dict.fromkeys(_vault_rel(p) for p in paths))
        if wanted == []:
            return CommitResult(None, message, 0)
        notes = self.ensure_repo()
        with self._git_errors("commit"), self._opened() as repo:
            self.refuse_during_operation(Path(repo.git_dir))
            if wanted is None:
                return self._commit_all(repo, message, notes)
            return self._commit_paths(repo, message, wanted, notes)

    def _files_at(self, rel: str) -> list[str]:
        """A path as git tracks it: a file (present or gone) is itself; a folder, the files under it."""
        path = self.root / rel
        if not path.is_dir() or path.is_symlink():
            return [rel]
        out: list[str] = []
        for dirpath, dirnames, filenames in os.walk(path):
            dirnames[:] = [d for d in dirnames if d != ".git"]
            base = Path(dirpath).relative_to(self.root).as_posix()
            out.extend(f"{base}/{name}" for name in filenames)
        return out

    def refuse_during_operation(self, git_dir: Path | None = None) -> None:
        """Raise ``GitBusy`` while a git operation is under way in the vault's repository."""
        operation = operation_in_progress(
            self.root, lock_wait_s=self.lock_wait_s, stale_lock_s=self.stale_lock_s, git_dir=git_dir
        )
        if operation is not None:
            raise operation.error(self.root)

    def _commit_all(self, repo: Repo, message: str, notes: list[str]) -> CommitResult:
        self._with_index_lock(repo, notes, lambda: repo.git.add("-A"))
        held = self._secrets_staged(repo)
        if held:
            self._with_index_lock(repo, notes, lambda: repo.git.reset("-q", "--", *held))
        staged = repo.git.diff("--cached", "--name-only", "--no-renames", "-z")
        changed = [p for p in staged.split("\0") if p and p not in held]
        if not changed:
            return CommitResult(None, message, 0, tuple(notes), tuple(held.items()))
        options = [f"core.hooksPath={os.devnull}", *self._missing_identity(repo)]
        self._with_index_lock(
            repo,
            notes,
            lambda: repo.git(c=options).commit(
                "-q", "--no-verify", "--no-gpg-sign", "--cleanup=whitespace", "-m", message
            ),
        )
        return CommitResult(_head(repo), message, len(changed), tuple(notes), tuple(held.items()))

    def _commit_paths(self, repo: Repo, message: str, wanted: list[str], notes: list[str]) -> CommitResult:
        """Build the commit in a temporary index (HEAD plus exactly these paths, as they are on disk), so
        other changes in the work tree or the person's staged ones never join it; then move the branch
        with a compare-and-swap and bring the real index in line for these paths."""
        head = _head(repo)
        wanted = list(dict.fromkeys(f for p in wanted for f in self._files_at(p)))
        # check-ignore reads names, not pathspecs, and refuses the literal-pathspec setting.
        listing = _feed(
            repo,
            ["check-ignore", "-z", "--stdin"],
            wanted,
            env={"GIT_LITERAL_PATHSPECS": "0"},
            ok_codes=(0, 1),
        )
        ignored = set(listing.split("\0"))
        wanted = [p for p in wanted if p not in ignored]
        if not wanted:
            return CommitResult(None, message, 0, tuple(notes))
        git_dir = Path(repo.git_dir)
        scratch = git_dir / f"vaultmem-index-{os.getpid()}-{secrets.token_hex(4)}"
        env = {"GIT_INDEX_FILE": str(scratch)}
        base = [head] if head else ["--empty"]
        try:
            repo.git.read_tree(*base, env=env)
            _feed(repo, ["update-index", "--add", "--remove", "-z", "--stdin"], wanted, env=env)
            # A file holding a secret (a person typed it into a leaf or a note) never goes in: it keeps
            # its committed version, and the caller is told.
            held = self._secrets_staged(repo, env, head or _EMPTY_TREE)
            if held:
                wanted = [p for p in wanted if p not in held]
                repo.git.read_tree(*base, env=env)
                _feed(repo, ["update-index", "--add", "--remove", "-z", "--stdin"], wanted, env=env)
            tree = repo.git.write_tree(env=env).strip()
        finally:
            scratch.unlink(missing_ok=True)
            scratch.with_name(scratch.name + ".lock").unlink(missing_ok=True)
        before = repo.git.rev_parse(f"{head}^{{tree}}").strip() if head else None
        if tree == before:
            return CommitResult(None, message, 0, tuple(notes), tuple(held.items()))
        if before is None:
            listing = repo.git.ls_tree("-r", "-z", "--name-only", tree)
        else:
            listing = repo.git.diff_tree("-r", "-z", "--name-only", "--no-renames", before, tree)
        changed = [p for p in listing.split("\0") if p]
        options = self._missing_identity(repo)
        parents = ["-p", head] if head else []
        sha = repo.git(c=options).commit_tree(tree, *parents, "--no-gpg-sign", "-m", message).strip()
        subject = message.splitlines()[0]
        # Compare-and-swap: a commit the person made meanwhile is never overwritten (GitError; retried).
        repo.git.update_ref("-m", f"commit: {subject}", "HEAD", sha, head or "0" * len(sha))
        self._with_index_lock(
            repo, notes, lambda: _feed(repo, ["update-index", "--add", "--remove", "-z", "--stdin"], wanted)
        )
        return CommitResult(sha, message, len(changed), tuple(notes), tuple(held.items()))

    def head(self) -> str | None:
        """The current commit, or None when there is no repository or no commit yet."""
        with self._git_errors("rev-parse"):
            repo = self._open()
            if repo is None:
                return None
            with repo:
                return _head(repo)

    def log(self, n: int = 20) -> list[tuple[str, str]]:
        """The last ``n`` commits as ``(sha, subject)``, newest first."""
        if n <= 0:
            return []
        out = self._log("-z", f"--max-count={n}", "--format=%H %s", "--no-show-signature")
        return [(sha, subject) for sha, _, subject in (rec.partition(" ") for rec in out.split("\0") if rec)]

    def _log(self, *args: str) -> str:
        """``git log`` with ``args`` ("" when there is no repository or no commit yet)."""
        with self._git_errors("log"):
            repo = self._open()
            if repo is None:
                return ""
            with repo:
                if _head(repo) is None:
                    return ""
                return bytes(repo.git.log(*args, stdout_as_string=False)).decode("utf-8", errors="replace")

    def commits_between(
        self, start: str, end: str, *, limit: int = 100, max_diff_bytes: int = 100_000
    ) -> list[CommitInfo]:
        """The commits made from ``start`` up to ``end`` (ISO 8601 times), newest first, at most
        ``limit``, each with its changed files and its patch (moved files shown as renames). Reads only."""
        out = self._log(
            f"--since={start}",
            f"--until={end}",
            f"--max-count={limit}",
            "--format=%x1e%H%x1f%cI%x1f%s",
            "--patch-with-raw",
            "--find-renames",
            "--no-color",
            "--no-ext-diff",
            "--no-show-signature",
        )
        found = []
        for record in out.split("\x1e")[1:]:
            head, _, body = record.partition("\n")
            sha, when, subject = head.split("\x1f", 2)
            lines = body.strip("\n").split("\n")
            raw = [line[1:] for line in lines if line.startswith(":")]
            patch = _without_sidecars(
                "\n".join(line for line in lines if not line.startswith(":")).strip("\n")
            )
            found.append(
                CommitInfo(
                    sha,
                    when,
                    subject,
                    _raw_files("\n".join(raw)),
                    patch[:max_diff_bytes],
                    len(patch) > max_diff_bytes,
                )
            )
        return found

    # -- repository --------------------------------------------------------------------------------
    def _pinned_env(self, git_dir: Path) -> dict[str, str]:
        return {
            "GIT_DIR": str(git_dir),
            "GIT_WORK_TREE": str(self.root),
            "GIT_INDEX_FILE": str(git_dir / "index"),
            "GIT_LITERAL_PATHSPECS": "1",  # a file named `[draft].md` is a name, not a glob
            "GIT_TERMINAL_PROMPT": "0",
        }

    def _open(self) -> Repo | None:
        """The repository whose work tree is exactly the vault (caller closes it), or None."""
        from git import Repo
        from git.exc import InvalidGitRepositoryError, NoSuchPathError

        try:
            repo = Repo(self.root)  # no parent search: an enclosing repository is not the vault's
        except (InvalidGitRepositoryError, NoSuchPathError):
            return None
        tree = repo.working_tree_dir
        if repo.bare or tree is None or not os.path.samefile(tree, self.root):
            repo.close()
            raise GitError(f"{self.root}/.git is not a repository of this directory; move it aside and retry")
        repo.git.update_environment(**self._pinned_env(Path(repo.git_dir)))
        return repo

    @contextlib.contextmanager
    def _opened(self) -> Iterator[Repo]:
        repo = self._open()
        if repo is None:  # ensure_repo just made it one: someone removed .git in between
            raise GitError(f"{self.root} is no longer a git repository; retry")
        with repo:
            yield repo

    @contextlib.contextmanager
    def _git_errors(self, action: str) -> Iterator[None]:
        """Turn every gitpython failure into one GitError line that says what to do."""
        try:
            from git.exc import GitCommandError, GitCommandNotFound
            from git.exc import GitError as GitPythonError
        except ImportError as exc:  # gitpython refuses to import when it finds no git executable
            raise GitError(_NO_GIT) from exc
        try:
            yield
        except GitCommandNotFound as exc:
            raise GitError(_NO_GIT) from exc
        except GitCommandError as exc:
            raise GitError(
                f"git {action} failed in {self.root}: {_stderr_line(exc.stderr, exc.status)}; the vault's files "
                f"are unchanged: fix the repository (`git status` there) or set git.auto_commit = false"
            ) from exc
        except GitPythonError as exc:
            raise GitError(
                f"git {action} failed in {self.root}: {type(exc).__name__}: {exc}; set git.auto_commit = false"
            ) from exc

    def _missing_identity(self, repo: Repo) -> list[str]:
        """``-c`` settings for the parts of user.name/user.email the repository's config lacks."""
        out = repo.git.config("-z", "--get-regexp", r"^user\.(name|email)$", with_exceptions=False)
        found = {rec.partition("\n")[0] for rec in out.split("\0") if rec.partition("\n")[2].strip()}
        return [
            f"{key}={value}"
            for key, value in zip(("user.name", "user.email"), GIT_AUTHOR, strict=True)
            if key not in found
        ]

    def _secrets_staged(
        self, repo: Repo, env: dict[str, str] | None = None, against: str | None = None
    ) -> dict[str, tuple[str, ...]]:
        """The staged files (in the index ``env`` names) that hold a secret, with the kinds found.

        Only content new to this commit is read: a file whose blob is also one this commit deletes
        was moved (compaction moves leaves without changing a byte) and was screened when it came in."""
        base = [against] if against else []
        raw = repo.git.diff("--cached", "--raw", "--no-renames", "--no-abbrev", "-z", *base, env=env)
        fields = raw.split("\0")
        entries = []
        for header, path in zip(fields[0::2], fields[1::2], strict=False):
            parts = header.split()
            if len(parts) >= 5 and path:
                entries.append((parts[3], parts[4][:1], parts[2], path))
        gone = {old for _new, status, old, _ in entries if status == "D"}
        held: dict[str, tuple[str, ...]] = {}
        for new, status, _old, path in entries:
            if status in "AMT" and new not in gone:
                kinds = self.screen(self.root / path)
                if kinds:
                    held[path] = kinds
        return held

    # -- index.lock --------------------------------------------------------------------------------
    def _with_index_lock(self, repo: Repo, notes: list[str], run: Callable[[], object]) -> None:
        """Run a git command that takes the index lock, clearing a stale lock first and on a lost race."""
        from git.exc import GitCommandError

        self._clear_index_lock(repo, notes)
        try:
            run()
        except GitCommandError as exc:
            if "index.lock" not in str(exc.stderr):
                raise
            # Another git took the lock between our check and this command: same check, one retry.
            self._clear_index_lock(repo, notes)
            run()

    def _clear_index_lock(self, repo: Repo, notes: list[str]) -> None:
        lock = Path(repo.git_dir) / "index.lock"
        deadline = time.monotonic() + self.lock_wait_s
        while lock.exists() and (left := deadline - time.monotonic()) > 0:
            time.sleep(min(_POLL_S, left))  # a live git finishes fast
        try:
            age = time.time() - lock.stat().st_mtime
        except FileNotFoundError:
            return
        if age < self.stale_lock_s:
            raise GitError(
                f"another git process holds {lock} (for {age:.0f}s); retry, or delete it if no git is running"
            )
        # Old and still there after the wait: a git killed with SIGKILL left it, and no git will remove it.
        with contextlib.suppress(FileNotFoundError):
            lock.unlink()
        shown = lock.relative_to(self.root) if lock.is_relative_to(self.root) else lock
        notes.append(f"removed a stale {shown.as_posix()} left by a killed git (age {age:.0f}s)")

    # -- ignore files ------------------------------------------------------------------------------
    def _ensure_ignores(self) -> list[str]:
        notes: list[str] = []
        state_ignore = self.root / STATE_DIR / ".gitignore"
        if not state_ignore.exists():
            fsio.atomic_write(state_ignore, STATE_GITIGNORE, root=self.root, expected=None)
            notes.append(
                f"created {STATE_DIR}/.gitignore (only config.toml of the engine state is versioned)"
            )
        root_ignore = self.root / ".gitignore"
        try:
            data: bytes | None = root_ignore.read_bytes()
        except FileNotFoundError:
            data = None
        text = (data or b"").decode("utf-8", errors="surrogateescape")
        present = {line.strip() for line in text.splitlines()}
        missing = [pattern for pattern in ROOT_IGNORES if pattern not in present]
        if not missing:
            return notes
        newline = "\r\n" if "\r\n" in text else "\n"
        separator = newline if text and not text.endswith(("\n", "\r")) else ""
        updated = text + separator + newline.join(missing) + newline
        expected = None if data is None else fsio.sha256_bytes(data)
        fsio.atomic_write(
            root_ignore, updated.encode("utf-8", errors="surrogateescape"), root=self.root, expected=expected
        )
        notes.append(f"{'added' if data is not None else 'created .gitignore with'} {', '.join(missing)}")
        return notes


def _feed(
    repo: Repo,
    args: list[str],
    paths: Sequence[str],
    *,
    env: dict[str, str] | None = None,
    ok_codes: tuple[int, ...] = (0,),
) -> str:
    """Run a git command that reads NUL-separated paths on stdin (no command-line length limit)."""
    from git.exc import GitCommandError

    with tempfile.TemporaryFile() as stdin:
        stdin.write(b"".join(p.encode("utf-8", errors="surrogateescape") + b"\0" for p in paths))
        stdin.seek(0)
        status, out, err = repo.git.execute(
            ["git", *args], istream=stdin, env=env, with_extended_output=True, with_exceptions=False
        )
    if status not in ok_codes:
        raise GitCommandError(["git", *args], status, err, out)
    return str(out)


def _head(repo: Repo) -> str | None:
    out = repo.git.rev_parse("--verify", "--quiet", "HEAD^{commit}", with_exceptions=False)
    return out.strip() or None


def _without_sidecars(patch: str) -> str:
    """A patch without the parts that change ``_embeddings.json`` (base64 vectors: nothing to read).
    The commit's file list still names them."""
    first, *rest = patch.split("\ndiff --git ")
    parts = [first, *(f"diff --git {p}" for p in rest)]
    kept = [p for p in parts if not (p.splitlines() or [""])[0].rstrip('"').endswith(f"/{SIDECAR_NAME}")]
    return "\n".join(kept)


def _raw_files(raw: str) -> tuple[str, ...]:
    """``git log --raw`` lines (``:modes shas STATUS\tpath[\tnew path]``) as ``A path``, ``M path``,
    ``D path``, ``R old -> new``."""
    files = []
    for line in raw.splitlines():
        meta, _, paths = line.partition("\t")
        letter = meta.split()[-1][:1] if meta.split() else "M"
        names = paths.split("\t")
        files.append(
            f"R {names[0]} -> {names[1]}" if letter in "RC" and len(names) == 2 else f"{letter} {names[0]}"
        )
    return tuple(files)


def _vault_rel(path: str) -> str:
    pure = PurePosixPath(path)
    if not pure.parts or pure.is_absolute() or {"..", ".git"} & set(pure.parts):
        raise UnsafePath(f"not a vault-relative path: {path!r}")
    return pure.as_posix()


def _stderr_line(stderr: object, status: object) -> str:
    """The line of git's stderr worth showing (gitpython wraps it as ``\\n  stderr: '...'``)."""
    text = str(stderr or "").strip()
    text = text.removeprefix("stderr:").strip().strip("'")
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    for line in lines:
        if line.startswith(("fatal:", "error:")):
            return line
    return lines[0] if lines else f"exit status {status}"
