from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from vaultmem import frontmatter
from vaultmem.errors import FrontmatterError

OWNED = frozenset({"id", "status"})


def test_split_plain_markdown_has_empty_meta() -> None:
    doc = frontmatter.split("# Title\n\nbody\n")
    assert doc.meta == {}
    assert doc.body == "# Title\n\nbody\n"


def test_bom_and_crlf_are_tolerated() -> None:
    doc = frontmatter.split("\ufeff---\r\nid: abc\r\ntags: [x]\r\n---\r\nline one\r\nline two\r\n")
    assert doc.meta == {"id": "abc", "tags": ["x"]}
    assert doc.body == "line one\nline two\n"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("---\nid: [unclosed\n---\nbody", "malformed YAML"),
        ("---\n- a\n- b\n---\nbody", "must be a mapping"),
        ("---\njust a string\n---\nbody", "must be a mapping"),
        ("---\nid: x\nbody without a closing fence", "never closes"),
    ],
)
def test_bad_frontmatter_is_a_clear_error(text: str, message: str) -> None:
    with pytest.raises(FrontmatterError, match=message):
        frontmatter.split(text, where="notes/x.md")


def test_user_keys_survive_rewrite_byte_for_byte() -> None:
    original = (
        "---\n"
        "id: abc\n"
        "status: admitted\n"
        "created: 2024-01-02   # a person's comment\n"
        "aliases:\n"
        "  - First\n"
        "  - 'Second: quoted'\n"
        "rating: 05\n"
        "---\n"
        "body\n"
    )
    doc = frontmatter.split(original)
    rendered = frontmatter.render({"id": "abc", "status": "sealed"}, doc.body, keep=doc, owned=OWNED)
    assert "status: sealed\n" in rendered
    assert "created: 2024-01-02   # a person's comment\n" in rendered
    assert "aliases:\n  - First\n  - 'Second: quoted'\n" in rendered
    assert "rating: 05\n" in rendered
    again = frontmatter.split(rendered)
    assert again.meta["aliases"] == ["First", "Second: quoted"]


keys = st.text(alphabet="abcdefghijklmnopqrstuvwxyz_", min_size=1, max_size=10)
values = st.one_of(
    st.text(max_size=40),
    st.integers(),
    st.floats(allow_nan=False, allow_infinity=False),
    st.booleans(),
    st.none(),
    st.lists(st.text(max_size=10), max_size=4),
)


@given(meta=st.dictionaries(keys, values, max_size=8), body=st.text(max_size=200))
def test_frontmatter_round_trip(meta: dict[str, object], body: str) -> None:
    body = frontmatter.normalise_newlines(body)
    engine = {k: v for k, v in meta.items() if v is not None}
    rendered = frontmatter.render(engine, body, owned=frozenset(engine))
    doc = frontmatter.split(rendered)
    assert doc.meta == engine
    expected_body = body if body.endswith("\n") or not body else body + "\n"
    assert doc.body == expected_body


@given(user=st.dictionaries(keys.filter(lambda k: k not in OWNED), st.text(max_size=20), max_size=5))
def test_user_keys_round_trip_through_engine_rewrite(user: dict[str, str]) -> None:
    first = frontmatter.render({"id": "x", **user}, "b", owned=frozenset({"id"}))
    doc = frontmatter.split(first)
    second = frontmatter.render({"id": "y", "status": "sealed"}, doc.body, keep=doc, owned=OWNED)
    assert frontmatter.split(second).meta == {"id": "y", "status": "sealed", **user}
