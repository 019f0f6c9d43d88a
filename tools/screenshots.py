"""Screenshots of every dashboard panel on the sample vault, for the README (docs/img/dashboard-*.png).

    python tools/screenshots.py [--out docs/img]

Works on a copy of ``sample_vault/``: its index rebuilt, the two example folders configured as
``[sources]`` (notes, mail), git auto-commit turned on after a first commit of the copy (dated the day
before, so "Today" lists only today's work), and the demo's ``docs/examples/today.jsonl`` ingested with
its timestamps moved to today, then compacted: the "Today" panel then has a digest and the day's memory
commits. The status panel is shot after "Run ingest" of notes was clicked (the queue runner off, so the
queued job shows). Drives Debian's chromium through Playwright (as the tests do); 1440x900, light theme,
plus the graph and status panels in the dark theme.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from vaultmem.dashboard import Dashboard  # noqa: E402
from vaultmem.dashboard.page import CHROMIUM, CHROMIUM_FLAGS  # noqa: E402
from vaultmem.vault import Vault  # noqa: E402

WAIT_MS = 120_000


def prepare(tmp: Path) -> Path:
    vault_dir = tmp / "sample_vault"
    shutil.copytree(ROOT / "sample_vault", vault_dir)
    config = vault_dir / ".vaultmem" / "config.toml"
    examples = ROOT / "docs" / "examples"
    text = config.read_text(encoding="utf-8").replace("auto_commit = false", "auto_commit = true")
    text += f'\n[sources]\nnotes = "{examples / "notes"}"\nmail = "{examples / "mail"}"\n'
    config.write_text(text, encoding="utf-8")
    with Vault.open(vault_dir) as vault:
        vault.reindex()
    yesterday = (datetime.now(UTC) - timedelta(days=1)).strftime("%Y-%m-%dT12:00:00Z")
    env = {**os.environ, "GIT_AUTHOR_DATE": yesterday, "GIT_COMMITTER_DATE": yesterday}
    git = ["git", "-c", "user.name=vaultmem", "-c", "user.email=vaultmem@localhost"]
    subprocess.run(["git", "init", "-q"], cwd=vault_dir, check=True)
    subprocess.run([*git, "add", "-A"], cwd=vault_dir, check=True)
    subprocess.run([*git, "commit", "-qm", "the sample vault"], cwd=vault_dir, check=True, env=env)
    today = datetime.now(UTC).date().isoformat()
    records = []
    for line in (examples / "today.jsonl").read_text(encoding="utf-8").splitlines():
        record = json.loads(line)
        record["ts"] = today + str(record["ts"])[10:]
        record["session"] = f"{today}-friday"
        records.append(record)
    with Vault.open(vault_dir) as vault:
        vault.ingest_messages(records, source="assistant-chat")
        vault.compact()
    return vault_dir


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "img")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory() as tmp:
        vault_dir = prepare(Path(tmp))
        with (
            Vault.open(vault_dir) as vault,
            Dashboard(vault, run_queue=False) as dash,
            sync_playwright() as p,
        ):
            browser = p.chromium.launch(executable_path=CHROMIUM, args=list(CHROMIUM_FLAGS))
            for theme in ("light", "dark"):
                context = browser.new_context(viewport={"width": 1440, "height": 900}, color_scheme=theme)
                context.set_default_timeout(WAIT_MS)
                page = context.new_page()
                page.goto(dash.url)
                page.wait_for_selector("html[data-ready-status]")

                def shot(name: str, page: object = page, theme: str = theme) -> None:
                    suffix = "" if theme == "light" else "-dark"
                    page.screenshot(path=str(args.out / f"dashboard-{name}{suffix}.png"))  # type: ignore[attr-defined]

                def show(panel: str, page: object = page) -> None:
                    page.evaluate(f"location.hash = '#{panel}'")  # type: ignore[attr-defined]

                if theme == "light":
                    page.click('.source-row[data-source="notes"] button.ingest-btn')
                    page.wait_for_selector('#queue-table tr[data-kind="ingest"]')
                shot("status")
                show("graph")
                page.wait_for_selector('#cy[data-ready="1"]')
                # The test clicks the node (tests/test_dashboard.py); here the hash the click sets opens it.
                show("graph/place%3Akyoto")
                page.wait_for_selector("html[data-ready-topic]")
                page.wait_for_timeout(500)  # the selection's fade settles (cosmetic only)
                shot("graph")
                if theme == "dark":
                    context.close()
                    continue
                show("metrics")
                page.wait_for_selector("html[data-ready-metrics]")
                shot("metrics")
                show("heatmap")
                page.wait_for_selector("#heat-sources .strip-row")
                shot("heatmap")
                show("search")
                page.wait_for_selector("#search-q")
                page.fill("#search-q", "when is the ryokan check-in?")
                page.click("#search-form button[type=submit]")
                page.wait_for_selector("html[data-ready-search]")
                shot("search")
                show("tree")
                page.wait_for_selector("html[data-ready-tree]")
                source = page.locator('#tree-root > li[data-id="assistant-chat"]')
                source.locator(".trow").first.click()
                level = source.locator("li.kind-summary").first
                level.wait_for()
                level.locator(".trow").first.click()
                level.locator("li.kind-summary, li.kind-leaf").first.wait_for()
                shot("tree")
                show("today")
                page.wait_for_selector("html[data-ready-today]")
                page.locator("#commits details.commit summary").first.click()
                shot("today")
                context.close()
            browser.close()
    print(f"wrote {', '.join(sorted(p.name for p in args.out.glob('dashboard-*.png')))}")


if __name__ == "__main__":
    main()
