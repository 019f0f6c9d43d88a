"""``forking.Ahead``: work done by a forked child while this process goes on, its result taken later."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from vaultmem import forking


def _pids_of_children() -> set[int]:
    me = os.getpid()
    out = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == me:
                out.add(int(entry.name))
    return out


needs_fork = pytest.mark.skipif(not forking.can_fork(), reason="this process may not fork (threads)")


@needs_fork
def test_the_childs_result_comes_back_and_the_child_is_gone() -> None:
    before = _pids_of_children()
    with forking.Ahead(lambda: {"pid": os.getpid(), "big": "x" * 1_000_000}) as ahead:
        assert ahead.forked
        got = ahead.result()
    assert got["pid"] != os.getpid() and len(got["big"]) == 1_000_000
    assert _pids_of_children() == before


@needs_fork
def test_the_childs_exception_is_raised_here() -> None:
    def fails() -> None:
        raise FileNotFoundError("no such sidecar")

    with forking.Ahead(fails) as ahead, pytest.raises(FileNotFoundError, match="no such sidecar"):
        ahead.result()


@needs_fork
def test_a_child_that_dies_without_a_result_is_named_in_the_error() -> None:
    # A child killed midway (here it leaves at once) sends nothing back: the error says which child.
    def dies() -> None:
        os._exit(3)

    before = _pids_of_children()
    with (
        forking.Ahead(dies, "the process writing a batch of 2 leaf files") as ahead,
        pytest.raises(OSError, match="the process writing a batch of 2 leaf files ended without a result"),
    ):
        ahead.result()
    assert _pids_of_children() == before


@needs_fork
def test_a_result_never_taken_ends_the_child() -> None:
    # The child blocks writing a result larger than the pipe holds; leaving the block closes the pipe,
    # the child's write fails and it ends: nothing is left running.
    before = _pids_of_children()
    with forking.Ahead(lambda: "y" * 10_000_000) as ahead:
        assert ahead.forked
    assert _pids_of_children() == before
    with pytest.raises(RuntimeError), forking.Ahead(lambda: "z" * 10_000_000):
        raise RuntimeError("the caller failed meanwhile")
    assert _pids_of_children() == before


def test_without_fork_the_work_runs_here_when_its_result_is_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(forking, "can_fork", lambda: False)
    ran: list[int] = []
    with forking.Ahead(lambda: ran.append(os.getpid()) or 7) as ahead:
        assert not ahead.forked and ran == []
        assert ahead.result() == 7
    assert ran == [os.getpid()]
