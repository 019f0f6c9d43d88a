"""sample_vault/ is what `just sample` builds from docs/examples/: re-ingesting those inputs today must
give the very same leaves (ids, sources, sessions), so a change to adapters or the chunker that would
change ids, or the sessions of existing email threads, shows up here."""

from __future__ import annotations

import re
from pathlib import Path

from tests.helpers import EXAMPLES_CONFIG, ROOT, ingest_examples
from vaultmem.embed import FakeEmbedder
from vaultmem.vault import Vault


def _sample_leaves() -> dict[str, tuple[str, str]]:
    leaves = {}
    for path in (ROOT / "sample_vault" / "sources").rglob("*.md"):
        text = path.read_text(encoding="utf-8")
        if "\nkind: leaf\n" not in text:
            continue
        fields = {k: re.search(rf"^{k}: (.*)$", text, re.M) for k in ("id", "source", "session")}
        values = {k: m.group(1).strip("'\"") if m else "" for k, m in fields.items()}
        leaves[values["id"]] = (values["source"], values["session"])
    return leaves


def test_ingesting_the_examples_again_gives_the_sample_vault_leaves(tmp_path: Path) -> None:
    with Vault.init(tmp_path / "v", EXAMPLES_CONFIG, embedder=FakeEmbedder()) as vault:
        ingest_examples(vault)
        rebuilt = {leaf.id: (leaf.source, leaf.session or "") for leaf in vault.ls()}
    expected = _sample_leaves()
    assert len(expected) > 100
    assert rebuilt == expected
