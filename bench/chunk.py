"""Chunking throughput (MB/s) on long and unbroken text, the inputs that made chunking quadratic.

Each input is one message (one chat turn or document section) chunked at the default bound of 256
tokens; the figures are the input's UTF-8 size over the wall time and over the CPU time of this process
that `chunker.chunk_message` takes (on a loaded machine the CPU figure is the steadier one). Every run
also checks the chunk invariants (bounded, lossless), so a fast but wrong chunker cannot pass.

    python bench/chunk.py [--mb 10] [--zh-mb 1] [--only base64,prose] [--chunker OLD.py]

``--chunker`` times another version of ``vaultmem/chunker.py`` on the same inputs, for a before/after
table in one run: ``git show <commit>:vaultmem/chunker.py > /tmp/old_chunker.py``.
"""

from __future__ import annotations

import argparse
import base64
import importlib.util
import random
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from _common import table

from vaultmem.chunker import DEFAULT_MAX_TOKENS, chunk_message
from vaultmem.model import Message
from vaultmem.tokens import count_tokens

SENTENCE = (
    "the migration of the billing database finished late on Thursday because the replica lagged "
    "behind and Priya had to rebuild it from a fresh snapshot before anyone could run the smoke tests"
)
WORDS = SENTENCE.split(" ")
HANZI = "我们明天下午三点在杭州开会讨论数据库迁移计划请大家提前准备好材料并确认时间是否合适谢谢"


def _sized(make: Callable[[random.Random, int], str], nbytes: int) -> str:
    rng = random.Random(7)
    text = make(rng, nbytes)
    while len(text.encode("utf-8")) > nbytes:  # the makers overshoot by less than one piece
        text = text[: len(text) - 1]
    return text


def _one_line(rng: random.Random, nbytes: int) -> str:
    """Prose with spaces and full stops but not a single line break (a pasted log line, a minified doc)."""
    out: list[str] = []
    size = 0
    while size < nbytes:
        sentence = " ".join(rng.choice(WORDS) for _ in range(rng.randint(6, 20))).capitalize() + ". "
        out.append(sentence)
        size += len(sentence)
    return "".join(out)


def _base64(rng: random.Random, nbytes: int) -> str:
    """One unbroken base64 token (an inlined image or attachment pasted into a message)."""
    return base64.b64encode(rng.randbytes(nbytes * 3 // 4 + 3)).decode("ascii")


def _prose(rng: random.Random, nbytes: int) -> str:
    """Ordinary paragraphs of a few sentences each."""
    out: list[str] = []
    size = 0
    while size < nbytes:
        para = _one_line(rng, rng.randint(200, 1200)).strip() + "\n\n"
        out.append(para)
        size += len(para)
    return "".join(out)


def _chinese(rng: random.Random, nbytes: int) -> str:
    """Chinese without spaces, with the usual 。 and ， every sentence or so."""
    out: list[str] = []
    size = 0
    while size < nbytes:
        sentence = "".join(rng.choice(HANZI) for _ in range(rng.randint(8, 40))) + rng.choice("。，")
        out.append(sentence)
        size += 3 * len(sentence)
    return "".join(out)


def _chinese_unbroken(rng: random.Random, nbytes: int) -> str:
    """Chinese without spaces or punctuation: one unbroken run of ideographs."""
    return "".join(rng.choice(HANZI) for _ in range(nbytes // 3 + 1))


def load_chunker(path: Path | None) -> Callable[[Message, int], list[Any]]:
    if path is None:
        return chunk_message
    spec = importlib.util.spec_from_file_location("other_chunker", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is made
    spec.loader.exec_module(module)
    return module.chunk_message  # type: ignore[no-any-return]


def measure(name: str, text: str, chunk: Callable[[Message, int], list[Any]]) -> list[object]:
    message = Message(source="bench", text=text, source_id="m1")
    t, cpu = time.perf_counter(), time.process_time()
    chunks = chunk(message, DEFAULT_MAX_TOKENS)
    dt, dcpu = time.perf_counter() - t, time.process_time() - cpu
    assert all(count_tokens(c.text) <= DEFAULT_MAX_TOKENS for c in chunks), name
    assert "".join("".join(c.text.split()) for c in chunks) == "".join(text.split()), name
    mb = len(text.encode("utf-8")) / 1e6
    return [name, f"{mb:.2f}", len(chunks), f"{dt:.3f}", f"{mb / dt:.2f}", f"{dcpu:.3f}", f"{mb / dcpu:.2f}"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, default=10.0, help="size of the English and base64 inputs")
    parser.add_argument("--zh-mb", type=float, default=1.0, help="size of the Chinese inputs")
    parser.add_argument("--only", default="", help="comma-separated input names (default: all)")
    parser.add_argument("--chunker", type=Path, default=None, help="another chunker.py to time instead")
    args = parser.parse_args()
    chunk = load_chunker(args.chunker)
    big, zh = int(args.mb * 1e6), int(args.zh_mb * 1e6)
    inputs = {
        "one-line": ("one line of prose", _one_line, big),
        "base64": ("one base64 token", _base64, big),
        "prose": ("prose in paragraphs", _prose, big),
        "chinese": ("Chinese, punctuated", _chinese, zh),
        "chinese-unbroken": ("Chinese, no punctuation", _chinese_unbroken, zh),
    }
    wanted = [w for w in args.only.split(",") if w] or list(inputs)
    rows = []
    for key in wanted:
        label, make, size = inputs[key]
        rows.append(measure(label, _sized(make, size), chunk))
    which = args.chunker or "vaultmem/chunker.py"
    print(f"\nChunking at {DEFAULT_MAX_TOKENS} tokens, one message per input ({which})")
    print(table(["input", "MB", "chunks", "seconds", "MB/s", "CPU s", "MB/s of CPU"], rows))


if __name__ == "__main__":
    main()
