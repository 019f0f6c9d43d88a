"""Email adapter: headers, charsets, HTML bodies, reply trimming, threads and mbox files."""

from __future__ import annotations

import base64
import json
import mailbox
from datetime import UTC, datetime
from email.message import EmailMessage
from pathlib import Path

import pytest

from tests.helpers import run
from vaultmem.errors import InvalidInput
from vaultmem.inputs.email import html_to_text, parse_eml, parse_mbox
from vaultmem.inputs.mailreply import trim_reply
from vaultmem.inputs.mailthread import KnownEmail, is_follow_up, normalise_subject, thread_messages
from vaultmem.model import InputKind, Message


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
    # the quote answered inline leaves a marker; the trailing quote and its wrapped attribution go
    assert trim_reply(body) == "> …\nMy answer."


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


# -- replies as mailing lists write them ---------------------------------------------------------------

INLINE_REPLY = """On Tue, 3 Mar 2026 at 08:55, Priya Raman <priya.raman@tidepool.example>
wrote:

> Proposal for 0.11: we cut the release branch on Thursday 12 March and ship
> on Tuesday 17 March.

Thursday works for me, but I am on call that week.

> Scope: the webhook retry queue and the new export format.

The retry queue still has a flaky test; I will fix it by Wednesday.

> Objections by Friday, please.
None from me.

--
Diego
"""


def test_inline_reply_keeps_every_answer_and_marks_each_quote() -> None:
    assert trim_reply(INLINE_REPLY) == (
        "On Tue, 3 Mar 2026 at 08:55, Priya Raman <priya.raman@tidepool.example>\nwrote:\n\n"
        "> …\n\nThursday works for me, but I am on call that week.\n\n"
        "> …\n\nThe retry queue still has a flaky test; I will fix it by Wednesday.\n\n"
        "> …\nNone from me."
    )


@pytest.mark.parametrize(
    "attribution",
    [
        "On Tue, Mar 3, 2026 at 8:55 AM Priya Raman <priya.raman@tidepool.example> wrote:",
        "On Tue, Mar 3, 2026 at 8:55 AM Priya Raman <\npriya.raman@tidepool.example> wrote:",
        "On 03/03/2026 08:55, Priya Raman wrote:",
        "Le mar. 3 mars 2026 à 08:55, Priya Raman <priya.raman@tidepool.example> a écrit :",
        "Am 03.03.2026 um 08:55 schrieb Priya Raman <priya.raman@tidepool.example>:",
        "Priya Raman <priya.raman@tidepool.example> schrieb am Di., 3. März 2026, 08:55:",
        "El mar, 3 mar 2026 a las 8:55, Priya Raman (<priya.raman@tidepool.example>) escribió:",
        "在 2026年3月3日 周二 08:55，Priya Raman <priya.raman@tidepool.example> 写道：",
        "Priya Raman <priya.raman@tidepool.example> 于2026年3月3日周二 08:55写道：",
        "Priya Raman <priya.raman@tidepool.example> writes:",
        "priya.raman@tidepool.example writes:",
        "Priya Raman wrote:",
    ],
)
def test_attribution_shapes(attribution: str) -> None:
    quote = "> Can we ship on the 17th?\n> Or is that too early?"
    # answered inline: the attribution stays, the quote becomes a marker, the answer is kept
    assert (
        trim_reply(f"{attribution}\n{quote}\n\nYes, the 17th.\n") == f"{attribution}\n> …\n\nYes, the 17th."
    )
    # top posted: the answer above, the attribution and the quote below it are dropped
    assert trim_reply(f"Yes, the 17th.\n\n{attribution}\n\n{quote}\n") == "Yes, the 17th."


def test_a_sentence_that_introduces_a_quote_is_the_senders_text() -> None:
    body = "Here is what the vendor wrote:\n> price goes up in April\n"
    assert trim_reply(body) == "Here is what the vendor wrote:"


@pytest.mark.parametrize(
    "original",
    [
        "From: Priya Raman <priya.raman@tidepool.example>\nSent: Tuesday, March 3, 2026 8:55 AM\n"
        "To: tidepool-dev\nSubject: Release 0.11 plan",
        "________________________________\nFrom: Priya Raman\nSent: Tuesday, March 3, 2026 8:55 AM",
        "*From:* Priya Raman\n*Sent:* Tuesday, March 3, 2026 8:55 AM\n*Subject:* plan",
        "From: Priya Raman <priya.raman@tidepool.example>\nDate: Tue, 3 Mar 2026 08:55\nSubject: plan",
        "Von: Priya Raman <priya.raman@tidepool.example>\nGesendet: Dienstag, 3. März 2026 08:55\n"
        "An: tidepool-dev\nBetreff: Release 0.11",
        "发件人: Priya Raman <priya.raman@tidepool.example>\n发送时间: 2026年3月3日 8:55\n主题: 计划",
        "-----Ursprüngliche Nachricht-----\nVon: Priya",
        "----- 原始邮件 -----\n发件人: Priya",
    ],
)
def test_outlook_original_below_a_reply_is_dropped(original: str) -> None:
    body = f"Fine by me.\n\n{original}\n\nProposal for 0.11: we cut the branch on Thursday.\n> old quote"
    assert trim_reply(body) == "Fine by me."


def test_header_like_lines_of_the_senders_own_text_are_kept() -> None:
    body = (
        "Booked, here are the details:\n\nFrom: Lisbon (LIS)\nTo: Osaka (KIX)\nDate: 12 April 2026\n"
        "Seat: 23A\n\nSee you at the gate."
    )
    assert trim_reply(body) == body
    forwarded = (
        "FYI\n\nBegin forwarded message:\n\nFrom: Bank <alerts@bank.example>\nSubject: Card\n"
        "Date: 3 March 2026\n\nYour card ends in 1234."
    )
    assert trim_reply(forwarded) == forwarded


def test_mailing_list_footer_is_dropped() -> None:
    body = (
        "Fine by me.\n_______________________________________________\n"
        "tidepool-dev mailing list\ntidepool-dev@lists.tidepool.example"
    )
    assert trim_reply(body) == "Fine by me."


@pytest.mark.parametrize(
    ("subject", "normal", "follow_up"),
    [
        ("Release 0.11 plan", "release 0.11 plan", False),
        ("[tidepool-dev] Release 0.11 plan", "release 0.11 plan", False),
        ("Re: [tidepool-dev] Release 0.11 plan", "release 0.11 plan", True),
        ("[tidepool-dev] RE: Re[2]: Release  0.11   plan", "release 0.11 plan", True),
        ("AW: WG: Release 0.11 plan", "release 0.11 plan", True),
        ("Fwd: Release 0.11 plan (fwd)", "release 0.11 plan", True),
        ("回复: [tidepool-dev] Release 0.11 plan", "release 0.11 plan", True),
        ("答复：发布计划", "发布计划", True),
        ("Regarding the plan", "regarding the plan", False),
    ],
)
def test_subjects_are_normalised_for_threading(subject: str, normal: str, follow_up: bool) -> None:
    assert normalise_subject(subject) == normal
    assert is_follow_up(subject) is follow_up


def _mail(mid: str, subject: str, ts: str, *, refs: str = "", parent: str = "") -> Message:
    meta = {"subject": subject, "references": refs, "in_reply_to": parent}
    return Message(
        source="list",
        text=f"Subject: {subject}",
        kind=InputKind.EMAIL,
        source_id=mid,
        session=(refs.split() or [parent] if refs or parent else [mid])[0],
        ts=datetime.fromisoformat(ts),
        meta={k: v for k, v in meta.items() if v},
    )


def test_thread_by_headers_then_by_subject_within_a_window() -> None:
    batch = [
        _mail("late", "Re: Release plan", "2026-06-20T09:00:00+00:00"),  # three months on: a new thread
        _mail("r3", "Re: Release plan", "2026-03-04T09:00:00+00:00", parent="r1"),  # parent only
        _mail("root", "Release plan", "2026-03-03T08:00:00+00:00"),
        _mail("r1", "Re: Release plan", "2026-03-03T09:00:00+00:00", refs="root", parent="root"),
        _mail("r2", "RE: [dev] Release plan", "2026-03-03T10:00:00+00:00"),  # no headers at all
        _mail("other", "Re: Lunch", "2026-03-03T11:00:00+00:00"),  # a reply whose thread is unknown
    ]
    threaded = {m.source_id: m.session for m in thread_messages(batch, lambda source: [])}
    assert threaded == {
        "late": "late",
        "r3": "root",
        "root": "root",
        "r1": "root",
        "r2": "root",
        "other": "other",
    }


def test_a_later_reply_joins_a_thread_the_vault_already_holds() -> None:
    known = [KnownEmail("r1", "root", "Re: Release plan", datetime(2026, 3, 3, 9, tzinfo=UTC))]
    asked: list[str] = []

    def lookup(source: str) -> list[KnownEmail]:
        asked.append(source)
        return known

    later = [
        _mail("r4", "Re: Release plan", "2026-03-05T09:00:00+00:00", parent="r1"),
        _mail("r5", "Aw: Release plan", "2026-03-06T09:00:00+00:00"),
    ]
    assert [m.session for m in thread_messages(later, lookup)] == ["root", "root"]
    assert asked == ["list"]  # the vault is asked once per source
    chat = Message(source="chat", text="hi")
    assert thread_messages([chat], lookup) == [chat] and asked == ["list"]


# -- a mailing-list thread through the CLI -------------------------------------------------------------
# Five messages written for this test, in the shapes mail clients write them: a quoted-printable
# announcement with a signature and a list footer, an inline (interleaved) reply with a wrapped
# attribution, a top-posted reply whose References header is missing, a Chinese inline reply in GB2312
# and base64, and an HTML-only Outlook reply with no thread headers at all (threaded by its subject).

ROOT = "rel011-plan@tidepool.example"
DIEGO = "CAD1ego-0311@mail.tidepool.example"
MARA = "mara-0311-1140@tidepool.example"
WEI = "wangwei-0304@tidepool.example"
ANDRE = "DB9PR-andre-0304@outlook.example"

PRIYA_MAIL = b"""From: Priya Raman <priya.raman@tidepool.example>
To: tidepool-dev@lists.tidepool.example
Subject: [tidepool-dev] Release 0.11 plan
Date: Tue, 03 Mar 2026 08:55:00 +0000
Message-ID: <rel011-plan@tidepool.example>
List-Id: Tidepool development <tidepool-dev.lists.tidepool.example>
MIME-Version: 1.0
Content-Type: text/plain; charset=utf-8
Content-Transfer-Encoding: quoted-printable

Hi all,

Proposal for 0.11: we cut the release branch on Thursday 12 March and ship
on Tuesday 17 March.

Scope: the webhook retry queue, the new export format and Andr=C3=A9's cach=
ing fix.

The Postgres 16 migration stays out of 0.11; it needs its own window.

Objections by Friday, please.

--=20
Priya Raman
Release manager, Tidepool
_______________________________________________
tidepool-dev mailing list
tidepool-dev@lists.tidepool.example
"""

DIEGO_MAIL = b"""From: Diego Ferreira <diego.ferreira@tidepool.example>
To: tidepool-dev@lists.tidepool.example
Subject: Re: [tidepool-dev] Release 0.11 plan
Date: Tue, 03 Mar 2026 10:05:00 +0000
Message-ID: <CAD1ego-0311@mail.tidepool.example>
In-Reply-To: <rel011-plan@tidepool.example>
References: <rel011-plan@tidepool.example>
MIME-Version: 1.0
Content-Type: text/plain; charset=utf-8; format=flowed
Content-Transfer-Encoding: 8bit

On Tue, 3 Mar 2026 at 08:55, Priya Raman <priya.raman@tidepool.example>
wrote:

> Proposal for 0.11: we cut the release branch on Thursday 12 March and ship
> on Tuesday 17 March.

Thursday works for me, but I am on call that week, so someone else should
press the button on the 17th.

> Scope: the webhook retry queue, the new export format and Andr\xc3\xa9's caching fix.

The retry queue still has a flaky test (test_backoff_jitter); I will fix it
by Wednesday or we drop it from the scope.

> The Postgres 16 migration stays out of 0.11; it needs its own window.

Agreed. I can do the migration on Saturday 21 March, early morning.

> Objections by Friday, please.
None from me.

--\x20
Diego
"""

MARA_MAIL = b"""From: Mara Lindqvist <mara.lindqvist@tidepool.example>
To: tidepool-dev@lists.tidepool.example
Subject: Re: [tidepool-dev] Release 0.11 plan
Date: Tue, 03 Mar 2026 11:40:00 +0000
Message-ID: <mara-0311-1140@tidepool.example>
In-Reply-To: <CAD1ego-0311@mail.tidepool.example>
MIME-Version: 1.0
Content-Type: text/plain; charset=utf-8

I'll press the button on the 17th, Diego.

Please keep the export format behind a feature flag until the docs are
merged.

Sent from my phone

On Tue, 3 Mar 2026 at 10:05, Diego Ferreira <diego.ferreira@tidepool.example> wrote:
> On Tue, 3 Mar 2026 at 08:55, Priya Raman <priya.raman@tidepool.example>
> wrote:
>
>> Proposal for 0.11: we cut the release branch on Thursday 12 March and ship
>> on Tuesday 17 March.
>
> Thursday works for me, but I am on call that week, so someone else should
> press the button on the 17th.
"""

WEI_BODY = """在 2026年3月3日 周二 18:05，Diego Ferreira <diego.ferreira@tidepool.example> 写道：
> The retry queue still has a flaky test (test_backoff_jitter); I will fix it
> by Wednesday or we drop it from the scope.

这个测试我昨天在杭州的构建机上也复现了，固定随机种子以后就不再失败。

> Agreed. I can do the migration on Saturday 21 March, early morning.

迁移那天我可以在北京远程值班，早上六点以后都在线。

王伟
"""
WEI_MAIL = (
    b"From: =?UTF-8?B?546L5Lyf?= <wang.wei@tidepool.example>\n"
    b"To: tidepool-dev@lists.tidepool.example\n"
    b"Subject: =?UTF-8?B?5Zue5aSNOiBbdGlkZXBvb2wtZGV2XSBSZWxlYXNlIDAuMTEgcGxhbg==?=\n"
    b"Date: Wed, 04 Mar 2026 02:15:00 +0000\n"
    b"Message-ID: <wangwei-0304@tidepool.example>\n"
    b"In-Reply-To: <CAD1ego-0311@mail.tidepool.example>\n"
    b"References: <rel011-plan@tidepool.example>\n <CAD1ego-0311@mail.tidepool.example>\n"
    b"MIME-Version: 1.0\n"
    b'Content-Type: text/plain; charset="gb2312"\n'
    b"Content-Transfer-Encoding: base64\n\n" + base64.encodebytes(WEI_BODY.encode("gbk"))
)

ANDRE_MAIL = b"""From: Andre Costa <andre.costa@tidepool.example>
To: tidepool-dev@lists.tidepool.example
Subject: RE: [tidepool-dev] Release 0.11 plan
Date: Wed, 04 Mar 2026 09:30:00 +0000
Message-ID: <DB9PR-andre-0304@outlook.example>
MIME-Version: 1.0
Content-Type: text/html; charset="windows-1252"
Content-Transfer-Encoding: quoted-printable

<html><head><style>p {margin:0cm}</style></head><body lang=3D"EN-US">
<p>The caching fix is merged in main since this morning (PR 482).</p>
<p>I=92d like one more day of soak time on staging before we tag it.</p>
<div><div style=3D"border:none;border-top:solid #E1E1E1 1.0pt;padding:3.0pt 0cm 0cm 0cm">
<p><b>From:</b> Priya Raman &lt;priya.raman@tidepool.example&gt;<br>
<b>Sent:</b> Tuesday, March 3, 2026 8:55 AM<br>
<b>To:</b> tidepool-dev@lists.tidepool.example<br>
<b>Subject:</b> [tidepool-dev] Release 0.11 plan</p></div></div>
<p>Hi all,</p>
<p>Proposal for 0.11: we cut the release branch on Thursday 12 March and ship on Tuesday 17 March.</p>
</body></html>
"""

THREAD = {
    "andre.eml": ANDRE_MAIL,
    "diego.eml": DIEGO_MAIL,
    "mara.eml": MARA_MAIL,
    "priya.eml": PRIYA_MAIL,
    "wei.eml": WEI_MAIL,
}
# Every line each sender wrote, as it reads once decoded.
WRITTEN = {
    ROOT: [
        "Hi all,",
        "Proposal for 0.11: we cut the release branch on Thursday 12 March and ship",
        "on Tuesday 17 March.",
        "Scope: the webhook retry queue, the new export format and André's caching fix.",
        "The Postgres 16 migration stays out of 0.11; it needs its own window.",
        "Objections by Friday, please.",
    ],
    DIEGO: [
        "Thursday works for me, but I am on call that week, so someone else should",
        "press the button on the 17th.",
        "The retry queue still has a flaky test (test_backoff_jitter); I will fix it",
        "by Wednesday or we drop it from the scope.",
        "Agreed. I can do the migration on Saturday 21 March, early morning.",
        "None from me.",
    ],
    MARA: [
        "I'll press the button on the 17th, Diego.",
        "Please keep the export format behind a feature flag until the docs are",
        "merged.",
    ],
    WEI: [
        "这个测试我昨天在杭州的构建机上也复现了，固定随机种子以后就不再失败。",
        "迁移那天我可以在北京远程值班，早上六点以后都在线。",
        "王伟",
    ],
    ANDRE: [
        "The caching fix is merged in main since this morning (PR 482).",
        "I’d like one more day of soak time on staging before we tag it.",
    ],
}
# What nobody wrote in the message that carries it: signatures, footers, quoted originals.
NOT_WRITTEN = ["Release manager, Tidepool", "mailing list", "Sent from my phone", "Sent: Tuesday", "Diego\n"]


def _write_mbox(path: Path, names: list[str]) -> None:
    box = mailbox.mbox(path)
    for name in names:
        box.add(THREAD[name])
    box.close()


def _ingest(args: list[str], vault: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, object]:
    code, out, err = run(
        ["ingest", *args, "--source", "tidepool-dev", "--wait", "--json", "--vault", str(vault)], capsys
    )
    assert code == 0, err
    report: dict[str, object] = json.loads(out)
    return report


def _fake_vault(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    vault = tmp_path / "vault"
    assert run(["init", str(vault)], capsys)[0] == 0
    config = vault / ".vaultmem" / "config.toml"
    config.write_text(config.read_text().replace('model = "default"', 'model = "fake"'))
    return vault


@pytest.mark.parametrize("layout", ["mbox", "eml-folder", "three-runs"])
def test_mailing_list_thread_through_the_cli(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], layout: str
) -> None:
    vault = _fake_vault(tmp_path, capsys)
    if layout == "mbox":
        _write_mbox(tmp_path / "thread.mbox", ["priya.eml", "diego.eml", "mara.eml", "wei.eml", "andre.eml"])
        _ingest([str(tmp_path / "thread.mbox")], vault, capsys)
    elif layout == "eml-folder":  # file names sort in no useful order: threading goes by time
        folder = tmp_path / "thread"
        folder.mkdir()
        for name, raw in THREAD.items():
            (folder / name).write_bytes(raw)
        _ingest([str(folder)], vault, capsys)
    else:  # the replies arrive in later runs, one without any thread header
        _write_mbox(tmp_path / "thread.mbox", ["priya.eml", "diego.eml"])
        _ingest([str(tmp_path / "thread.mbox")], vault, capsys)
        for name in ("mara.eml", "wei.eml", "andre.eml"):
            (tmp_path / name).write_bytes(THREAD[name])
        _ingest([str(tmp_path / "mara.eml")], vault, capsys)
        _ingest([str(tmp_path / "wei.eml"), str(tmp_path / "andre.eml")], vault, capsys)

    _, out, _ = run(["ls", "--json", "--vault", str(vault)], capsys)
    leaves = json.loads(out)
    by_message: dict[str, str] = {}
    for leaf in leaves:  # what reached the leaf files on disk
        body = (vault / leaf["path"]).read_text(encoding="utf-8").split("\n---\n", 1)[1]
        by_message[leaf["source_id"]] = by_message.get(leaf["source_id"], "") + body
    assert set(by_message) == set(WRITTEN)
    assert {leaf["session"] for leaf in leaves} == {ROOT}  # one thread, one session
    everything = "\n".join(by_message.values())
    for message_id, lines in WRITTEN.items():
        for line in lines:
            assert line in by_message[message_id], (message_id, line)
            assert everything.count(line) == 1, line  # a quoted line never comes back as new text
    for text in NOT_WRITTEN:
        assert text not in everything
    assert by_message[DIEGO].count("> …") == 4  # each inline answer shows it answers a quote
    assert "André's" in by_message[ROOT] and "I’d like" in by_message[ANDRE]

    _, out, _ = run(["search", "flaky test_backoff_jitter", "--json", "--vault", str(vault)], capsys)
    assert json.loads(out)[0]["provenance"]["message_ids"] == [DIEGO]
    _, out, _ = run(["search", "北京远程值班", "--json", "--vault", str(vault)], capsys)
    assert json.loads(out)[0]["provenance"]["message_ids"] == [WEI]
