"""The dashboard's data: one JSON view per panel, each read through the public ``Vault`` API.

Owns the shape of what the page draws (status, metrics, graph, topic, heatmap, search, tree, day) and
the two requests it can make (ingest a configured source, compact), both of which only queue jobs. It
runs no SQL of its own: every number comes from a ``Vault`` call, so the page and the CLI never
disagree. Calls on one vault are serialised by ``lock`` (one SQLite connection, many HTTP threads).
Memory text leaves here as data; the page renders it as text, never as markup.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar, cast

from vaultmem import daemonstate, gitsync
from vaultmem.errors import InvalidInput, NodeNotFound, ReadOnlyVault
from vaultmem.layout import note_of
from vaultmem.model import Leaf, format_ts
from vaultmem.navigate import Node
from vaultmem.summaryfile import SummaryNode, summary_json
from vaultmem.vault import Vault

T = TypeVar("T")
GRAPH_NODES = 300  # the graph's default size: the hottest entities
GRAPH_MAX_NODES = 1000
GRAPH_EDGES = 1500  # the heaviest co-occurrence edges among them
SEARCH_HITS = 20
PAGE = 100  # tree children per page
HEAT_DAYS = 365
STORAGE_EVERY_S = 60.0
CACHE_ENTRIES = 256  # views kept while the index does not change  # the walk over every file for the storage figures, at most this often

# What a running job of a kind means, for the one-word state at the top of the status panel.
_DOING = {
    "ingest": "ingesting",
    "admit": "embedding",
    "append_buffer": "compacting",
    "seal": "compacting",
    "flush_stale": "compacting",
    "resummarise": "summarising",
    "topic_route": "routing topics",
    "digest_daily": "writing digests",
    "session_end": "writing session notes",
    "detect_updates": "looking for updates",
}


def leaf_view(leaf: Leaf) -> dict[str, Any]:
    """A leaf as the page shows it (text, provenance, where its file is)."""
    return {
        "id": leaf.id,
        "kind": "leaf",
        "text": leaf.text,
        "path": leaf.path,
        "source": leaf.source,
        "session": leaf.session,
        "speaker": leaf.speaker,
        "role": leaf.role,
        "ts": format_ts(leaf.ts),
        "status": leaf.status.value,
        "entities": list(leaf.entities),
    }


def node_view(node: Node) -> dict[str, Any]:
    """A tree node (level or leaf) as the tree browser shows it."""
    return {
        "id": node.id,
        "kind": node.kind,
        "title": node.title,
        "path": node.path,
        "ts": node.ts,
        "ts_end": node.ts_end,
        "depth": node.depth,
        "children": node.children,
        "descendants": node.descendants,
        "stale": node.stale,
        "speaker": node.speaker,
        "text": node.text,
    }


class Panels:
    """The JSON behind each panel, for one open vault."""

    def __init__(self, vault: Vault, *, actions: bool = True) -> None:
        self.vault = vault
        self.actions = actions and vault.read_only is None  # the two buttons of the status panel
        self.lock = threading.RLock()
        self._storage: dict[str, Any] | None = None
        self.runner: dict[str, Any] = {}  # what the server's queue runner last did (set by the server)
        self._cache: OrderedDict[tuple[Any, ...], tuple[tuple[Any, ...], Any]] = OrderedDict()
        if vault.read_only is None:
            vault.hot_topics(1)  # seeds the heat of an index rebuilt without it, once: the graph is by heat

    def _cached(self, key: tuple[Any, ...], compute: Callable[[], T]) -> T:
        """``compute()``, or its last result while the index has not changed (any commit, by any
        process, changes ``index_version``) and the UTC day is the same (heat decays by the day)."""
        with self.lock:
            version = (*self.vault.index_version(), datetime.now(UTC).date())
            hit = self._cache.get(key)
            if hit is not None and hit[0] == version:
                self._cache.move_to_end(key)
                return cast(T, hit[1])
            value = compute()
            self._cache[key] = (version, value)
            while len(self._cache) > CACHE_ENTRIES:
                self._cache.popitem(last=False)
            return value

    # -- status and metrics ---------------------------------------------------------------------------
    def status(self) -> dict[str, Any]:
        v = self.vault
        with self.lock:
            daemon = daemonstate.status(v.layout)
            by_kind = v.jobs.by_kind()
            running = v.jobs.list("running", limit=50)
            parked = v.jobs.list("parked", limit=20)
            folders = v.source_folders()
        # Stat calls only, outside the lock; a git command holding the index is not waited for.
        operation = gitsync.operation_in_progress(v.layout.root, lock_wait_s=0)
        queued = sum(states.get("queued", 0) for states in by_kind.values())
        doing = sorted({_DOING.get(j.kind, j.kind) for j in running})
        state = ", ".join(doing) if doing else ("waiting" if queued else "idle")
        return {
            "state": state,
            "vault": self.vault_info(),
            "read_only": v.read_only,
            "actions": self.actions,
            "daemon": daemon,
            # A git operation under way pauses every write (the daemon's and the queue's) until it ends.
            "git": {**operation.as_dict(), "why": operation.describe()} if operation else None,
            "queue": by_kind,
            "parked": [
                {
                    "id": j.id,
                    "kind": j.kind,
                    "payload": j.payload,
                    "attempts": j.attempts,
                    "error": (j.last_error or "").splitlines()[0][:300] if j.last_error else None,
                }
                for j in parked
            ],
            "sources": [
                {"name": name, "path": str(where), "exists": where.exists()}
                for name, where in folders.items()
            ],
            "runner": dict(self.runner),
        }

    def vault_info(self) -> dict[str, Any]:
        root = self.vault.layout.root
        return {"name": root.name, "root": str(root), "git": self.vault.config.git_auto_commit}

    def measure_storage(self) -> dict[str, Any]:
        """Walk every file for the storage figures (no lock: it reads the file system only)."""
        files, index_bytes = self.vault.storage()
        self._storage = {"files": files, "index": index_bytes, "at": _now_iso()}
        return self._storage

    def storage_due(self) -> bool:
        if self._storage is None:
            return True
        at = datetime.fromisoformat(self._storage["at"].replace("Z", "+00:00"))
        return (datetime.now(UTC) - at).total_seconds() >= STORAGE_EVERY_S

    def metrics(self) -> dict[str, Any]:
        return {
            **self._cached(("metrics",), self._metrics),
            "storage": self._storage,
        }  # storage: None until walked

    def _metrics(self) -> dict[str, Any]:
        with self.lock:
            stats = self.vault.stats(files=False)
            per_source = self.vault.leaves_per_source()
        return {
            "leaves": stats.leaves,
            "summaries": stats.summaries,
            "topics": stats.topics,
            "sources": [{"name": s, "leaves": per_source.get(s, 0)} for s in stats.sources],
            "by_status": stats.by_status,
            "first_memory": stats.first_memory,
            "latest_memory": stats.latest_memory,
        }

    # -- graph and topics --------------------------------------------------------------------------------
    def graph(self, limit: int = GRAPH_NODES, min_weight: int = 1) -> dict[str, Any]:
        limit = max(1, min(limit, GRAPH_MAX_NODES))
        return self._cached(("graph", limit, min_weight), lambda: self._graph(limit, min_weight))

    def _graph(self, limit: int, min_weight: int) -> dict[str, Any]:
        with self.lock:
            found = self.vault.graph(limit=limit, min_weight=min_weight, by="heat")
        nodes = [
            {
                "key": n["key"],
                "name": n["name"],
                "kind": n["kind"],
                "heat": n["heat"],
                "leaves": n["leaves"],
                "sources": n["sources"],
                "first_seen": n["first_seen"],
                "last_seen": n["last_seen"],
                "topic": n["topic"],
            }
            for n in found["nodes"]
        ]
        return {
            "nodes": nodes,
            "edges": found["edges"][:GRAPH_EDGES],
            "edges_total": len(found["edges"]),
            "limit": limit,
        }

    def topic(self, key: str, n: int = 8) -> dict[str, Any]:
        return self._cached(("topic", key, n), lambda: self._topic(key, n))

    def _topic(self, key: str, n: int) -> dict[str, Any]:
        with self.lock:
            view = self.vault.topic(key, n)
        return {
            "entity": view.entity.as_dict(),
            "summary": view.summary,
            "facts": [leaf_view(x) for x in view.facts],
            "recent": [leaf_view(x) for x in view.recent],
        }

    def topic_names(self, n: int = 50) -> list[dict[str, str]]:
        """The hottest entities, for the search panel's scope."""
        return [{"key": e["key"], "name": e["name"], "kind": e["kind"]} for e in self.graph(n)["nodes"]]

    # -- heatmap ------------------------------------------------------------------------------------
    def heatmap(self, source: str | None = None, last: str | None = None) -> dict[str, Any]:
        """Leaves per UTC day over a year ending ``last`` (default today; a vault silent for a year
        ends at its latest memory instead)."""
        return self._cached(("heatmap", source, last), lambda: self._heatmap(source, last))

    def _heatmap(self, source: str | None, last: str | None) -> dict[str, Any]:
        end = date.fromisoformat(last) if last else datetime.now(UTC).date()
        with self.lock:
            days = self.vault.leaves_per_day(end - timedelta(days=HEAT_DAYS - 1), end, source=source)
            if not days and last is None:
                latest = self.vault.stats(files=False).latest_memory
                if latest and latest[:10] < end.isoformat():
                    end = date.fromisoformat(latest[:10])
                    days = self.vault.leaves_per_day(end - timedelta(days=HEAT_DAYS - 1), end, source=source)
            sources = self.vault.sources()
        first = end - timedelta(days=HEAT_DAYS - 1)
        return {
            "first": first.isoformat(),
            "last": end.isoformat(),
            "source": source,
            "days": days,
            "total": sum(days.values()),
            "sources": sources,
        }

    # -- search -------------------------------------------------------------------------------------
    def search(
        self,
        query: str,
        scope: str = "all",
        since: str | None = None,
        until: str | None = None,
        limit: int = SEARCH_HITS,
    ) -> dict[str, Any]:
        """``scope``: ``all``, ``source:<name>`` or ``topic:<entity>``; ``since``/``until``: days or
        times (a bare day as ``until`` means the end of it)."""
        if not query.strip():
            raise InvalidInput("type a few words to search for")
        kind, _, value = scope.partition(":")
        if kind not in ("all", "source", "topic") or (kind != "all" and not value):
            raise InvalidInput(f"unknown scope {scope!r}; use all, source:<name> or topic:<entity>")
        if until and len(until) == 10:
            until += "T23:59:59Z"
        with self.lock:
            hits = self.vault.search(
                query,
                max(1, min(limit, 100)),
                source=value if kind == "source" else None,
                topic=value if kind == "topic" else None,
                since=since or None,
                until=until or None,
            )
        return {
            "query": query,
            "scope": scope,
            "hits": [
                {
                    "id": h.id,
                    "kind": h.kind,
                    "text": h.text,
                    "path": h.path,
                    "score": round(h.score, 4),
                    "weak": h.weak,
                    "source": h.source,
                    "session": h.session,
                    "speaker": h.speaker,
                    "role": h.role,
                    "ts": h.ts,
                    "status": h.status,
                }
                for h in hits
            ],
        }

    # -- tree ---------------------------------------------------------------------------------------
    def children(
        self, node: str | None = None, source: str | None = None, offset: int = 0, limit: int = PAGE
    ) -> dict[str, Any]:
        """The tree one level at a time: without ``node`` and ``source`` the sources; a source's top;
        a level's children. Paged: ``total`` says how many there are."""
        return self._cached(
            ("children", node, source, offset, limit), lambda: self._children(node, source, offset, limit)
        )

    def _children(self, node: str | None, source: str | None, offset: int, limit: int) -> dict[str, Any]:
        with self.lock:
            if node is None and source is None:
                counts = self.vault.leaves_per_source()
                sources = self.vault.sources()
                items = [
                    {"id": s, "kind": "source", "title": s, "descendants": counts.get(s, 0)} for s in sources
                ]
                return {"items": items, "total": len(items), "offset": 0}
            nodes, total = self.vault.children(node, source=source, offset=offset, limit=limit)
        return {"items": [node_view(n) for n in nodes], "total": total, "offset": offset}

    # -- a day ----------------------------------------------------------------------------------------
    def day(self, day: str | None = None) -> dict[str, Any]:
        """A UTC day's digest and, with git, the memory commits of that day. Without ``day``: today,
        or the latest day with memories when today has none (``fallback``)."""
        v = self.vault
        with self.lock:
            when = date.fromisoformat(day) if day else datetime.now(UTC).date()
            fallback = False
            if day is None and not v.leaves_per_day(when, when):
                latest = v.stats(files=False).latest_memory
                if latest:
                    when, fallback = date.fromisoformat(latest[:10]), True
            leaves = sum(v.leaves_per_day(when, when).values())
            # Both cost in proportion to the day (its leaves, its commits' patches): kept until the index
            # changes, the commits also until git moves HEAD.
            digest, note = self._cached(("digest", when), lambda: self._day_digest(when))
            commits = self._cached(
                ("commits", when, v.repo_stamp()), lambda: [c.as_dict() for c in v.commits_of(when)]
            )
        return {
            "day": when.isoformat(),
            "fallback": fallback,
            "leaves": leaves,
            "digest": digest,
            "note": note,
            "git": v.config.git_auto_commit or bool(commits),
            "commits": commits,
        }

    def _day_digest(self, when: date) -> tuple[dict[str, Any] | None, str | None]:
        """The day's digest and a note: a missing or stale digest is built in memory, never written (a
        page view writes nothing; the day's queued job writes the file)."""
        found = self.vault.global_digest(when, write=False)
        return (self._digest(found[0]) if found else None), None

    def _digest(self, node: SummaryNode) -> dict[str, Any]:
        """A digest with its links resolved to the leaves' files."""
        data = summary_json(node)
        ids = [c.linked_id for c in node.children]
        # A note's section opens its note (the section has no file of its own).
        found = {
            x.id: note_of(x.path) or x.path
            for x in self.vault.fetch([i for i in ids if i])
            if isinstance(x, Leaf)
        }
        base = node.directory
        data["children"] = [
            {
                "label": c.label,
                "path": found.get(i or "") if c.wiki else f"{base}/{c.target}",
            }
            for c, i in zip(node.children, ids, strict=True)
        ]
        return data

    # -- requests (queued, never run here) -------------------------------------------------------------
    def request_ingest(self, source: str) -> dict[str, Any]:
        self._allowed()
        with self.lock:
            added = self.vault.queue_ingest(source)
        return {
            "queued": int(added),
            "message": f"ingest of {source} queued" if added else f"ingest of {source} is already queued",
        }

    def request_compact(self) -> dict[str, Any]:
        self._allowed()
        with self.lock:
            added = self.vault.queue_compaction()
        return {
            "queued": added,
            "message": f"compaction queued ({added} jobs)" if added else "nothing new to queue",
        }

    # -- the review inbox (issue #20): a person's decisions, never an agent's --------------------------
    def review(self) -> dict[str, Any]:
        """The proposals waiting in ``review/`` with both texts, oldest first."""
        with self.lock:
            waiting = self.vault.proposals()
            texts = {i: leaf for p in waiting for i in (p.old, p.new) if (leaf := self._leaf(i)) is not None}
        items = []
        for p in waiting:
            old, new = texts.get(p.old), texts.get(p.new)
            items.append(
                {
                    **p.as_dict(),
                    "key": p.new,
                    "old_text": old.text if old else None,
                    "new_text": new.text if new else None,
                    "old_path": old.path if old else None,
                    "new_path": new.path if new else None,
                    "old_ts": format_ts(old.ts) if old else None,
                    "new_ts": format_ts(new.ts) if new else None,
                }
            )
        return {"proposals": items, "actions": self.actions}

    def _leaf(self, leaf_id: str) -> Leaf | None:
        try:
            return self.vault.get(leaf_id)
        except NodeNotFound:
            return None

    def decide(self, key: str, decision: str) -> dict[str, Any]:
        """Accept, reject or skip a proposal (``key``: its new leaf's id or its file name)."""
        self._allowed()
        if decision not in ("accept", "reject", "skip"):
            raise InvalidInput("decision must be accept, reject or skip")
        with self.lock:
            done = self.vault.decide(key, decision)
        outcome = next((k for k, v in done.items() if v and k != "invalid"), None)
        return {"outcome": outcome or "skipped", "message": f"{key}: {outcome or 'left for later'}"}

    def _allowed(self) -> None:
        if not self.actions:
            raise ReadOnlyVault("the dashboard is read-only: start it without --read-only to queue work")

    # -- the export ---------------------------------------------------------------------------------
    def snapshot(self) -> dict[str, Any]:
        """Everything the page shows, for a file that opens offline: every panel's view, each graph
        node's topic, the heatmap of every source, every leaf (the offline search reads them), the
        whole tree, and the last days with memories."""
        v = self.vault
        self.measure_storage()
        graph = self.graph()
        status = self.status()
        metrics = self.metrics()
        heat = {"": self.heatmap()}
        for source in heat[""]["sources"]:
            heat[source] = self.heatmap(source, heat[""]["last"])
        with self.lock:
            leaves = [leaf_view(x) for x in v.ls()]
        tree: dict[str, list[Any]] = {"": self.children()["items"]}
        todo: list[tuple[str | None, str | None]] = [(None, s["id"]) for s in tree[""]]
        while todo:
            node, source = todo.pop()
            items: list[dict[str, Any]] = []
            while True:
                page = self.children(node, source, len(items), 1000)
                items.extend(page["items"])
                if len(items) >= page["total"] or not page["items"]:
                    break
            # Leaves travel once (in ``leaves``); the tree names them by id.
            tree[node or f"source:{source}"] = [i if i["kind"] != "leaf" else i["id"] for i in items]
            todo.extend((i["id"], None) for i in items if i["kind"] == "summary")
        today = self.day()
        days = {today["day"]: today}
        recent = sorted({x["ts"][:10] for x in leaves if x["ts"] and x["ts"][:10] < today["day"]})[-13:]
        for d in recent:
            days[d] = self.day(d)
        return {
            "generated": _now_iso(),
            "status": {**status, "actions": False},
            "metrics": metrics,
            "graph": graph,
            "topics": {n["key"]: self.topic(n["key"]) for n in graph["nodes"]},
            "heatmap": heat,
            "leaves": leaves,
            "tree": tree,
            "days": days,
            "today": today["day"],
            "review": {**self.review(), "actions": False},
        }


def _now_iso() -> str:
    return datetime.fromtimestamp(time.time(), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def file_under(root: Path, rel: str) -> Path | None:
    """The Markdown file ``rel`` inside the vault, or None when it is not one (outside the vault, in
    ``.vaultmem`` or ``.git``, not ``.md``, missing): what the page's plain file links may open."""
    parts = Path(rel).parts
    if not rel or Path(rel).is_absolute() or any(p in ("..", "") or p.startswith(".") for p in parts):
        return None
    if not rel.endswith(".md"):
        return None
    path = (root / rel).resolve()
    try:
        path.relative_to(root.resolve())
    except ValueError:
        return None
    return path if path.is_file() else None
