"""GitRecorder against real git repositories in tmp_path (no mocks)."""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

from vaultmem.errors import GitBusy, GitError, UnsafePath
from vaultmem.gitsync import GIT_AUTHOR, ROOT_IGNORES, STATE_GITIGNORE, GitRecorder, Journal, commit_message
from vaultmem.vault import Vault


@pytest.fixture(autouse=True)
def _git_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Keep the machine's git config and identity out of every test."""
    config = tmp_path / "gitconfig"
    config.write_text("")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(config))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    for var in (
        "GIT_DIR",
        "GIT_WORK_TREE",
        "GIT_INDEX_FILE",
        "GIT_CONFIG_PARAMETERS",
        "GIT_CONFIG_COUNT",
        "GIT_AUTHOR_NAME",
        "GIT_AUTHOR_EMAIL",
        "GIT_COMMITTER_NAME",
        "GIT_COMMITTER_EMAIL",
        "EMAIL",
    ):
        monkeypatch.delenv(var, raising=False)


def git(cwd: Path, *args: str) -> str:
    """The git CLI with a throwaway identity (for commands the test runs itself, e.g. revert)."""
    done = subprocess.run(
        ["git", "-c", "user.name=tester", "-c", "user.email=t@example.org", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout


def tree(root: Path) -> set[str]:
    return set(git(root, "ls-tree", "-r", "--name-only", "HEAD").split())


def make_vault(root: Path) -> Path:
    """A hand-made vault: two fresh leaves, the config, engine state and a stray temp file."""
    (root / ".vaultmem").mkdir(parents=True)
    (root / ".vaultmem" / "config.toml").write_text("[git]\nauto_commit = true\n")
    (root / ".vaultmem" / "chunks.db").write_bytes(b"SQLite format 3\x00")
    (root / ".vaultmem" / "chunks.db-wal").write_bytes(b"wal")
    fresh = root / "sources" / "chat" / "_fresh"
    fresh.mkdir(parents=True)
    (fresh / "a.md").write_text("---\nid: a\n---\nroses by the fence\n")
    (fresh / "b.md").write_text("---\nid: b\n---\nthe garden project\n")
    (fresh / ".vm-tmp-1234-c.md").write_text("half written")
    return root


def test_ensure_repo_creates_repo_and_ignores_and_is_idempotent(tmp_path: Path) -> None:
    root = tmp_path / "vault"
    root.mkdir()
    user_lines = "node_modules/\n# my notes\n.obsidian/workspace*\n*.bak"  # no final newline
    (root / ".gitignore").write_text(user_lines)
    recorder = GitRecorder(root)

    notes = recorder.ensure_repo()

    assert (root / ".git").is_dir()
    assert any("created a git repository" in note for note in notes)
    assert (root / ".vaultmem" / ".gitignore").read_bytes() == STATE_GITIGNORE
    assert (root / ".gitignore").read_text() == user_lines + "\n.vm-tmp-*\n"
    before = (root / ".gitignore").stat().st_mtime_ns
    assert recorder.ensure_repo() == []
    assert (root / ".gitignore").read_text() == user_lines + "\n.vm-tmp-*\n"
    assert (root / ".gitignore").stat().st_mtime_ns == before
    assert recorder.head() is None
    assert recorder.log() == []


def test_ensure_repo_creates_root_gitignore_and_keeps_a_custom_state_gitignore(tmp_path: Path) -> None:
    root = tmp_path / "vault"
    (root / ".vaultmem").mkdir(parents=True)
    (root / ".vaultmem" / ".gitignore").write_text("*\n")

    GitRecorder(root).ensure_repo()

    assert (root / ".vaultmem" / ".gitignore").read_text() == "*\n"
    assert (root / ".gitignore").read_text().splitlines() == list(ROOT_IGNORES)


def test_ensure_repo_on_a_missing_directory_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(GitError, match="not a directory"):
        GitRecorder(tmp_path / "nowhere").ensure_repo()


def test_commit_records_new_files_but_never_engine_state_or_temp_files(tmp_path: Path) -> None:
    root = make_vault(tmp_path / "vault")
    recorder = GitRecorder(root)

    result = recorder.commit("memory: add 2 leaves from chat")

    assert result.sha is not None and len(result.sha) == 40
    assert result.message == "memory: add 2 leaves from chat"
    committed = {
        ".gitignore",
        ".vaultmem/.gitignore",
        ".vaultmem/config.toml",
        "sources/chat/_fresh/a.md",
        "sources/chat/_fresh/b.md",
    }
    assert tree(root) == committed
    assert result.files == len(committed)
    assert any("created a git repository" in note for note in result.notes)
    assert recorder.head() == result.sha
    assert recorder.log() == [(result.sha, "memory: add 2 leaves from chat")]

    again = recorder.commit("memory: nothing happened")
    assert again.sha is None and again.files == 0 and again.notes == ()
    assert recorder.head() == result.sha


def test_commit_on_a_vault_made_by_vault_init(vault: Vault) -> None:
    root = vault.layout.root
    state_ignore = (root / ".vaultmem" / ".gitignore").read_bytes()

    result = GitRecorder(root).commit("memory: new vault")

    assert result.sha is not None
    assert (root / ".vaultmem" / ".gitignore").read_bytes() == state_ignore == STATE_GITIGNORE
    assert {p for p in tree(root) if p.startswith(".vaultmem/")} == {
        ".vaultmem/.gitignore",
        ".vaultmem/config.toml",
    }


def test_commit_with_paths_stages_only_those_including_deletions_and_moves(tmp_path: Path) -> None:
    root = make_vault(tmp_path / "vault")
    recorder = GitRecorder(root)
    recorder.commit("memory: start")
    fresh = root / "sources" / "chat" / "_fresh"
    (fresh / "a.md").unlink()
    sealed = root / "sources" / "chat" / "01-garden"
    sealed.mkdir()
    (fresh / "b.md").rename(sealed / "b.md")
    (root / "core").mkdir()
    (root / "core" / "unrelated.md").write_text("someone else's edit\n")

    result = recorder.commit(
        "memory: drop a, seal b into 01-garden/",
        paths=[
            "sources/chat/_fresh/a.md",
            "sources/chat/_fresh/b.md",
            "sources/chat/01-garden/b.md",
            ".vaultmem/chunks.db",  # ignored: silently not committed
            "sources/chat/_fresh/never-existed.md",  # unknown: nothing to record
        ],
    )

    assert result.sha is not None
    assert result.files == 3  # a deleted; b's old path deleted and new path added
    files = tree(root)
    assert "sources/chat/_fresh/a.md" not in files
    assert "sources/chat/_fresh/b.md" not in files
    assert "sources/chat/01-garden/b.md" in files
    assert "core/unrelated.md" not in files
    assert not any(p.startswith(".vaultmem/chunks") for p in files)
    assert git(root, "status", "--porcelain").strip() == "?? core/"

    nothing = recorder.commit("memory: only ignored or unknown", paths=[".vaultmem/chunks.db", "gone.md"])
    assert nothing.sha is None and recorder.head() == result.sha
    assert recorder.commit("memory: no paths", paths=[]).sha is None
    assert recorder.log(0) == []


def test_commit_rejects_paths_outside_the_vault(tmp_path: Path) -> None:
    recorder = GitRecorder(make_vault(tmp_path / "vault"))
    for bad in ("../x.md", "/etc/passwd", ".git/config", ""):
        with pytest.raises(UnsafePath):
            recorder.commit("memory: bad", paths=[bad])


def test_author_falls_back_to_vaultmem_identity(tmp_path: Path) -> None:
    root = make_vault(tmp_path / "vault")

    GitRecorder(root).commit("memory: add")

    name, email = GIT_AUTHOR
    assert (
        git(root, "log", "-1", "--format=%an <%ae>|%cn <%ce>").strip() == f"{name} <{email}>|{name} <{email}>"
    )
    assert "vaultmem" not in (root / ".git" / "config").read_text()  # nothing written to git config


def test_author_is_the_repository_user_when_configured(tmp_path: Path) -> None:
    root = make_vault(tmp_path / "vault")
    recorder = GitRecorder(root)
    recorder.ensure_repo()
    git(root, "config", "user.name", "Ada Lovelace")
    git(root, "config", "user.email", "ada@example.org")

    recorder.commit("memory: add")

    assert git(root, "log", "-1", "--format=%an <%ae>").strip() == "Ada Lovelace <ada@example.org>"


def test_hooks_never_run_or_block(tmp_path: Path) -> None:
    root = make_vault(tmp_path / "vault")
    recorder = GitRecorder(root)
    recorder.ensure_repo()
    hooks = root / ".git" / "hooks"
    marker = tmp_path / "post-commit-ran"
    for name, body in (
        ("pre-commit", "exit 1"),
        ("commit-msg", "exit 1"),
        ("post-commit", f"touch {marker}"),
    ):
        (hooks / name).write_text(f"#!/bin/sh\n{body}\n")
        (hooks / name).chmod(0o755)

    assert recorder.commit("memory: add").sha is not None
    assert not marker.exists()


def index_lock(root: Path, age_s: float) -> Path:
    lock = root / ".git" / "index.lock"
    lock.write_bytes(b"")
    then = time.time() - age_s
    os.utime(lock, (then, then))
    return lock


def test_stale_index_lock_is_removed_with_a_note(tmp_path: Path) -> None:
    root = make_vault(tmp_path / "vault")
    recorder = GitRecorder(root, stale_lock_s=10.0, lock_wait_s=0.05)
    recorder.ensure_repo()
    lock = index_lock(root, age_s=60)

    result = recorder.commit("memory: add")

    assert result.sha is not None
    assert not lock.exists()
    assert [n for n in result.notes if "index.lock" in n] == [
        "removed a stale .git/index.lock left by a killed git (age 60s)"
    ]


def test_fresh_index_lock_is_an_error_and_nothing_is_committed(tmp_path: Path) -> None:
    root = make_vault(tmp_path / "vault")
    recorder = GitRecorder(root, stale_lock_s=3600.0, lock_wait_s=0.05)
    first = recorder.commit("memory: start")
    leaf = root / "sources" / "chat" / "_fresh" / "c.md"
    leaf.write_text("new leaf\n")
    lock = index_lock(root, age_s=0)

    with pytest.raises(GitError, match=r"another git process holds .*index\.lock.*delete it") as info:
        recorder.commit("memory: add c")

    assert "\n" not in str(info.value)
    assert lock.exists()  # a live git's lock is never taken away
    assert recorder.head() == first.sha
    assert leaf.read_text() == "new leaf\n"


def test_index_lock_released_during_the_wait_lets_the_commit_through(tmp_path: Path) -> None:
    root = make_vault(tmp_path / "vault")
    recorder = GitRecorder(root, stale_lock_s=3600.0, lock_wait_s=120.0)  # the wait ends with the lock
    recorder.ensure_repo()
    lock = index_lock(root, age_s=0)
    go = threading.Event()

    def live_git_finishes() -> None:
        if go.wait(timeout=60):
            threading.Event().wait(0.2)  # the "other git" works for a moment, then releases its lock
            lock.unlink()

    releaser = threading.Thread(target=live_git_finishes)
    releaser.start()
    go.set()
    result = recorder.commit("memory: add")
    releaser.join(timeout=60)

    assert not releaser.is_alive()
    assert result.sha is not None
    assert not any("index.lock" in n for n in result.notes)


def test_lock_reported_by_git_itself_is_checked_and_retried_once(tmp_path: Path) -> None:
    """The race: a lock appears after the pre-check, so git itself fails on it; the same check then runs."""
    root = make_vault(tmp_path / "vault")
    recorder = GitRecorder(root, stale_lock_s=10.0, lock_wait_s=0.05)
    recorder.ensure_repo()
    notes: list[str] = []
    attempts: list[str] = []
    with recorder._opened() as repo:

        def add() -> None:
            if not attempts:
                index_lock(root, age_s=60)  # a git killed between the check and this command
            attempts.append("add")
            repo.git.add("-A")

        recorder._with_index_lock(repo, notes, add)

    assert attempts == ["add", "add"]
    assert notes == ["removed a stale .git/index.lock left by a killed git (age 60s)"]
    assert "sources/chat/_fresh/a.md" in git(root, "ls-files")


def test_broken_repository_is_one_clear_error(tmp_path: Path) -> None:
    root = make_vault(tmp_path / "vault")
    recorder = GitRecorder(root)
    recorder.commit("memory: start")
    (root / ".git" / "HEAD").write_text("garbage\n")

    with pytest.raises(GitError, match="not a usable git repository") as info:
        recorder.commit("memory: more")
    assert "\n" not in str(info.value)


@pytest.mark.slow
def test_sigkilled_git_add_leaves_a_lock_that_commit_recovers_from(tmp_path: Path) -> None:
    """A real `git add` killed with SIGKILL while it holds .git/index.lock.

    Made deterministic with a clean filter that signals it has started and then blocks: git takes the
    index lock before it hashes files, so once the marker exists the lock is held, and the kill happens
    mid-add every time instead of racing a fast add on a large tree.
    """
    root = make_vault(tmp_path / "vault")
    recorder = GitRecorder(root, lock_wait_s=0.05)
    recorder.ensure_repo()
    attributes = root / ".git" / "info" / "attributes"
    attributes.parent.mkdir(exist_ok=True)
    attributes.write_text("*.md filter=block\n")
    started = tmp_path / "filter-started"
    clean = f"touch {shlex.quote(str(started))}; exec sleep 30"
    proc = subprocess.Popen(
        ["git", "-c", f"filter.block.clean={clean}", "add", "-A"],
        cwd=root,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    lock = root / ".git" / "index.lock"
    try:
        deadline = time.monotonic() + 60  # bounds a hang only
        while not (started.exists() and lock.exists()):
            assert proc.poll() is None, "git add ended before it could be killed"
            assert time.monotonic() < deadline, "git add never reached the clean filter"
            threading.Event().wait(0.01)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)
    attributes.unlink()
    assert lock.exists()
    blocked = subprocess.run(["git", "add", "-A"], cwd=root, capture_output=True, text=True)
    assert blocked.returncode != 0 and "index.lock" in blocked.stderr
    then = time.time() - 60  # as if the kill happened a minute ago
    os.utime(lock, (then, then))

    result = recorder.commit("memory: add 2 leaves from chat")

    assert result.sha is not None
    assert any("removed a stale .git/index.lock" in n for n in result.notes)
    assert "sources/chat/_fresh/a.md" in tree(root)


def test_git_revert_undoes_a_compaction(tmp_path: Path) -> None:
    root = make_vault(tmp_path / "vault")
    recorder = GitRecorder(root)
    recorder.commit("memory: add 2 leaves from chat")
    fresh = root / "sources" / "chat" / "_fresh"
    before = {name: (fresh / name).read_bytes() for name in ("a.md", "b.md")}
    sealed = root / "sources" / "chat" / "01-garden"
    sealed.mkdir()
    for name in before:
        (fresh / name).rename(sealed / name)
    (sealed / "_summary.md").write_text("---\nid: s1\n---\nA garden by the fence.\n")
    seal = recorder.commit("memory: seal 2 leaves into 01-garden/")
    assert seal.files == 5

    git(root, "revert", "--no-edit", "HEAD")

    assert {name: (fresh / name).read_bytes() for name in before} == before
    assert not sealed.exists()
    assert git(root, "status", "--porcelain", "--untracked-files=no").strip() == ""
    assert recorder.log(2)[1] == (seal.sha, "memory: seal 2 leaves into 01-garden/")


def test_vault_inside_another_work_tree_gets_its_own_repository(tmp_path: Path) -> None:
    outer = tmp_path / "projects"
    outer.mkdir()
    git(outer, "init", "-q")
    (outer / "README.md").write_text("outer\n")
    git(outer, "add", "README.md")
    git(outer, "commit", "-q", "-m", "outer: first")
    outer_head = git(outer, "rev-parse", "HEAD")
    root = make_vault(outer / "notes" / "vault")

    result = GitRecorder(root).commit("memory: add")

    assert (root / ".git").is_dir()
    assert "sources/chat/_fresh/a.md" in tree(root)
    assert git(outer, "rev-parse", "HEAD") == outer_head
    assert git(outer, "diff", "--cached", "--name-only") == ""
    assert GitRecorder(root).log() == [(result.sha, "memory: add")]


def test_inherited_git_dir_does_not_redirect_commits(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    other = tmp_path / "other"
    other.mkdir()
    git(other, "init", "-q")
    root = make_vault(tmp_path / "vault")
    monkeypatch.setenv("GIT_DIR", str(other / ".git"))  # as inside a git hook of another repository
    monkeypatch.setenv("GIT_WORK_TREE", str(other))

    result = GitRecorder(root).commit("memory: add")

    monkeypatch.delenv("GIT_DIR")
    monkeypatch.delenv("GIT_WORK_TREE")
    assert result.sha is not None and (root / ".git").is_dir()
    assert "sources/chat/_fresh/a.md" in tree(root)
    unborn = subprocess.run(["git", "rev-parse", "--verify", "-q", "HEAD"], cwd=other, capture_output=True)
    assert unborn.returncode != 0  # the other repository got no commit


def test_missing_git_binary_is_a_git_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = make_vault(tmp_path / "vault")
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))

    with pytest.raises(GitError, match="git is not installed"):
        GitRecorder(root).commit("memory: add")
    assert not (root / ".git").exists()


def test_commit_of_paths_leaves_the_persons_staged_and_unstaged_changes_out(tmp_path: Path) -> None:
    root = make_vault(tmp_path / "vault")
    recorder = GitRecorder(root)
    recorder.commit("memory: start")
    fresh = root / "sources" / "chat" / "_fresh"
    (fresh / "a.md").write_text("---\nid: a\n---\nroses by the fence, edited by the engine\n")
    (root / "plan.md").write_text("a person's plan, staged\n")
    git(root, "add", "plan.md")
    (fresh / "b.md").write_text("---\nid: b\n---\nthe garden project, edited by hand\n")

    result = recorder.commit("memory: engine step", paths=["sources/chat/_fresh/a.md"])

    assert result.files == 1
    assert git(root, "show", "--name-only", "--format=", "HEAD").split() == ["sources/chat/_fresh/a.md"]
    # The person's staged file stays staged, their edit stays an edit, the engine's path is clean.
    assert git(root, "status", "--porcelain").splitlines() == ["A  plan.md", " M sources/chat/_fresh/b.md"]


def test_commit_during_a_git_operation_commits_nothing(tmp_path: Path) -> None:
    root = make_vault(tmp_path / "vault")
    recorder = GitRecorder(root, lock_wait_s=0.05)
    first = recorder.commit("memory: start")
    (root / ".git" / "MERGE_HEAD").write_text(f"{first.sha}\n")  # a merge stopped on a conflict
    (root / "sources" / "chat" / "_fresh" / "a.md").write_text("---\nid: a\n---\nchanged\n")

    with pytest.raises(GitBusy, match=r"a git merge is in progress \(.git/MERGE_HEAD\).*git merge --abort"):
        recorder.commit("memory: more", paths=["sources/chat/_fresh/a.md"])
    assert recorder.head() == first.sha


def test_journal_keeps_engine_paths_until_a_commit_consumes_them(tmp_path: Path) -> None:
    root = tmp_path / "vault"
    (root / ".vaultmem").mkdir(parents=True)
    journal = Journal(root)
    journal.record_paths([root / "sources/x/_fresh/a.md", root / ".vaultmem/chunks.db", root / ".git/index"])
    journal.record_message("memory: add 1 leaves from x")
    paths, messages, size = journal.read()
    assert paths == ["sources/x/_fresh/a.md"] and messages == ["memory: add 1 leaves from x"]
    journal.record_paths([root / "sources/x/_fresh/b.md"])  # appended while a commit is being made
    journal.consume(size)
    assert journal.read()[:2] == (["sources/x/_fresh/b.md"], [])
    assert commit_message(["memory: a", "memory: b", "memory: a"], "memory: compact") == (
        "memory: compact: 2 operations\n\n- a\n- b"
    )
    assert commit_message(["memory: a"], "memory: compact") == "memory: a"


def test_a_file_holding_a_secret_is_never_committed_and_a_moved_one_is_not_read_again(tmp_path: Path) -> None:
    import random

    from tests.secret_shapes import rand

    root = make_vault(tmp_path / "v")
    secret = "gh" + "p_" + rand(random.Random(3), 36)
    note = root / "notes" / "todo.md"
    note.parent.mkdir()
    note.write_text(f"rotate {secret} on Friday\n")
    seen: list[str] = []

    def screen(path: Path) -> tuple[str, ...]:
        seen.append(path.name)
        return ("github_token",) if secret in path.read_text() else ()

    recorder = GitRecorder(root, screen=screen)
    result = recorder.commit("memory: add")
    assert result.held == (("notes/todo.md", ("github_token",)),)
    assert "notes/todo.md" not in tree(root) and "sources/chat/_fresh/a.md" in tree(root)
    assert "?? notes/todo.md" in git(root, "status", "--porcelain", "--untracked-files=all")
    # Named by a folder in a path-limited commit, the file still stays out.
    (root / "notes" / "ok.md").write_text("nothing secret here\n")
    result = recorder.commit("memory: notes", ["notes"])
    assert result.sha is not None and "notes/ok.md" in tree(root) and "notes/todo.md" not in tree(root)
    # A committed leaf moved without a change of content is not read again.
    seen.clear()
    fresh = root / "sources" / "chat" / "_fresh" / "a.md"
    level = root / "sources" / "chat" / "01-level"
    level.mkdir()
    fresh.rename(level / fresh.name)
    recorder.commit("memory: seal")
    assert fresh.name not in seen and "todo.md" in seen
    # The default screen reads the file, and embedding sidecars (random-looking base64) are the engine's.
    from vaultmem.gitsync import secret_kinds

    assert secret_kinds(note) == ("github_token",)
    sidecar = level / "_embeddings.json"
    sidecar.write_text(
        '{"vector": "'
        + rand(random.Random(4), 512, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/")
        + '"}'
    )
    assert secret_kinds(sidecar) == ()


def test_journal_squashed_after_a_failed_commit_keeps_everything_once(tmp_path: Path) -> None:
    root = tmp_path / "vault"
    (root / ".vaultmem").mkdir(parents=True)
    journal = Journal(root)
    for _ in range(50):  # a commit failing again and again: the same paths and messages each time
        journal.record_paths([root / "sources/x/_fresh/a.md", root / "sources/x/_fresh/b.md"])
        journal.record_message("memory: add 2 leaves from x")
    before = journal.path.stat().st_size
    journal.squash()
    assert journal.read()[:2] == (
        ["sources/x/_fresh/a.md", "sources/x/_fresh/b.md"],
        ["memory: add 2 leaves from x"],
    )
    assert journal.path.stat().st_size < before / 20
