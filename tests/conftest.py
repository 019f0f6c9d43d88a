"""Shared fixtures: every test gets its own vault in tmp_path and a clean environment.

Helpers shared by several test modules (input builders, ``make_vault``, the CLI runner ``run``,
``wait_for``/``watching``, the loopback ``ChatServer``) live in ``tests/helpers.py``; no test module
imports another. Where the tests of a module are (module → test file):

    errors, model, tokens             test_vault.py (errors through the API), test_tokens.py
    redact                            test_redact.py (+ secret_shapes.py), test_secrets_cli.py
    frame                             test_frame.py
    yamlsubset, frontmatter           test_yamlsubset.py, test_frontmatter.py
    layout, fsio                      test_fsio.py, test_confined.py, test_names.py
    leaffile, summaryfile, cluster    test_cluster_summaryfile.py, test_vault.py
    summarise, llm                    test_summarise.py
    entities_names, entities, entities_llm   test_entities.py
    timeparse                         test_timeparse.py
    chunker, scoring                  test_chunker.py, test_scoring.py
    inputs (read_path), inputs.*      test_inputs.py, test_inputs_chat.py, test_inputs_docs.py, test_inputs_email.py
    inputs.* exports, sniff, archive  test_imports.py, test_import_ingest.py
    agentllm, corefile, corepolicy    test_core.py
    episodes, recipes, sessionnote    test_recipes.py, test_sessionnote.py, test_core.py
    config                            test_cli.py, test_vault.py
    db, index, opening                test_damaged_index.py, test_read_only.py, test_reindex_check.py
    jobs, pool                        test_jobs.py, test_liveness.py, test_interrupt.py
    vectors, sidecar, embed           test_vectors.py, test_sidecar.py, test_embed.py
    scan, reindex, check              test_reindex_check.py
    gitsync, autocommit               test_gitsync.py, test_git_aware.py
    lock                              test_vault.py (fair turns), test_faults.py
    ingest, status, admit             test_vault.py, test_sidecar.py
    steps, stale, compact, order      test_compact.py, test_compact_crash.py, test_docmem.py
    topics.*                          test_topics.py
    digest                            test_digest.py
    reconcile, watch, daemon, daemonstate   test_watch.py, test_git_aware.py
    docmem, sessions, navigate        test_docmem.py
    docsync, wikilinks                test_docsync.py (+ docs_vault.py: the documentation vault it and bench/docs.py use)
    search, context                   test_search.py, test_context.py
    stats                             test_vault.py, test_cli.py, test_read_only.py
    memindex, coremem, memtiers       test_core.py, test_recipes.py, test_sessionnote.py, test_memory_cli.py
    vault                             test_vault.py, test_integration.py, test_sample_vault.py
    cli                               test_cli.py, test_cli_docs.py (docs/cli.md from --help)
    agentio                           test_agentio.py
    agenttools, mcpserver, memtool    test_mcpserver.py, test_memtool.py
    hooks, exportmd                   test_hooks.py
    dashboard.*                       test_dashboard.py (browser tests in Debian chromium: slow)
    every module                      test_architecture.py (import order, docs table, ``__all__``), test_faults.py (kill -9)
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import settings

from tests.helpers import ChatServer, _Handler, _HTTPServer
from vaultmem import embed
from vaultmem.embed import FakeEmbedder
from vaultmem.vault import Vault

# Hypothesis's default 200 ms deadline per example is a speed guess: on a loaded machine it fails tests
# that are correct (speed is measured in bench/, never in unit tests).
settings.register_profile("vaultmem", deadline=None)
settings.load_profile("vaultmem")

# A test run started in the background by a non-interactive shell (`cmd &`, as CI and scripts may) gets
# Ctrl-C ignored, and an ignored signal stays ignored across exec: every child a test stops with SIGINT
# (the dashboard, `watch`, an interrupted `ingest --wait`) would then run on until killed. A handled
# signal is reset to its default in a child, so handling it here gives each child Python's own.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(autouse=True)
def _isolated_env(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    monkeypatch.delenv("VAULTMEM_VAULT", raising=False)
    # One model cache for the session: the real model's prepared weights are written once, not per test.
    monkeypatch.setenv("VAULTMEM_CACHE", str(tmp_path_factory.getbasetemp() / "model-cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    # "auto" picks the bfloat16 runtime on a CPU with bfloat16 instructions: the suite runs the float32
    # runtimes on every CPU (tests of the choice and of bf16 set it themselves).
    monkeypatch.setattr(embed, "CPUINFO", tmp_path / "no-cpuinfo")


@pytest.fixture
def vault(tmp_path: Path) -> Iterator[Vault]:
    v = Vault.init(tmp_path / "vault", embedder=FakeEmbedder())
    yield v
    v.close()


@pytest.fixture
def server() -> Iterator[ChatServer]:
    before = set(threading.enumerate())
    state = ChatServer()
    httpd = _HTTPServer(("127.0.0.1", 0), _Handler)
    httpd.state = state
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    state.url = f"http://127.0.0.1:{httpd.server_port}/v1/"
    try:
        yield state
    finally:
        state.stop.set()
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=5)
    assert set(threading.enumerate()) <= before


llm_server = server  # the same loopback server under the name the other test modules ask for


@pytest.fixture
def git_vault(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Vault]:
    """A vault with git auto-commit on (the fake embedder named in its config), the machine's git
    config and identity kept out."""
    config = tmp_path / "gitconfig"
    config.write_text("")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(config))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    v = Vault.init(
        tmp_path / "gv", '[embed]\nmodel = "fake"\n\n[git]\nauto_commit = true\n', embedder=FakeEmbedder()
    )
    yield v
    v.close()
