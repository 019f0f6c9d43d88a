"""Optional git history for a vault: one commit per logical vault operation (config ``git.auto_commit``).

Owns the vault's own repository (``<vault>/.git``, created even when the vault sits inside another work
tree), the two ignore files that keep engine state and temp files out of it, and recovery from a stale
``.git/index.lock`` left by a killed git. Every git call is pinned to that repository, whatever
``GIT_DIR``/``GIT_WORK_TREE``/``GIT_INDEX_FILE`` the process inherited (a git hook sets them).

It never writes to the vault's files (git only touches ``.git/``; this module only the ignore files), never
writes git config (identity and hook settings go on the command line), never runs the user's hooks,
never commits ignored files, and never resets, checks out, pushes or pulls. A failed commit raises
``GitError`` and leaves the vault exactly as it was.

It never commits a secret: every file about to be committed with content git has not seen in this
commit's own deletions (a moved file is not read again) is screened (``secret_kinds``); one that holds
a secret (a person typed it into a leaf or a note) is unstaged and left out of the commit, and
``CommitResult.held`` names it. That is the only way a file is kept out; the index of the repository
changes no other way.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

from vaultmem import fsio
from vaultmem.errors import GitError, UnsafePath
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
        """Stage ``paths`` (vault-relative; all of the vault when None) and commit them if anything changed."""
        if not message.strip():
            raise ValueError("a commit message must not be empty")
        wanted = None if paths is None else [_vault_rel(p) for p in paths]
        notes = self.ensure_repo()
        with self._git_errors("commit"), self._opened() as repo:
            add_specs: list[str] = []
            commit_specs: list[str] = []
            if wanted is not None:
                add_specs, commit_specs = self._committable(repo, wanted)
                if not commit_specs:
                    return CommitResult(None, message, 0, tuple(notes))
            if wanted is None or add_specs:
                spec = ["--", *add_specs] if wanted is not None else []
                self._with_index_lock(repo, notes, lambda: repo.git.add("-A", *spec))
            spec = ["--", *commit_specs] if wanted is not None else []
            held = self._hold_back_secrets(repo, notes, spec)
            staged = repo.git.diff("--cached", "--name-only", "--no-renames", "-z", *spec)
            changed = [p for p in staged.split("\0") if p and p not in held]
            if held and wanted is not None:
                # `git commit -- <paths>` takes the work tree's content of those paths: name only the
                # files that may go in, so a held file under a named folder stays out.
                spec = ["--", *changed]
            if not changed:
                return CommitResult(None, message, 0, tuple(notes), tuple(held.items()))
            options = [f"core.hooksPath={os.devnull}", *self._missing_identity(repo)]
            self._with_index_lock(
                repo,
                notes,
                lambda: repo.git(c=options).commit(
                    "-q", "--no-verify", "--no-gpg-sign", "--cleanup=whitespace", "-m", message, *spec
                ),
            )
            return CommitResult(_head(repo), message, len(changed), tuple(notes), tuple(held.items()))

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

    def _committable(self, repo: Repo, wanted: list[str]) -> tuple[list[str], list[str]]:
        """Split requested paths into those to stage and those to commit, dropping ignored and unknown ones.

        A path to stage exists or is in the index; a path to commit may also be only in HEAD (a deletion
        staged by an earlier, interrupted run). Git rejects a pathspec that matches nothing.
        """
        if not wanted:
            return [], []
        # Named explicitly, an ignored file makes `git add` fail; as part of a directory it is skipped.
        listing = repo.git.ls_files("-z", "--others", "--ignored", "--exclude-standard", "--", *wanted)
        ignored = set(listing.split("\0"))
        wanted = [p for p in wanted if p not in ignored]
        missing = [p for p in wanted if not os.path.lexists(self.root / p)]
        in_index: set[str] = set()
        in_head: set[str] = set()
        if missing:
            in_index = _matched(missing, repo.git.ls_files("-z", "--cached", "--", *missing))
            if _head(repo) is not None:
                in_head = _matched(
                    missing, repo.git.ls_tree("-r", "-z", "--name-only", "HEAD", "--", *missing)
                )
        add = [p for p in wanted if p not in missing or p in in_index]
        return add, [p for p in wanted if p not in missing or p in in_index or p in in_head]

    def _hold_back_secrets(self, repo: Repo, notes: list[str], spec: list[str]) -> dict[str, tuple[str, ...]]:
        """Unstage every staged file that holds a secret; return them with the kinds found.

        Only content new to this commit is read: a file whose blob is also one this commit deletes
        was moved (compaction moves leaves without changing a byte) and was screened when it came in."""
        raw = repo.git.diff("--cached", "--raw", "--no-renames", "--no-abbrev", "-z", *spec)
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
        if held:
            self._with_index_lock(repo, notes, lambda: repo.git.reset("-q", "--", *held))
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


def _matched(specs: list[str], listing: str) -> set[str]:
    """The specs (files or directories) that name at least one path of a NUL-separated git listing."""
    names = [n for n in listing.split("\0") if n]
    return {s for s in specs if any(n == s or n.startswith(f"{s}/") for n in names)}


def _stderr_line(stderr: object, status: object) -> str:
    """The line of git's stderr worth showing (gitpython wraps it as ``\\n  stderr: '...'``)."""
    text = str(stderr or "").strip()
    text = text.removeprefix("stderr:").strip().strip("'")
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    for line in lines:
        if line.startswith(("fatal:", "error:")):
            return line
    return lines[0] if lines else f"exit status {status}"
