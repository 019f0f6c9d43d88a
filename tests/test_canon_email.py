"""Email adapter: headers, charsets, HTML bodies, reply trimming, threads and mbox files."""

from __future__ import annotations

import mailbox
from datetime import UTC, datetime
from email.message import EmailMessage
from pathlib import Path

import pytest

from vaultmem.canon_email import html_to_text, parse_eml, parse_mbox, trim_reply
from vaultmem.errors import InvalidInput
from vaultmem.model import InputKind


def _email(body: str, **headers: str) -> EmailMessage:
    msg = EmailMessage()
    defaults = {
        "From": "Ana Silva <ana@example.com>",
        "To": "Bob <bob@example.com>",
        "Subject": "Lunch",
        "Date": "Tue, 05 Mar 2024 14:30:00 +0100",
        "Message-ID": "<m1@example.com>",
    }
    for name, value in {**defaults, **{k.replace("_", "-"): v for k, v in headers.items()}}.items():
        if value:
            msg[name] = value
    msg.set_content(body)
    return msg


def _raw(headers: str, body: bytes) -> bytes:
    return headers.replace("\n", "\r\n").encode("ascii") + b"\r\n" + body


def test_provenance_from_headers() -> None:
    msg = _email("See you at noon.", Cc="Carl <carl@example.com>, dee@example.com")
    message = parse_eml(bytes(msg), source="mail")
    assert message.kind is InputKind.EMAIL
    assert message.source == "mail"
    assert message.text == "Subject: Lunch\n\nSee you at noon."
    assert message.source_id == "m1@example.com"
    assert message.session == "m1@example.com"  # a thread root is its own session
    assert message.speaker == "Ana Silva"
    assert message.ts == datetime(2024, 3, 5, 13, 30, tzinfo=UTC)
    assert message.meta["from"] == "Ana Silva <ana@example.com>"
    assert message.meta["to"] == "Bob <bob@example.com>"
    assert message.meta["cc"] == "Carl <carl@example.com>, dee@example.com"
    assert message.meta["subject"] == "Lunch"


def test_quoted_reply_and_signature_are_trimmed() -> None:
    body = (
        "Yes, Thursday works.\n\nBring the slides.\n\n-- \nAna Silva\nHead of Things\n\n"
        "On Mon, Mar 4, 2024 at 9:00 AM Bob <bob@example.com> wrote:\n> Does Thursday work?\n> Bob\n"
    )
    msg = _email(body, Subject="Re: Meeting", In_Reply_To="<m0@example.com>", Message_ID="<m2@example.com>")
    message = parse_eml(bytes(msg), source="mail")
    assert message.text == "Subject: Re: Meeting\n\nYes, Thursday works.\n\nBring the slides."
    assert message.session == "m0@example.com"
    assert message.meta["in_reply_to"] == "m0@example.com"


def test_attribution_without_signature_and_inline_quotes() -> None:
    body = (
        "> earlier point\nMy answer.\n\nSent from my iPhone\n\n"
        "On Mon, Mar 4, 2024 Bob <\nbob@x.com> wrote:\n\n> old"
    )
    assert trim_reply(body) == "My answer."


def test_attribution_not_followed_by_quote_is_kept() -> None:
    body = "On Monday she wrote: the plan is fine.\nNothing quoted here."
    assert trim_reply(body) == body


def test_outlook_original_message_and_chinese_attribution() -> None:
    outlook = (
        "Approved.\n\n-----Original Message-----\nFrom: Bob\nSent: Monday\nSubject: budget\n\nplease approve"
    )
    assert trim_reply(outlook) == "Approved."
    chinese = "好的，明天见。\n\n在 2024年3月4日 周一 09:00，张伟 <zw@example.cn> 写道：\n> 明天开会吗？"
    assert trim_reply(chinese) == "好的，明天见。"


def test_html_only_email_is_converted_to_text() -> None:
    msg = _email("placeholder")
    msg.set_content(
        "<html><head><style>p {color: red}</style><title>t</title></head><body>"
        "<p>Hello&nbsp;Bob,</p><p>The <b>offsite</b> is   on\nFriday.</p>"
        "<ul><li>bring laptop</li><li>bring badge</li></ul>"
        '<div class="gmail_quote"><div>On Mon, Bob wrote:<br></div>'
        "<blockquote><p>When is it?</p></blockquote></div></body></html>",
        subtype="html",
    )
    message = parse_eml(bytes(msg), source="mail")
    assert message.text == (
        "Subject: Lunch\n\nHello Bob,\n\nThe offsite is on Friday.\n\n- bring laptop\n- bring badge"
    )


def test_html_to_text_marks_blockquotes() -> None:
    assert html_to_text("<p>top</p><blockquote>quoted<br>two</blockquote><p>end</p>") == (
        "top\n\n> quoted\n> two\n\nend"
    )


def test_plain_part_is_preferred_and_attachments_ignored() -> None:
    msg = _email("plain version")
    msg.add_alternative("<p>html version</p>", subtype="html")
    msg.add_attachment(b"secret attachment text", maintype="text", subtype="plain", filename="a.txt")
    message = parse_eml(bytes(msg), source="mail")
    assert message.text == "Subject: Lunch\n\nplain version"


def test_latin1_body() -> None:
    raw = _raw(
        "From: a@example.com\nSubject: hi\nContent-Type: text/plain; charset=iso-8859-1\n"
        "Content-Transfer-Encoding: 8bit\n",
        "Café à Zürich – 5 €".encode("cp1252"),
    )
    assert parse_eml(raw, source="mail").text == "Subject: hi\n\nCafé à Zürich – 5 €"


def test_gbk_body_declared_as_gb2312_and_raw_gbk_subject() -> None:
    # 镕 is in GBK but not in GB2312; mail clients label GBK text "gb2312" all the time.
    body = "朱镕基说：明天下午三点开会。"
    raw = (
        b"From: zw@example.cn\r\nSubject: "
        + "会议通知".encode("gbk")
        + b"\r\nContent-Type: text/plain; charset=gb2312\r\nContent-Transfer-Encoding: 8bit\r\n\r\n"
        + body.encode("gbk")
    )
    assert parse_eml(raw, source="mail").text == f"Subject: 会议通知\n\n{body}"


def test_shift_jis_body_base64() -> None:
    msg = _email("placeholder")
    msg.set_content("明日の会議は十時です。", charset="shift_jis", cte="base64")
    assert parse_eml(bytes(msg), source="mail").text.endswith("明日の会議は十時です。")


def test_unknown_charset_falls_back_to_latin1() -> None:
    raw = _raw(
        "From: a@example.com\nSubject: x\nContent-Type: text/plain; charset=x-made-up\n",
        "Olá".encode("latin-1"),
    )
    assert parse_eml(raw, source="mail").text == "Subject: x\n\nOlá"


def test_rfc2047_headers() -> None:
    raw = _raw(
        "From: =?utf-8?q?J=C3=BCrgen_M=C3=BCller?= <jm@example.de>\n"
        "Subject: =?utf-8?b?w5xiZXJzaWNodA==?= =?iso-8859-1?q?f=FCr_M=E4rz?=\n",
        b"body",
    )
    message = parse_eml(raw, source="mail")
    assert message.meta["subject"] == "Übersichtfür März"
    assert message.speaker == "Jürgen Müller"
    assert message.text.startswith("Subject: Übersichtfür März\n\n")


def test_missing_message_id_gets_a_content_hash() -> None:
    raw = bytes(_email("hello", Message_ID=""))
    first = parse_eml(raw, source="mail")
    assert first.source_id is not None and first.source_id.startswith("sha256-")
    assert first.source_id == parse_eml(raw, source="mail").source_id
    assert first.session == first.source_id
    assert parse_eml(raw + b"!", source="mail").source_id != first.source_id


def test_subject_kept_when_body_is_only_quote() -> None:
    msg = _email("On Mon, Mar 4, 2024 Bob wrote:\n> ping\n", Subject="Re: ping")
    assert parse_eml(bytes(msg), source="mail").text == "Subject: Re: ping"


def test_speaker_falls_back_to_address_and_bad_date_is_none() -> None:
    message = parse_eml(bytes(_email("x", From="solo@example.com", Date="not a date")), source="mail")
    assert message.speaker == "solo@example.com"
    assert message.ts is None


@pytest.mark.parametrize("data", [b"", b"   \r\n"])
def test_empty_email_is_refused(data: bytes) -> None:
    with pytest.raises(InvalidInput, match="nothing to ingest"):
        parse_eml(data, source="mail")


def test_mbox_threads(tmp_path: Path) -> None:
    path = tmp_path / "inbox.mbox"
    box = mailbox.mbox(path)
    box.add(
        _email("Kickoff is Monday.\nFrom now on we meet weekly.", Subject="Kickoff", Message_ID="<root@x>")
    )
    box.add(
        _email(
            "Monday works.\n\nOn Sun, Ana wrote:\n> Kickoff is Monday.",
            From="Bob <bob@example.com>",
            Subject="Re: Kickoff",
            Message_ID="<r1@x>",
            In_Reply_To="<root@x>",
            References="<root@x>",
        )
    )
    box.add(
        _email(
            "Agenda attached.",
            Subject="Re: Kickoff",
            Message_ID="<r2@x>",
            In_Reply_To="<r1@x>",
            References="<root@x> <r1@x>",
        )
    )
    box.close()
    messages = parse_mbox(path, source="mail")
    assert [m.source_id for m in messages] == ["root@x", "r1@x", "r2@x"]
    assert {m.session for m in messages} == {"root@x"}
    assert [m.speaker for m in messages] == ["Ana Silva", "Bob", "Ana Silva"]
    # mbox escapes body lines starting with "From "; the escape must not read as a quote.
    assert messages[0].text == "Subject: Kickoff\n\nKickoff is Monday.\nFrom now on we meet weekly."
    assert messages[1].text == "Subject: Re: Kickoff\n\nMonday works."
    assert messages[2].meta["references"] == "root@x r1@x"


def test_missing_mbox_raises(tmp_path: Path) -> None:
    with pytest.raises(InvalidInput, match="cannot open mailbox"):
        parse_mbox(tmp_path / "nope.mbox", source="mail")


def test_forwarded_content_is_kept_and_missing_subject_is_marked() -> None:
    body = "FYI\n\n---------- Forwarded message ---------\nFrom: Bank\n\nYour card ends in 1234."
    message = parse_eml(bytes(_email(body, Subject="")), source="mail")
    assert message.text == f"Subject: (no subject)\n\n{body}"
    assert "subject" not in message.meta
