"""The fast frontmatter subset agrees with full YAML wherever it answers."""

from __future__ import annotations

import pytest
import yaml
from hypothesis import example, given, settings
from hypothesis import strategies as st

from vaultmem import yamlsubset

scalars = st.one_of(
    st.text(max_size=30),
    st.sampled_from(
        [
            "yes",
            "No",
            "null",
            "~",
            "1.5",
            "0x1F",
            "2024-01-02",
            "12:30",
            "true",
            "-",
            "a: b",
            "#x",
            "3f9a1c2b4d5e6f70",
            "1234567890123456",
            "1e5",
            "Chen Jing",
            "陈静",
            "雾凇拼音",
            " lead",
            "trail ",
        ]
    ),
    st.integers(min_value=-(10**12), max_value=10**12),
    st.floats(allow_nan=False, allow_infinity=False),
    st.booleans(),
)
values = st.one_of(
    scalars, st.lists(scalars, max_size=4), st.dictionaries(st.text(max_size=8), scalars, max_size=3)
)
keys = st.from_regex(r"[a-z_][a-z0-9_]{0,8}", fullmatch=True)


@example({"_": {": ": ""}})  # a quoted key holding ": " (the fast reader split it there)
@settings(max_examples=400, deadline=None)
@given(st.dictionaries(keys, values, max_size=8))
def test_dump_round_trips_through_full_yaml(mapping: dict[str, object]) -> None:
    text = yamlsubset.dump(mapping)
    if text is None:
        return
    assert (yaml.safe_load(text) or {}) == mapping
    assert yamlsubset.load(text) == mapping


lines = st.one_of(
    st.builds(
        lambda k, v: f"{k}: {v}",
        keys,
        st.text(alphabet=st.characters(blacklist_characters="\n\r"), max_size=25),
    ),
    st.sampled_from(
        [
            "tags:",
            "  - a",
            "- b",
            "# comment",
            "x: [a, 'b,c', \"d\"]",
            "y: {a: 1, b: [x]}",
            "z: 'it''s'",
            'w: "\\x41"',
            "when: 2024-01-02",
            "v: 010",
            "u: +1",
            "t: .5",
            "s: 1_000",
            "r: &a x",
            "q: !!str 5",
            "p: a # c",
            "o: [a, b,]",
            "n: {a: 1, a: 2}",
        ]
    ),
)


@settings(max_examples=600, deadline=None)
@given(st.lists(lines, min_size=1, max_size=5))
def test_load_agrees_with_full_yaml_or_declines(raw_lines: list[str]) -> None:
    raw = "\n".join(raw_lines) + "\n"
    fast = yamlsubset.load(raw)
    if fast is None:
        return
    try:
        expected = yaml.safe_load(raw)
    except yaml.YAMLError:
        raise AssertionError(f"fast path accepted text YAML rejects: {raw!r}") from None
    assert fast == (expected or {})


def test_engine_frontmatter_takes_the_fast_path() -> None:
    mapping = {
        "id": "3f9a1c2b4d5e6f70",
        "kind": "leaf",
        "ts": "2026-03-02T09:16:00Z",
        "score": 0.62,
        "reasons": ["remember", "datetime"],
        "speaker": "陈静",
        "provenance": {"subject": "Re: rent"},
    }
    text = yamlsubset.dump(mapping)
    assert text is not None and "kind: leaf\n" in text and "reasons: [remember, datetime]" in text
    assert yamlsubset.load(text) == mapping


def test_user_yaml_declines_to_full_parser() -> None:
    assert yamlsubset.load("tags:\n  - a\n") is None
    assert yamlsubset.load("created: 2024-01-02\n") is None
    assert yamlsubset.load("note: hi # comment\n") is None


@given(
    st.one_of(
        st.text(max_size=12), st.sampled_from(["yes", "NO", "Null", "on", "oN", "y", "~", "", ".inf", "1e3"])
    )
)
def test_tag_shortcut_matches_pyyaml_resolver(text: str) -> None:
    expected = yaml.resolver.Resolver().resolve(yaml.ScalarNode, text, (True, False))
    assert yamlsubset._tag(text) == expected


def test_a_line_parsed_once_gives_each_load_its_own_values(monkeypatch: pytest.MonkeyPatch) -> None:
    """``load`` remembers each line's parse (the same lines repeat on every leaf): a list is the caller's
    own, a flow mapping is parsed again, a line outside the subset stays outside, and a full memory
    starts afresh without changing any result."""
    raw = "kind: leaf\nreasons: [datetime, money]\nprovenance: {a: b}\nseq: 0\n"
    first = yamlsubset.load(raw)
    assert first == {"kind": "leaf", "reasons": ["datetime", "money"], "provenance": {"a": "b"}, "seq": 0}
    first["reasons"].append("mutated")
    first["provenance"]["c"] = "d"
    assert yamlsubset.load(raw) == {
        "kind": "leaf",
        "reasons": ["datetime", "money"],
        "provenance": {"a": "b"},
        "seq": 0,
    }
    assert yamlsubset.load("kind: leaf\nkind: leaf\n") is None  # a repeated key, remembered line or not
    assert yamlsubset.load("a: b: c\n") is None and yamlsubset.load("a: b: c\n") is None
    monkeypatch.setattr(yamlsubset, "LINES_KEPT", 2)
    for n in range(10):
        assert yamlsubset.load(f"n: {n}\nkind: leaf\n") == {"n": n, "kind": "leaf"}
    assert len(yamlsubset._LINES) <= 2
