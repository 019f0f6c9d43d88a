"""The CLI: every command, --json output, vault discovery, and one clear error line with exit 1."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import CONFIG, INBOX_CHAT, run, topic_records
from vaultmem.cli import app

# Two turns of a household chat, as a chat app exports them.


@pytest.fixture
def inbox(tmp_path: Path) -> Path:
    d = tmp_path / "inbox"
    d.mkdir()
    (d / "chat.json").write_text(json.dumps(INBOX_CHAT))
    return d


def test_full_flow(tmp_path: Path, inbox: Path, capsys: pytest.CaptureFixture[str]) -> None:
    v = str(tmp_path / "v")
    assert run(["init", v], capsys)[0] == 0
    code, out, _ = run(
        ["ingest", str(inbox / "chat.json"), "--vault", v, "--source", "home", "--json"], capsys
    )
    assert code == 0
    report = json.loads(out)
    assert report["added"] == 2 and report["sources"] == ["home"]
    code, out, err = run(["ls", "--vault", v, "--json"], capsys)
    assert code == 0, err
    leaves = json.loads(out)
    assert [leaf["speaker"] for leaf in leaves] == ["Mia", "Tom"]
    code, out, _ = run(["show", leaves[0]["id"], "--vault", v], capsys)
    assert "boiler service" in out and "speaker: Mia" in out
    code, out, _ = run(["show", leaves[0]["id"], "--vault", v, "--json"], capsys)
    assert json.loads(out)["provenance"]["message_ids"] == ["1"]
    code, out, _ = run(["show", "--vault", v], capsys)
    assert "sources/home/" in out and "_fresh/" in out
    code, out, err = run(["stats", "--vault", v, "--json"], capsys)
    assert code == 0, err
    stats = json.loads(out)
    assert stats["chunks"] == 2 and stats["sources"] == ["home"]
    assert stats["first_memory"] == "2024-05-01T09:00:00Z"
    code, out, _ = run(["stats", "--vault", v], capsys)
    assert "latest memory:  2024-05-01T09:01:00Z" in out
    code, out, err = run(["reindex", "--vault", v, "--json"], capsys)
    assert code == 0, err  # an error is one line on stderr and nothing on stdout: show it
    assert json.loads(out)["leaves"] == 2
    code, out, _ = run(["check", "--vault", v], capsys)
    assert code == 0 and out.startswith("ok")


def test_check_exit_status(tmp_path: Path, inbox: Path, capsys: pytest.CaptureFixture[str]) -> None:
    v = tmp_path / "v"
    run(["init", str(v)], capsys)
    run(["ingest", str(inbox), "--vault", str(v)], capsys)
    next((v / "sources").rglob("*.md")).unlink()
    code, out, _ = run(["check", "--vault", str(v), "--json"], capsys)
    assert code == 1
    assert json.loads(out)["problems"][0]["code"] == "orphan_row"
    code, out, _ = run(["check", "--fix", "--vault", str(v)], capsys)
    assert code == 0 and "fixed   orphan_row" in out


def test_vault_found_from_env_then_cwd(
    tmp_path: Path, inbox: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    v = tmp_path / "v"
    run(["init", str(v)], capsys)
    monkeypatch.setenv("VAULTMEM_VAULT", str(v))
    assert run(["ingest", str(inbox)], capsys)[0] == 0
    monkeypatch.delenv("VAULTMEM_VAULT")
    (v / "sources" / "deep").mkdir(parents=True, exist_ok=True)
    monkeypatch.chdir(v / "sources" / "deep")
    code, out, _ = run(["stats", "--json"], capsys)
    assert code == 0 and json.loads(out)["chunks"] == 2


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["stats", "--vault", "/nonexistent/v"], "no vault at"),
        (["show", "../../etc/passwd", "--vault", "{v}"], "invalid node id"),
        (["show", "0123456789abcdef", "--vault", "{v}"], "no leaf with id"),
        (["ingest", "{bad}", "--vault", "{v}"], "not valid UTF-8"),
        (["ingest", "{inbox}", "--source", "../x", "--vault", "{v}"], "invalid source name"),
        (["init", "{v}"], "already a vault"),
        (["ls", "--status", "bogus", "--vault", "{v}"], "status"),
    ],
)
def test_errors_are_one_line_and_exit_1(
    tmp_path: Path, inbox: Path, capsys: pytest.CaptureFixture[str], argv: list[str], needle: str
) -> None:
    v = tmp_path / "v"
    run(["init", str(v)], capsys)
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"caf\xe9")
    argv = [a.format(v=v, bad=bad, inbox=inbox) for a in argv]
    code, _out, err = run(argv, capsys)
    assert code == 1
    assert needle in err
    assert len(err.strip().splitlines()) == 1
    assert "Traceback" not in err


def test_console_script_runs_in_a_subprocess(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "vaultmem.cli", "stats", "--vault", str(tmp_path / "none")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 1
    assert proc.stderr.startswith("vaultmem: error: no vault at")


def test_every_command_is_documented() -> None:
    doc = (Path(__file__).parent.parent / "docs" / "cli.md").read_text()
    names = [c.name or (c.callback.__name__ if c.callback else "") for c in app.registered_commands]
    missing = [n for n in names if f"`vaultmem {n}" not in doc]
    assert not missing, f"undocumented commands: {missing}"


@pytest.fixture
def fake_vault(tmp_path: Path, inbox: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    """A vault configured with the deterministic fake embedder, filled and embedded through the CLI."""
    v = tmp_path / "fv"
    run(["init", str(v)], capsys)
    config = v / ".vaultmem" / "config.toml"
    config.write_text(config.read_text().replace('model = "default"', 'model = "fake"'))
    code, out, _ = run(["ingest", str(inbox), "--wait", "--vault", str(v), "--json"], capsys)
    assert code == 0 and json.loads(out)["embedded"] == 2
    return v


def test_search_and_context_commands(fake_vault: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["search", "boiler service", "--vault", str(fake_vault), "--json"], capsys)
    hits = json.loads(out)
    assert code == 0 and hits[0]["provenance"]["speaker"] == "Mia"
    assert hits[0]["provenance"]["message_ids"] == ["1"]
    code, out, _ = run(["search", "boiler", "--since", "2024-06-01", "--vault", str(fake_vault)], capsys)
    assert out.strip() == "no results"
    code, out, _ = run(
        ["search", "boiler", "--source", "inbox", "--k", "1", "--vault", str(fake_vault)], capsys
    )
    assert out.startswith(" 1. ") and "boiler service" in out
    code, out, _ = run(
        ["context", "when is the boiler service", "--budget", "60", "--vault", str(fake_vault)], capsys
    )
    assert out.startswith("<memory") and "Mia: Remember: the boiler service" in out
    code, out, _ = run(["context", "boiler", "--json", "--budget", "60", "--vault", str(fake_vault)], capsys)
    data = json.loads(out)
    assert data["tokens"] <= 60 and data["items"][0]["provenance"]["path"].startswith("sources/inbox/_fresh/")


def test_search_bad_input_is_one_clear_line(fake_vault: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for argv, needle in (
        (["search", "  "], "query is empty"),
        (["search", "x", "--since", "someday"], "not a date"),
    ):
        code, _, err = run([*argv, "--vault", str(fake_vault)], capsys)
        assert code == 1 and needle in err and len(err.strip().splitlines()) == 1


def test_jobs_command_lists_retries_and_runs(fake_vault: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from vaultmem import Vault

    with Vault.open(fake_vault) as vault:
        vault.jobs.enqueue("extract", {"id": "0123456789abcdef"}, dedupe_key="x", max_attempts=1)
        (job,) = vault.jobs.claim("test", kinds=["extract"])
        vault.jobs.fail(job, "simulated failure")
        waiting = vault.jobs.pending()  # work queued by the ingest (the day's digest)
    code, out, _ = run(["jobs", "--vault", str(fake_vault)], capsys)
    assert code == 0 and "parked 1" in out and "simulated failure" in out
    code, out, _ = run(["jobs", "--retry", "--run", "--json", "--vault", str(fake_vault)], capsys)
    assert code == 0
    data = json.loads(out)
    assert data["retried"] == 1 and data["ran"] == 1 + waiting and data["counts"]["parked"] == 0


def test_compact_tree_read_and_context_modes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:

    from vaultmem.vault import Vault

    v = tmp_path / "v"
    config = CONFIG.format(fanout=50, workers=2) + '\n[embed]\nmodel = "fake"\n'
    with Vault.init(v, config) as vault:
        vault.ingest_messages(topic_records(20))
        vault.flush()
    code, out, _ = run(["compact", "--dry-run", "--vault", str(v)], capsys)
    assert code == 0 and out.startswith("would seal ")
    code, out, _ = run(["compact", "--vault", str(v), "--json"], capsys)
    report = json.loads(out)
    assert code == 0 and report["sealed"] == 72 and report["jobs_failed"] == 0
    code, out, _ = run(["tree", "--vault", str(v), "--json"], capsys)
    tops = json.loads(out)
    level = next(n for n in tops if n["kind"] == "summary")
    code, out, _ = run(["tree", level["id"], "--query", "kyoto ryokan", "--vault", str(v)], capsys)
    assert code == 0 and len(out.splitlines()) == level["children"]
    code, out, _ = run(["read", level["id"], "--vault", str(v)], capsys)
    assert code == 0 and out.startswith(f"# {level['title']}")
    code, out, _ = run(["read", level["id"], "--budget", "40", "--vault", str(v), "--json"], capsys)
    assert code == 0 and json.loads(out)["tokens"] <= 40
    code, out, _ = run(["show", level["id"], "--vault", str(v)], capsys)
    assert code == 0 and level["title"] in out
    for mode in ("flat", "collapsed", "walk"):
        code, out, _ = run(
            ["context", "kyoto ryokan", "--budget", "200", "--mode", mode, "--vault", str(v), "--json"],
            capsys,
        )
        data = json.loads(out)
        assert code == 0 and 0 < data["tokens"] <= 200
        assert all(item["link"].startswith("file://") for item in data["items"])
    code, _, err = run(["context", "x", "--mode", "sideways", "--vault", str(v)], capsys)
    assert code == 1 and "unknown context mode" in err


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["foo"], "No such command 'foo'"),
        (["serch", "x"], "Did you mean 'search'?"),
        (["search"], "Missing argument 'QUERY'"),
        (["context", "x", "--budget", "abc"], "Invalid value for '--budget'"),
        (["search", "x", "--jsn"], "Possible options: --json"),
        (["ls", "--limit", "0"], "--limit"),
        (["topics", "--n"], "--n"),
    ],
)
def test_usage_errors_are_one_line_and_exit_2(
    capsys: pytest.CaptureFixture[str], argv: list[str], needle: str
) -> None:
    code, out, err = run(argv, capsys)
    assert code == 2
    assert needle in err
    assert len(err.strip().splitlines()) == 1, err
    assert "Traceback" not in err and out == ""


def test_usage_errors_through_the_console_script() -> None:
    """What a person meets in a shell: no traceback, one line, status 2; a bare `vaultmem` prints help."""
    for argv, first in ((["bogus"], "vaultmem: error: No such command"), ([], "Usage: vaultmem")):
        proc = subprocess.run(
            [sys.executable, "-m", "vaultmem.cli", *argv], capture_output=True, text=True, check=False
        )
        assert proc.returncode == 2, proc.stderr
        assert proc.stderr.startswith(first) and "Traceback" not in proc.stderr
    proc = subprocess.run(
        [sys.executable, "-m", "vaultmem.cli", "--version"], capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0 and proc.stdout.startswith("vaultmem 0.")


def test_one_name_for_how_many_and_old_spellings_still_work(
    fake_vault: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    v = ["--vault", str(fake_vault), "--json"]
    for argv in (
        ["search", "boiler", "-n", "1"],
        ["search", "boiler", "--limit", "1"],
        ["search", "boiler", "--k", "1"],
    ):
        code, out, _ = run([*argv, *v], capsys)
        assert code == 0 and len(json.loads(out)) == 1, argv
    code, out, _ = run(["ls", "-n", "1", *v], capsys)
    assert code == 0 and len(json.loads(out)) == 1
    for argv in (["topics", "--limit", "1"], ["topics", "--n", "1"], ["graph", "-n", "1"]):
        assert run([*argv, *v], capsys)[0] == 0, argv
    code, out, _ = run(["search", "--help"], capsys)
    assert "--limit" in out and "--k " not in out and "-k," not in out


def test_context_takes_the_filters_search_has(fake_vault: Path, capsys: pytest.CaptureFixture[str]) -> None:
    v = ["--vault", str(fake_vault), "--json", "--budget", "200"]
    code, out, _ = run(["context", "boiler service", *v], capsys)
    assert code == 0 and json.loads(out)["items"]
    for extra in (["--since", "2024-06-01"], ["--until", "2024-04-30"], ["--session", "nope"]):
        code, out, _ = run(["context", "boiler service", *v, *extra], capsys)
        assert code == 0 and json.loads(out)["items"] == [], extra
    code, out, _ = run(
        ["context", "boiler service", *v, "--since", "2024-05-01", "--until", "2024-05-02"], capsys
    )
    assert [i["provenance"]["speaker"] for i in json.loads(out)["items"]][:1] == ["Mia"]


def test_weak_matches_are_flagged_in_search_and_context(
    fake_vault: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    v = ["--vault", str(fake_vault)]
    code, out, _ = run(["search", "boiler service", "--json", *v], capsys)
    hits = json.loads(out)
    assert hits[0]["weak"] is False and hits[0]["evidence"]["words"] is True
    code, out, _ = run(["search", "lattice chromodynamics", "--json", *v], capsys)
    hits = json.loads(out)
    assert code == 0 and hits and all(h["weak"] for h in hits)
    assert all(h["evidence"]["words"] is False for h in hits)
    code, out, _ = run(["search", "lattice chromodynamics", *v], capsys)
    assert out.startswith("no good match: every hit is weak") and "(weak)" in out
    code, out, err = run(["context", "lattice chromodynamics", *v], capsys)
    assert code == 0 and "weak matches only" in err
    code, out, _ = run(["context", "lattice chromodynamics", "--json", *v], capsys)
    assert json.loads(out)["weak"] is True
    code, out, err = run(["context", "boiler service", "--json", *v], capsys)
    assert json.loads(out)["weak"] is False and err == ""


def test_search_imports_only_what_it_needs(tmp_path: Path) -> None:
    """Opening a vault and searching it, as `vaultmem search` does from a cold shell, must not pay for
    ingest, compaction, topics, git or torch, nor for what only writing or reading files needs: PyYAML,
    the update detector, the secret rules (and their Aho-Corasick automaton), the Chinese word lists and
    time rules."""
    import subprocess
    import sys

    from tests.helpers import chat
    from vaultmem.embed import FakeEmbedder
    from vaultmem.vault import Vault

    with Vault.init(tmp_path / "v", embedder=FakeEmbedder()) as v:
        v.ingest_messages(chat(5), source="chat")
        v.flush()
    code = (
        "import sys, vaultmem.cli; from vaultmem import Vault; from vaultmem.embed import FakeEmbedder;"
        f"v = Vault.open({str(tmp_path / 'v')!r}, embedder=FakeEmbedder());"
        "assert v.search('roses near the Fence', k=3);"
        "from vaultmem import entities_names, redact, timeparse;"
        "print(entities_names._ENGLISH, entities_names._CHINESE, redact._rules.cache_info().currsize,"
        " timeparse._cn_compiled.cache_info().currsize);"
        "print(' '.join(sorted(m for m in sys.modules if m.startswith(('vaultmem.', 'torch', 'email', 'git',"
        " 'yaml', 'ahocorasick')))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    flags, modules = out.splitlines()
    assert flags == "True False 0 0"  # "Fence" was looked up among English names (the query's topic heat)
    loaded = set(modules.split())
    for module in (
        "vaultmem.ingest",
        "vaultmem.compact",
        "vaultmem.steps",
        "vaultmem.topics.plan",
        "vaultmem.topics.route",
        "vaultmem.topics.query",
        "vaultmem.docmem",
        "vaultmem.sessions",
        "vaultmem.summarise",
        "vaultmem.pool",
        "vaultmem.gitsync",
        "vaultmem.inputs.email",
        "vaultmem.inputs.chat",
        "vaultmem.check",
        "vaultmem.scoring",
        "vaultmem.admit",
        "vaultmem.autocommit",
        "vaultmem.stats",
        "vaultmem.llm",
        "torch",
        "email",
        "yaml",
        "vaultmem.detect",
        "ahocorasick",
    ):
        assert module not in loaded, f"{module} is imported to open and search a vault"
    assert "vaultmem.search" in loaded and "vaultmem.vault" in loaded


def test_lazy_public_names() -> None:
    import vaultmem
    from vaultmem.sessions import SessionTree
    from vaultmem.summaryfile import SummaryNode
    from vaultmem.vault import Vault as VaultClass

    assert (vaultmem.Vault, vaultmem.SessionTree, vaultmem.SummaryNode) == (
        VaultClass,
        SessionTree,
        SummaryNode,
    )
    assert set(vaultmem.__all__) <= set(dir(vaultmem))
    with pytest.raises(AttributeError):
        _ = vaultmem.NoSuchThing  # type: ignore[attr-defined]


def test_cli_format_names_are_the_sniffers() -> None:
    from vaultmem import cli
    from vaultmem.inputs.sniff import FORMAT_NAMES

    assert cli.FORMAT_NAMES == FORMAT_NAMES


@pytest.mark.parametrize(("preset", "threads"), [(None, 1), ("2", 2)])
def test_a_command_runs_openblas_on_one_thread_unless_the_user_says_otherwise(
    preset: str | None, threads: int
) -> None:
    """The console script sets OpenBLAS to one thread before NumPy is loaded
    (``cli.one_blas_thread_for_the_process``): a limit set per call on a worker thread did not hold.
    A count the user set in the environment is theirs."""
    code = (
        "from vaultmem import cli\n"
        "try:\n"
        "    cli.main(['--version'])\n"
        "except SystemExit:\n"
        "    pass\n"
        "import numpy\n"
        "from threadpoolctl import threadpool_info\n"
        "print([p['num_threads'] for p in threadpool_info() if p['user_api'] == 'blas'])\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    if preset is not None:
        env["OPENBLAS_NUM_THREADS"] = preset
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert out.stdout.strip().splitlines()[-1] == str([threads])
