"""vaultmem next to git, with real git repositories in tmp_path: every write pauses while a git operation
is under way (revert, merge, cherry-pick, rebase, bisect, detached HEAD, a live index.lock), the daemon
(a real watchdog observer) pauses and catches up, a clean revert is not redone, hand edits get their own
commits, engine commits are one per run and stage only the engine's paths, check --fix settles
duplicate ids."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.helpers import CONFIG, chat, run, topic_records, wait_for, watching
from vaultmem import gitsync
from vaultmem.daemon import Daemon
from vaultmem.embed import FakeEmbedder
from vaultmem.errors import GitBusy
from vaultmem.model import Leaf
from vaultmem.vault import Vault

DEADLINE_S = 60.0


@pytest.fixture(autouse=True)
def _git_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Keep the machine's git config, identity and hooks out of every test."""
    config = tmp_path / "gitconfig"
    config.write_text(
        "[user]\n\tname = Ada Hand\n\temail = ada@example.org\n[init]\n\tdefaultBranch = main\n"
    )
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(config))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    for var in ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_AUTHOR_NAME", "GIT_COMMITTER_NAME"):
        monkeypatch.delenv(var, raising=False)


def git(root: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, check=check)


def head(root: Path) -> str:
    return git(root, "rev-parse", "HEAD").stdout.strip()


def commits(root: Path) -> int:
    return int(git(root, "rev-list", "--count", "HEAD").stdout)


def chat_file(path: Path, n: int, prefix: str) -> Path:
    """A chat export as an assistant app writes it: one JSON list of turns."""
    turns = [
        {
            "id": f"{prefix}-{i}",
            "speaker": "Mia" if i % 2 else "Tom",
            "content": f"{prefix} {i}: the boiler service moved to {10 + i % 18} May, before 10am please.",
            "ts": f"2024-05-{1 + i % 28:02d}T09:{i % 60:02d}:00Z",
        }
        for i in range(n)
    ]
    path.write_text(json.dumps(turns), encoding="utf-8")
    return path


def cli_vault(tmp_path: Path, capsys: pytest.CaptureFixture[str], *, auto_commit: bool) -> Path:
    """A vault made and filled through the CLI (fake embedder), inside a git repository with history."""
    root = tmp_path / "v"
    assert run(["init", str(root)], capsys)[0] == 0
    config = root / ".vaultmem" / "config.toml"
    text = config.read_text().replace('model = "default"', 'model = "fake"')
    config.write_text(text.replace("auto_commit = false", f"auto_commit = {str(auto_commit).lower()}"))
    code, _, err = run(
        ["ingest", str(chat_file(tmp_path / "a.json", 6, "first")), "--vault", str(root)], capsys
    )
    assert code == 0, err
    if not auto_commit:
        git(root, "init", "-q")
    (root / "plan.txt").write_text("the plan\n")
    git(root, "add", "-A")
    git(root, "commit", "-qm", "base")
    return root


def leaf_files(root: Path) -> set[str]:
    return {p.relative_to(root).as_posix() for p in (root / "sources").rglob("*.md")}


# -- git operations that pause every write --------------------------------------------------------------
def _edit_commit(root: Path, text: str, message: str) -> None:
    (root / "plan.txt").write_text(text)
    git(root, "commit", "-qam", message)


def start_merge(root: Path) -> None:
    git(root, "checkout", "-qb", "other")
    _edit_commit(root, "theirs\n", "theirs")
    git(root, "checkout", "-q", "main")
    _edit_commit(root, "ours\n", "ours")
    assert git(root, "merge", "other", check=False).returncode != 0


def start_revert(root: Path) -> None:
    _edit_commit(root, "first change\n", "first")
    _edit_commit(root, "second change\n", "second")
    assert git(root, "revert", "--no-edit", "HEAD~1", check=False).returncode != 0


def start_cherry_pick(root: Path) -> None:
    git(root, "checkout", "-qb", "other")
    _edit_commit(root, "theirs\n", "theirs")
    git(root, "checkout", "-q", "main")
    _edit_commit(root, "ours\n", "ours")
    assert git(root, "cherry-pick", "other", check=False).returncode != 0


def start_rebase(*extra: str) -> Callable[[Path], None]:
    def start(root: Path) -> None:
        git(root, "checkout", "-qb", "other")
        _edit_commit(root, "theirs\n", "theirs")
        git(root, "checkout", "-q", "main")
        _edit_commit(root, "ours\n", "ours")
        git(root, "checkout", "-q", "other")
        assert git(root, "rebase", *extra, "main", check=False).returncode != 0

    return start


def start_bisect(root: Path) -> None:
    git(root, "bisect", "start")


def start_detached(root: Path) -> None:
    git(root, "checkout", "-q", "--detach")


def start_index_lock(root: Path) -> None:
    (root / ".git" / "index.lock").write_bytes(b"")  # a git command holding the index right now


def touch_lock(root: Path) -> None:
    lock = root / ".git" / "index.lock"
    if lock.exists():
        os.utime(lock)  # still held: never old enough to look like a killed git's


OPERATIONS: dict[str, tuple[Callable[[Path], None], str, str, list[str]]] = {
    # name: (how it starts, word in the error, what shows it, how a person ends it)
    "merge": (start_merge, "merge", "MERGE_HEAD", ["merge", "--abort"]),
    "revert": (start_revert, "revert", "REVERT_HEAD", ["revert", "--abort"]),
    "cherry-pick": (start_cherry_pick, "cherry-pick", "CHERRY_PICK_HEAD", ["cherry-pick", "--abort"]),
    "rebase": (start_rebase(), "rebase", "rebase-merge", ["rebase", "--abort"]),
    "rebase --apply": (start_rebase("--apply"), "rebase", "rebase-apply", ["rebase", "--abort"]),
    "bisect": (start_bisect, "bisect", "BISECT_LOG", ["bisect", "reset"]),
    "detached HEAD": (start_detached, "detached HEAD", "HEAD", ["checkout", "-q", "main"]),
    "index.lock": (start_index_lock, "index.lock", "index.lock", []),
}


@pytest.mark.parametrize(
    ("name", "auto_commit"),
    [(name, name in {"revert", "rebase", "detached HEAD", "index.lock"}) for name in OPERATIONS],
)
def test_cli_writes_refuse_during_a_git_operation_and_reads_go_on(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str, auto_commit: bool
) -> None:
    """Whether or not vaultmem commits itself: a half-restored tree is never written to."""
    root = cli_vault(tmp_path, capsys, auto_commit=auto_commit)
    start, word, marker, end = OPERATIONS[name]
    start(root)
    assert (root / ".git" / marker).exists()
    before_files, before_head = leaf_files(root), git(root, "rev-parse", "HEAD").stdout
    more = chat_file(tmp_path / "b.json", 4, "second")
    v = ["--vault", str(root)]
    for argv in (
        ["ingest", str(more), "--wait"],
        ["compact"],
        ["check", "--fix"],
        ["reindex"],
        ["watch", "--once"],
    ):
        touch_lock(root)
        code, _, err = run([*argv, *v], capsys)
        assert code == 1, (argv, err)
        assert err.count("\n") == 1 and "Traceback" not in err, err
        assert word in err and "vaultmem writes nothing until it ends" in err, err
    assert leaf_files(root) == before_files
    assert git(root, "rev-parse", "HEAD").stdout == before_head  # nothing committed in the middle
    # Reading goes on, and says why writing does not.
    code, out, _ = run(["search", "boiler service", *v, "--json"], capsys)
    assert code == 0 and json.loads(out)
    code, out, _ = run(["stats", *v, "--json"], capsys)
    assert code == 0 and json.loads(out)["git"]["operation"] in {word, "git command"}
    code, out, _ = run(["stats", *v], capsys)
    assert "writes are paused" in out
    assert run(["check", *v], capsys)[0] == 0
    # The person ends the operation: writes go on.
    if end:
        git(root, *end)
    (root / ".git" / "index.lock").unlink(missing_ok=True)
    code, _, err = run(["ingest", str(more), *v], capsys)
    assert code == 0, err
    assert len(leaf_files(root)) > len(before_files)


def test_operation_in_progress_finds_the_repository_of_a_worktree(tmp_path: Path) -> None:
    main_repo = tmp_path / "main"
    main_repo.mkdir()
    git(main_repo, "init", "-q")
    (main_repo / "f.txt").write_text("x\n")
    git(main_repo, "add", "-A")
    git(main_repo, "commit", "-qm", "x")
    git(main_repo, "worktree", "add", "-q", "--detach", str(tmp_path / "wt"))
    vault = tmp_path / "wt" / "notes" / "vault"  # a vault inside the worktree (no .git of its own)
    vault.mkdir(parents=True)
    found = gitsync.operation_in_progress(vault)
    assert found is not None and found.name == "detached HEAD"
    git(tmp_path / "wt", "switch", "-q", "-c", "notes")
    assert gitsync.operation_in_progress(vault) is None


# -- the daemon -----------------------------------------------------------------------------------------
def make_git_vault(tmp_path: Path) -> Vault:
    return Vault.init(
        tmp_path / "v",
        CONFIG.format(fanout=4, workers=2) + "\n[git]\nauto_commit = true\n",
        embedder=FakeEmbedder(),
    )


def two_runs(vault: Vault) -> None:
    """A first commit, then two runs of the engine, each one commit: 120 turns ingested and compacted,
    then 40 more."""
    vault.ingest_messages(chat(2, source="notes"))
    for records in (topic_records(30), topic_records(10, start=120)):
        with vault.commit_batch("memory: run"):
            vault.ingest_messages(records)
            vault.flush()
            vault.compact()


def due_jobs(vault: Vault) -> int:
    row = vault.conn.execute(
        "SELECT count(*) FROM jobs WHERE state = 'running' OR (state = 'queued' AND run_after <= ?)",
        (time.time() + 1.0,),
    ).fetchone()
    return int(row[0])


def quiet(daemon: Daemon, vault: Vault) -> None:
    """Wait until the daemon has nothing left to do and nothing left to commit, on two looks in a row
    with the loop turning in between."""
    end = time.monotonic() + DEADLINE_S
    streak = 0
    while streak < 2:
        if time.monotonic() > end:
            raise AssertionError("the daemon never went quiet")
        turns = daemon.loops + 2
        if daemon.settled() and due_jobs(vault) == 0 and not vault.has_uncommitted():
            streak += 1
            wait_for(lambda turns=turns: daemon.loops >= turns, DEADLINE_S, "two turns of the loop")
        else:
            streak = 0
            time.sleep(0.05)


def test_daemon_pauses_during_a_conflicting_revert_and_abort_works(tmp_path: Path) -> None:
    vault = make_git_vault(tmp_path)
    root = vault.layout.root
    two_runs(vault)
    first_run = git(root, "rev-parse", "HEAD~1").stdout.strip()
    assert commits(root) == 3
    before = head(root)
    with watching(root) as daemon:
        events = daemon.watcher.stats.events
        # Reverting the first run's commit conflicts with the second run, which changed the same levels.
        assert git(root, "revert", "--no-edit", first_run, check=False).returncode != 0
        assert (root / ".git" / "REVERT_HEAD").exists()
        wait_for(lambda: daemon.paused is not None, DEADLINE_S, "the daemon to pause")
        wait_for(lambda: daemon.watcher.stats.events > events, DEADLINE_S, "the revert's events")
        loops = daemon.loops
        wait_for(lambda: daemon.loops >= loops + 3, DEADLINE_S, "the loop to turn while paused")
        status = vault.stats().daemon
        assert status["state"] == "paused" and status["paused"]["operation"] == "revert"
        assert "git revert --abort" in status["paused"]["advice"]
        assert head(root) == before  # nothing was committed into the half-reverted tree
        git(root, "revert", "--abort")  # fails if anything had been committed meanwhile
        wait_for(lambda: daemon.resumed == 1, DEADLINE_S, "the catch-up after the revert")
        quiet(daemon, vault)
        assert vault.stats().daemon["state"] == "running"
        assert daemon.report.pauses == 1
    assert head(root) == before
    assert git(root, "status", "--porcelain").stdout == ""
    assert vault.check().ok
    vault.close()


def test_a_clean_revert_of_an_engine_run_is_not_redone(tmp_path: Path) -> None:
    vault = make_git_vault(tmp_path)
    root = vault.layout.root
    two_runs(vault)
    with watching(root) as daemon:
        quiet(daemon, vault)
        git(root, "revert", "--no-edit", "HEAD")  # undo the second run: leaves, levels, topics, digests
        reverted = head(root)
        wait_for(lambda: daemon.report.moved + daemon.report.deleted > 0, DEADLINE_S, "the revert to be seen")
        quiet(daemon, vault)
        assert daemon.report.stale == 0  # every restored level matched its children
    assert head(root) == reverted  # git restored a consistent tree: no re-summarise, no commit at all
    assert git(root, "status", "--porcelain").stdout == ""
    assert vault.conn.execute("SELECT count(*) FROM chunks WHERE status = 'stale'").fetchone()[0] == 0
    assert vault.check().ok
    vault.close()


def test_reverting_a_compaction_re_summarises_nothing_git_restored(tmp_path: Path) -> None:
    vault = make_git_vault(tmp_path)
    root = vault.layout.root
    vault.ingest_messages(topic_records(30))
    vault.flush()
    vault.compact()
    vault.ingest_messages(topic_records(10, start=120))
    vault.flush()
    vault.compact()  # merges the 40 new leaves into the levels, re-summarises them and their parents
    assert "re-summarise" in git(root, "log", "-1", "--format=%B").stdout
    with watching(root) as daemon:
        quiet(daemon, vault)
        git(root, "revert", "--no-edit", "HEAD")
        reverted = head(root)
        wait_for(lambda: daemon.report.moved > 0, DEADLINE_S, "the revert to be seen")
        quiet(daemon, vault)
    after = git(root, "log", "--format=%B", f"{reverted}..HEAD").stdout
    # The 40 leaves are still there (their ingest was not reverted), so their topic links and day
    # digests are made again; the levels git put back are left as they are.
    assert "re-summarise" not in after and "stale" not in after
    assert commits(root) - int(git(root, "rev-list", "--count", reverted).stdout) <= 1
    assert vault.check().ok
    vault.close()


def sealed_leaf(vault: Vault) -> Leaf:
    """A leaf two levels down (so its edit concerns a level and the parent above it)."""
    return next(x for x in vault.ls(status="sealed") if x.path.count("/") >= 4)


def edit_by_hand(vault: Vault, leaf: Leaf) -> None:
    """What a person does in Obsidian: one more sentence in the leaf's text, saved in place."""
    path = vault.layout.root / leaf.path
    path.write_text(path.read_text().replace(leaf.text, leaf.text + " Mara says the hedge needs trimming."))


def test_hand_edit_is_committed_on_its_own_never_inside_an_engine_commit(tmp_path: Path) -> None:
    vault = make_git_vault(tmp_path)
    root = vault.layout.root
    two_runs(vault)
    leaf = sealed_leaf(vault)
    with watching(root) as daemon:
        quiet(daemon, vault)
        before = head(root)
        edit_by_hand(vault, leaf)
        wait_for(lambda: daemon.report.changed >= 1, DEADLINE_S, "the edit to be reconciled")
        quiet(daemon, vault)
    log = git(root, "log", "--format=%H %s", f"{before}..HEAD").stdout.splitlines()[::-1]
    assert len(log) == 2  # the person's commit, then the engine's re-summary of the levels above it
    (hand_sha, hand_subject), (engine_sha, _) = (line.split(" ", 1) for line in log)
    assert hand_subject == f"edit by hand: {leaf.path}"
    assert git(root, "show", "--format=%an", "--name-only", hand_sha).stdout.split() == [
        "Ada",
        "Hand",
        leaf.path,
    ]
    engine_files = git(root, "show", "--format=", "--name-only", engine_sha).stdout.split()
    assert leaf.path not in engine_files and engine_files
    assert "re-summarise" in git(root, "show", "-s", "--format=%B", engine_sha).stdout
    assert git(root, "status", "--porcelain").stdout == ""
    vault.close()


# -- without the daemon ---------------------------------------------------------------------------------
def test_compact_commits_hand_edits_first_and_leaves_other_files_alone(tmp_path: Path) -> None:
    vault = make_git_vault(tmp_path)
    root = vault.layout.root
    two_runs(vault)
    leaf = sealed_leaf(vault)
    edit_by_hand(vault, leaf)
    (root / "scratch.txt").write_text("a person's file vaultmem never reads\n")
    before = head(root)
    vault.compact()
    subjects = git(root, "log", "--format=%s", f"{before}..HEAD").stdout.splitlines()[::-1]
    assert subjects[0] == f"edit by hand: {leaf.path}" and subjects[1].startswith("memory: compact")
    assert git(root, "status", "--porcelain").stdout == "?? scratch.txt\n"  # never `git add -A`
    vault.close()


def test_cli_ingest_and_compact_are_one_commit_each(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "v"
    assert run(["init", str(root)], capsys)[0] == 0
    config = '[embed]\nmodel = "fake"\n[git]\nauto_commit = true\n' + CONFIG.format(fanout=4, workers=2)
    (root / ".vaultmem" / "config.toml").write_text(config)
    export = tmp_path / "chat.json"
    export.write_text(json.dumps(topic_records(30)))
    assert run(["ingest", str(export), "--wait", "--vault", str(root)], capsys)[0] == 0
    assert run(["compact", "--vault", str(root)], capsys)[0] == 0
    subjects = git(root, "log", "--format=%s").stdout.splitlines()
    assert len(subjects) == 2, subjects  # was 1 + 1 + one per seal, condensation, re-summary, topic, digest
    assert subjects[1] == "memory: ingest: 2 operations" and subjects[0].startswith("memory: compact: ")
    body = git(root, "log", "-1", "--format=%b").stdout
    assert "- seal " in body and "- digest " in body
    assert git(root, "status", "--porcelain").stdout == ""


def test_a_commit_put_off_by_a_git_operation_is_made_after_it(tmp_path: Path) -> None:
    vault = make_git_vault(tmp_path)
    root = vault.layout.root
    vault.ingest_messages(chat(3))
    before = head(root)
    with vault.commit_batch():
        vault.ingest_messages(chat(3, session="s2", prefix="Later"))
        git(root, "checkout", "-q", "--detach")  # the person looks at an old state meanwhile
    assert head(root) == before and any("not committed yet" in w for w in vault.warnings)
    with pytest.raises(GitBusy, match="detached HEAD"):
        vault.ingest_messages(chat(2, session="s3", prefix="Refused"))
    git(root, "checkout", "-q", "main")
    vault.commit_pending()
    assert git(root, "log", "-1", "--format=%s").stdout.strip() == "memory: add 3 leaves from chat"
    assert git(root, "status", "--porcelain").stdout == ""
    vault.close()


def test_jobs_wait_for_a_git_operation_without_failing(tmp_path: Path) -> None:
    vault = make_git_vault(tmp_path)
    root = vault.layout.root
    vault.ingest_messages(chat(4))
    git(root, "checkout", "-q", "--detach")
    with pytest.raises(GitBusy):
        vault.work()
    jobs = vault.jobs.list()
    assert jobs and all(j.state == "queued" and j.attempts == 0 for j in jobs)
    git(root, "checkout", "-q", "main")
    assert vault.work().jobs_failed == 0 and vault.jobs.pending() == 0
    vault.close()


# -- duplicate ids ----------------------------------------------------------------------------------------
def test_check_fix_settles_duplicate_ids_without_deleting_a_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with Vault.init(tmp_path / "v", CONFIG.format(fanout=50, workers=2), embedder=FakeEmbedder()) as vault:
        vault.ingest_messages(topic_records(20))
        vault.flush()
        vault.compact()
        root = vault.layout.root
        sealed = [x for x in vault.ls(status="sealed")]
        level = (root / sealed[0].path).parent
        fresh = root / "sources" / "chat" / "_fresh"
        # What a conflicted revert leaves: a whole level in two places, and one leaf in _fresh as well.
        shutil.copytree(level, level.with_name(level.name + "-copy"))
        shutil.copy2(root / sealed[-1].path, fresh / Path(sealed[-1].path).name)
        # A person copied a leaf to write a variant of it.
        variant = fresh / ("x" + Path(sealed[1].path).name)
        variant.write_text(
            (root / sealed[1].path).read_text().replace(sealed[1].text, "Tulips go in by October.")
        )
        leaves_before = len(vault.ls())
    v = ["--vault", str(root)]
    code, out, _ = run(["check", *v], capsys)
    assert code == 1 and "duplicate_id" in out and "(--fix repairs it)" in out
    code, out, err = run(["check", "--fix", *v], capsys)
    assert code == 0, out + err
    assert "moved to .vaultmem/duplicates/" in out and "now a node of its own" in out
    assert run(["check", *v], capsys)[0] == 0
    aside = list((root / ".vaultmem" / "duplicates").rglob("*.md"))
    assert len(aside) == len(list(level.glob("*.md"))) + 1  # nothing deleted: the copies are kept aside
    with Vault.open(root, embedder=FakeEmbedder()) as vault:
        texts = [x.text for x in vault.ls()]
        assert len(texts) == leaves_before + 1 and "Tulips go in by October." in texts
        assert vault.get(sealed[1].id).path == sealed[1].path  # the node stays where it was indexed
        assert not variant.exists()  # renamed to carry its own id
        assert vault.check().ok
