"""The module order of docs/architecture.md is the one the code follows.

The table "Modules, bottom to top" in docs/architecture.md is the only place the order is written: this
test reads it (every backticked dotted name in its module column, left to right, top to bottom) and the
imports of every module (``ast``, function-level imports included), and fails when a module imports one
that is not above it, when a module is missing from the table, or when the table names one that does
not exist. A module of a package imported from outside also loads the package's ``__init__`` (which
imports its members), so the package itself must be above the importer too.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import vaultmem
from vaultmem.errors import VaultError

ROOT = Path(vaultmem.__file__).parent
DOC = ROOT.parent / "docs" / "architecture.md"


def documented_order() -> list[str]:
    text = DOC.read_text(encoding="utf-8")
    section = text.split("## Modules, bottom to top", 1)[1].split("\n## ", 1)[0]
    order: list[str] = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 3 or not cells[1].startswith("`"):
            continue
        order.extend(re.findall(r"`([a-z_][a-z_0-9.]*)`", cells[1]))
    return order


def modules() -> dict[str, Path]:
    found = {}
    for path in sorted(ROOT.rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        if parts:  # vaultmem/__init__.py is the public surface, above everything
            found[".".join(parts)] = path
    return found


def imports_of(path: Path, known: set[str]) -> set[str]:
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module != "vaultmem" and not node.module.startswith("vaultmem."):
                continue
            base = node.module.removeprefix("vaultmem").removeprefix(".")
            for alias in node.names:
                name = f"{base}.{alias.name}".strip(".")
                out.add(name if name in known else base)
        elif isinstance(node, ast.Import):
            out.update(a.name.removeprefix("vaultmem.") for a in node.names if a.name.startswith("vaultmem."))
    return out


def test_the_table_lists_every_module_once() -> None:
    order = documented_order()
    assert len(order) == len(set(order)), [m for m in order if order.count(m) > 1]
    assert sorted(order) == sorted(modules())


def test_imports_point_down_the_table() -> None:
    order = documented_order()
    rank = {name: n for n, name in enumerate(order)}
    known = set(modules())
    wrong = []
    for name, path in modules().items():
        for target in sorted(imports_of(path, known) - {name}):
            needed = [target]
            package = target.rpartition(".")[0]
            if package and not name.startswith(package + "."):
                needed.append(package)  # importing a member runs the package's __init__
            wrong.extend(f"{name} -> {t}" for t in needed if rank.get(t, len(order)) > rank.get(name, -1))
    assert not wrong, "imports pointing up docs/architecture.md's table:\n" + "\n".join(wrong)


def test_public_names_are_sorted_and_complete() -> None:
    """As httpx checks its ``__all__``: sorted, naming exactly what the package exports (modules aside),
    and every error a caller may catch is among them."""
    lazy = set(vars(vaultmem)["_LAZY"])  # imported on first use (PEP 562)
    exported = sorted(
        lazy
        | {
            name
            for name, value in vars(vaultmem).items()
            if not name.startswith("_") and str(getattr(value, "__module__", "")).startswith("vaultmem")
        }
    )
    assert all(getattr(vaultmem, name) is not None for name in lazy)
    assert vaultmem.__all__ == sorted(vaultmem.__all__)
    assert vaultmem.__all__ == exported

    def errors(cls: type[VaultError]) -> set[str]:
        return {cls.__name__}.union(*(errors(sub) for sub in cls.__subclasses__()))

    assert errors(VaultError) <= set(vaultmem.__all__)
