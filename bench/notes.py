"""Notes written by hand, indexed where they are (#15): what lands under ``sources/``, and how long it takes.

Writes an Obsidian-help-like set of notes (``tests/docs_vault.py``: nested folders, frontmatter,
wikilinks, a Chinese page) straight into a new vault, as a person's notes, then reads them the way the
watcher does (``Vault.read_notes``), admits them (``flush``), and rebuilds the index from the files
(``reindex``). Measured: section rows, leaf files and bytes under ``sources/`` (a copy of the notes is
what #15 removes), whether any note was changed by the engine, whether ``reindex`` gives the same ids,
``check``, and the wall time of each step (fake embedder: the engine's own cost, not the model's); then
a tenth of the notes are moved to another top folder (``Moved/``) and read again: how many of their
sections keep their ids (the same document) and ``check`` after it.
Links, after a ``compact`` (so summaries quote the notes), are counted by this tree's ``linkcheck`` over
both vaults alike: links in the files the engine writes and how many of them Obsidian cannot follow,
and the summary lines (document nodes, topics, digests) linking a section by its heading as a wikilink.

``--before DIR`` runs the same in a child process with another copy of the package first (for instance
``git archive main vaultmem | tar -x -C DIR``), so both rows come from one run.

    .venv/bin/python bench/notes.py --notes 120 [--before /tmp/main_src]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench._common import table  # noqa: E402


def measure(vault_dir: Path, notes: int) -> dict[str, object]:
    from tests.docs_vault import write_docs_vault
    from vaultmem.embed import FakeEmbedder
    from vaultmem.vault import Vault

    vault = Vault.init(vault_dir, embedder=FakeEmbedder())
    rels = write_docs_vault(vault_dir, notes)
    before = {r: (vault_dir / r).read_bytes() for r in rels}
    start = time.perf_counter()
    vault.read_notes(rels)
    read_s = time.perf_counter() - start
    start = time.perf_counter()
    vault.flush()
    flush_s = time.perf_counter() - start
    ids = sorted(r[0] for r in vault.conn.execute("SELECT id FROM chunks WHERE kind = 'leaf'"))
    files = [p for p in (vault_dir / "sources").rglob("*") if p.is_file()]
    leaf_files = sum(1 for p in files if p.name.endswith(".md") and p.name != "_summary.md")
    size = sum(p.stat().st_size for p in files)
    start = time.perf_counter()
    vault.reindex()
    reindex_s = time.perf_counter() - start
    after = sorted(r[0] for r in vault.conn.execute("SELECT id FROM chunks WHERE kind = 'leaf'"))
    check_ok = vault.check().ok
    vault.compact()
    out: dict[str, object] = {
        "notes": len(rels),
        "sections": len(ids),
        "leaf_files": leaf_files,
        "bytes": size,
        "notes_changed": sum(1 for r in rels if (vault_dir / r).read_bytes() != before[r]),
        "same_ids": ids == after,
        "check_ok": check_ok,
        "read_s": read_s,
        "flush_s": flush_s,
        "reindex_s": reindex_s,
    }
    # A tenth of the notes (with a folder above them) moved to another top folder, read as the watcher
    # reads a move: how many of their sections keep their ids (the same document).
    nested = [r for r in rels if r.count("/") >= 1][: max(1, len(rels) // 10)]
    kept_before = {r[0] for r in vault.conn.execute("SELECT id FROM chunks WHERE kind = 'leaf'")}
    moved = []
    for rel in nested:
        target = vault_dir / "Moved" / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        (vault_dir / rel).rename(target)
        moved.append(f"Moved/{rel}")
    start = time.perf_counter()
    vault.read_notes(moved)
    move_s = time.perf_counter() - start
    moved_rows = [
        str(r[0])
        for rel in moved
        for r in vault.conn.execute(
            "SELECT id FROM chunks WHERE kind = 'leaf' AND path >= ? AND path < ?", (rel + "#", rel + "$")
        )
    ]
    out.update(
        {
            "moved_across_notes": len(moved),
            "moved_sections_same_ids": f"{sum(1 for i in moved_rows if i in kept_before)}/{len(moved_rows)}",
            "move_read_s": move_s,
            "check_ok_after_move": vault.check().ok,
        }
    )
    return out


def links(vault_dir: Path) -> dict[str, object]:
    """Links of the files the engine wrote (``sources/``, ``topics/``, ``global/``), by this tree's rule."""
    from vaultmem import linkcheck, wikilinks
    from vaultmem.layout import Layout

    files = linkcheck.VaultFiles(Layout(vault_dir))
    engine = [r for r in files.notes if r.startswith(("sources/", "topics/", "global/"))]
    found = [(r, link) for r in engine for _s, _e, link in wikilinks.find_links(files.text(r) or "")]
    heading_children = sum(
        1
        for r in engine
        if r.endswith("/_summary.md")
        for line in (files.text(r) or "").splitlines()
        if line.startswith("- [[") and "#" in line.split("|", 1)[0] and "%%" in line
    )
    return {
        "engine_links": len(found),
        "engine_links_unresolved": sum(1 for r, link in found if not files.resolves(link, r)),
        "section_links_by_heading": heading_children,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--notes", type=int, default=120)
    parser.add_argument("--before", type=Path, help="another copy of the package, measured first")
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)  # the package to measure
    parser.add_argument("--vault", type=Path, help=argparse.SUPPRESS)  # where the child's vault goes
    args = parser.parse_args()
    if args.child is not None:
        sys.path.insert(0, str(args.child))  # before this tree, which holds the bench helpers
        print(json.dumps(measure(args.vault, args.notes)))
        return
    with tempfile.TemporaryDirectory() as tmp:
        rows = []
        if args.before is not None:
            old = Path(tmp) / "before"
            child = [
                sys.executable,
                __file__,
                "--child",
                str(args.before.resolve()),
                "--notes",
                str(args.notes),
            ]
            out = subprocess.run(
                [*child, "--vault", str(old)],
                check=True,
                capture_output=True,
                text=True,
            ).stdout
            rows.append(("before", {**json.loads(out.strip().splitlines()[-1]), **links(old)}))
        rows.append(("this tree", {**measure(Path(tmp) / "vault", args.notes), **links(Path(tmp) / "vault")}))
    keys = list(rows[0][1])
    print(table(["figure", *(name for name, _ in rows)], [[k, *(r[k] for _, r in rows)] for k in keys]))


if __name__ == "__main__":
    main()
