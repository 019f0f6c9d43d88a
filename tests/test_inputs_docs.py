"""Document adapter: heading sections, heading paths, frontmatter and plain text."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from vaultmem.errors import InvalidInput, UnsafePath
from vaultmem.inputs.docs import parse_document
from vaultmem.model import InputKind, Message


def _by_path(messages: list[Message]) -> dict[str, Message]:
    return {m.meta["heading_path"]: m for m in messages}


def test_nested_atx_headings_build_heading_paths() -> None:
    doc = "# Top\ntop text\n## Sub\nsub text\n### Subsub\ndeep text\n## Sub2 ##\nmore\n# Next\nlast\n"
    messages = parse_document(doc, source="notes", doc_name="plan.md")
    assert [m.meta["heading_path"] for m in messages] == [
        "Top",
        "Top > Sub",
        "Top > Sub > Subsub",
        "Top > Sub2",
        "Next",
    ]
    assert [m.source_id for m in messages] == [f"plan.md#{n}" for n in range(1, 6)]
    assert messages[2].text == "### Subsub\n\ndeep text"
    assert messages[3].text.startswith("## Sub2\n")  # closing hashes dropped
    assert all(m.kind is InputKind.DOC and m.session == "plan.md" for m in messages)
    assert all(m.meta["file"] == "plan.md" and m.source == "notes" for m in messages)


def test_ids_are_stable_across_parses() -> None:
    doc = "intro\n\n# A\na\n# B\nb\n"
    first = parse_document(doc, source="s", doc_name="d.md")
    assert first == parse_document(doc, source="s", doc_name="d.md")
    assert [m.source_id for m in first] == ["d.md#0", "d.md#1", "d.md#2"]
    assert first[0].meta["heading_path"] == ""


def test_setext_headings() -> None:
    doc = "Title\n=====\n\nintro\n\nPart one\n--------\nbody one\n\nnot a heading\nbecause two lines\n---\n"
    by_path = _by_path(parse_document(doc, source="s", doc_name="d.md"))
    assert set(by_path) == {"Title", "Title > Part one"}
    assert by_path["Title"].text == "# Title\n\nintro"
    # A rule under a multi-line paragraph stays a rule, in the section's text.
    assert by_path["Title > Part one"].text.endswith("because two lines\n---")


def test_hash_lines_inside_fenced_code_are_not_headings() -> None:
    doc = (
        "# Script\n```bash\n# install\npip install x\n```\n"
        "~~~~\n# also code\n~~~\n## still code\n~~~~\n## Real\nok\n"
    )
    messages = parse_document(doc, source="s", doc_name="d.md")
    assert [m.meta["heading_path"] for m in messages] == ["Script", "Script > Real"]
    assert "# install" in messages[0].text
    assert "## still code" in messages[0].text


def test_hashtags_are_not_headings() -> None:
    messages = parse_document("#project #idea\nsome thought\n", source="s", doc_name="t.md")
    assert len(messages) == 1
    assert messages[0].text == "#project #idea\nsome thought"


def test_frontmatter_title_and_date_apply_to_every_section() -> None:
    doc = "---\ntitle: Weekly Review\ndate: 2024-05-01\ntags: [a, b]\n---\n# Wins\nshipped\n# Losses\nnone\n"
    messages = parse_document(doc, source="s", doc_name="review.md")
    assert len(messages) == 2
    assert all(m.meta["title"] == "Weekly Review" for m in messages)
    assert all(m.ts == datetime(2024, 5, 1, tzinfo=UTC) for m in messages)
    assert not any("tags" in m.text or "---" in m.text for m in messages)


def test_frontmatter_datetime_string_and_crlf_bom() -> None:
    doc = "\ufeff---\r\ndate: '2024-05-01T09:30:00+02:00'\r\n---\r\nbody line\r\n"
    (message,) = parse_document(doc, source="s", doc_name="d.md")
    assert message.ts == datetime(2024, 5, 1, 7, 30, tzinfo=UTC)
    assert message.text == "body line"
    assert "title" not in message.meta


def test_text_that_only_looks_like_frontmatter_is_kept() -> None:
    doc = "---\njust: [unclosed\n---\nbody\n"
    (message,) = parse_document(doc, source="s", doc_name="d.md")
    assert "just: [unclosed" in message.text


def test_plain_text_is_one_section_with_paragraphs_intact() -> None:
    doc = "First paragraph\nstill first.\n\nSecond paragraph.\n\n\tindented tail"
    (message,) = parse_document(doc, source="s", doc_name="notes.txt")
    assert message.text == doc
    assert message.source_id == "notes.txt#0"
    assert message.meta == {"file": "notes.txt", "heading_path": ""}


def test_empty_parent_heading_is_folded_into_child_path_but_leaf_heading_kept() -> None:
    doc = "# Parent\n## Child\nchild text\n## Lonely\n"
    messages = parse_document(doc, source="s", doc_name="d.md")
    assert [(m.source_id, m.text) for m in messages] == [
        ("d.md#2", "## Child\n\nchild text"),
        ("d.md#3", "## Lonely"),
    ]
    assert messages[0].meta["heading_path"] == "Parent > Child"


def test_empty_document_gives_nothing() -> None:
    assert parse_document("  \n\n", source="s", doc_name="d.md") == []


def test_bad_arguments() -> None:
    with pytest.raises(UnsafePath):
        parse_document("x", source="../up", doc_name="d.md")
    with pytest.raises(InvalidInput):
        parse_document("x", source="s", doc_name=" ")
