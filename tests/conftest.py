"""Shared fixtures: every test gets its own vault in tmp_path and a clean environment."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.test_summarise import server as llm_server  # noqa: F401  (a loopback chat-completions server)
from vaultmem.embed import FakeEmbedder
from vaultmem.vault import Vault

REPO = Path(__file__).parent.parent


def run_cli(*args: str, stdin: str | None = None, timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
    """``python -m vaultmem.cli`` in a subprocess (this checkout's code), output captured as text."""
    return subprocess.run(
        [sys.executable, "-m", "vaultmem.cli", *args],
        input=stdin,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


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


@pytest.fixture
def vault(tmp_path: Path) -> Iterator[Vault]:
    v = Vault.init(tmp_path / "vault", embedder=FakeEmbedder())
    yield v
    v.close()


def chat(
    n: int, *, source: str = "chat", session: str = "s1", prefix: str = "Message"
) -> list[dict[str, object]]:
    """n substantive chat records with ids and timestamps."""
    return [
        {
            "id": f"{session}-m{i}",
            "role": "user" if i % 2 == 0 else "assistant",
            "content": f"{prefix} {i}: we talked about the garden project and the roses planted near the fence.",
            "ts": f"2024-03-{1 + i % 28:02d}T10:{i % 60:02d}:00Z",
            "session": session,
            "source": source,
        }
        for i in range(n)
    ]


@contextmanager
def read_only(*paths: Path) -> Iterator[None]:
    """Make directories unwritable, even for root (which ignores permission bits): chattr +i there."""
    as_root = os.geteuid() == 0
    done: list[Path] = []
    try:
        for path in paths:
            if as_root:
                if subprocess.run(["chattr", "+i", str(path)], capture_output=True).returncode != 0:
                    pytest.skip("chattr +i is not supported on this filesystem")
            else:
                path.chmod(0o555)
            done.append(path)
        yield
    finally:
        for path in done:
            if as_root:
                subprocess.run(["chattr", "-i", str(path)], check=True)
            else:
                path.chmod(0o755)


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
