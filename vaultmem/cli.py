"""``vaultmem`` command line: a thin typer adapter over ``Vault``.

Composition root: finds the vault (``--vault``, then ``VAULTMEM_VAULT``, then the current directory and
its parents), calls the library, renders text or ``--json``. Any ``VaultError`` becomes one line on
stderr and exit status 1. Progress bars go to stderr and only on a terminal.
"""

from __future__ import annotations

import json
import os
import sqlite3
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from typer._click import exceptions as click_exceptions

from vaultmem import db
from vaultmem.errors import InvalidInput, VaultError, VaultNotFound
from vaultmem.fsio import is_disk_full
from vaultmem.layout import STATE_DIR
from vaultmem.leaffile import leaf_json
from vaultmem.model import LEAF_ID_RE, SUMMARY_ID_RE, Leaf, format_ts
from vaultmem.summaryfile import SummaryNode, summary_json
from vaultmem.tokens import count_tokens

if TYPE_CHECKING:
    from vaultmem.vault import Vault

# The names of ``inputs.sniff.FORMAT_NAMES``, written out: importing the sniffer imports every export
# parser, which a `vaultmem search` must not pay for (tests/test_cli.py checks that they agree).
FORMAT_NAMES = (
    "chatgpt",
    "claude",
    "claude-code",
    "codex",
    "telegram",
    "discord",
    "slack",
    "whatsapp",
    "chat",
    "markdown",
    "email",
    "mbox",
)

app = typer.Typer(
    name="vaultmem",
    help="Long-term memory for AI agents, kept as plain Markdown you can read, edit and diff.\n\n"
    "Exit status: 0 done, 1 an error in the vault or the input (one line on stderr), 2 a usage error,"
    " 130 interrupted (Ctrl-C).",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
    # Plain help: the same text on a terminal, in a pipe and in docs/cli.md (generated from it).
    rich_markup_mode=None,
    context_settings={"max_content_width": 100},
)

VaultOpt = Annotated[
    Path | None,
    typer.Option(
        "--vault", "-V", metavar="DIR", help="Vault directory (default: $VAULTMEM_VAULT, then the cwd)."
    ),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of text.")]
SourceFilter = Annotated[
    str | None,
    typer.Option(
        "--source", "-s", metavar="NAME", help="Only memories of this source (a folder under sources/)."
    ),
]
SessionFilter = Annotated[
    str | None, typer.Option("--session", metavar="ID", help="Only memories of this session.")
]
TopicFilter = Annotated[
    str | None,
    typer.Option(
        "--topic", "-t", metavar="ENTITY", help="Only leaves mentioning this entity (a name or key)."
    ),
]


def _limit_opt(help_text: str) -> Any:
    """``--limit`` / ``-n``: the one name for "how many" across commands."""
    return typer.Option("--limit", "-n", min=1, metavar="N", help=help_text)


def _alias(*names: str) -> Any:
    """An old spelling of ``--limit`` (``--k``, ``--n``), still accepted, no longer shown."""
    return typer.Option(*names, hidden=True, min=1)


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import version

        typer.echo(f"vaultmem {version('vaultmem')}")
        raise typer.Exit()


@app.callback()
def _root(
    _version_flag: Annotated[
        bool,
        typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit."),
    ] = False,
) -> None:
    pass


def locate_vault(explicit: Path | None) -> Path:
    if explicit is not None:
        return explicit
    env = os.environ.get("VAULTMEM_VAULT")
    if env:
        return Path(env)
    here = Path.cwd()
    for candidate in (here, *here.parents):
        if (candidate / STATE_DIR).is_dir():
            return candidate
    raise VaultNotFound(
        f"no vault in {here} or its parents; pass --vault, set VAULTMEM_VAULT, or run `vaultmem init`"
    )


def open_vault(explicit: Path | None) -> Vault:
    """Open the vault and say on stderr what opening it had to do (an index rebuilt after damage)."""
    from vaultmem.vault import Vault  # here, not on top: `vaultmem mcp` answers before it opens a vault

    vault = Vault.open(locate_vault(explicit))
    # One command, then exit: opening the faster query runtime after its search would cost the process
    # more than it saves (a server turns it back on).
    vault.warm_queries = False
    say_warnings(vault)
    return vault


def say_warnings(vault: Vault) -> None:
    """Print (on stderr) and forget what the vault had to do besides the command (an index rebuilt)."""
    for warning in vault.warnings:
        typer.echo(f"vaultmem: warning: {warning}", err=True)
    vault.warnings.clear()


def emit_json(data: Any) -> None:
    typer.echo(json.dumps(data, ensure_ascii=False, indent=2, default=str))


@contextmanager
def progress_bar(label: str) -> Iterator[Callable[[int, int], None] | None]:
    """A rich progress bar on stderr when it is a terminal; nothing when piped."""
    if not sys.stderr.isatty():
        yield None
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeRemainingColumn

    with Progress(
        "[progress.description]{task.description}",
        BarColumn(),
        MofNCompleteColumn(),
        TimeRemainingColumn(),
        transient=True,
    ) as bar:
        task = bar.add_task(label, total=None)

        def update(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        yield update


@contextmanager
def interruptible(vault: Vault) -> Iterator[None]:
    """Ctrl-C in long work: say what was written and what is still queued (the jobs this process held
    are back in the queue by now), then exit 130."""
    before = vault.tally()
    try:
        yield
    except KeyboardInterrupt:
        after = vault.tally()
        typer.echo(
            f"interrupted: {after['leaves'] - before['leaves']} new leaves written (kept),"
            f" {max(0, after['vectors'] - before['vectors'])} embedded; {after['queued']} jobs queued"
            " (`vaultmem jobs --run` or `vaultmem ingest --wait` finishes them)",
            err=True,
        )
        raise typer.Exit(130) from None


def _print_summary(node: SummaryNode, where: str, *, targets: bool) -> None:
    """A summary as text: title and path, its facts, its text, its child links."""
    typer.echo(f"# {node.title}  ({node.path})")
    typer.echo(
        f"id: {node.id}  {where}  leaves: {node.descendants}  "
        f"{format_ts(node.earliest) or '?'} .. {format_ts(node.latest) or '?'}"
        f"  summariser: {node.summariser}{'  STALE' if node.stale else ''}"
    )
    typer.echo("")
    typer.echo(node.searchable)
    typer.echo("")
    for link in node.children:
        typer.echo(f"  - {link.label}  ({link.target})" if targets else f"  - {link.label}")


def _leaf_line(leaf: Leaf) -> str:
    who = leaf.speaker or leaf.role or "-"
    text = " ".join(leaf.text.split())
    if len(text) > 90:
        text = text[:87] + "..."
    return f"{leaf.id}  {format_ts(leaf.ts) or '-':20}  {leaf.status.value:18}  {who[:14]:14}  {text}"


@app.command()
def init(
    path: Annotated[Path, typer.Argument(metavar="PATH", help="Directory for the new vault.")] = Path("."),
    as_json: JsonOpt = False,
) -> None:
    """Create a vault in PATH."""
    from vaultmem.vault import Vault

    with Vault.init(path) as vault:
        root = vault.layout.root
    if as_json:
        emit_json({"path": str(root)})
        return
    typer.echo(f"created vault at {root}")


@app.command()
def ingest(
    paths: Annotated[
        list[Path],
        typer.Argument(
            metavar="PATH",
            help="Files, directories or ZIP exports: chat .json/.jsonl, .md/.txt, .eml, mbox, and exports"
            " of ChatGPT, Claude, Claude Code, Codex, WhatsApp, Telegram, Slack, Discord.",
        ),
    ],
    source: Annotated[
        str | None,
        typer.Option(
            "--source",
            "-s",
            metavar="NAME",
            help="Source name (default: from the file name; exports name their own, e.g. chatgpt).",
        ),
    ] = None,
    fmt: Annotated[
        str | None,
        typer.Option(
            "--format",
            "-f",
            metavar="FORMAT",
            help="Read every file as this format instead of recognising it: " + ", ".join(FORMAT_NAMES) + ".",
        ),
    ] = None,
    all_branches: Annotated[
        bool,
        typer.Option("--all-branches", help="ChatGPT: keep edited and regenerated branches too."),
    ] = False,
    wait: Annotated[
        bool, typer.Option("--wait", help="Also embed now: run queued work until the queue is idle.")
    ] = False,
    vault_path: VaultOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Ingest chats, documents, emails and exported histories into the vault.

    Each file is recognised by its content (a ChatGPT or Claude export, a Claude Code or Codex session,
    a WhatsApp, Telegram, Slack or Discord export), else read by its suffix; a ZIP export is read as it
    is. Re-importing an export adds only the turns the vault does not hold yet.
    """
    with open_vault(vault_path) as vault, interruptible(vault), vault.commit_batch("memory: ingest"):
        with progress_bar("ingesting") as progress:
            reports = [
                vault.ingest_path(p, source=source, progress=progress, fmt=fmt, all_branches=all_branches)
                for p in paths
            ]
        work = None
        if wait:
            with progress_bar("embedding") as progress:
                work = vault.flush(progress)
    total = reports[0]
    for report in reports[1:]:
        total = total.merge(report)
    if as_json:
        emit_json(
            {
                "messages": total.messages,
                "added": len(total.added),
                "updated": len(total.updated),
                "removed": len(total.removed),
                "duplicates": total.duplicates,
                "dropped": total.dropped,
                "redacted": total.redacted,
                "sources": list(total.sources),
                "skipped": [{"path": s.path, "reason": s.reason} for s in total.skipped],
                "ids": list(total.added),
                "embedded": work.embedded if work else None,
            }
        )
        return
    for skipped in total.skipped:
        typer.echo(f"skipped {skipped.path}: {skipped.reason}", err=True)
    typer.echo(
        f"{total.messages} messages -> {len(total.added)} new leaves ({total.duplicates} already present, "
        f"{total.dropped} dropped as low-value, {total.redacted} redacted) in {', '.join(total.sources) or '-'}"
    )
    if total.updated or total.removed:
        typer.echo(
            f"documents: {len(total.updated)} sections replaced in place, {len(total.removed)} removed"
        )
    if work is not None:
        typer.echo(
            f"embedded {work.embedded} leaves ({work.reused} vectors reused), admitted {work.admitted}"
        )
        for note in work.notes:
            typer.echo(f"note: {note}", err=True)


@app.command()
def show(
    node_id: Annotated[
        str | None, typer.Argument(metavar="ID", help="A leaf or summary id; without one, the vault's tree.")
    ] = None,
    vault_path: VaultOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Show a leaf or a level; without an id, the tree of sources."""
    with open_vault(vault_path) as vault:
        if node_id is not None and node_id.startswith("s"):
            node = vault.summary(node_id)
            if as_json:
                emit_json(summary_json(node))
                return
            _print_summary(node, f"depth: {node.depth}", targets=False)
            return
        if node_id is not None:
            leaf = vault.get(node_id)
            if as_json:
                emit_json(leaf_json(leaf))
                return
            typer.echo(f"# {leaf.id}  ({leaf.path})")
            for key, value in leaf.provenance.items():
                if value not in (None, [], ""):
                    typer.echo(f"{key}: {value}")
            typer.echo(
                f"status: {leaf.status.value}  score: {leaf.score}  reasons: {', '.join(leaf.reasons)}"
            )
            typer.echo("")
            typer.echo(leaf.text)
            return
        tree = vault.source_tree()
        if as_json:
            emit_json(
                {
                    src: {lvl: [leaf.id for leaf in leaves] for lvl, leaves in levels.items()}
                    for src, levels in tree.items()
                }
            )
            return
        if not tree:
            typer.echo("(empty vault)")
        titles = vault.level_titles()
        for src, levels in tree.items():
            typer.echo(f"sources/{src}/")
            dirs = sorted(set(levels) | {d for d in titles.get(src, {}) if d})
            for lvl in dirs:
                leaves = levels.get(lvl, [])
                indent = "  " * (lvl.count("/") + 1)
                name = lvl.rsplit("/", 1)[-1]
                title = titles.get(src, {}).get(lvl)
                label = f"{title}  " if title else ""
                count = f"({len(leaves)} leaves)" if leaves else ""
                typer.echo(f"{indent}{name}/  {label}{count}".rstrip())
                if lvl == "_fresh":
                    for leaf in leaves[:5]:
                        typer.echo(f"{indent}  {_leaf_line(leaf)}")
                    if len(leaves) > 5:
                        typer.echo(f"{indent}  ... {len(leaves) - 5} more (vaultmem ls --source {src})")


@app.command("ls")
def ls_cmd(
    source: SourceFilter = None,
    session: SessionFilter = None,
    status: Annotated[
        str | None,
        typer.Option("--status", metavar="STATUS", help="pending_extraction|admitted|sealed|dropped"),
    ] = None,
    limit: Annotated[int | None, _limit_opt("At most this many leaves (default: all).")] = None,
    vault_path: VaultOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """List leaves."""
    with open_vault(vault_path) as vault:
        leaves = vault.ls(source=source, session=session, status=status, limit=limit)
    if as_json:
        emit_json([leaf_json(leaf) for leaf in leaves])
        return
    for leaf in leaves:
        typer.echo(_leaf_line(leaf))


@app.command()
def stats(vault_path: VaultOpt = None, as_json: JsonOpt = False) -> None:
    """Sizes, sources, counts, time span, job queue and daemon.

    Storage size, sources, chunks, topics, first and latest memory, leaves by status, queue depth, and
    the watch daemon's state.
    """
    with open_vault(vault_path) as vault:
        data = vault.stats().as_dict()
    if as_json:
        emit_json(data)
        return
    typer.echo(f"vault:          {data['path']}")
    typer.echo(
        f"storage:        {data['storage_bytes'] / 1024:.1f} KiB in files, {data['index_bytes'] / 1024:.1f} KiB index"
    )
    typer.echo(f"sources:        {len(data['sources'])} ({', '.join(data['sources'])})")
    typer.echo(f"chunks:         {data['chunks']} leaves, {data['summaries']} summaries")
    typer.echo(f"topics:         {data['topics']}")
    typer.echo(f"first memory:   {data['first_memory'] or '-'}")
    typer.echo(f"latest memory:  {data['latest_memory'] or '-'}")
    typer.echo(
        f"by status:      {', '.join(f'{k} {v}' for k, v in sorted(data['by_status'].items())) or '-'}"
    )
    typer.echo(f"jobs:           {', '.join(f'{k} {v}' for k, v in data['jobs'].items())}")
    d = data["daemon"]
    state = d.get("state") or ("running" if d.get("running") else "stopped")
    if state == "stopped":
        typer.echo("daemon:         not running (start it with `vaultmem watch`)")
    elif state == "paused" and d.get("paused"):
        p = d["paused"]
        typer.echo(f"daemon:         paused since {p.get('since')} (pid {d['pid']}): {p.get('why')}")
    else:
        typer.echo(f"daemon:         {state} (pid {d['pid']} on {d['host']}, since {d['since']})")
    if data.get("git"):
        typer.echo(f"git:            {data['git']['why']}: writes are paused; {data['git']['advice']}")
    typer.echo(
        f"last event:     {d.get('last_event') or '-'}; queue depth {d.get('queue') if d.get('queue') is not None else '-'}"
    )
    for warning in d.get("warnings") or []:
        typer.echo(f"daemon warning: {warning}")


def _when_opt(help_text: str) -> Any:
    return typer.Option(metavar="WHEN", help=help_text + " (ISO 8601: 2024-05-01 or 2024-05-01T09:00Z)")


SinceOpt = Annotated[str | None, _when_opt("Only memories at or after this time")]
UntilOpt = Annotated[str | None, _when_opt("Only memories at or before this time")]
AsOfOpt = Annotated[
    str | None,
    typer.Option(
        "--as-of",
        metavar="DATE",
        help="Answer as the vault stood then: what it held, valid at that moment (a date is its whole day).",
    ),
]
IncludeSupersededOpt = Annotated[
    bool,
    typer.Option(
        "--include-superseded", help="Rank superseded and expired memories as found (still marked)."
    ),
]


@app.command()
def search(
    query: Annotated[
        str,
        typer.Argument(metavar="QUERY", help="What to look for (words, a phrase, Chinese or Japanese text)."),
    ],
    limit: Annotated[int, _limit_opt("Number of hits.")] = 10,
    source: SourceFilter = None,
    session: SessionFilter = None,
    since: SinceOpt = None,
    until: UntilOpt = None,
    kind: Annotated[str | None, typer.Option("--kind", metavar="KIND", help="leaf or summary")] = None,
    status: Annotated[
        str | None,
        typer.Option("--status", metavar="STATUS", help="pending_extraction|admitted|sealed|dropped|stale"),
    ] = None,
    topic: TopicFilter = None,
    as_of: AsOfOpt = None,
    include_superseded: IncludeSupersededOpt = False,
    k: Annotated[int | None, _alias("--k", "-k")] = None,
    vault_path: VaultOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Hybrid search: full-text (BM25) and embeddings, fused.

    A superseded memory comes right after the one that replaced it, marked (superseded by ...)."""
    with open_vault(vault_path) as vault:
        hits = vault.search(
            query,
            k or limit,
            source=source,
            session=session,
            since=since,
            until=until,
            kind=kind,
            status=status,
            topic=topic,
            as_of=as_of,
            include_superseded=include_superseded,
        )
    if as_json:
        emit_json([hit.as_dict() for hit in hits])
        return
    if not hits:
        typer.echo("no results")
    elif all(hit.weak for hit in hits):
        typer.echo("no good match: every hit is weak (few of the query's words, little in meaning)")
    for n, hit in enumerate(hits, 1):
        who = hit.speaker or hit.role or "-"
        text = " ".join(hit.text.split())
        mark = "  (weak)" if hit.weak else ""
        if "superseded_by" in hit.extra:
            mark += f"  (superseded by {hit.extra['superseded_by']})"
        typer.echo(f"{n:2}. {hit.score:.4f}  {hit.id}  {hit.ts or '-':20}  {who[:14]:14}  {hit.source}{mark}")
        typer.echo(f"    {text[:200]}{'...' if len(text) > 200 else ''}")


@app.command()
def context(
    query: Annotated[str, typer.Argument(metavar="QUERY", help="The question the context is for.")],
    budget: Annotated[
        int, typer.Option("--budget", "-b", metavar="TOKENS", help="Token budget for the whole block.")
    ] = 1024,
    source: SourceFilter = None,
    session: SessionFilter = None,
    since: SinceOpt = None,
    until: UntilOpt = None,
    mode: Annotated[
        str | None,
        typer.Option("--mode", metavar="MODE", help="flat | collapsed | walk (default: the measured best)"),
    ] = None,
    topic: TopicFilter = None,
    as_of: AsOfOpt = None,
    include_superseded: IncludeSupersededOpt = False,
    vault_path: VaultOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Remembered text for QUERY within a token budget.

    Ready to paste into a prompt: a <memory> block marked as data, grouped by conversation and day.
    """
    with open_vault(vault_path) as vault:
        ctx = vault.context(
            query,
            budget,
            source=source,
            session=session,
            since=since,
            until=until,
            mode=mode,
            topic=topic,
            as_of=as_of,
            include_superseded=include_superseded,
        )
        root = vault.layout.root
    if as_json:
        from vaultmem.index import file_of

        data = ctx.as_dict()
        for item in data["items"]:
            item["link"] = (root / file_of(item["path"])).as_uri()  # a note's section: its note
        emit_json(data)
        return
    if ctx.items and ctx.weak:
        typer.echo(
            "vaultmem: nothing closely related remembered; the context holds weak matches only", err=True
        )
    typer.echo(ctx.text or "(nothing relevant remembered)")


@app.command()
def recall(
    query: Annotated[str, typer.Argument(metavar="QUERY", help="The question the block is for.")],
    budget: Annotated[
        int, typer.Option("--budget", "-b", metavar="TOKENS", help="Token budget for the whole block.")
    ] = 1024,
    source: SourceFilter = None,
    mode: Annotated[
        str | None,
        typer.Option("--mode", metavar="MODE", help="flat | collapsed | walk (default: the measured best)"),
    ] = None,
    as_of: AsOfOpt = None,
    include_superseded: IncludeSupersededOpt = False,
    vault_path: VaultOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """What an agent puts in its system prompt for QUERY: core memory, then context.

    Core memory first (read only), then the remembered text for QUERY in what is left of the budget;
    with --as-of, both as the vault stood then.
    """
    with open_vault(vault_path) as vault:
        found = vault.recall(
            query, budget, source=source, mode=mode, as_of=as_of, include_superseded=include_superseded
        )
    if as_json:
        emit_json(found.as_dict())
        return
    typer.echo(found.text or "(nothing remembered)")


@app.command()
def topics(
    limit: Annotated[int, _limit_opt("How many entities.")] = 20,
    rescan: Annotated[
        bool,
        typer.Option(
            "--rescan",
            help="First find entities anew (every leaf when the rules changed, else leaves that list none), then compact.",
        ),
    ] = False,
    n: Annotated[int | None, _alias("--n")] = None,
    vault_path: VaultOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """The hottest entities and their topic trees.

    People, places, projects, repos, tickers...: heat, kind, name, leaves, sources, last seen, topic.
    """
    with open_vault(vault_path) as vault, interruptible(vault):
        if rescan:
            with progress_bar("finding entities") as bar:
                gained = vault.rescan_entities(bar)
            if gained:
                vault.compact()
            if not as_json:
                typer.echo(f"entities found in {gained} leaves")
        found = vault.hot_topics(n or limit)
    if as_json:
        emit_json([e.as_dict() for e in found])
        return
    if not found:
        typer.echo("no entities yet (they are found as leaves are admitted: `vaultmem compact`)")
    for e in found:
        tree = e.topic.rsplit("/", 1)[0] + "/" if e.topic else "-"
        mark = " (archived)" if e.archived else ""
        typer.echo(
            f"{e.heat:7.1f}  {e.kind:8} {e.name[:28]:28} {e.leaves:5} leaves {e.sources:2} sources"
            f"  {(e.last_seen or '-')[:10]}  {tree}{mark}"
        )


@app.command()
def topic(
    name: Annotated[
        str, typer.Argument(metavar="NAME", help="An entity: Caroline, @caroline, person:caroline, a repo...")
    ],
    limit: Annotated[int, _limit_opt("Facts and recent leaves to show (each).")] = 5,
    n: Annotated[int | None, _alias("--n")] = None,
    vault_path: VaultOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """What the vault knows about one entity.

    Its topic summary (latest state first), its key facts and its latest leaves.
    """
    with open_vault(vault_path) as vault:
        view = vault.topic(name, n or limit)
    if as_json:
        emit_json(view.as_dict())
        return
    e = view.entity
    typer.echo(f"# {e.name}  ({e.key}; heat {e.heat:.1f}; {e.leaves} leaves in {e.sources} sources)")
    typer.echo(
        f"seen {(e.first_seen or '-')[:10]} .. {(e.last_seen or '-')[:10]}; topic: {e.topic or 'none yet'}"
    )
    if view.summary:
        typer.echo("\n" + view.summary)
    for title, leaves in (("Key facts", view.facts), ("Latest", view.recent)):
        typer.echo(f"\n## {title}")
        for leaf in leaves:
            typer.echo(_leaf_line(leaf))


@app.command()
def graph(
    limit: Annotated[int, _limit_opt("The most mentioned entities to include.")] = 200,
    min_weight: Annotated[
        int, typer.Option("--min-weight", metavar="W", help="Leaves two entities share, at least.")
    ] = 1,
    vault_path: VaultOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """The entity graph: entities and co-occurrence edges.

    --json gives the nodes and edges a force-directed view draws.
    """
    with open_vault(vault_path) as vault:
        data = vault.graph(limit=limit, min_weight=min_weight)
    if as_json:
        emit_json(data)
        return
    typer.echo(f"{len(data['nodes'])} entities, {len(data['edges'])} edges")
    for edge in data["edges"][:40]:
        typer.echo(f"{edge['weight']:5}  {edge['source']}  --  {edge['target']}")


@app.command("tree")
def tree_cmd(
    node_id: Annotated[
        str | None,
        typer.Argument(metavar="ID", help="A level (summary id); without one, every source's top."),
    ] = None,
    query: Annotated[
        str | None,
        typer.Option("--query", "-q", metavar="QUESTION", help="Rank the children by this question."),
    ] = None,
    vault_path: VaultOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Drill down: the children of a level, or every source's top.

    Levels and leaves in reading order, or ranked by --query.
    """
    with open_vault(vault_path) as vault:
        nodes = vault.drill_down(node_id, query=query)
    if as_json:
        emit_json([n.as_dict() for n in nodes])
        return
    if not nodes:
        typer.echo("(no children)")
    for n in nodes:
        score = f"{n.score:.3f}  " if n.score is not None else ""
        if n.kind == "summary":
            span = f"{(n.ts or '')[:10]}..{(n.ts_end or '')[:10]}"
            typer.echo(f"{score}{n.id}  [{n.descendants} leaves, {span}]  {n.title}")
        else:
            typer.echo(f"{score}{n.id}  {(n.ts or '')[:10]}  {n.line()[:100]}")


@app.command("read")
def read_cmd(
    node_id: Annotated[str, typer.Argument(metavar="ID", help="A level (summary id) or a leaf id.")],
    budget: Annotated[
        int | None,
        typer.Option(
            "--budget", "-b", metavar="TOKENS", help="Expand breadth first within this many tokens."
        ),
    ] = None,
    vault_path: VaultOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Read a node as one document, or expanded to a budget.

    The whole subtree depth first in reading order, or (--budget) expanded breadth first to fit.
    """
    with open_vault(vault_path) as vault:
        if budget is not None:
            expansion = vault.expand_to_length(node_id, budget)
            text, nodes = expansion.text, list(expansion.nodes)
        else:
            text, nodes = vault.serialize(node_id), []
    if as_json:
        emit_json({"id": node_id, "text": text, "nodes": nodes, "tokens": count_tokens(text)})
        return
    typer.echo(text)


@app.command()
def digest(
    day: Annotated[
        str | None,
        typer.Argument(metavar="DATE", help="YYYY-MM-DD, 'today' or 'yesterday' (UTC; default: today)."),
    ] = None,
    week: Annotated[
        bool, typer.Option("--week", help="The week holding DATE (its part in DATE's month).")
    ] = False,
    month: Annotated[bool, typer.Option("--month", help="The month holding DATE.")] = False,
    start: Annotated[
        str | None, typer.Option("--from", metavar="DAY", help="A range: its first day (YYYY-MM-DD).")
    ] = None,
    end: Annotated[
        str | None, typer.Option("--to", metavar="DAY", help="A range: its last day (YYYY-MM-DD).")
    ] = None,
    vault_path: VaultOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """What happened on a day, in a week or a month.

    The global tree's digest, written on the spot when it is missing or behind its leaves.
    """
    if week and month:
        raise InvalidInput("--week and --month exclude each other; give one of them")
    ranged = start is not None or end is not None
    with open_vault(vault_path) as vault:
        period = "week" if week else "month" if month else "day"
        nodes = vault.global_digest(day, start=start, end=end, period=period)
    if as_json:
        data = [summary_json(node) for node in nodes]
        emit_json(data if ranged else (data[0] if data else None))
        return
    if not nodes:
        typer.echo("(no digest: nothing was remembered then)")
    for n, node in enumerate(nodes):
        if n:
            typer.echo("")
        _print_summary(node, f"period: {node.period}", targets=True)


@app.command()
def jobs(
    retry: Annotated[
        bool, typer.Option("--retry", help="Requeue parked jobs (or --id) with fresh attempts.")
    ] = False,
    job_id: Annotated[int | None, typer.Option("--id", metavar="N", help="Only this job.")] = None,
    run: Annotated[bool, typer.Option("--run", help="Run queued work now until the queue is idle.")] = False,
    vault_path: VaultOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """List, retry or run the job queue.

    Lists queued, running and parked jobs; --retry requeues parked ones; --run runs the queue to idle.
    """
    with open_vault(vault_path) as vault, interruptible(vault):
        retried = vault.jobs.retry(job_id) if retry else 0
        work = None
        if run:
            with progress_bar("working") as progress:
                work = vault.work(progress)
        listed = vault.jobs.list()
        counts = vault.jobs.counts()
    if as_json:
        emit_json(
            {
                "counts": counts,
                "retried": retried,
                "ran": work.jobs_done if work else 0,
                "jobs": [
                    {
                        "id": j.id,
                        "kind": j.kind,
                        "state": j.state,
                        "attempts": j.attempts,
                        "payload": j.payload,
                        "last_error": j.last_error,
                    }
                    for j in listed
                ],
            }
        )
        return
    if retry:
        typer.echo(f"requeued {retried} jobs")
    if work is not None:
        typer.echo(f"ran {work.jobs_done} jobs ({work.jobs_failed} failed)")
    typer.echo(", ".join(f"{k} {v}" for k, v in counts.items()))
    for j in listed:
        if j.state == "parked" or len(listed) <= 20:
            err = f"  last error: {j.last_error}" if j.last_error else ""
            typer.echo(
                f"{j.id:6}  {j.kind:12}  {j.state:7}  attempts {j.attempts}/{j.max_attempts}  {json.dumps(j.payload)}{err}"
            )


@app.command()
def compact(
    dry_run: Annotated[
        bool,
        typer.Option("--dry-run", help="Print the plan (new levels, merges, condensations); change nothing."),
    ] = False,
    vault_path: VaultOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Seal buffered leaves into levels, condense, re-summarise.

    Runs the job queue until it is idle.
    """
    with open_vault(vault_path) as vault, interruptible(vault):
        with progress_bar("compacting") as progress:
            report = vault.compact(dry_run=dry_run, progress=progress)
        warnings = list(vault.warnings)
    if as_json:
        emit_json({"dry_run": dry_run, **report.as_dict(), "warnings": warnings})
        return
    for line in report.operations:
        typer.echo(("would " if dry_run else "") + line.removeprefix("memory: "))
    for line in report.planned:
        typer.echo(f"  new level {line}")
    if dry_run:
        if not report.operations:
            typer.echo("nothing to compact: every buffer is under its thresholds")
        return
    typer.echo(
        f"sealed {report.sealed} leaves into {report.levels} new levels, merged {report.merged} into existing"
        f" ones, condensed {report.condensed} levels, re-summarised {report.resummarised}"
        + (f"; {report.jobs_failed} jobs failed (see `vaultmem jobs`)" if report.jobs_failed else "")
    )
    for note in report.notes:
        typer.echo(f"note: {note}")
    for warning in warnings:
        typer.echo(f"warning: {warning}", err=True)


@app.command()
def forget(
    target: Annotated[
        str, typer.Argument(metavar="ID|QUERY", help="A leaf or level id, or words naming the leaves.")
    ],
    reason: Annotated[
        str | None, typer.Option("--reason", metavar="TEXT", help="Why (in the commit).")
    ] = None,
    limit: Annotated[int, _limit_opt("With QUERY: forget at most this many matching leaves.")] = 5,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask (QUERY); for scripts.")] = False,
    vault_path: VaultOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Forget leaves: kept in a tombstone (.trash/vaultmem/forgotten/), out of search, context,
    topics and digests; what they are under is re-summarised. A level's id forgets every leaf under it.
    `vaultmem restore ID` undoes it."""
    with open_vault(vault_path) as vault, interruptible(vault):
        if LEAF_ID_RE.match(target) or SUMMARY_ID_RE.match(target):
            ids = [target]
        else:
            hits = [
                h for h in vault.search(target, limit, kind="leaf", include_superseded=True) if not h.weak
            ]
            if not hits:
                raise InvalidInput(f"no leaf matches {target!r} well; nothing forgotten")
            for hit in hits:
                typer.echo(f"  {hit.id}  {hit.ts or '-':20}  {' '.join(hit.text.split())[:90]}", err=True)
            _confirm(f"forget these {len(hits)} leaves?", yes)
            ids = [h.id for h in hits]
        done = vault.forget(ids, reason=reason)
        say_warnings(vault)
    if as_json:
        emit_json([t.as_dict() for t in done])
        return
    for tomb in done:
        typer.echo(f"forgot {tomb.id} ({tomb.path}); `vaultmem restore {tomb.id}` brings it back")


@app.command()
def restore(
    leaf_id: Annotated[
        str, typer.Argument(metavar="ID", help="A forgotten leaf's id, or a forgotten level's.")
    ],
    vault_path: VaultOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Bring a forgotten leaf (or every leaf of a forgotten level) back exactly as it was."""
    with open_vault(vault_path) as vault, interruptible(vault):
        rel = vault.restore(leaf_id)
        say_warnings(vault)
    if as_json:
        emit_json({"id": leaf_id, "path": rel})
        return
    typer.echo(f"restored {leaf_id} at {rel}")


@app.command()
def forgotten(vault_path: VaultOpt = None, as_json: JsonOpt = False) -> None:
    """The forgotten leaves, most recent first."""
    with open_vault(vault_path) as vault:
        found = vault.forgotten()
    if as_json:
        emit_json([t.as_dict() for t in found])
        return
    if not found:
        typer.echo("nothing forgotten")
    for tomb in found:
        typer.echo(f"{tomb.forgotten_at}  {tomb.id}  {tomb.path}  {tomb.reason or ''}".rstrip())


@app.command()
def purge(
    leaf_id: Annotated[str, typer.Argument(metavar="ID", help="The leaf to erase (live or forgotten).")],
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask; for scripts.")] = False,
    rewrite_history: Annotated[
        bool,
        typer.Option(
            "--rewrite-history",
            help="DESTRUCTIVE: rewrite the vault's git history so no commit holds the text.",
        ),
    ] = False,
    force: Annotated[
        bool, typer.Option("--force", help="Rewrite history even though the repository has a remote.")
    ] = False,
    vault_path: VaultOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Erase a leaf's text everywhere: the leaf, what drew on it (re-summarised), copies, the index.

    Then proves it: every file under the vault, git objects, chunks.db and its WAL are searched.
    Exit 1 when the text is still somewhere (listed)."""
    with open_vault(vault_path) as vault, interruptible(vault):
        what = "and rewrite the git history " if rewrite_history else ""
        _confirm(f"purge {leaf_id} {what}for good? (not undoable)", yes)
        report = vault.purge(leaf_id, rewrite_history=rewrite_history, force=force)
        say_warnings(vault)
    if as_json:
        emit_json(report.as_dict())
    else:
        typer.echo(f"purged {leaf_id}; {report.rewritten} commits rewritten")
        for rel in report.removed:
            typer.echo(f"removed copy {rel}")
        for where in report.traces:
            typer.echo(f"still holds the text: {where}")
        for note in report.notes:
            typer.echo(note)
        if not report.traces:
            typer.echo("the text is nowhere under the vault (files, git objects, chunks.db, WAL)")
    if report.traces:
        raise typer.Exit(1)


@app.command("review")
def review_cmd(
    scan: Annotated[
        bool,
        typer.Option("--scan", help="First look for memories that update older ones (offline detector)."),
    ] = False,
    accept: Annotated[
        list[str] | None, typer.Option("--accept", metavar="KEY", help="Accept a proposal.")
    ] = None,
    reject: Annotated[
        list[str] | None, typer.Option("--reject", metavar="KEY", help="Reject a proposal.")
    ] = None,
    skip: Annotated[
        list[str] | None, typer.Option("--skip", metavar="KEY", help="Leave it for later.")
    ] = None,
    revert: Annotated[
        str | None,
        typer.Option("--revert", metavar="NEW-OLD", help="Undo an applied update (from the weekly log)."),
    ] = None,
    list_only: Annotated[bool, typer.Option("--list", help="Only list the waiting proposals.")] = False,
    vault_path: VaultOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """The review inbox: proposals that a new memory replaces an older one.

    Decisions a person wrote into review/*.md (decision: accept|reject) are carried out first. On a
    terminal, without --accept/--reject/--skip, each proposal is shown and a key decides:
    a accept, r reject, s skip, o open the file, q quit. KEY: the proposal's new id or file name."""
    done: dict[str, Any] = {}
    with open_vault(vault_path) as vault:
        if revert:
            vault.revert_update(revert)
            done["reverted"] = revert
        if scan:
            found = vault.propose_updates()
            done |= {k: [p.as_dict() for p in v] for k, v in found.items()}
        decided = vault.apply_reviews()
        for decision, keys in (("accept", accept), ("reject", reject), ("skip", skip)):
            for key in keys or []:
                for k, v in vault.decide(key, decision).items():
                    decided.setdefault(k, []).extend(v)
        interactive = not (list_only or as_json or accept or reject or skip) and sys.stdin.isatty()
        if interactive:
            for p in vault.proposals():
                typer.echo(f"\n{p.new} updates {p.old}  ({p.confidence:.2f}: {'; '.join(p.why)})")
                typer.echo((vault.layout.root / p.path).read_text(encoding="utf-8").split("---\n", 2)[-1])
                while True:
                    key = (
                        typer.prompt("[a]ccept [r]eject [s]kip [o]pen [q]uit", default="s")
                        .strip()
                        .lower()[:1]
                    )
                    if key == "o":
                        typer.launch(str(vault.layout.root / p.path))
                        continue
                    break
                if key == "q":
                    break
                choice = {"a": "accept", "r": "reject"}.get(key, "skip")
                for k, v in vault.decide(p.new, choice).items():
                    decided.setdefault(k, []).extend(v)
        waiting = vault.proposals()
        say_warnings(vault)
    done |= {k: [p if isinstance(p, tuple) else p.as_dict() for p in v] for k, v in decided.items()}
    done["waiting"] = [p.as_dict() for p in waiting]
    if as_json:
        emit_json(done)
        return
    for key in ("applied", "proposed", "dismissed", "accepted", "rejected", "expired", "gone"):
        for p in done.get(key, []):
            typer.echo(f"{key}: {p['new']} updates {p['old']} ({p['confidence']:.2f})")
    for rel, why in done.get("invalid", []):
        typer.echo(f"invalid proposal {rel}: {why}", err=True)
    for p in waiting:
        typer.echo(f"waiting: {p.new} updates {p.old} ({p.confidence:.2f}: {'; '.join(p.why)})  {p.path}")
    if not waiting:
        typer.echo("nothing waiting for review")


def _confirm(question: str, yes: bool) -> None:
    """Ask on a terminal; without one, ``--yes`` is required (a script never hangs on a prompt)."""
    if yes:
        return
    if not sys.stdin.isatty():
        raise InvalidInput(f"{question} (no terminal to ask on: pass --yes)")
    if not typer.confirm(question, default=False, err=True):
        raise InvalidInput("nothing done")


@app.command("reindex")
def reindex_cmd(vault_path: VaultOpt = None, as_json: JsonOpt = False) -> None:
    """Rebuild chunks.db from the vault's files."""
    with open_vault(vault_path) as vault, progress_bar("reading files") as progress:
        report = vault.reindex(progress)
        say_warnings(vault)
    if as_json:
        emit_json(
            {
                "leaves": report.leaves,
                "requeued": report.requeued,
                "vectors": report.vectors,
                "skipped": [{"path": p, "reason": r} for p, r in report.skipped],
                "duplicates": [{"path": p, "id": i} for p, i in report.duplicates],
            }
        )
        return
    for path, reason in report.skipped:
        typer.echo(f"skipped {path}: {reason}", err=True)
    for path, leaf_id in report.duplicates:
        typer.echo(f"duplicate id {leaf_id} in {path} (first copy kept)", err=True)
    typer.echo(
        f"reindexed {report.leaves} leaves, {report.vectors} vectors from sidecars, {report.requeued} jobs queued"
    )


@app.command()
def watch(
    once: Annotated[
        bool, typer.Option("--once", help="Catch up with what changed while no daemon ran, then exit.")
    ] = False,
    rescan: Annotated[
        float,
        typer.Option(
            "--rescan", metavar="SECONDS", help="Seconds between rescans for events the OS dropped."
        ),
    ] = 60.0,
    vault_path: VaultOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Keep the index and the trees in step with hand edits (a daemon).

    SIGINT or SIGTERM stops it cleanly.
    """
    import signal
    import threading
    from datetime import UTC, datetime

    from vaultmem.daemon import Daemon
    from vaultmem.reconcile import PathsReport

    def say(batch: PathsReport) -> None:
        if as_json:
            return
        for old, new in batch.moved:
            typer.echo(f"moved    {old} -> {new}")
        for label, paths in (("new", batch.new), ("changed", batch.changed), ("deleted", batch.deleted)):
            for rel in paths:
                typer.echo(f"{label:8} {rel}")
        for rel in batch.notes:
            typer.echo(f"note     {rel}")
        if batch.added:
            typer.echo(f"added    {len(batch.added)} leaves from notes")
        for rel, why in batch.invalid:
            typer.echo(f"invalid  {rel}: {why}", err=True)

    def notice(message: str) -> None:  # paused for a git operation, resumed after it
        if not as_json:
            typer.echo(f"{format_ts(datetime.now(UTC))} {message}", err=True)

    with open_vault(vault_path) as vault:
        daemon = Daemon(vault, rescan_s=rescan, on_batch=say, on_notice=notice)
        if once:
            report = daemon.once()
        else:
            stop = threading.Event()
            for sig in (signal.SIGINT, signal.SIGTERM):
                signal.signal(sig, lambda *_: stop.set())
            if not as_json:
                typer.echo(f"watching {vault.layout.root} (pid {os.getpid()}); Ctrl-C stops", err=True)
            report = daemon.run(stop)
    if as_json:
        emit_json(report.as_dict())
        return
    typer.echo(
        f"{report.batches} batches, {report.paths} paths: {report.new} new, {report.moved} moved,"
        f" {report.changed} changed, {report.deleted} deleted, {report.notes} notes ({report.added} leaves),"
        f" {report.unchanged} unchanged, {report.stale} levels stale"
    )
    for warning in report.warnings:
        typer.echo(f"warning: {warning}", err=True)


@app.command()
def dashboard(
    port: Annotated[
        int,
        typer.Option(
            "--port", "-p", min=0, max=65535, metavar="PORT", help="Port on 127.0.0.1 (0: any free one)."
        ),
    ] = 0,
    read_only: Annotated[
        bool, typer.Option("--read-only", help="Show only: no buttons, nothing written to the vault.")
    ] = False,
    export: Annotated[
        Path | None,
        typer.Option(
            "--export", metavar="FILE", help="Write the page as one offline HTML file instead of serving it."
        ),
    ] = None,
    open_browser: Annotated[
        bool, typer.Option("--open", help="Open the page in the default browser.")
    ] = False,
    vault_path: VaultOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Serve a local page of the vault: status, metrics, graph, heatmap, search, tree, the review
    inbox, the day.

    Binds to 127.0.0.1 only; the address printed carries a token made for this run, and requests
    without it are refused. Every script and style is packaged (no network). Run ingest and Compact
    now only queue jobs (the watch daemon runs them, or the dashboard when no daemon runs). --export
    writes the same views, with the data inlined, to one HTML file that opens offline.
    """
    from vaultmem.dashboard import Dashboard, export_html

    with open_vault(vault_path) as vault:
        vault.warm_queries = export is None  # a server searches again and again
        if read_only or export is not None:
            # A viewer writes nothing: no digest written on demand, no query heat, no buttons.
            vault.read_only = vault.read_only or "the dashboard was started to show, not to change"
        if export is not None:
            size = export_html(vault, export)
            if as_json:
                emit_json({"path": str(export.absolute()), "bytes": size})
            else:
                typer.echo(f"wrote {export} ({size / 1024:.0f} KiB): open it in a browser, no server needed")
            return
        dash = Dashboard(vault, port=port, read_only=read_only)
        if as_json:
            emit_json({"url": dash.url, "port": dash.port})
        else:
            typer.echo(f"vaultmem dashboard: {dash.url}")
            typer.echo("(only this address opens it; Ctrl-C stops)", err=True)
        if open_browser:
            import webbrowser

            webbrowser.open(dash.url)
        try:
            dash.serve_forever()
        except KeyboardInterrupt:
            typer.echo("stopped", err=True)


@app.command("check")
def check_cmd(
    fix: Annotated[bool, typer.Option("--fix", help="Repair what can be derived from the files.")] = False,
    redact: Annotated[
        bool,
        typer.Option("--redact", help="With --fix: rewrite files that hold a secret, the secret replaced."),
    ] = False,
    vault_path: VaultOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Verify that the index and the files agree (exit 1 if not)."""
    with open_vault(vault_path) as vault:
        report = vault.check(fix=fix, redact=redact)
        say_warnings(vault)
    if as_json:
        emit_json(
            {
                "ok": report.ok,
                "leaves": report.leaves,
                "problems": [p.__dict__ for p in report.problems],
                "fixed": [p.__dict__ for p in report.fixed],
            }
        )
    else:
        for p in report.fixed:
            typer.echo(f"fixed   {p.code:15} {p.path}: {p.message}")
        for p in report.problems:
            hint = " (--fix repairs it)" if p.fixable else ""
            typer.echo(f"problem {p.code:15} {p.path}: {p.message}{hint}")
        typer.echo(
            f"{'ok' if report.ok else 'FAILED'}: {report.leaves} leaves checked, {len(report.problems)} problems"
        )
    if not report.ok:
        raise typer.Exit(1)


# -- agent memory tiers: core memory, onboarding, session notes, episodes, recipes -------------------------


def _group(name: str) -> typer.Typer:
    """A command with subcommands; run alone, it does its own default (list, show). Its help is its
    callback's docstring."""
    group = typer.Typer(
        name=name,
        invoke_without_command=True,
        no_args_is_help=False,
        rich_markup_mode=None,
        context_settings={"max_content_width": 100},
    )
    app.add_typer(group, name=name)
    return group


core_app = _group("core")
sessions_app = _group("sessions")
episodes_app = _group("episodes")
recipes_app = _group("recipes")
CoreName = Annotated[
    str,
    typer.Argument(metavar="FILE", help="user-profile, projects, patterns, soul, knowledge, errors, tools."),
]


def _entry_lines(entries: tuple[tuple[str | None, str], ...]) -> list[str]:
    return [f"- [{tag}] {text}" if tag else f"- {text}" for tag, text in entries]


@core_app.callback()
def core_cmd(
    ctx: typer.Context, vault_path: VaultOpt = None, as_json: JsonOpt = False, as_of: AsOfOpt = None
) -> None:
    """Core memory: the prompt block and each file's budget.

    Subcommands: show FILE, edit FILE ($EDITOR), add FILE TEXT (within its budget), search QUERY.
    --as-of DATE shows the block as core memory stood then.
    """
    if ctx.invoked_subcommand is not None:
        return
    with open_vault(vault_path) as vault:
        block = vault.core_block(as_of=as_of)
        files = vault.core_files()
        say_warnings(vault)
    if as_json:
        emit_json({"block": block.as_dict(), "files": [f.as_dict() for f in files]})
        return
    typer.echo(
        block.text or "(the core files hold no entries yet: `vaultmem onboard` or `vaultmem core add`)"
    )
    typer.echo("")
    for f in files:
        where = "in the prompt" if f.in_prompt else "on demand"
        over = "  OVER BUDGET (shown cut)" if f.over_budget and f.in_prompt else ""
        typer.echo(
            f"{f.path:24} {f.chars:5}/{f.budget:<5} characters, {len(f.entries):3} entries, {where}{over}"
        )
    typer.echo(f"block: {block.chars}/{block.budget} characters")
    for line in block.left_out:
        typer.echo(f"left out of the block: {line}", err=True)


@core_app.command("show")
def core_show(name: CoreName, vault_path: VaultOpt = None, as_json: JsonOpt = False) -> None:
    """One core file: its budget, size and entries."""
    with open_vault(vault_path) as vault:
        view = vault.core_file(name)
    if as_json:
        emit_json(view.as_dict())
        return
    where = "in the prompt" if view.in_prompt else "on demand"
    typer.echo(f"# {view.title}  ({view.path}: {view.chars}/{view.budget} characters, {where})")
    for line in _entry_lines(view.entries):
        typer.echo(line)


@core_app.command("edit")
def core_edit(
    name: Annotated[str, typer.Argument(metavar="FILE", help="The core file to edit.")] = "user-profile",
    vault_path: VaultOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Open a core file in $VISUAL or $EDITOR, then index what you wrote.

    Your edit is kept as you wrote it; a file left over its budget is shown cut in the block and
    condensed at its next update.
    """
    import shlex
    import subprocess

    editor = os.environ.get("VISUAL") or os.environ.get("EDITOR")
    with open_vault(vault_path) as vault:
        view = vault.core_file(name)
        vault.core_files()  # creates the missing files from their templates
        path = vault.layout.abs(view.path)
        if not editor:
            raise InvalidInput(f"set $EDITOR (or $VISUAL) to your editor, or open {path} in Obsidian")
        try:
            status = subprocess.run([*shlex.split(editor), str(path)], check=False).returncode
        except OSError as exc:
            raise InvalidInput(f"cannot run the editor {editor!r}: {exc.strerror}") from exc
        if status != 0:
            raise InvalidInput(f"the editor exited with status {status}; {view.path} is as it left it")
        report = vault.reconcile_paths([view.path])
        after = vault.core_file(name)
    if as_json:
        emit_json({**after.as_dict(), "invalid": [{"path": p, "why": w} for p, w in report.invalid]})
        return
    for rel, why in report.invalid:
        typer.echo(f"invalid  {rel}: {why}", err=True)
    typer.echo(f"{after.path}: {after.chars}/{after.budget} characters, {len(after.entries)} entries")
    if after.over_budget:
        typer.echo(
            f"warning: {after.path} is {after.chars - after.budget} characters over its budget: the block"
            " shows it cut; its next update condenses it (what leaves goes to knowledge.md)",
            err=True,
        )


@core_app.command("add")
def core_add(
    name: CoreName,
    text: Annotated[list[str], typer.Argument(metavar="TEXT...", help="The entry (words are joined).")],
    vault_path: VaultOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Add an entry to a core file, keeping it within its budget (with the [llm] model if set)."""
    with open_vault(vault_path) as vault:
        result = vault.core_update(name, [" ".join(text)])
        say_warnings(vault)
    if as_json:
        emit_json(result.as_dict())
        return
    typer.echo(
        f"core/{result.file}.md: {len(result.added)} added, {len(result.refreshed)} refreshed,"
        f" {result.chars}/{result.budget} characters ({result.by})"
    )
    for entry, to, why in result.moved:
        typer.echo(f"moved to {to} ({why}): {entry}")
    for note in result.notes:
        typer.echo(f"note: {note}")


def _show_memory_hits(hits: list[Any], as_json: bool) -> None:
    """What `sessions --search` and `episodes --search` print: the hits as JSON or as lines."""
    if as_json:
        emit_json([h.as_dict() for h in hits])
    else:
        _print_hits(hits)


def _print_hits(hits: list[Any]) -> None:
    if not hits:
        typer.echo("no results")
    for n, hit in enumerate(hits, 1):
        text = " ".join(hit.text.split())
        typer.echo(f"{n:2}. {hit.score:7.3f}  {hit.path}")
        typer.echo(f"    {text[:200]}{'...' if len(text) > 200 else ''}")


@core_app.command("search")
def core_search(
    query: Annotated[str, typer.Argument(metavar="QUERY", help="Words to find in the core files.")],
    limit: Annotated[int, _limit_opt("Number of hits.")] = 10,
    vault_path: VaultOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Search every core file (knowledge.md and the archives included), entry by entry."""
    with open_vault(vault_path) as vault:
        hits = vault.search_memory(query, kinds=["core"], k=limit)
    if as_json:
        emit_json([h.as_dict() for h in hits])
        return
    _print_hits(hits)


@app.command()
def onboard(
    name: Annotated[str | None, typer.Option("--name", metavar="NAME", help="What to call you.")] = None,
    language: Annotated[
        str | None, typer.Option("--language", metavar="LANG", help="The language to answer in.")
    ] = None,
    use: Annotated[
        str | None, typer.Option("--use", metavar="TEXT", help="What you mainly use the agent for.")
    ] = None,
    skip: Annotated[bool, typer.Option("--skip", help="Ask nothing: only create the core files.")] = False,
    vault_path: VaultOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """First run: core files, then your name, language and use.

    Asks three questions on a terminal (Enter skips one) unless answers are given as options.
    """
    from vaultmem.coremem import QUESTIONS

    answers = {"name": name, "language": language, "use": use}
    given = {k: v for k, v in answers.items() if v}
    if not given and not skip and sys.stdin.isatty() and not as_json:
        for key, question in QUESTIONS:
            reply = typer.prompt(f"{question} (Enter skips)", default="", show_default=False)
            if reply.strip():
                given[key] = reply
    with open_vault(vault_path) as vault:
        result = vault.onboard(given)
    if as_json:
        emit_json(result.as_dict())
        return
    for rel in result.created:
        typer.echo(f"created  {rel}")
    for update in result.updates:
        for entry in update.added:
            typer.echo(f"core/{update.file}.md: {entry}")
    if result.skipped:
        typer.echo(f"skipped: {', '.join(result.skipped)} (`vaultmem core add user-profile ...` later)")


@sessions_app.callback()
def sessions_cmd(
    ctx: typer.Context,
    limit: Annotated[int | None, _limit_opt("At most this many notes (default: all).")] = None,
    search_for: Annotated[
        str | None, typer.Option("--search", metavar="QUERY", help="Only notes matching these words.")
    ] = None,
    vault_path: VaultOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Session notes: what each chat session discussed and decided.

    `sessions end SESSION` writes one now.

    A chat session gets its note by itself once it has been idle for [sessions] idle_s (the queue
    runs it: `vaultmem watch`, or `vaultmem jobs --run`).
    """
    if ctx.invoked_subcommand is not None:
        return
    with open_vault(vault_path) as vault:
        if search_for is not None:
            _show_memory_hits(vault.search_memory(search_for, kinds=["session"], k=limit or 10), as_json)
            return
        notes = vault.sessions(limit=limit)
    if as_json:
        emit_json([n.as_dict() for n in notes])
        return
    if not notes:
        typer.echo("no session notes yet")
    for note in notes:
        first = note.discussed[0] if note.discussed else ""
        typer.echo(
            f"{format_ts(note.started) or '-':20}  {note.messages:4} msgs  {note.session}  ({note.path})"
        )
        if first:
            typer.echo(f"    {first[:120]}")


@sessions_app.command("end")
def sessions_end(
    session: Annotated[str, typer.Argument(metavar="SESSION", help="The session of the messages.")],
    source: SourceFilter = None,
    vault_path: VaultOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Write (or refresh) a session's note now and propose its facts to core memory."""
    with open_vault(vault_path) as vault:
        note = vault.end_session(session, source=source)
        say_warnings(vault)
    if as_json:
        emit_json(note.as_dict())
        return
    typer.echo(f"{note.path}: {note.messages} messages ({note.summariser})")
    for title, items in (
        ("discussed", note.discussed),
        ("decided", note.decisions),
        ("open", note.open_items),
        ("remembered", note.remembered),
    ):
        for item in items:
            typer.echo(f"  {title:10} {item}")
    for line in note.notes:
        typer.echo(f"note: {line}")


@episodes_app.callback()
def episodes_cmd(
    ctx: typer.Context,
    limit: Annotated[int | None, _limit_opt("At most this many episodes (default: all).")] = None,
    failed: Annotated[bool, typer.Option("--failed", help="Only failed episodes.")] = False,
    search_for: Annotated[
        str | None, typer.Option("--search", metavar="QUERY", help="Only episodes matching these words.")
    ] = None,
    vault_path: VaultOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Episodes: tasks the agent carried out, newest first.

    `episodes record REQUEST` records one; similar successful ones become a recipe.
    """
    if ctx.invoked_subcommand is not None:
        return
    with open_vault(vault_path) as vault:
        if search_for is not None:
            _show_memory_hits(vault.search_memory(search_for, kinds=["episode"], k=limit or 10), as_json)
            return
        found = vault.episodes(limit=limit, success=False if failed else None)
    if as_json:
        emit_json([e.as_dict() for e in found])
        return
    if not found:
        typer.echo("no episodes yet")
    for ep in found:
        mark = "ok  " if ep.success else "FAIL"
        typer.echo(
            f"{format_ts(ep.ts) or '-':20}  {mark}  {ep.mode:8}  {ep.request[:80]}  [{', '.join(ep.tools)}]"
        )


@episodes_app.command("record")
def episodes_record(
    request: Annotated[str, typer.Argument(metavar="REQUEST", help="The user's request.")],
    mode: Annotated[str, typer.Option("--mode", metavar="MODE", help="agent, ask, plan...")] = "agent",
    tool: Annotated[
        list[str] | None, typer.Option("--tool", metavar="NAME", help="A tool called (repeat, in order).")
    ] = None,
    outcome: Annotated[
        list[str] | None, typer.Option("--outcome", metavar="TEXT", help="Its outcome (repeat, in order).")
    ] = None,
    failed: Annotated[bool, typer.Option("--failed", help="The task failed.")] = False,
    recipe: Annotated[
        str | None, typer.Option("--recipe", metavar="NAME", help="The recipe it followed.")
    ] = None,
    session: SessionFilter = None,
    vault_path: VaultOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Record one task execution; similar successful ones become a recipe."""
    with open_vault(vault_path) as vault:
        record = vault.record_episode(
            request,
            mode=mode,
            tools=tool or [],
            outcomes=outcome or [],
            success=not failed,
            session=session,
            recipe=recipe,
        )
    if as_json:
        emit_json(record.as_dict())
        return
    typer.echo(f"recorded {record.episode.path}")
    if record.recipe is not None:
        typer.echo(f"{record.outcome}: recipe {record.recipe.name} ({record.recipe.success_count} successes)")
    for note in record.notes:
        typer.echo(f"note: {note}")


@recipes_app.callback()
def recipes_cmd(
    ctx: typer.Context,
    archived: Annotated[bool, typer.Option("--archived", help="Archived recipes too.")] = False,
    vault_path: VaultOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Recipes: steps learnt from similar episodes, or written by hand.

    `recipes for REQUEST` matches them to a request, `recipes report NAME` counts a use.
    """
    if ctx.invoked_subcommand is not None:
        return
    with open_vault(vault_path) as vault:
        found = vault.recipes(archived=archived)
    if as_json:
        emit_json([r.as_dict() for r in found])
        return
    if not found:
        typer.echo("no recipes yet")
    for r in found:
        kind = "archived" if r.archived else ("learned" if r.learned else "by hand")
        fast = "  fast path" if r.fast_path else ""
        typer.echo(
            f"{r.name:32} {r.success_count:3} ok {r.failure_count:3} failed  {kind}{fast}  [{', '.join(r.trigger)}]"
        )


@recipes_app.command("for")
def recipes_for_cmd(
    request: Annotated[str, typer.Argument(metavar="REQUEST", help="The user's request.")],
    limit: Annotated[
        int | None, _limit_opt("At most this many recipes (default: [recipes] max_in_prompt).")
    ] = None,
    max_chars: Annotated[
        int | None, typer.Option("--max-chars", min=1, metavar="N", help="Characters of the whole block.")
    ] = None,
    vault_path: VaultOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """The recipes for a request, as the block a prompt would carry."""
    with open_vault(vault_path) as vault:
        found = vault.recipes_for(request, limit=limit, max_chars=max_chars)
    if as_json:
        emit_json(found.as_dict())
        return
    typer.echo(found.text or "no recipe matches")


@recipes_app.command("report")
def recipes_report(
    name: Annotated[str, typer.Argument(metavar="NAME", help="The recipe (its file name without .md).")],
    failed: Annotated[bool, typer.Option("--failed", help="It failed (default: it succeeded).")] = False,
    vault_path: VaultOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Count a successful (or --failed) use of a recipe."""
    with open_vault(vault_path) as vault:
        recipe = vault.recipe_result(name, success=not failed)
    if as_json:
        emit_json(recipe.as_dict())
        return
    fit = ", fit for a fast path" if recipe.fast_path else ""
    typer.echo(f"{recipe.name}: {recipe.success_count} successes, {recipe.failure_count} failures{fit}")


@app.command("mcp")
def mcp_cmd(
    http: Annotated[
        bool,
        typer.Option("--http", help="Serve streamable HTTP on 127.0.0.1 (bearer token) instead of stdio."),
    ] = False,
    port: Annotated[
        int, typer.Option("--port", "-p", metavar="PORT", help="HTTP port on 127.0.0.1 (0: a free one).")
    ] = 8765,
    read_only: Annotated[
        bool, typer.Option("--read-only", help="Offer only the tools that read (search, context, read...).")
    ] = False,
    tools: Annotated[
        str | None,
        typer.Option(
            "--tools",
            metavar="PROFILES",
            help="Add tool profiles: editor (edit, move, forget), agent (recipes_for, end_session,"
            " record_episode), admin (compact, reindex, status).",
        ),
    ] = None,
    source: Annotated[
        str | None,
        typer.Option(
            "--source",
            "-s",
            metavar="NAME",
            help="Source of what is remembered (default: the client's name).",
        ),
    ] = None,
    vault_path: VaultOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Serve the vault to agents over MCP (stdio by default).

    Tools: search, context, read, browse, recent, remember, update, core, core_update (see
    docs/agents.md). With --http the bearer token is made on first use in .vaultmem/mcp-token (mode 0600)
    and printed once; --json prints where the server listens as one JSON line.
    """
    from vaultmem.layout import Layout
    from vaultmem.model import safe_name

    root = locate_vault(vault_path).absolute()
    if not Layout(root).is_vault():
        raise VaultNotFound(f"no vault at {root}; create one with `vaultmem init {root}`")
    if source is not None:
        safe_name(source)
    try:
        from vaultmem import mcpserver
    except ImportError as exc:
        raise InvalidInput(
            f"the MCP server needs the `mcp` package ({exc}); install it with `pip install 'vaultmem[mcp]'`"
        ) from exc
    options = mcpserver.Options(mcpserver.parse_profiles(tools), read_only, source)
    handle = mcpserver.VaultHandle(root)
    if not http:
        mcpserver.serve_stdio(handle, options)
        return
    token, created = mcpserver.load_token(Layout(root).state)
    token_file = Layout(root).state / mcpserver.TOKEN_FILE

    def ready(url: str) -> None:
        if as_json:
            info = {"url": url, "token_file": str(token_file), "pid": os.getpid()}
            emit_json_line({**info, "token": token} if created else info)
        if created:
            typer.echo(f"vaultmem: new bearer token, shown once (kept in {token_file}): {token}", err=True)
        typer.echo(
            f"vaultmem: serving {root} at {url} (Authorization: Bearer <token in {token_file}>)", err=True
        )

    mcpserver.serve_http(handle, options, port=port, token=token, ready=ready)


def emit_json_line(data: Any) -> None:
    """One line of JSON on stdout, flushed (what a program waiting on a server reads)."""
    typer.echo(json.dumps(data, ensure_ascii=False, default=str))
    sys.stdout.flush()


hook_app = typer.Typer(
    help="Claude Code hooks: the memory block at session start, the transcript ingested as it grows.\n\n"
    "Each reads Claude Code's hook JSON on stdin. Settings to paste: docs/agents.md.",
    no_args_is_help=True,
    rich_markup_mode=None,
)
app.add_typer(hook_app, name="hook")
BudgetOpt = Annotated[
    int, typer.Option("--budget", "-b", min=1, metavar="TOKENS", help="Token budget of the memory block.")
]
HookSourceOpt = Annotated[
    str, typer.Option("--source", "-s", metavar="NAME", help="Source the session's turns go to.")
]
WaitOpt = Annotated[
    bool, typer.Option("--wait", help="Also embed the new turns now (else the queue or `watch` does).")
]


@hook_app.command("session-start")
def hook_session_start(budget: BudgetOpt = 1500, vault_path: VaultOpt = None) -> None:
    """SessionStart: print the memory block to inject (hookSpecificOutput JSON).

    Core memory first (when the vault has it), then what the vault remembers about the last turns of
    the transcript (a resumed or compacted session) or else the project's folder name.
    """
    from vaultmem import hooks

    payload = hooks.read_payload(sys.stdin.read() if not sys.stdin.isatty() else "", needs_transcript=False)
    with open_vault(vault_path) as vault:
        emit_json_line(hooks.session_start(vault, payload, budget))


def _ingest_hook(source: str, wait: bool, vault_path: Path | None, as_json: bool) -> None:
    from vaultmem import hooks

    payload = hooks.read_payload(sys.stdin.read(), needs_transcript=True)
    session = payload.get("session_id") if isinstance(payload.get("session_id"), str) else None
    with open_vault(vault_path) as vault:
        report = hooks.ingest_transcript(vault, payload["transcript_path"], session=session, source=source)
        if wait and report.added:
            vault.flush()
    if as_json:
        emit_json_line(report.as_dict())
    else:
        typer.echo(
            f"{report.turns} turns in {report.lines} new lines; {len(report.added)} new leaves", err=True
        )


def _transcript_hook(summary: str) -> Callable[..., None]:
    """A hook command that ingests the session transcript (Stop and PreCompact take the same options)."""

    def command(
        source: HookSourceOpt = "claude-code",
        wait: WaitOpt = False,
        vault_path: VaultOpt = None,
        as_json: JsonOpt = False,
    ) -> None:
        _ingest_hook(source, wait, vault_path, as_json)

    command.__doc__ = summary
    return command


hook_app.command("stop")(
    _transcript_hook("Stop: ingest the turns of the session transcript not ingested yet.")
)
hook_app.command("pre-compact")(
    _transcript_hook(
        "PreCompact: ingest the transcript before Claude Code compacts it (only turns not yet ingested)."
    )
)


export_app = typer.Typer(
    help="Write what the vault knows into files other tools read.",
    no_args_is_help=True,
    rich_markup_mode=None,
)
app.add_typer(export_app, name="export")


@export_app.command("claude-md")
def export_claude_md(
    path: Annotated[
        Path, typer.Argument(metavar="PATH", help="The file to write (a folder: its MEMORY.md; -: stdout).")
    ] = Path("MEMORY.md"),
    vault_path: VaultOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """A MEMORY.md of at most 200 lines: core memory, hot topics, recent days, links into the vault.

    For tools that only read a file (in CLAUDE.md: @MEMORY.md). Never overwrites a file it did not write.
    """
    from vaultmem import exportmd

    with open_vault(vault_path) as vault:
        if str(path) == "-":
            text = exportmd.render(vault)
            if as_json:
                emit_json({"path": None, "lines": text.count("\n"), "text": text})
            else:
                typer.echo(text, nl=False)
            return
        written = exportmd.write(vault, path)
        lines = Path(written).read_text(encoding="utf-8").count("\n")
    if as_json:
        emit_json({"path": written, "lines": lines})
        return
    typer.echo(f"wrote {written} ({lines} lines)")


def help_text(command: str | None = None, width: int = 88) -> str:
    """What ``vaultmem [COMMAND] --help`` prints on a terminal ``width`` columns wide (docs/cli.md is
    generated from it, so the reference cannot drift from the code)."""
    group = typer.main.get_command(app)
    ctx = group.make_context("vaultmem", [], resilient_parsing=True, terminal_width=width)
    if command is None:
        return group.get_help(ctx)
    for name in command.split():  # "hook stop": a command of a group
        sub = group.get_command(ctx, name)  # type: ignore[attr-defined]
        if sub is None:
            raise InvalidInput(f"no command {command!r}")
        ctx = sub.make_context(name, [], parent=ctx, resilient_parsing=True)
        group = sub
    with ctx:
        return str(group.get_help(ctx))


def usage_line(exc: click_exceptions.ClickException) -> str:
    """A usage error as one line: what is wrong, click's "did you mean", and where help is."""
    message = " ".join(exc.format_message().split())
    ctx = getattr(exc, "ctx", None)
    where = ctx.command_path if ctx is not None else "vaultmem"
    return f"{where}: error: {message} (see `{where} --help`)"


def one_blas_thread_for_the_process() -> None:
    """OpenBLAS on one thread in the whole process, set before NumPy loads it (commands import NumPy
    lazily, so a command's process has not loaded it yet); a value the user set is kept.

    ``embed.one_blas_thread`` limits the threads that embed and score; this also covers NumPy work
    outside it (compaction's clustering on the job workers' threads) and keeps OpenBLAS from starting
    threads at all. Before ``embed._release_blas_control`` the limit did not hold on the job workers'
    threads, and this setting alone took LoCoMo conv-26's compaction from 29.9 s of CPU to 16.6 s
    (``bench/firstrun.py``, one run, loaded)."""
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")


def main(argv: list[str] | None = None) -> None:
    """The console script. Exit status: 0 ok, 1 a vault error (one line), 2 a usage error (one line),
    130 interrupted. ``standalone_mode=False`` so that errors come here and are printed as one line
    (click's own printing is a usage block or, with rich, a box)."""
    one_blas_thread_for_the_process()
    try:
        result = app(args=argv, prog_name="vaultmem", standalone_mode=False)
    except VaultError as exc:
        typer.echo(f"vaultmem: error: {exc}", err=True)
        sys.exit(1)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except typer.Abort:
        typer.echo("aborted", err=True)
        sys.exit(1)
    except KeyboardInterrupt:
        sys.exit(130)
    except sqlite3.DatabaseError as exc:
        if db.is_disk_full(exc):
            _disk_full(exc)
        if "readonly database" in str(exc):  # a write the library did not guard, on a read-only vault
            typer.echo(f"vaultmem: error: the vault is read-only; this command writes ({exc})", err=True)
            sys.exit(1)
        if not db.is_damage(exc):
            raise
        typer.echo(
            f"vaultmem: error: chunks.db is damaged ({exc}); run `vaultmem reindex`: it moves the damaged"
            " file aside and rebuilds the index from the files",
            err=True,
        )
        sys.exit(1)
    except OSError as exc:
        if not is_disk_full(exc):
            raise
        _disk_full(exc)
    except click_exceptions.NoArgsIsHelpError as exc:
        # A bare `vaultmem` (or a group without its command): the help, as a usage error.
        typer.echo(exc.format_message(), err=True)
        sys.exit(exc.exit_code)
    except click_exceptions.ClickException as exc:
        typer.echo(usage_line(exc), err=True)
        sys.exit(exc.exit_code)
    if isinstance(result, int) and result:
        sys.exit(result)


def _disk_full(exc: BaseException) -> None:
    """A full disk the library did not turn into DiskFull is still no bug: one line, exit 1."""
    typer.echo(
        f"vaultmem: error: the disk is full ({exc}); what finished was kept and a step cut short finishes"
        " on the next open; free space, then run the command again",
        err=True,
    )
    sys.exit(1)


if __name__ == "__main__":
    main()
