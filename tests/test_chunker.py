from __future__ import annotations

import base64
import json
import random
import re
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from tests.helpers import run
from vaultmem import chunker
from vaultmem.chunker import DEFAULT_MAX_TOKENS, chunk_id, chunk_message
from vaultmem.model import Message
from vaultmem.tokens import count_tokens


def test_short_message_is_one_chunk_with_stable_id() -> None:
    m = Message(source="s", text="  Remember: the deploy key rotates on Fridays.  ", source_id="m1")
    (chunk,) = chunk_message(m)
    assert chunk.text == "Remember: the deploy key rotates on Fridays."
    assert chunk.id == chunk_id("s", "m1", 0, chunk.text)
    assert chunk_message(m)[0].id == chunk.id  # deterministic across calls
    assert len(chunk.id) == 16


def test_ids_depend_on_source_sequence_and_content() -> None:
    base = chunk_id("s", "m1", 0, "text")
    assert (
        len(
            {
                base,
                chunk_id("t", "m1", 0, "text"),
                chunk_id("s", "m2", 0, "text"),
                chunk_id("s", "m1", 1, "text"),
                chunk_id("s", "m1", 0, "text!"),
            }
        )
        == 5
    )


def test_known_id_is_stable_across_versions() -> None:
    # A literal: if this changes, every existing vault's ids would change.
    assert chunk_id("slack", "m-1", 0, "hello") == "4cf4f6771af186c5"


def test_long_document_splits_at_paragraphs_first() -> None:
    paras = [f"Paragraph {i} " + "word " * 40 for i in range(6)]
    m = Message(source="d", text="\n\n".join(paras), source_id="doc#0")
    chunks = chunk_message(m, max_tokens=100)
    assert len(chunks) > 1
    assert all(c.tokens <= 100 for c in chunks)
    assert chunks[0].text.startswith("Paragraph 0")
    assert [c.seq for c in chunks] == list(range(len(chunks)))


def test_cjk_without_spaces_is_bounded() -> None:
    m = Message(source="d", text="雾凇拼音是一个很好用的输入法配置。" * 50, source_id="x")
    chunks = chunk_message(m, max_tokens=64)
    assert all(c.tokens <= 64 for c in chunks)
    assert "".join(c.text for c in chunks).replace(" ", "") == m.text


def test_empty_message_gives_no_chunk() -> None:
    assert chunk_message(Message(source="s", text="   \n ")) == []


@settings(max_examples=150, deadline=None)
@given(text=st.text(min_size=1, max_size=3000), limit=st.integers(min_value=8, max_value=300))
def test_no_chunk_exceeds_the_bound_and_no_text_is_lost(text: str, limit: int) -> None:
    m = Message(source="s", text=text, source_id="id")
    chunks = chunk_message(m, max_tokens=limit)
    assert all(count_tokens(c.text) <= limit for c in chunks)
    joined = "".join("".join(c.text.split()) for c in chunks)
    assert joined == "".join(text.split())


# The chunker as it was before it became linear: the greedy rule that re-counts every unit, and a word
# over the bound cut by growing a piece one character at a time. Kept as the oracle of the rules: the
# linear chunker must give exactly these chunks, so the ids of existing vaults never change.
_PARA_RE = re.compile(r"\n[ \t]*\n+")
_SENT_RE = re.compile(r"(?<=[.!?。！？；;])\s+|(?<=[。！？])")
_WORD_RE = re.compile(r"\S+\s*")


def _reference_chunks(text: str, limit: int) -> list[str]:
    text = text.strip()
    if not text:
        return []
    if count_tokens(text) <= limit:
        return [text]
    out: list[str] = []
    current: list[str] = []
    current_tokens = 0
    for unit, sep in _reference_units(text, limit):
        unit_tokens = count_tokens(unit)
        if current and current_tokens + unit_tokens > limit:
            out.append("".join(current).strip())
            current, current_tokens = [], 0
        current.append(unit + sep)
        current_tokens += unit_tokens
    tail = "".join(current).strip()
    return [*out, tail] if tail else out


def _reference_units(text: str, limit: int) -> Iterator[tuple[str, str]]:
    for para in _PARA_RE.split(text):
        para = para.strip()
        if not para:
            continue
        if count_tokens(para) <= limit:
            yield para, "\n\n"
            continue
        for sent in _SENT_RE.split(para):
            if not sent.strip():
                continue
            if count_tokens(sent) <= limit:
                yield sent.strip(), " "
                continue
            for word in _WORD_RE.findall(sent):
                word = word.strip()
                if count_tokens(word) <= limit:
                    yield word, " "
                    continue
                start = 0
                while start < len(word):
                    end = start + 1
                    while end < len(word) and count_tokens(word[start : end + 1]) <= limit:
                        end += 1
                    yield word[start:end], ""
                    start = end


# Characters that exercise every rule: letters and digits (runs of 4 and 3), sentence marks, the full
# stops that end a sentence without a space, Unicode spaces, blank lines, CJK, other symbols.
_TRICKY = st.sampled_from(
    [*"aZq09.!?;。！？；,-/+= \t\n\u3000\xa0\u2028好雾é😀", "\n\n", "\n \n", "。 ", ". ", "abcdefgh"]
)


@settings(max_examples=400, deadline=None)
@example(text="x" * 33 + " yyy zz", limit=8)  # the cut word's last piece "x" runs into "yyy": 1 token
@example(text="好。。\u3000下！？x. y", limit=8)
@given(
    text=st.one_of(st.lists(_TRICKY, max_size=400).map("".join), st.text(max_size=600)),
    limit=st.integers(min_value=8, max_value=40),
)
def test_linear_chunker_gives_exactly_the_chunks_of_the_greedy_rule(text: str, limit: int) -> None:
    message = Message(source="s", text=text, source_id="m")
    chunks = chunk_message(message, max_tokens=limit)
    assert [c.text for c in chunks] == _reference_chunks(text, limit)
    assert [c.tokens for c in chunks] == [count_tokens(c.text) for c in chunks]
    assert [c.id for c in chunks] == [chunk_id("s", "m", i, c.text) for i, c in enumerate(chunks)]


def test_space_table_matches_the_regex_and_str_isspace() -> None:
    every = "".join(map(chr, range(sys.maxunicode + 1)))
    spaces = {ord(c) for c in re.findall(r"\s", every)}
    assert spaces == {ord(c) for c in every if c.isspace()}
    assert spaces == set(chunker._SPACES)


def test_long_text_of_few_tokens_is_one_chunk() -> None:
    text = "start" + " \n" * 20_000 + "end"
    (chunk,) = chunk_message(Message(source="s", text=text, source_id="m"))
    assert chunk.text == text and chunk.tokens == 3


@pytest.mark.parametrize(
    "text",
    [
        base64.b64encode(random.Random(1).randbytes(6_000_000)).decode(),  # one 8 MB token
        "雾凇拼音输入法配置" * 400_000,  # 3.6 M ideographs, no space, no punctuation
        "word " * 800_000,  # 4 MB of words with no sentence end
        ("A sentence with a few words in it. " * 120_000).strip(),  # 4 MB on one line
    ],
    ids=["base64", "chinese", "words", "one-line"],
)
def test_multi_megabyte_unbroken_text_is_bounded_and_lossless(text: str) -> None:
    # A quadratic chunker needs hours here; the suite's per-test timeout catches a regression.
    chunks = chunk_message(Message(source="s", text=text, source_id="big"))
    assert len(chunks) > 1000
    assert all(0 < c.tokens <= DEFAULT_MAX_TOKENS for c in chunks)
    assert all(c.tokens == count_tokens(c.text) for c in chunks[:50])
    assert "".join("".join(c.text.split()) for c in chunks) == "".join(text.split())


def test_pasted_base64_image_in_a_chat_through_the_cli(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A 200 KB data URL pasted into a chat turn (13 s of chunking before it became linear)."""
    image = base64.b64encode(random.Random(3).randbytes(150_000)).decode()
    turn = f"Here is the screenshot of the broken export: data:image/png;base64,{image} (see the red box)"
    chat = tmp_path / "support.json"
    chat.write_text(json.dumps([{"id": "t1", "speaker": "Mara", "content": turn}]))
    vault = tmp_path / "vault"
    assert run(["init", str(vault)], capsys)[0] == 0
    code, out, err = run(["ingest", str(chat), "--json", "--vault", str(vault)], capsys)
    assert code == 0, err
    _, out, _ = run(["ls", "--json", "--vault", str(vault)], capsys)
    leaves = sorted(json.loads(out), key=lambda leaf: leaf["seq"])
    assert len(leaves) > 100 and all(leaf["tokens"] <= DEFAULT_MAX_TOKENS for leaf in leaves)
    assert "".join("".join(leaf["text"].split()) for leaf in leaves) == "".join(turn.split())
