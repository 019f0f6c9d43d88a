"""The dashboard page: ``index.html`` with its assets linked (served) or inlined (the offline export).

Owns the packaged assets (``static/``: the page, its script and style, the vendored bundles listed in
``static/vendor/MANIFEST.json``) and the Content-Security-Policy of each form: the served page may load
scripts, styles and data from its own origin only; the exported file may run only the scripts whose
hashes its policy names and load nothing at all. Never reads the vault.
"""

from __future__ import annotations

import base64
import hashlib
import html
import json
from functools import cache
from importlib.resources import files
from typing import Any

# The order matters: the sanitiser and the graph library before the app that uses them.
SCRIPTS = ("vendor/purify.min.js", "vendor/cytoscape.min.js", "app.js")
STYLES = ("app.css",)
ASSETS = {
    **{name: "text/javascript; charset=utf-8" for name in SCRIPTS},
    "app.css": "text/css; charset=utf-8",
    "favicon.svg": "image/svg+xml",
}

# How the tests, bench/dashboard.py and tools/screenshots.py drive the page: Debian's chromium (never a
# downloaded browser), headless, with the background connections a closed network refuses turned off.
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)
GENERATOR = b'<meta name="generator" content="vaultmem dashboard">'  # how an earlier export is known
# cytoscape adds a <style> element (which the policy refuses) unless an element with this id exists: the
# page's own stylesheet carries the id, and the rule it would add is in app.css.
CYTOSCAPE_STYLE_ID = "__________cytoscape_stylesheet"
SERVED_CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self';"
    " base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)


@cache
def asset(name: str) -> bytes:
    """A packaged asset's bytes (``name`` one of ``ASSETS``)."""
    if name not in ASSETS and name != "index.html":
        raise KeyError(name)
    return files("vaultmem.dashboard").joinpath("static", *name.split("/")).read_bytes()


def served(token: str) -> bytes:
    """The page as the server sends it: assets by URL, the token for the page's own requests."""
    head = f'<meta name="vaultmem-token" content="{html.escape(token)}">' + "".join(
        f'<link rel="stylesheet" id="{CYTOSCAPE_STYLE_ID}" href="static/{name}">' for name in STYLES
    )
    head += '<link rel="icon" href="static/favicon.svg">'
    scripts = "".join(f'<script src="static/{name}" defer></script>' for name in SCRIPTS)
    return _fill(head, scripts).encode("utf-8")


def exported(snapshot: dict[str, Any]) -> bytes:
    """One self-contained HTML file: every script and style inline, the data as JSON, a policy that
    allows exactly those scripts and styles (by hash) and no network at all."""
    codes = [asset(name).decode("utf-8") for name in SCRIPTS]
    css = "".join(asset(name).decode("utf-8") for name in STYLES)
    for code in (*codes, css):
        if "<script" in code.lower() or "</script" in code.lower() or "</style" in code.lower():
            raise ValueError("an asset holds a tag that would end its inline element")
    policy = (
        "default-src 'none'; "
        f"script-src {' '.join(_hash(c) for c in codes)}; style-src {_hash(css)}; img-src data:;"
        " base-uri 'none'; form-action 'none'"
    )
    icon = base64.b64encode(asset("favicon.svg")).decode("ascii")
    head = (
        f'<meta http-equiv="Content-Security-Policy" content="{policy}">'
        f'<link rel="icon" href="data:image/svg+xml;base64,{icon}"><style id="{CYTOSCAPE_STYLE_ID}">{css}</style>'
    )
    # JSON inside <script>: "<" escaped, so memory text can never end the element or open a comment.
    data = json.dumps(snapshot, ensure_ascii=False, separators=(",", ":")).replace("<", "\\u003c")
    scripts = f'<script type="application/json" id="vm-snapshot">{data}</script>' + "".join(
        f"<script>{c}</script>" for c in codes
    )
    return _fill(head, scripts).encode("utf-8")


def _fill(head: str, scripts: str) -> str:
    page = asset("index.html").decode("utf-8")
    return page.replace("<!--vm:head-->", head, 1).replace("<!--vm:scripts-->", scripts, 1)


def _hash(code: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(code.encode("utf-8")).digest()).decode("ascii") + "'"
