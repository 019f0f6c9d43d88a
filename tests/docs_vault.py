"""A documentation vault written for the tests: Obsidian-help-like pages in nested folders.

Pages have frontmatter (``tags``, ``aliases``, ``description``, ``permalink``, a key nobody knows),
headings at several levels, wikilinks to pages and headings (``[[Settings]]``, ``[[Canvas#Add cards|cards]]``),
embeds of attachments the vault does not hold (``![[canvas-icon.svg]]``), Markdown links, links in code
samples that are examples (never links), and a Chinese page. Deterministic for a given ``pages`` count.
"""

from __future__ import annotations

import random
from pathlib import Path

FOLDERS = (
    "Getting started",
    "Editing and formatting",
    "Linking notes and files",
    "Plugins",
    "Plugins/Core",
    "Files and folders",
    "Customization",
    "Obsidian Sync",
)
TOPICS = (
    "Settings",
    "Canvas",
    "Graph view",
    "Backlinks",
    "Daily notes",
    "Templates",
    "Command palette",
    "Hotkeys",
    "Search",
    "Bookmarks",
    "Properties",
    "Callouts",
    "Embed files",
    "Internal links",
    "Aliases",
    "Tags",
    "Themes",
    "CSS snippets",
    "Workspaces",
    "Outline",
    "File recovery",
    "Page preview",
    "Slash commands",
    "Word count",
    "Audio recorder",
)
SENTENCES = (
    "Open {a} from the ribbon, or run the command from the command palette.",
    "You can change how {a} behaves under Settings, in the section for core plugins.",
    "{a} keeps working offline; nothing leaves your device unless you turn on Sync.",
    "To undo a change in {a}, use file recovery, which keeps snapshots every five minutes.",
    "Hold Ctrl (Cmd on macOS) while you hover a link to preview it without leaving {a}.",
    "{a} stores its settings in the .obsidian folder of your vault, next to your notes.",
    "The price of a Sync plan is 4 USD a month when billed yearly; {a} is free.",
    "When {a} is off, the notes it made stay in your vault as ordinary Markdown files.",
)


def page_name(n: int) -> str:
    base = TOPICS[n % len(TOPICS)]
    return base if n < len(TOPICS) else f"{base} {n // len(TOPICS) + 1}"


def folder_of(n: int) -> str:
    return FOLDERS[n % len(FOLDERS)]


def page_text(n: int, pages: int, rng: random.Random) -> str:
    name = page_name(n)
    other = page_name((n + 1) % pages)
    third = page_name((n + 7) % pages)
    lines = [
        "---",
        f"tags: [help, {folder_of(n).split('/')[0].lower().replace(' ', '-')}]",
        f"aliases: [{name} help, How to use {name}]",
        f'description: "How to use {name} in Obsidian: where to find it, what it does."',
        f"permalink: {name.lower().replace(' ', '-')}",
        "mobile: true",
        "---",
        f"{rng.choice(SENTENCES).format(a=name)} See also [[{other}]] and [[Settings]].",
        "",
        "## Turn it on",
        "",
        f"1. Open [[Settings]].\n2. Under **Core plugins**, enable {name}.",
        f"{rng.choice(SENTENCES).format(a=name)}",
        "",
        "## Use it",
        "",
        f"![[{name.lower().replace(' ', '-')}-icon.svg]] {rng.choice(SENTENCES).format(a=name)}",
        f"Read [[{third}#Use it|how {third} is used]] and [the guide]({other.replace(' ', '%20')}.md).",
        "",
        "### Keyboard",
        "",
        f"{rng.choice(SENTENCES).format(a=name)} A link written as `[[Note name]]` is an example, not a link.",
        "",
        "```md",
        "[[Three laws of motion]]",
        "![[Engelbart.jpg]]",
        "```",
        "",
        "## Troubleshooting",
        "",
        f"{rng.choice(SENTENCES).format(a=name)} If nothing helps, ask in [[Community forum]] "
        "or read [[Help and support#Report a bug]].",
        "",
    ]
    return "\n".join(lines)


CHINESE = """---
tags: [help, 中文]
aliases: [快速开始]
description: 第一次使用 Obsidian 的步骤。
---
欢迎使用 Obsidian！先打开 [[Settings]]，再看看 [[Canvas]]。

## 创建笔记

按 Ctrl+N 创建新笔记，笔记保存在你的仓库文件夹里。

## 同步

同步服务每月 4 美元，可以在 [[Settings#Turn it on|设置]] 里打开。
"""


def write_docs_vault(root: Path, pages: int = 120, seed: int = 7) -> list[str]:
    """Write ``pages`` pages (plus a Chinese one) under ``root``; returns their relative paths."""
    rng = random.Random(seed)
    out = []
    for n in range(pages):
        rel = f"{folder_of(n)}/{page_name(n)}.md"
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(page_text(n, pages, rng), encoding="utf-8")
        out.append(rel)
    path = root / "Getting started" / "快速开始.md"
    path.write_text(CHINESE, encoding="utf-8")
    out.append("Getting started/快速开始.md")
    return out
