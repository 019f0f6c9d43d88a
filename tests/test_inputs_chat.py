"""Chat adapter: records, JSON and JSONL logs become CHAT messages with stable ids."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone

import pytest

from vaultmem.errors import InvalidInput, UnsafePath
from vaultmem.inputs.chat import clean_text, messages_from_records, parse_chat_bytes
from vaultmem.model import InputKind


def test_plain_turns_get_deterministic_ids_across_parses() -> None:
    turns = [
        {"role": "user", "content": "Hi, I'm Ana."},
        {"role": "assistant", "content": "Hello Ana!"},
        {"role": "user", "content": "I live in Lisbon."},
    ]
    first = messages_from_records(turns, source="agent")
    second = messages_from_records([dict(t) for t in turns], source="agent")
    assert [m.source_id for m in first] == ["default#0", "default#1", "default#2"]
    assert first == second
    assert [m.role for m in first] == ["user", "assistant", "user"]
    assert all(m.kind is InputKind.CHAT and m.source == "agent" for m in first)


def test_session_argument_and_record_fields() -> None:
    records = [
        {"id": "m1", "role": "user", "content": "one", "ts": "2024-03-01T10:00:00Z"},
        {"role": "assistant", "content": "two"},
        {"role": "user", "content": "three", "session": "other", "source": "slack"},
    ]
    messages = messages_from_records(records, source="agent", session="s1")
    assert [m.source_id for m in messages] == ["m1", "s1#1", "other#2"]
    assert [m.session for m in messages] == ["s1", "s1", "other"]
    assert [m.source for m in messages] == ["agent", "agent", "slack"]
    assert messages[0].ts == datetime(2024, 3, 1, 10, 0, tzinfo=UTC)


def test_role_versus_speaker() -> None:
    records = [
        {"role": "Alice", "content": "a"},
        {"speaker": "Bob", "content": "b"},
        {"role": "user", "speaker": "Carol", "content": "c"},
        {"speaker": "ASSISTANT", "content": "d"},
        {"text": "e"},
    ]
    got = [(m.role, m.speaker) for m in messages_from_records(records, source="x")]
    assert got == [(None, "Alice"), (None, "Bob"), ("user", "Carol"), ("assistant", None), (None, None)]


def test_openai_content_parts_and_text_key() -> None:
    records = [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Look at this"},
                {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}},
                {"type": "text", "text": "and this"},
            ],
        },
        {"role": "assistant", "text": "Seen."},
    ]
    messages = messages_from_records(records, source="x")
    assert messages[0].text == "Look at this\n\nand this"
    assert messages[1].text == "Seen."


def test_timestamps_in_every_accepted_form() -> None:
    epoch = 1_700_000_000
    expected = datetime.fromtimestamp(epoch, tz=UTC)
    records = [
        {"content": "iso", "ts": "2023-11-14T22:13:20+00:00"},
        {"content": "seconds", "ts": epoch},
        {"content": "millis", "ts": epoch * 1000},
        {
            "content": "datetime",
            "ts": datetime(2023, 11, 14, 23, 13, 20, tzinfo=timezone(timedelta(hours=1))),
        },
        {"content": "none"},
    ]
    stamps = [m.ts for m in messages_from_records(records, source="x")]
    assert stamps == [expected, expected, expected, expected, None]


def test_unreadable_timestamp_names_the_record() -> None:
    with pytest.raises(InvalidInput, match=r"record 1: cannot read timestamp"):
        messages_from_records([{"content": "a"}, {"content": "b", "ts": "yesterday"}], source="x")


def test_empty_content_is_skipped_but_positions_stay_stable() -> None:
    records = [
        {"role": "user", "content": "first"},
        {"role": "assistant", "content": "   \n\t "},
        {"role": "assistant", "content": None},
        {"role": "user", "content": "last"},
    ]
    messages = messages_from_records(records, source="x")
    assert [(m.text, m.source_id) for m in messages] == [("first", "default#0"), ("last", "default#3")]


@pytest.mark.parametrize(
    ("records", "pattern"),
    [
        ([{"content": "ok"}, "not a mapping"], r"record 1: expected an object"),
        ([{"content": 42}], r"record 0: content must be a string"),
        ([{"role": "user"}], r"record 0: has no 'content'"),
        ([{"content": "x", "id": ["a"]}], r"record 0: id must be a string"),
    ],
)
def test_bad_records_raise_with_position(records: list[object], pattern: str) -> None:
    with pytest.raises(InvalidInput, match=pattern):
        messages_from_records(records, source="x")  # type: ignore[arg-type]


def test_unsafe_sources_are_refused() -> None:
    with pytest.raises(UnsafePath):
        messages_from_records([{"content": "a"}], source="../etc")
    with pytest.raises(UnsafePath, match="record 0"):
        messages_from_records([{"content": "a", "source": "a/b"}], source="ok")


def test_text_is_normalised() -> None:
    messages = messages_from_records([{"content": "  line1\r\nline2\x00\x07\tend\x1b\r\n\n"}], source="x")
    assert messages[0].text == "line1\nline2\tend"
    assert clean_text("\x85a\rb ") == "a\nb"


def test_json_list_file() -> None:
    data = json.dumps([{"role": "user", "content": "hello"}, {"role": "assistant", "content": "hi"}])
    messages = parse_chat_bytes(data.encode(), source="x", filename="talk.json")
    assert [m.text for m in messages] == ["hello", "hi"]
    # Without a session the file name keeps ids from colliding with other files.
    assert [m.source_id for m in messages] == ["talk#0", "talk#1"]
    assert messages[0].session == "talk"


def test_json_object_with_messages_session_and_source() -> None:
    data = {
        "session": "trip-planning",
        "source": "claude",
        "messages": [
            {"id": 7, "role": "user", "content": "Book Porto"},
            {"role": "assistant", "content": "Ok"},
        ],
    }
    messages = parse_chat_bytes(json.dumps(data).encode(), source="fallback", filename="x.json")
    assert [m.source_id for m in messages] == ["7", "trip-planning#1"]
    assert {m.session for m in messages} == {"trip-planning"}
    assert {m.source for m in messages} == {"claude"}


def test_json_with_bom_and_crlf() -> None:
    data = b"\xef\xbb\xbf" + json.dumps([{"content": "a\r\nb"}]).encode().replace(b"\n", b"\r\n")
    assert parse_chat_bytes(data, source="x", filename="a.json")[0].text == "a\nb"


def test_jsonl_with_blank_lines() -> None:
    lines = [
        json.dumps({"role": "user", "content": "one", "session": "s"}),
        "",
        "   ",
        json.dumps({"role": "assistant", "content": "two", "session": "s"}),
    ]
    messages = parse_chat_bytes("\n".join(lines).encode(), source="x", filename="log.jsonl")
    assert [(m.text, m.source_id) for m in messages] == [("one", "s#0"), ("two", "s#1")]


def test_jsonl_bad_line_names_its_number() -> None:
    data = b'{"content": "ok"}\n\n{"content": "broken"\n{"content": "later"}\n'
    with pytest.raises(InvalidInput, match=r"log\.jsonl: line 3 is not valid JSON"):
        parse_chat_bytes(data, source="x", filename="log.jsonl")


def test_jsonl_record_that_is_not_an_object_names_its_line() -> None:
    with pytest.raises(InvalidInput, match=r"line 2: expected an object"):
        parse_chat_bytes(b'{"content": "ok"}\n[1, 2]\n', source="x", filename="log.jsonl")


@pytest.mark.parametrize(
    ("data", "pattern"),
    [
        (b"\xff\xfe{}", r"not valid UTF-8"),
        (b'{"messages": "nope"}', r"'messages' list"),
        (b"42", r"expected a list of messages"),
        (b'[{"content": "a"},', r"invalid JSON at line 1"),
        (b"[" * 100_000 + b"]" * 100_000, r"nested too deeply"),
    ],
)
def test_bad_json_files(data: bytes, pattern: str) -> None:
    with pytest.raises(InvalidInput, match=pattern):
        parse_chat_bytes(data, source="x", filename="c.json")
