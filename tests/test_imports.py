"""Export adapters, each on a fixture written for the test (tests/data/exports/): ChatGPT trees with
branches and null messages, Claude content blocks, Claude Code and Codex transcripts with tool calls,
WhatsApp in several locales, Telegram rich text, a Slack export folder, DiscordChatExporter JSON."""

from __future__ import annotations

import json
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import pytest

from vaultmem.errors import InvalidInput
from vaultmem.inputs import chatgpt, claudecode, codex, read_path, whatsapp
from vaultmem.inputs.exports import ExportFile, ImportOptions, head_text
from vaultmem.inputs.sniff import EXPORTS, detect, tree_format
from vaultmem.model import Message

DATA = Path(__file__).parent / "data" / "exports"
CHATGPT = DATA / "chatgpt" / "conversations.json"
CLAUDE_CODE = DATA / "claudecode" / "1f2e3d4c-5b6a-4798-8a9b-0c1d2e3f4a5b.jsonl"
CODEX = next((DATA / "codex").rglob("rollout-*.jsonl"))


def texts(messages: list[Message]) -> list[str]:
    return [m.text for m in messages]


# -- sniffing ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        (CHATGPT, "chatgpt"),
        (DATA / "claude" / "conversations.json", "claude"),
        (CLAUDE_CODE, "claude-code"),
        (CODEX, "codex"),
        (DATA / "whatsapp" / "WhatsApp Chat - Harbour walk.txt", "whatsapp"),
        (DATA / "whatsapp" / "WhatsApp Chat with Diego Ramos.txt", "whatsapp"),
        (DATA / "whatsapp" / "WhatsApp-Chat mit Jonas.txt", "whatsapp"),
        (DATA / "telegram" / "result.json", "telegram"),
        (DATA / "telegram" / "account" / "result.json", "telegram"),
        (next((DATA / "discord").glob("*.json")), "discord"),
        (DATA / "slack" / "general" / "2026-03-02.json", "slack"),
    ],
)
def test_each_fixture_is_recognised_by_content_under_any_name(path: Path, expected: str) -> None:
    head = head_text(path.read_bytes())
    assert [f.name for f in EXPORTS if f.sniff("renamed.dat", head)] == [expected]
    fmt = detect("renamed.dat", head)
    assert fmt is not None and fmt.name == expected


@pytest.mark.parametrize(
    "path",
    [
        Path(__file__).parents[1] / "docs" / "examples" / "team-slack.json",
        Path(__file__).parents[1] / "docs" / "examples" / "assistant-chat.jsonl",
        DATA / "claude" / "users.json",
        Path(__file__).parents[1] / "README.md",
    ],
)
def test_native_and_unrelated_files_are_not_taken_by_an_export_adapter(path: Path) -> None:
    assert detect(path.name, head_text(path.read_bytes())) is None


def test_slack_folder_is_recognised_from_its_file_names() -> None:
    names = [p.relative_to(DATA / "slack").as_posix() for p in (DATA / "slack").rglob("*.json")]
    fmt = tree_format(names)
    assert fmt is not None and fmt.name == "slack"
    assert tree_format(["notes/a.md", "2026-03-02.json"]) is None
    assert tree_format([f"Export Jan/{n}" for n in names]) is fmt


# -- ChatGPT -------------------------------------------------------------------------------------


def test_chatgpt_follows_the_branch_to_current_node() -> None:
    messages = read_path(CHATGPT).messages
    kyoto = [m for m in messages if m.meta.get("title") == "Kyoto trip budget"]
    assert [m.source_id for m in kyoto] == ["c1-u1", "c1-a1", "c1-a2", "c1-u2", "c1-a3"]
    joined = "\n".join(texts(messages))
    # regenerated answer and the edited-away question stay out; so do system, hidden, tool, thoughts
    assert "first draft answer that was regenerated" not in joined
    assert "And in euros?" not in joined
    assert "50170.0" not in joined and "I live in Lisbon" not in joined and "rooms plus rail" not in joined
    assert "Lisbon tram 28 Sunday timetable" not in joined  # a prompt to the browser tool
    assert "思考了" not in joined  # reasoning recap
    assert {m.role for m in messages} == {"user", "assistant"}
    assert all(m.source == "chatgpt" for m in messages)


def test_chatgpt_provenance_multimodal_code_and_chinese() -> None:
    by_id = {m.source_id: m for m in read_path(CHATGPT).messages}
    first = by_id["c1-u1"]
    assert first.session == "67c4a1b0-5e2f-8000-a1d2-0c9e7b3f4a11"
    assert first.ts == datetime(2026, 3, 2, 10, 0, 10, tzinfo=UTC)
    assert first.text.startswith("Here is the ryokan booking.")
    assert first.text.endswith("Attachments: ryokan-booking.png")
    assert "model" not in first.meta and by_id["c1-a3"].meta["model"] == "gpt-4o"
    assert by_id["c1-a1"].text.startswith("```python\nrooms = 3 * 48000")
    zh = by_id["z2"]
    assert zh.meta["title"] == "快速排序的实现" and zh.meta["model"] == "o4-mini"
    assert "```python\ndef quicksort(xs):\n    if len(xs) <= 1:" in zh.text
    assert "z4" not in by_id  # the null message at the tip of the branch


def test_chatgpt_all_branches_keeps_edits_and_regenerations_marked() -> None:
    file = ExportFile("conversations.json", CHATGPT.read_bytes())
    every = chatgpt.parse(file, ImportOptions(all_branches=True))
    alternates = {m.source_id for m in every if m.meta.get("branch") == "alternate"}
    assert alternates == {"c1-a1-old", "c1-u2-old", "c1-a3-old"}
    shown = chatgpt.parse(file, ImportOptions())
    assert {m.source_id for m in every} - alternates == {m.source_id for m in shown}
    # the same turn has the same id either way, so a later --all-branches import adds only the others
    assert {m.source_id: m.text for m in shown}.items() <= {m.source_id: m.text for m in every}.items()


def test_chatgpt_without_current_node_takes_the_newest_leaf_and_survives_cycles() -> None:
    conv = json.loads(CHATGPT.read_text(encoding="utf-8"))[0]
    del conv["current_node"]
    conv["mapping"]["client-created-root"]["parent"] = "c1-a3"  # a corrupt export: a loop
    messages = chatgpt.parse(ExportFile("c.json", json.dumps([conv]).encode()), ImportOptions())
    assert [m.source_id for m in messages][-1] == "c1-a3"


def test_chatgpt_very_long_conversation_is_read_in_linear_time() -> None:
    n = 20_000
    mapping: dict[str, object] = {"root": {"id": "root", "message": None, "parent": None, "children": ["n0"]}}
    for i in range(n):
        role = "user" if i % 2 == 0 else "assistant"
        mapping[f"n{i}"] = {
            "id": f"n{i}",
            "parent": "root" if i == 0 else f"n{i - 1}",
            "children": [f"n{i + 1}"] if i + 1 < n else [],
            "message": {
                "id": f"n{i}",
                "author": {"role": role},
                "create_time": 1772445600 + i,
                "content": {"content_type": "text", "parts": [f"turn {i}: the tide table for Cascais"]},
                "metadata": {},
            },
        }
    conv = {"title": "long", "conversation_id": "long-1", "current_node": f"n{n - 1}", "mapping": mapping}
    messages = chatgpt.parse(ExportFile("c.json", json.dumps([conv]).encode()), ImportOptions())
    assert len(messages) == n
    assert messages[0].text.startswith("turn 0:") and messages[-1].text.startswith(f"turn {n - 1}:")


def test_chatgpt_structure_errors_name_the_conversation() -> None:
    with pytest.raises(InvalidInput, match=r"c.json: conversation 1 has no 'mapping'"):
        chatgpt.parse(ExportFile("c.json", b'[{"mapping": {}}, {"title": "x"}]'), ImportOptions())


# -- Claude --------------------------------------------------------------------------------------


def test_claude_export_blocks_tools_attachments_and_unnamed_chat() -> None:
    result = read_path(DATA / "claude" / "conversations.json")
    messages = result.messages
    assert [m.role for m in messages] == ["user", "assistant", "user", "user", "assistant"]
    first, answer, thanks, zh, _ = messages
    assert first.meta["title"] == "Tidepool webhook panic" and first.source == "claude"
    assert first.text.endswith("Attachments: batcher.go")
    assert "slice is empty when flush runs" not in answer.text  # thinking stays out
    assert "→ web_search: go index out of range [0] with length 0 timer flush" in answer.text
    assert "← An empty slice has length 0." in answer.text
    assert "```go\nif len(b.pending) == 0 {" in answer.text
    assert thanks.text.endswith("Attachments: grafana-after.png")
    assert zh.text == "把这句话翻译成英文：我们下周三在雾凇岛见面。" and "title" not in zh.meta
    assert zh.session == "c9d8e7f6-1234-4abc-9def-00112233aabb"


# -- Claude Code ---------------------------------------------------------------------------------


def test_claude_code_turns_with_tools_one_line_each() -> None:
    messages = read_path(CLAUDE_CODE).messages
    assert [(m.role, m.source_id) for m in messages] == [
        ("user", "u-0001"),
        ("assistant", "u-0003"),
        ("user", "u-0011"),
        ("assistant", "u-0012"),
    ]
    answer = messages[1].text.split("\n")
    assert answer == [
        "Let me look at the batcher first.",
        "→ Read: /home/mara/src/tidepool/internal/webhook/batcher.go",
        "← 1\tpackage webhook (3 lines)".replace("\t", " "),
        "→ Edit: /home/mara/src/tidepool/internal/webhook/batcher.go",
        "← The file has been updated.",
        "→ Bash: go test ./internal/webhook/ -run TestFlushEmpty",
        "← ok github.com/mara/tidepool/internal/webhook 0.012s",
        "Fixed: `flush()` now returns early when nothing is pending, and TestFlushEmpty passes.",
    ]
    assert messages[3].text.split("\n")[1].startswith("← error: <tool_use_error>File has not been read")
    joined = "\n".join(texts(messages))
    for absent in ("Subagent chatter", "Probably the empty slice", "/clear", "Caveat:"):
        assert absent not in joined
    first = messages[0]
    assert first.source == "tidepool" and first.session == "1f2e3d4c-5b6a-4798-8a9b-0c1d2e3f4a5b"
    assert first.meta["project"] == "/home/mara/src/tidepool" and first.meta["git_branch"] == "fix/batcher"
    assert messages[1].meta["model"] == "claude-sonnet-4-5-20250929"


def test_claude_code_torn_last_line_is_left_for_next_time_and_bad_middle_line_raises() -> None:
    data = CLAUDE_CODE.read_bytes()
    torn = data + b'{"type":"user","message":{"role":"user","content":"half'
    assert texts(claudecode.parse(ExportFile("s.jsonl", torn), ImportOptions())) == texts(
        claudecode.parse(ExportFile("s.jsonl", data), ImportOptions())
    )
    lines = data.split(b"\n")
    lines[4] = b"{not json"
    with pytest.raises(InvalidInput, match=r"s.jsonl: line 5 is not valid JSON"):
        claudecode.parse(ExportFile("s.jsonl", b"\n".join(lines)), ImportOptions())


# -- Codex ---------------------------------------------------------------------------------------


def test_codex_session_turns_tools_and_injected_context() -> None:
    messages = read_path(CODEX).messages
    assert [m.role for m in messages] == ["user", "assistant", "user", "assistant"]
    assert messages[0].text == "Why does `make release` fail on the arm64 runner?"
    answer = messages[1].text.split("\n")
    assert answer[0] == "→ shell: bash -lc grep -n GOARCH Makefile"
    assert answer[1] == "← 12:GOARCH ?= amd64"
    assert answer[2].startswith("→ apply_patch: *** Begin Patch *** Update File: Makefile")
    assert answer[3] == "← Success. Updated the following files: (2 lines)"
    assert answer[4].startswith("The Makefile pinned `GOARCH ?= amd64`")
    assert messages[3].text.split("\n")[:2] == [
        "→ shell: cat Dockerfile",
        "← cat: Dockerfile: No such file or directory",
    ]
    joined = "\n".join(texts(messages))
    assert "environment_context" not in joined and "Inspecting the Makefile" not in joined
    assert joined.count("Why does `make release` fail") == 1  # event_msg repeats are not read
    assert {m.source for m in messages} == {"harbor"}
    assert messages[1].meta["model"] == "gpt-5-codex"
    assert {m.session for m in messages} == {"019a2d7a-6c4e-7f10-9d2b-4e5f6a7b8c9d"}


def test_codex_older_layout_without_envelope() -> None:
    lines = [
        {"id": "0f1e2d3c", "timestamp": "2025-05-02T08:00:00Z", "instructions": "be brief", "git": None},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "rename foo to bar"}]},
        {
            "type": "function_call",
            "name": "shell",
            "arguments": '{"command": ["rg", "foo"]}',
            "call_id": "c1",
        },
        {
            "type": "function_call_output",
            "call_id": "c1",
            "output": '{"output": "", "metadata": {"exit_code": 1}}',
        },
        {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "No foo found."}],
        },
    ]
    data = "\n".join(json.dumps(x) for x in lines).encode()
    assert codex.sniff("old.jsonl", head_text(data))
    messages = codex.parse(ExportFile("old.jsonl", data), ImportOptions())
    assert [m.text for m in messages] == [
        "rename foo to bar",
        "→ shell: rg foo\n← error: (no output)\nNo foo found.",
    ]
    assert messages[0].session == "0f1e2d3c" and messages[0].source == "codex"


# -- WhatsApp ------------------------------------------------------------------------------------


def test_whatsapp_ios_group_multiline_system_lines_and_media() -> None:
    messages = read_path(DATA / "whatsapp" / "WhatsApp Chat - Harbour walk.txt").messages
    assert [m.speaker for m in messages] == ["Mara Lind", "Diego Ramos", "Priya", "Mara Lind", "Diego Ramos"]
    assert messages[0].text == (
        "Saturday plan for the harbour walk:\n1. meet at Cais do Sodré at 10:00\n"
        "2. lunch at the fish market\n3. back by 16:00"
    )
    assert messages[2].text == "Count me in 🙌"  # the edit marker is dropped
    assert messages[3].text == "Attachment: 00000012-PHOTO-2026-03-02-09-18-00.jpg"
    assert messages[4].text == "周六见，别忘了带防晒霜！"
    assert messages[4].ts == datetime(2026, 3, 13, 21, 40, 11, tzinfo=UTC)  # 13/03: day first
    joined = "\n".join(texts(messages))
    assert "end-to-end" not in joined and "created this group" not in joined and "omitted" not in joined
    assert {m.session for m in messages} == {"Harbour walk"} and {m.source for m in messages} == {"whatsapp"}


def test_whatsapp_us_locale_month_first_with_narrow_no_break_space() -> None:
    messages = read_path(DATA / "whatsapp" / "WhatsApp Chat with Diego Ramos.txt").messages
    assert [(m.speaker, m.ts) for m in messages] == [
        ("Diego Ramos", datetime(2026, 3, 2, 9, 15, tzinfo=UTC)),
        ("Mara Lind", datetime(2026, 3, 2, 9, 31, tzinfo=UTC)),
        ("Mara Lind", datetime(2026, 3, 14, 19, 45, tzinfo=UTC)),  # 3/14: month first, 7:45 PM
    ]
    assert messages[1].text == "Yes, the 11:20 from Cais do Sodré.\nTickets are in my email."
    assert {m.session for m in messages} == {"Diego Ramos"}


def test_whatsapp_german_dots_and_24h() -> None:
    messages = read_path(DATA / "whatsapp" / "WhatsApp-Chat mit Jonas.txt").messages
    assert [(m.speaker, m.text) for m in messages] == [
        ("Jonas", "Kommst du am Samstag zum Hafenspaziergang?"),
        ("Mara Lind", "Ja! Treffpunkt 10:00 am Cais do Sodré."),
    ]
    assert messages[0].ts == datetime(2026, 3, 2, 18, 5, tzinfo=UTC) and messages[0].session == "Jonas"


@pytest.mark.parametrize(
    ("line", "when"),
    [
        ("[2026/03/14 07:05:09] A: x", datetime(2026, 3, 14, 7, 5, 9, tzinfo=UTC)),
        ("14/03/2026, 19:05 - A: x", datetime(2026, 3, 14, 19, 5, tzinfo=UTC)),
        ("3/4/26, 12:05 AM - A: x", datetime(2026, 3, 4, 0, 5, tzinfo=UTC)),
        ("2026-03-14 14:05 agenda: harbour walk", None),  # a note's dated line, not a chat line
        ("[14/03/2026, 19:05 - A: x", None),  # an opened bracket must close
    ],
)
def test_whatsapp_line_shapes(line: str, when: datetime | None) -> None:
    data = (line + "\n").encode()
    if when is None:
        assert not whatsapp.sniff("c.txt", data.decode()) or not whatsapp.parse(
            ExportFile("c.txt", data), ImportOptions()
        )
        return
    assert whatsapp.sniff("c.txt", data.decode())
    (message,) = whatsapp.parse(ExportFile("c.txt", data), ImportOptions())
    assert message.ts == when and message.speaker == "A" and message.text == "x"


def test_whatsapp_identical_messages_get_distinct_stable_ids() -> None:
    data = b"12/03/2026, 14:05 - A: ok\n12/03/2026, 14:05 - A: ok\n"
    first = whatsapp.parse(ExportFile("c.txt", data), ImportOptions())
    again = whatsapp.parse(ExportFile("c.txt", data), ImportOptions())
    assert len({m.source_id for m in first}) == 2
    assert [m.source_id for m in first] == [m.source_id for m in again]


# -- Telegram ------------------------------------------------------------------------------------


def test_telegram_rich_text_service_messages_and_media() -> None:
    messages = read_path(DATA / "telegram" / "result.json").messages
    by_id = {m.source_id: m for m in messages}
    assert set(by_id) == {
        "tg-4815162342-101",
        "tg-4815162342-102",
        "tg-4815162342-104",
        "tg-4815162342-105",
        "tg-4815162342-106",
    }
    assert by_id["tg-4815162342-102"].text == (
        "Yes! Meet at Cais do Sodré at 10:00. Route: [this map](https://maps.example.org/r/harbour), "
        "bring `sunscreen` @diego_r"
    )
    assert by_id["tg-4815162342-102"].ts == datetime.fromtimestamp(1772875241, tz=UTC)
    assert by_id["tg-4815162342-104"].text == "Attachment: photos/photo_3@07-03-2026_09-25-10.jpg"
    assert by_id["tg-4815162342-105"].text == "👍"
    assert by_id["tg-4815162342-106"].text.startswith("周六见！我会带上")
    assert {m.session for m in messages} == {"Diego Ramos"} and messages[0].speaker == "Diego Ramos"


def test_telegram_account_export_reads_every_chat() -> None:
    messages = read_path(DATA / "telegram" / "account" / "result.json").messages
    assert Counter(m.session for m in messages) == {"Diego Ramos": 5, "Harbor release crew": 2}
    crew = [m for m in messages if m.session == "Harbor release crew"]
    assert crew[0].meta["forwarded_from"] == "Harbor CI"
    assert crew[1].text == "Poll: Ship without arm64? (Yes / No)"


# -- Slack ---------------------------------------------------------------------------------------


def test_slack_export_folder_channels_threads_dms_and_markup() -> None:
    result = read_path(DATA / "slack")
    assert result.skipped == []
    by_channel = Counter(m.session for m in result.messages)
    assert by_channel == {"#general": 3, "#harbor-dev": 2, "#dm-Mara Lind-Priya Nair": 2}
    hello = next(m for m in result.messages if m.source_id == "slack-general-1772438460.000200")
    assert hello.speaker == "Mara Lind"
    assert hello.text == (
        "Hi @Priya Nair, the arm64 fix is in PR 88 (https://git.example.org/harbor/pull/88) & ready for #harbor-dev"
    )
    reply = next(m for m in result.messages if m.source_id == "slack-general-1772438520.000300")
    assert reply.meta["thread"] == "1772438460.000200" and reply.speaker == "Priya Nair"
    joined = "\n".join(texts(result.messages))
    assert "has joined the channel" not in joined and "set the channel topic" not in joined
    assert (
        "Attachments: arm64-build.log" in joined and "构建日志显示 GOARCH 还是 amd64 <- 这就是原因" in joined
    )
    assert any(m.speaker == "deploybot" for m in result.messages)


def test_slack_single_day_file_names_its_channel_by_folder() -> None:
    messages = read_path(DATA / "slack" / "harbor-dev" / "2026-03-03.json").messages
    assert {m.session for m in messages} == {"#harbor-dev"}
    assert [m.speaker for m in messages] == ["U01MARA", "U02PRIYA"]  # no users.json beside it


# -- Discord -------------------------------------------------------------------------------------


def test_discord_exporter_messages_replies_mentions_and_system() -> None:
    messages = read_path(next((DATA / "discord").glob("*.json"))).messages
    assert [m.speaker for m in messages] == ["Mara", "Priya"]
    assert messages[0].text == (
        "@Priya the 2.4.0 notes are ready for review, see the attached draft\n\n"
        "Attachments: release-notes-2.4.0.md"
    )
    assert messages[1].text == "Looks good. 我们周五发布吧。\n\nHarbor 2.4.0 milestone — 12 closed issues"
    assert messages[0].session == "Harbor Dev #releases" and messages[0].source == "discord"
    assert messages[0].source_id == "discord-910000000000000001-1200000000000000002"
