"""How whole a documentation vault stays once ingested and compacted (#15): levels per page, links, keys.

Generates an Obsidian-help-like vault (``tests/docs_vault.py``: nested folders, frontmatter, wikilinks,
embeds, a Chinese page), ingests it as one folder, compacts, and measures from the files alone:

- folders per page: how many directories hold a page's leaves (1 = the page is one subtree);
- levels above a page: ``_summary.md`` levels between a page's leaves and its source's top;
- levels mixing pages: level folders that hold leaves of more than one page;
- unresolved links: wikilinks and Markdown links (outside code) that Obsidian cannot resolve, i.e.
  ghost notes; ``description`` kept: pages whose ``description`` is in some file of the vault (and the
  same for each page's ``source:`` URL, a key named like one the engine owns in a node);
- folder levels with a wrong depth: a folder level whose ``depth`` is not one more than its deepest
  child level's; summaries quoting a breadcrumb: level summaries holding a leaf's ``Page › Heading`` line.

``--before DIR`` also runs the same input through another copy of the package (for instance
``git archive main vaultmem | tar -x -C DIR``) in a child process, and measures its vault the same way.

    .venv/bin/python bench/docs.py --pages 173 [--before /tmp/main_src] [--embedder fake|minilm]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench._common import table  # noqa: E402
from tests.docs_vault import write_docs_vault  # noqa: E402

BUILD = """
import sys, time, json
sys.meta_path[:] = [f for f in sys.meta_path if "editable" not in repr(f).lower()]
sys.path.insert(0, {src!r})
from vaultmem.vault import Vault
from vaultmem.embed import FakeEmbedder, load_embedder
embedder = FakeEmbedder() if {fake!r} else None
start = time.perf_counter()
with Vault.init({vault!r}, embedder=embedder) as v:
    v.ingest_path({docs!r}, source="help")
    v.compact()
    ok = v.check().ok
print(json.dumps({{"seconds": time.perf_counter() - start, "check": ok}}))
"""


def build(src: str, docs: Path, vault: Path, fake: bool) -> dict[str, object]:
    code = BUILD.format(src=src, fake=fake, vault=str(vault), docs=str(docs))
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
    )
    result: dict[str, object] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def measure(vault: Path, pages: list[str], docs: Path) -> dict[str, float]:
    from vaultmem.layout import Layout
    from vaultmem.linkcheck import vault_links

    folders: dict[str, set[Path]] = defaultdict(set)
    depths: dict[str, list[int]] = defaultdict(list)
    level_pages: dict[Path, set[str]] = defaultdict(set)
    top = vault / "sources" / "help"
    for path in top.rglob("*.md"):
        if path.name == "_summary.md":
            continue
        text = path.read_text(encoding="utf-8")
        found = re.search(r"^session: (.*)$", text, re.M)
        if not found:
            continue
        page = found.group(1).strip().strip("'\"")
        folders[page].add(path.parent)
        level_pages[path.parent].add(page)
        depth = 0
        at = path.parent
        while at != top and at != vault:
            depth += (at / "_summary.md").is_file()
            at = at.parent
        depths[page].append(depth)
    every = "\n".join(p.read_text(encoding="utf-8") for p in vault.rglob("*.md") if ".trash" not in p.parts)
    descriptions = [
        m.group(1)
        for rel in pages
        if (m := re.search(r"^description: (.*)$", (docs / rel).read_text(encoding="utf-8"), re.M))
    ]
    sources = [
        m.group(1)
        for rel in pages
        if (m := re.search(r"^source: (.*)$", (docs / rel).read_text(encoding="utf-8"), re.M))
    ]
    wrong_depth = breadcrumbs = 0
    for node in top.rglob("_summary.md"):
        text = node.read_text(encoding="utf-8")
        summary = text.split("\n---\n", 1)[-1].split("## Children", 1)[0]
        breadcrumbs += "›" in summary
        if re.search(r"^document: .*/['\"]?$", text, re.M):
            own = re.search(r"^depth: (\d+)$", text, re.M)
            kids = [
                int(d.group(1))
                for child in node.parent.glob("*/_summary.md")
                if (d := re.search(r"^depth: (\d+)$", child.read_text(encoding="utf-8"), re.M))
            ]
            wrong_depth += own is None or int(own.group(1)) != 1 + max(kids, default=0)
    checked, bad = vault_links(Layout(vault))
    counts = [len(folders[p]) for p in pages if p in folders]
    levels = [max(depths[p]) for p in pages if p in depths]
    return {
        "pages found": len(counts),
        "folders per page (mean)": sum(counts) / max(1, len(counts)),
        "folders per page (max)": max(counts, default=0),
        "pages in one folder": sum(1 for c in counts if c == 1),
        "levels above a page (mean)": sum(levels) / max(1, len(levels)),
        "levels above a page (max)": max(levels, default=0),
        "levels mixing pages": sum(1 for s in level_pages.values() if len(s) > 1),
        "links checked": checked,
        "unresolved links": len(bad),
        "description kept": sum(1 for d in descriptions if d in every),
        "`source:` URL kept": sum(1 for u in sources if u in every),
        "folder levels with a wrong depth": wrong_depth,
        "summaries quoting a breadcrumb": breadcrumbs,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--pages", type=int, default=173)
    parser.add_argument("--before", help="another copy of the vaultmem package to compare with")
    parser.add_argument("--embedder", choices=("fake", "minilm"), default="minilm")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        docs = Path(tmp) / "help"
        pages = write_docs_vault(docs, pages=args.pages)
        runs = {}
        if args.before:
            runs["before"] = (args.before, Path(tmp) / "before")
        runs["after"] = (str(ROOT), Path(tmp) / "after")
        results = {}
        for name, (src, vault) in runs.items():
            started = time.perf_counter()
            built = build(src, docs, vault, args.embedder == "fake")
            figures = measure(vault, pages, docs)
            figures["ingest + compact s"] = float(built["seconds"])  # type: ignore[arg-type]
            figures["check ok"] = bool(built["check"])
            results[name] = figures
            print(f"{name}: {time.perf_counter() - started:.1f} s", file=sys.stderr)
    names = list(results)
    rows = [[key, *(results[n][key] for n in names)] for key in results["after"]]
    print(f"{len(pages)} pages ({args.pages} + 1 Chinese), embedder {args.embedder}")
    print(table(["figure", *names], rows))


if __name__ == "__main__":
    main()
