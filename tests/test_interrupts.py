"""Ctrl-C held while native code loads on the main thread (``interrupts.interrupts_held``): raised once,
after the block, never inside it where a library could catch it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from vaultmem.interrupts import interrupts_held

ROOT = Path(__file__).resolve().parent.parent


def _swallowing_work() -> bool:
    """Python that catches everything, as a library's initialisation may: True if it caught an
    interrupt."""
    try:
        total = 0
        for i in range(100_000):
            total += i
    except BaseException:
        return True
    return False


def test_an_interrupt_in_the_block_is_raised_once_after_it_and_never_inside() -> None:
    swallowed = None
    with pytest.raises(KeyboardInterrupt), interrupts_held():
        os.kill(os.getpid(), signal.SIGINT)
        os.kill(os.getpid(), signal.SIGINT)
        swallowed = _swallowing_work()
    assert swallowed is False
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # the handler is back
    assert _swallowing_work() is False  # nothing left pending: the second signal was the same Ctrl-C


def test_without_an_interrupt_the_block_runs_and_the_handler_is_restored() -> None:
    seen: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: seen.append(signum))
    try:
        with interrupts_held():
            assert _swallowing_work() is False
        assert seen == []
        with interrupts_held():
            os.kill(os.getpid(), signal.SIGINT)
            _swallowing_work()
            assert seen == []  # held
        assert seen == [signal.SIGINT]  # delivered to the handler that was there
    finally:
        signal.signal(signal.SIGINT, previous)


def test_off_the_main_thread_and_with_ctrl_c_ignored_it_changes_nothing() -> None:
    errors: list[BaseException] = []

    def run() -> None:
        try:
            with interrupts_held():  # signal.signal would raise ValueError off the main thread
                pass
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    assert errors == []
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with interrupts_held():
            assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, previous)


def _assert_interrupted_after_the_import(script: str) -> None:
    """Run ``script`` in a new Python: it prints whether the library was imported whole when the held
    Ctrl-C came, and exits 130."""
    proc = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"},
        timeout=240,
    )
    assert proc.stdout.strip() == "interrupted after True", proc.stderr
    assert proc.returncode == 130, proc.stderr


def test_ctrl_c_while_onnx_runtime_loads_comes_after_the_import_whole() -> None:
    """The real library: a SIGINT pending when ``import onnxruntime`` starts would be raised inside
    the import (the module left half-initialised, or the interrupt caught by its initialisation);
    held, the import completes and the interrupt follows it."""
    pytest.importorskip("onnxruntime")
    script = (
        "import os, signal, sys\n"
        "from vaultmem.interrupts import interrupts_held\n"
        "try:\n"
        "    with interrupts_held():\n"
        "        os.kill(os.getpid(), signal.SIGINT)\n"
        "        import onnxruntime\n"
        "except KeyboardInterrupt:\n"
        "    ort = sys.modules.get('onnxruntime')\n"
        "    print('interrupted after', hasattr(ort, 'InferenceSession'))\n"
        "    sys.exit(130)\n"
        "print('not interrupted')\n"
    )
    _assert_interrupted_after_the_import(script)


@pytest.mark.slow
def test_ctrl_c_while_the_bf16_runtime_imports_torch_comes_after_the_import_whole() -> None:
    """The "bf16" runtime imports torch on first use, on the main thread, for seconds. A Ctrl-C that
    lands while the import starts (sent by an import hook, so it is pending there every time) is raised
    after torch is imported whole, in vaultmem's code, not inside the import."""
    pytest.importorskip("torch")
    script = (
        "import os, signal, sys\n"
        "class Trip:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'torch':\n"
        "            sys.meta_path.remove(self)\n"
        "            os.kill(os.getpid(), signal.SIGINT)\n"
        "        return None\n"
        "from vaultmem.embed import NumpyBertEmbedder, default_model_path\n"
        "embedder = NumpyBertEmbedder(default_model_path(), runtime='bf16', workers=1)\n"
        "embedder._load()\n"
        "assert 'torch' not in sys.modules\n"
        "sys.meta_path.insert(0, Trip())\n"
        "try:\n"
        "    embedder._session()\n"
        "except KeyboardInterrupt:\n"
        "    torch = sys.modules.get('torch')\n"
        "    print('interrupted after', hasattr(torch, 'bfloat16'))\n"
        "    sys.exit(130)\n"
        "print('not interrupted')\n"
    )
    _assert_interrupted_after_the_import(script)
