"""The dashboard: a local page that shows a vault (status, metrics, entity graph, ingest heatmap,
search, tree, the day) and its offline export.

``panels`` reads the vault through the public ``Vault`` API into one JSON view per panel; ``page``
owns the packaged assets (the page, its script and style, vendored bundles with their licences) and
the two forms of the page (served, exported); ``server`` serves it on 127.0.0.1 behind a token.
A package because the assets are real files; the Python side is three small modules.
"""

from __future__ import annotations

from pathlib import Path

from vaultmem import fsio
from vaultmem.dashboard.page import GENERATOR, exported
from vaultmem.dashboard.panels import Panels
from vaultmem.dashboard.server import Dashboard
from vaultmem.errors import InvalidInput
from vaultmem.vault import Vault

__all__ = ["Dashboard", "Panels", "export_html"]


def export_html(vault: Vault, out: str | Path) -> int:
    """Write the dashboard as one HTML file that opens offline (the data inlined, every script and
    style inline, no network). Returns its size in bytes."""
    path = Path(out)
    expected: str | None = None
    if path.exists():
        old = path.read_bytes() if path.is_file() else b""
        if GENERATOR not in old[:2048]:
            raise InvalidInput(f"{path} exists and is not a vaultmem export; choose another file name")
        expected = fsio.sha256_bytes(old)
    data = exported(Panels(vault, actions=False).snapshot())
    # The export is written outside the vault: its own folder is the confinement root.
    fsio.atomic_write(path.absolute(), data, root=path.absolute().parent, expected=expected)
    return len(data)
