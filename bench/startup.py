"""Start-up: what `vaultmem search` from a cold shell imports and costs, optionally against an older tree.

    python bench/startup.py [--base DIR] [--runs 7] [--vault DIR]

``--base`` is a directory holding another copy of the ``vaultmem`` package (``git archive main vaultmem |
tar -x -C /tmp/base``): each run alternates the two trees, so a loaded machine slows both alike, and
the figures are the minimum over the runs (the least disturbed one). ``--base`` may also hold other
versions of dependencies (``pip install --no-deps --target DIR typer==0.29.2``): its PYTHONPATH comes
before the venv's site-packages. Reported: the import time of each heavy module during a whole
`vaultmem search` (self times summed by package, ``python -X importtime``), the vaultmem modules imported, a whole
`vaultmem search` on a copy of sample_vault/ (wall and CPU seconds of the process) and `vaultmem --help`.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _common import table

ROOT = Path(__file__).resolve().parent.parent
GROUPS = [
    "numpy",
    "typer",
    "pydantic",
    "pydantic_core",
    "rich",
    "click",
    "yaml",
    "email",
    "filelock",
    "tokenizers",
    "git",
]
HEAVY = [
    "vaultmem.redact",
    "vaultmem.entities_names",
    "vaultmem.entities",
    "vaultmem.scoring",
    "vaultmem.config",
    "vaultmem.index",
    "vaultmem.embed",
    "vaultmem.search",
    "vaultmem.ingest",
    "vaultmem.compact",
    "vaultmem.summarise",
    "vaultmem.steps",
    "vaultmem.topics.plan",
    "vaultmem.docmem",
    "vaultmem.sessions",
    "vaultmem.vault",
    "vaultmem.cli",
]
SEARCH = ["search", "Kyoto trip budget", "--limit", "3"]


def _env(tree: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(tree)
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # a user's install has its bytecode cached
    return env


def import_times(tree: Path, argv: list[str]) -> tuple[dict[str, int], dict[str, int], float]:
    """For one process (``-c "import vaultmem.cli"``, or ``-m vaultmem.cli search ...``, which also imports
    what the command imports lazily: typer 0.29's pydantic adapters): self microseconds per module,
    cumulative microseconds per module, and the CPU seconds of the whole process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = subprocess.run(
        [sys.executable, "-X", "importtime", *argv],
        env=_env(tree),
        cwd=tempfile.gettempdir(),  # not the checkout: `-c` puts the working directory first on sys.path
        capture_output=True,
        text=True,
        check=True,
    ).stderr
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    own: dict[str, int] = {}
    cumulative: dict[str, int] = {}
    for line in out.splitlines():
        if not line.startswith("import time:") or "cumulative" in line:
            continue
        head, total, name = line.split("|")
        own[name.strip()] = int(head.split(":")[1])
        cumulative[name.strip()] = int(total)
    return own, cumulative, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def group(module: str) -> str:
    top = module.split(".")[0]
    if top == "vaultmem":
        return module if module in HEAVY else "vaultmem (other modules)"
    return top if top in GROUPS else "standard library and other"


def cold_search(tree: Path, vault: Path) -> tuple[float, float]:
    """Wall and CPU seconds of one `vaultmem search` process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "vaultmem.cli", *SEARCH, "--vault", str(vault)],
        env=_env(tree),
        cwd=tempfile.gettempdir(),
        capture_output=True,
        check=True,
    )
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def cold_help(tree: Path) -> float:
    """Wall seconds of one `vaultmem --help` process."""
    t = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "vaultmem.cli", "--help"],
        env=_env(tree),
        cwd=tempfile.gettempdir(),
        capture_output=True,
        check=True,
    )
    return time.perf_counter() - t


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", type=Path, help="a directory holding an older vaultmem package")
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--vault", type=Path, help="vault to search (default: a copy of sample_vault/)")
    args = parser.parse_args()
    trees = {"now": ROOT}
    if args.base is not None:
        trees = {"base": args.base.resolve(), "now": ROOT}
    for tree in trees.values():
        subprocess.run([sys.executable, "-m", "compileall", "-q", str(tree / "vaultmem")], check=True)
    with tempfile.TemporaryDirectory() as tmp:
        vault = args.vault
        if vault is None:
            vault = Path(tmp) / "vault"
            shutil.copytree(ROOT / "sample_vault", vault)
            subprocess.run(
                [sys.executable, "-m", "vaultmem.cli", "reindex", "--vault", str(vault)],
                env=_env(ROOT),
                capture_output=True,
                check=True,
            )
        groups: dict[str, dict[str, float]] = {name: {} for name in trees}
        modules: dict[str, int] = {}
        import_cpu: dict[str, float] = {name: float("inf") for name in trees}
        wall: dict[str, float] = {name: float("inf") for name in trees}
        cpu: dict[str, float] = {name: float("inf") for name in trees}
        helps: dict[str, float] = {name: float("inf") for name in trees}
        for _ in range(args.runs):
            for name, tree in trees.items():  # alternated: both trees see the same load
                _own, _cumulative, used = import_times(tree, ["-c", "import vaultmem.cli"])
                import_cpu[name] = min(import_cpu[name], used)
                own, _cumulative, _used = import_times(
                    tree, ["-m", "vaultmem.cli", *SEARCH, "--vault", str(vault)]
                )
                modules[name] = sum(1 for m in own if m.startswith("vaultmem."))
                sums: dict[str, float] = {}
                for module, us in own.items():
                    sums[group(module)] = sums.get(group(module), 0.0) + us / 1000
                sums["all imports (sum of self times)"] = sum(own.values()) / 1000
                for key, ms in sums.items():
                    groups[name][key] = min(ms, groups[name].get(key, ms))
                w, c = cold_search(tree, vault)
                helps[name] = min(helps[name], cold_help(tree))
                wall[name], cpu[name] = min(wall[name], w), min(cpu[name], c)
    names = list(trees)
    two = len(names) == 2
    keys = [*GROUPS, *HEAVY, "vaultmem (other modules)", "standard library and other"]
    keys.append("all imports (sum of self times)")
    rows: list[list[object]] = []
    for key in keys:
        got = [groups[n].get(key) for n in names]
        if not any(got):
            continue
        cells: list[object] = [key, *("-" if f is None else f"{f:.1f}" for f in got)]
        if two:
            a, b = got
            cells.append(f"{a / b:.1f}x" if a and b else ("not imported" if a else "-"))
        rows.append(cells)
    rows.append(["vaultmem modules imported", *(modules[n] for n in names), *([""] if two else [])])
    for label, figures, scale in (
        ("`import vaultmem.cli` CPU ms", import_cpu, 1000),
        ("`vaultmem --help` wall ms", helps, 1000),
        ("`vaultmem search` wall ms", wall, 1000),
        ("`vaultmem search` CPU ms", cpu, 1000),
    ):
        cells = [label, *(f"{figures[n] * scale:.0f}" for n in names)]
        if two:
            cells.append(f"{figures['base'] / figures['now']:.2f}x")
        rows.append(cells)
    headers = ["imports of `vaultmem search`: self ms by module", *names, *(["base/now"] if two else [])]
    print(f"\n{args.runs} alternating runs, minimum of each figure")
    print(table(headers, rows))


if __name__ == "__main__":
    main()
