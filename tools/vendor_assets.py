"""Fetch the dashboard's JavaScript at pinned versions from the npm registry and vendor it.

    python tools/vendor_assets.py          # rewrite vaultmem/dashboard/static/vendor/ from npm
    python tools/vendor_assets.py --check  # fetch again and fail if the committed files differ

The dashboard loads no script from a CDN and needs no JavaScript toolchain to install: the built
browser bundles below are committed under ``vaultmem/dashboard/static/vendor/`` with their licences
and a ``MANIFEST.json`` (package, version, licence, the tarball's npm integrity and each file's
sha256). This script is how they got there: ``npm pack <name>@<version>`` (the published tarball,
nothing built here), then the bundle and the licence files are copied out of it. Needs ``npm`` on
PATH and the npm registry; run it only to change a version.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VENDOR = ROOT / "vaultmem" / "dashboard" / "static" / "vendor"

# name, version, files to copy out of the tarball (bundle first, then licences), licence (SPDX).
PINNED = (
    ("cytoscape", "3.34.4", ("dist/cytoscape.min.js", "LICENSE"), "MIT"),
    ("dompurify", "3.4.18", ("dist/purify.min.js", "LICENSE", "LICENSE-MPL"), "(MPL-2.0 OR Apache-2.0)"),
)


def _pack(name: str, version: str, into: Path) -> tuple[Path, str]:
    """``npm pack`` one package version into ``into``; returns the tarball and its npm integrity."""
    out = subprocess.run(
        ["npm", "pack", f"{name}@{version}", "--json", "--pack-destination", str(into)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    info = json.loads(out)[0]
    return into / info["filename"], info["integrity"]


def _vendored_name(name: str, member: str) -> str:
    base = member.rsplit("/", 1)[-1]
    return f"{name}.{base}" if base.upper().startswith("LICENSE") else base


def fetch(dest: Path) -> dict[str, object]:
    """Write every pinned bundle and licence into ``dest``; return the manifest."""
    dest.mkdir(parents=True, exist_ok=True)
    manifest: dict[str, object] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, version, members, licence in PINNED:
            tarball, integrity = _pack(name, version, Path(tmp))
            files = {}
            with tarfile.open(tarball) as tar:
                for member in members:
                    data = tar.extractfile(f"package/{member}")
                    if data is None:
                        raise SystemExit(f"{name}@{version}: {member} is not a file in the tarball")
                    target = dest / _vendored_name(name, member)
                    target.write_bytes(data.read())
                    files[target.name] = hashlib.sha256(target.read_bytes()).hexdigest()
            manifest[name] = {
                "version": version,
                "licence": licence,
                "integrity": integrity,
                "source": f"npm pack {name}@{version}",
                "files": files,
            }
    (dest / "MANIFEST.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    return manifest


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if the committed files differ")
    args = parser.parse_args()
    if shutil.which("npm") is None:
        raise SystemExit("npm is not on PATH (apt-get install -y npm)")
    if not args.check:
        fetch(VENDOR)
        print(f"vendored {', '.join(f'{n}@{v}' for n, v, _, _ in PINNED)} into {VENDOR.relative_to(ROOT)}")
        return
    with tempfile.TemporaryDirectory() as tmp:
        fetch(Path(tmp))
        differ = [
            p.name
            for p in sorted(Path(tmp).iterdir())
            if not (VENDOR / p.name).exists() or (VENDOR / p.name).read_bytes() != p.read_bytes()
        ]
    if differ:
        print(f"vendored files differ from npm: {', '.join(differ)}", file=sys.stderr)
        raise SystemExit(1)
    print("vendored files match npm")


if __name__ == "__main__":
    main()
