"""The Anthropic memory tool backed by the vault: every command through ``call`` (as the SDK's tool runner
sends them), confinement, hand edits, git, indexing, and the same class without the anthropic package."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from vaultmem.memtool import MAX_FILE_BYTES, ToolError, VaultMemoryTool, parse_command
from vaultmem.vault import Vault

REPO = Path(__file__).parent.parent
PREFS = "# Preferences\n- trains over flights\n- tea, not coffee\n"


@pytest.fixture
def tool(vault: Vault) -> VaultMemoryTool:
    return VaultMemoryTool(vault, client="claude-test")


def error(tool: VaultMemoryTool, command: dict[str, object]) -> str:
    with pytest.raises(ToolError) as caught:
        tool.call(command)
    return str(caught.value)


def git(root: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, check=True).stdout


def test_it_is_the_sdks_memory_tool(tool: VaultMemoryTool) -> None:
    from anthropic.lib.tools import BetaAbstractMemoryTool

    assert isinstance(tool, BetaAbstractMemoryTool)
    assert tool.to_dict() == {"type": "memory_20250818", "name": "memory"} and tool.name == "memory"


def test_every_command(tool: VaultMemoryTool, vault: Vault) -> None:
    root = vault.layout.root / "memories"
    empty = tool.call({"command": "view", "path": "/memories"})
    assert empty.startswith("Here're the files and directories up to 2 levels deep in /memories")
    assert tool.call({"command": "create", "path": "/memories/prefs.md", "file_text": PREFS}) == (
        "File created successfully at: /memories/prefs.md"
    )
    assert (root / "prefs.md").read_text() == PREFS
    shown = tool.call({"command": "view", "path": "/memories/prefs.md"})
    assert shown == (
        "Here's the content of /memories/prefs.md with line numbers:\n"
        "     1\t# Preferences\n     2\t- trains over flights\n     3\t- tea, not coffee\n     4\t"
    )
    part = tool.call({"command": "view", "path": "/memories/prefs.md", "view_range": [2, 3]})
    assert part.splitlines()[1:] == ["     2\t- trains over flights", "     3\t- tea, not coffee"]
    edited = tool.call(
        {
            "command": "str_replace",
            "path": "/memories/prefs.md",
            "old_str": "tea, not coffee",
            "new_str": "green tea",
        }
    )
    assert edited.startswith("The memory file has been edited.") and "     3\t- green tea" in edited
    assert tool.call(
        {
            "command": "insert",
            "path": "/memories/prefs.md",
            "insert_line": 1,
            "insert_text": "- window seats\n",
        }
    ) == ("The file /memories/prefs.md has been edited.")
    assert (
        root / "prefs.md"
    ).read_text() == "# Preferences\n- window seats\n- trains over flights\n- green tea\n"
    tool.call({"command": "create", "path": "/memories/trips/kyoto.md", "file_text": "Ryokan 14-16 April\n"})
    listing = tool.call({"command": "view", "path": "/memories"})
    assert (
        "\t/memories/prefs.md" in listing
        and "\t/memories/trips/" in listing
        and "\t/memories/trips/kyoto.md" in listing
    )
    assert tool.call(
        {"command": "rename", "old_path": "/memories/trips", "new_path": "/memories/travel"}
    ) == ("Successfully renamed /memories/trips to /memories/travel")
    assert (root / "travel" / "kyoto.md").is_file() and not (root / "trips").exists()
    assert tool.call({"command": "delete", "path": "/memories/travel/kyoto.md"}) == (
        "Successfully deleted /memories/travel/kyoto.md"
    )
    assert not (root / "travel" / "kyoto.md").exists()
    kept = list((vault.layout.root / ".trash").rglob("kyoto.md"))
    assert len(kept) == 1 and kept[0].read_text() == "Ryokan 14-16 April\n"  # recoverable without git too
    assert vault.check().ok


def test_command_errors_use_the_reference_wording(tool: VaultMemoryTool) -> None:
    tool.call({"command": "create", "path": "/memories/a.md", "file_text": "x\nx\n"})
    assert error(tool, {"command": "view", "path": "/memories/zz.md"}) == (
        "The path /memories/zz.md does not exist. Please provide a valid path."
    )
    assert "did not appear verbatim" in error(
        tool, {"command": "str_replace", "path": "/memories/a.md", "old_str": "y", "new_str": "z"}
    )
    assert "Multiple occurrences of old_str `x` in lines: 1, 2" in error(
        tool, {"command": "str_replace", "path": "/memories/a.md", "old_str": "x", "new_str": "z"}
    )
    assert "within the range [0, 2]" in error(
        tool, {"command": "insert", "path": "/memories/a.md", "insert_line": 9, "insert_text": "z"}
    )
    tool.call({"command": "create", "path": "/memories/b.md", "file_text": "1"})
    assert "already exists" in error(
        tool, {"command": "rename", "old_path": "/memories/a.md", "new_path": "/memories/b.md"}
    )
    assert "Cannot delete the /memories directory itself" in error(
        tool, {"command": "delete", "path": "/memories"}
    )
    assert "does not exist" in error(tool, {"command": "delete", "path": "/memories/none.md"})
    assert "Unknown or missing command" in error(tool, {"command": "format", "path": "/memories"})
    assert "needs: file_text" in error(tool, {"command": "create", "path": "/memories/c.md"})
    assert "must be a int" in error(
        tool, {"command": "insert", "path": "/memories/a.md", "insert_line": "2", "insert_text": "z"}
    )


def test_paths_are_confined(tool: VaultMemoryTool, vault: Vault, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.md").write_text("not yours")
    for path in (
        "/memories/../etc/passwd",
        "/memories/../../outside/secret.md",
        "/memories/a/../../x.md",
        "/memories/./a.md",
        "/memories/.hidden.md",
        "/memories/.git/config",
    ):
        assert "escape" in error(tool, {"command": "view", "path": path}), path
        assert "escape" in error(tool, {"command": "create", "path": path, "file_text": "x"}), path
    for path in (
        "/etc/passwd",
        "memories/a.md",
        "/memoriesX/a.md",
        "/tmp/memories/a.md",
        "C:\\memories\\a.md",
    ):
        assert "must start with /memories" in error(tool, {"command": "view", "path": path}), path
    tool.call({"command": "view", "path": "/memories"})  # makes the folder
    os.symlink(outside, vault.layout.root / "memories" / "link")
    assert "symlink" in error(tool, {"command": "view", "path": "/memories/link/secret.md"})
    assert "symlink" in error(tool, {"command": "create", "path": "/memories/link/new.md", "file_text": "x"})
    assert "symlink" in error(
        tool, {"command": "rename", "old_path": "/memories/link", "new_path": "/memories/l2"}
    )
    os.symlink(outside / "secret.md", vault.layout.root / "memories" / "file-link.md")
    assert "symlink" in error(
        tool, {"command": "str_replace", "path": "/memories/file-link.md", "old_str": "not", "new_str": "now"}
    )
    assert (outside / "secret.md").read_text() == "not yours" and not (outside / "new.md").exists()
    assert "symlink" not in tool.call({"command": "view", "path": "/memories"})  # links are not listed


def test_a_hand_edit_between_view_and_edit_is_never_lost(tool: VaultMemoryTool, vault: Vault) -> None:
    path = vault.layout.root / "memories" / "prefs.md"
    tool.call({"command": "create", "path": "/memories/prefs.md", "file_text": PREFS})
    tool.call({"command": "view", "path": "/memories/prefs.md"})
    # A person adds a line in Obsidian while Claude is thinking.
    path.write_text(PREFS + "- (Mara) cycles to work\n", encoding="utf-8")
    tool.call(
        {
            "command": "str_replace",
            "path": "/memories/prefs.md",
            "old_str": "tea, not coffee",
            "new_str": "green tea",
        }
    )
    assert path.read_text() == "# Preferences\n- trains over flights\n- green tea\n- (Mara) cycles to work\n"
    # Claude's view is now current again; the person edits once more: insert by line number and create
    # over the file are refused until Claude has seen the new text.
    path.write_text(path.read_text() + "- (Mara) no meetings before 10\n", encoding="utf-8")
    assert "changed since you last viewed it" in error(
        tool, {"command": "insert", "path": "/memories/prefs.md", "insert_line": 0, "insert_text": "x"}
    )
    assert "already exists and changed since you last viewed it" in error(
        tool, {"command": "create", "path": "/memories/prefs.md", "file_text": "overwritten"}
    )
    assert path.read_text().endswith("- (Mara) no meetings before 10\n")
    tool.call({"command": "view", "path": "/memories/prefs.md"})
    tool.call(
        {"command": "create", "path": "/memories/prefs.md", "file_text": "# Preferences\n- rewritten whole\n"}
    )
    assert path.read_text() == "# Preferences\n- rewritten whole\n"  # seen, then replaced: allowed


def test_a_file_claude_never_saw_is_not_overwritten(tool: VaultMemoryTool, vault: Vault) -> None:
    folder = vault.layout.root / "memories"
    folder.mkdir()
    (folder / "notes.md").write_text("Written by a person.\n", encoding="utf-8")
    assert "already exists" in error(
        tool, {"command": "create", "path": "/memories/notes.md", "file_text": "x"}
    )
    assert (folder / "notes.md").read_text() == "Written by a person.\n"


def test_writes_are_redacted_capped_and_searchable(tool: VaultMemoryTool, vault: Vault) -> None:
    tool.call(
        {
            "command": "create",
            "path": "/memories/infra.md",
            "file_text": "CI token: ghp_abcdefghijklmnopqrstuvwxyz0123456789\nThe staging box is called heron.\n",
        }
    )
    text = (vault.layout.root / "memories" / "infra.md").read_text()
    assert "ghp_abcdefghijklmnopqrstuvwxyz0123456789" not in text and "[REDACTED:" in text
    assert "would be" in error(
        tool, {"command": "create", "path": "/memories/big.md", "file_text": "x" * (MAX_FILE_BYTES + 1)}
    )
    assert not (vault.layout.root / "memories" / "big.md").exists()
    hits = vault.search("staging box heron", 3)
    assert hits and hits[0].extra.get("file") == "memories/infra.md"
    vault.flush()
    assert vault.check().ok
    path = vault.layout.root / "memories" / "infra.md"  # a person adds a secret by hand
    path.write_text(path.read_text() + "AWS key AKIAQ7N3XK2PLM4RT5VW typed by hand\n")
    shown = tool.call({"command": "view", "path": "/memories/infra.md"})
    assert "AKIAQ7N3XK2PLM4RT5VW" not in shown and "     3\tAWS key [REDACTED:" in shown  # line numbers kept


def test_git_records_every_change_and_keeps_what_was_deleted(git_vault: Vault) -> None:
    tool = VaultMemoryTool(git_vault, client="Claude API")
    root = git_vault.layout.root
    tool.call({"command": "create", "path": "/memories/prefs.md", "file_text": PREFS})
    tool.call({"command": "str_replace", "path": "/memories/prefs.md", "old_str": "tea", "new_str": "coffee"})
    tool.call({"command": "delete", "path": "/memories/prefs.md"})
    subjects = git(root, "log", "--format=%s").splitlines()
    assert subjects[:3] == [
        "memory: claude-api memory tool deleted /memories/prefs.md",
        "memory: claude-api memory tool edited /memories/prefs.md",
        "memory: claude-api memory tool created /memories/prefs.md",
    ]
    assert git(root, "show", "HEAD~1:memories/prefs.md") == PREFS.replace("tea", "coffee")
    assert git(root, "status", "--porcelain").strip() == ""


def test_without_the_anthropic_package(tmp_path: Path) -> None:
    """The same backend, with `anthropic` made unimportable: plain ``call`` and ``to_dict``."""
    Vault.init(tmp_path / "nv", '[embed]\nmodel = "fake"\n').close()
    script = f"""
import sys
sys.modules["anthropic"] = None  # as if it were not installed
from vaultmem.memtool import VaultMemoryTool, ToolError
from vaultmem.vault import Vault
with Vault.open({str(tmp_path / "nv")!r}) as vault:
    tool = VaultMemoryTool(vault)
    assert type(tool).__mro__[1].__name__ == "_Dispatch", type(tool).__mro__
    assert tool.to_dict() == {{"type": "memory_20250818", "name": "memory"}}
    print(tool.call({{"command": "create", "path": "/memories/a.md", "file_text": "hello"}}))
    try:
        tool.call({{"command": "view", "path": "/memories/../x"}})
    except ToolError as exc:
        print("refused:", exc)
"""
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "File created successfully at: /memories/a.md",
        "refused: Path /memories/../x would escape /memories or names a hidden file; refused",
    ]


def test_parse_command_matches_the_sdk_shapes() -> None:
    cmd = parse_command(
        {"command": "rename", "old_path": "/memories/a", "new_path": "/memories/b", "extra": 1}
    )
    assert (cmd.command, cmd.old_path, cmd.new_path) == ("rename", "/memories/a", "/memories/b")
    with pytest.raises(ToolError):
        parse_command(["view"])
