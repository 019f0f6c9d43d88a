"""Ctrl-C held back while native code runs on the main thread.

Python runs a signal's handler on the main thread between two bytecodes, wherever they are: inside a
native library's import too. Some libraries evaluate Python while they initialise and catch what it
raises (ONNX Runtime's module does: a KeyboardInterrupt raised there was seen to vanish, the interrupted
command running on to the end), or evaluate it through ``PyRun_*``, which marks the interrupt as
unhandled process-wide even when the caller catches it (the process then exits *by* SIGINT, whatever
status it chose). ``interrupts_held`` records a SIGINT that arrives in its block and delivers it to the
handler that was there as soon as the block ends, so the interrupt is raised in this package's code,
once, where ``except KeyboardInterrupt`` handlers expect it.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType


@contextmanager
def interrupts_held() -> Iterator[None]:
    """Hold SIGINT while the block runs; deliver it to the previous handler after. A no-op off the main
    thread (a handler never runs there) and when SIGINT has no Python handler (ignored, or default)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.getsignal(signal.SIGINT)
    if not callable(previous):
        yield
        return
    arrived: list[tuple[int, FrameType | None]] = []

    def hold(signum: int, frame: FrameType | None) -> None:
        arrived.append((signum, frame))

    signal.signal(signal.SIGINT, hold)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        if arrived:
            previous(*arrived[0])
