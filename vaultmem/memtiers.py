"""Session notes, episodes and recipes as operations on an open vault (through ``coremem.MemoryEnv``).

- ``end_session`` writes (or refreshes) the note of a chat session and proposes its lasting facts to
  core memory through ``coremem.update``; a note a person edited is never rewritten. Every ingest
  queues a ``session_end`` job for each chat session that just received messages
  (``jobs.schedule_session_notes``), due when the session has been idle for ``[sessions] idle_s`` (each
  new message pushes it back); the worker pool runs it (``run_session_job``), so the daemon writes notes
  on its own.
- ``record_episode`` writes an episode file; a successful one joins a learned recipe whose episodes'
  requests are within the similarity threshold of its own, or, with two other similar successful
  episodes not yet in a recipe, is promoted with them into a new recipe (``recipes``). Learned recipes
  beyond ``[recipes] max_learned`` are archived (moved to ``recipes/_archive/``), the least used first.
- ``recipes_for`` matches a request against the recipes; ``recipe_result`` counts a success or failure.

Model calls (session notes, recipe drafts) happen outside the write lock; every file write is atomic,
hash-guarded, indexed at once and committed when git auto-commit is on.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from vaultmem import coremem, episodes, fsio, index, memindex, recipes, sessionnote
from vaultmem.coremem import MemoryEnv
from vaultmem.episodes import Episode, Step
from vaultmem.errors import ConflictError, InvalidInput, NodeNotFound, SummariserError
from vaultmem.jobs import Job
from vaultmem.model import Leaf, format_ts, parse_ts
from vaultmem.recipes import Recipe, RecipeMatch
from vaultmem.sessionnote import SessionNote


@dataclass(frozen=True)
class EpisodeRecord:
    """What ``record_episode`` did: the episode, and the recipe it was promoted into or joined."""

    episode: Episode
    recipe: Recipe | None = None
    outcome: str = "recorded"  # recorded | promoted | joined | reported
    notes: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        return {
            "episode": self.episode.as_dict(),
            "recipe": self.recipe.as_dict() if self.recipe else None,
            "outcome": self.outcome,
            "notes": list(self.notes),
        }


# --- sessions ------------------------------------------------------------------------------------------


def session_leaves(conn: sqlite3.Connection, session: str, source: str | None) -> list[Leaf]:
    sql = "SELECT * FROM chunks WHERE kind = 'leaf' AND session = ?"
    params: list[Any] = [session]
    if source is not None:
        sql += " AND source = ?"
        params.append(source)
    rows = conn.execute(sql + " ORDER BY coalesce(ts, ''), source_id, seq, path", params)
    return [index.row_to_leaf(r) for r in rows]


def _vectors(env: MemoryEnv, leaves: Sequence[Leaf]) -> dict[str, Any]:
    """The leaves' stored vectors (of any model the index holds for them: one model per vault)."""
    out: dict[str, Any] = {}
    ids = [leaf.id for leaf in leaves]
    for part, marks in index.in_batches(ids):
        for row in env.conn.execute(f"SELECT id, vec FROM vectors WHERE id IN ({marks})", part):
            out[row["id"]] = np.frombuffer(row["vec"], dtype="<f4").astype(np.float32)
    return out


def end_session(env: MemoryEnv, session: str, source: str | None = None) -> SessionNote:
    """Write the note of ``session`` (all its sources, or ``source``'s) and propose its facts to core
    memory. NodeNotFound when no leaf has that session."""
    if not isinstance(session, str) or not session.strip():
        raise InvalidInput("name the session to end (the `session` of its messages)")
    leaves = session_leaves(env.conn, session, source)
    if not leaves:
        where = f" in source {source!r}" if source else ""
        raise NodeNotFound(f"no messages in session {session!r}{where}; `vaultmem ls --session` lists them")
    if source is None and len({leaf.source for leaf in leaves}) == 1:
        source = leaves[0].source
    coremem.sync(env, ["session", "episode"])
    note = sessionnote.note_id(source, session)
    rel = memindex.path_of(env.conn, "session", note) or sessionnote.rel_path(
        note, session, sessionnote.started_of(leaves)
    )
    existing = coremem.read_text(env, rel)
    if existing is not None:
        parsed = sessionnote.parse(existing[0], rel)
        if parsed is not None and parsed[0].hand_edited:
            kept = "edited by hand: kept as it is (delete its content_hash line to let vaultmem rewrite it)"
            return replace(parsed[0], notes=(kept,))
    tools = [
        t
        for _, meta in memindex.records(env.conn, "episode")
        if meta.get("session") == session and (source is None or meta.get("source") in (None, source))
        for t in meta.get("tools", [])
    ]
    offline = sessionnote.draft(leaves, tools, _vectors(env, leaves))
    draft, notes = offline, []
    if env.model is not None:
        try:
            system, user = sessionnote.llm_prompt(leaves)
            draft = sessionnote.llm_draft(
                env.model.ask(system, user, max_tokens=1500), leaves, offline, env.model.model
            )
        except SummariserError as exc:
            notes.append(f"llm: {exc}; extractive note")
    remembered: list[str] = []
    by_file: dict[str, list[str]] = {}
    for proposal in draft.proposals:
        by_file.setdefault(proposal.file, []).append(proposal.entry)
    for file, entries in by_file.items():
        try:
            done = coremem.update(env, file, entries)
        except (ConflictError, InvalidInput) as exc:
            notes.append(f"core {file}: {exc}")
            continue
        remembered += [f"{file}: {e}" for e in entries]
        notes += list(done.notes)
    body = sessionnote.render_body(session, source, draft, leaves, remembered)
    meta = sessionnote.meta_for(note, session, source, leaves, draft)
    with env.lock():
        current = coremem.read_text(env, rel)
        keep = None
        if current is not None:
            parsed = sessionnote.parse(current[0], rel)
            if parsed is not None and parsed[0].hand_edited:
                return replace(parsed[0], notes=("edited by hand meanwhile: kept as it is",))
            keep = parsed[1] if parsed is not None else None
        text = sessionnote.render(meta, body, keep)
        coremem.write(env, rel, text, current[1] if current is not None else None)
        env.commit(f"memory: session note for {session} ({len(leaves)} messages)")
    written = sessionnote.parse(text, rel)
    assert written is not None
    return replace(written[0], notes=(*draft.notes, *notes))


def list_sessions(env: MemoryEnv, limit: int | None = None) -> list[SessionNote]:
    coremem.sync(env, ["session"])
    out = []
    for rel, _ in memindex.records(env.conn, "session"):
        found = coremem.read_text(env, rel)
        parsed = sessionnote.parse(found[0], rel) if found is not None else None
        if parsed is not None:
            out.append(parsed[0])
    out.sort(key=lambda n: (format_ts(n.started) or "", n.path), reverse=True)
    return out[:limit] if limit is not None else out


def run_session_job(env: MemoryEnv, job: Job) -> bool:
    """The ``session_end`` job: the session's note (nothing when its messages are gone)."""
    session = str(job.payload.get("session") or "")
    source = job.payload.get("source")
    with contextlib.suppress(NodeNotFound):
        end_session(env, session, str(source) if source else None)
    return True


# --- episodes and recipes -------------------------------------------------------------------------------


def _episode(meta: Mapping[str, Any]) -> Episode:
    steps = tuple(Step(s["tool"], s.get("args"), s.get("outcome") or "") for s in meta.get("steps", []))
    return Episode(
        id=meta["id"],
        path=meta["path"],
        request=meta["request"],
        mode=meta["mode"],
        steps=steps,
        success=bool(meta["success"]),
        ts=parse_ts(meta.get("ts")),
        session=meta.get("session"),
        source=meta.get("source"),
        recipe=meta.get("recipe"),
    )


def _recipe(meta: Mapping[str, Any]) -> Recipe:
    return Recipe(
        name=meta["name"],
        path=meta["path"],
        title=meta["title"],
        trigger=tuple(meta["trigger"]),
        description=meta["description"],
        steps=tuple(meta["steps"]),
        success_count=int(meta["success_count"]),
        failure_count=int(meta["failure_count"]),
        modes=tuple(meta["modes"]),
        learned=bool(meta["learned"]),
        archived=bool(meta["archived"]),
        episodes=tuple(meta["episodes"]),
        created=meta.get("created"),
        last_used=meta.get("last_used"),
        summariser=meta.get("summariser"),
    )


def list_episodes(env: MemoryEnv, *, limit: int | None = None, success: bool | None = None) -> list[Episode]:
    coremem.sync(env, ["episode"])
    found = [_episode(meta) for _, meta in memindex.records(env.conn, "episode")]
    if success is not None:
        found = [e for e in found if e.success is success]
    found.sort(key=lambda e: (format_ts(e.ts) or "", e.id), reverse=True)
    return found[:limit] if limit is not None else found


def list_recipes(env: MemoryEnv, *, archived: bool = False) -> list[Recipe]:
    coremem.sync(env, ["recipe"])
    found = [_recipe(meta) for _, meta in memindex.records(env.conn, "recipe")]
    return sorted((r for r in found if archived or not r.archived), key=lambda r: (r.archived, r.name))


def record_episode(
    env: MemoryEnv,
    request: str,
    *,
    mode: str,
    tools: Sequence[str | Mapping[str, Any]],
    outcomes: Sequence[str] | str | None,
    success: bool,
    session: str | None = None,
    source: str | None = None,
    recipe: str | None = None,
) -> EpisodeRecord:
    text, mode = episodes.check_request(request, mode)
    if not isinstance(success, bool):
        raise InvalidInput("success must be true or false")
    steps = episodes.steps_from(tools, outcomes)
    ts = env.clock()
    followed = _find(env, recipe) if recipe is not None else None
    episode_id = episodes.episode_id(ts, text, steps)
    rel = episodes.rel_path(episode_id, ts, text)
    episode = Episode(
        episode_id, rel, text, mode, steps, success, ts, session, source, followed.name if followed else None
    )
    with env.lock():
        coremem.write(env, rel, episodes.render(episode), None)
        env.commit(f"memory: episode {'succeeded' if success else 'failed'}: {text[:60]}")
    if followed is not None:
        counted = recipe_result(env, followed.name, success=success, episode=episode)
        return EpisodeRecord(episode, counted, "reported")
    if not success:
        return EpisodeRecord(episode)
    return _promote(env, episode)


def _find(env: MemoryEnv, name: str) -> Recipe:
    if not isinstance(name, str) or not name.strip():
        raise InvalidInput("name the recipe (its file name without .md)")
    found = [r for r in list_recipes(env, archived=True) if r.name == name.strip()]
    if not found:
        raise NodeNotFound(f"no recipe named {name!r}; `vaultmem recipes` lists them")
    return found[0]  # a live one sorts before an archived one of the same name


def _promote(env: MemoryEnv, episode: Episode) -> EpisodeRecord:
    coremem.sync(env, ["episode", "recipe"])
    s = env.settings
    every = {e.id: e for e in (_episode(m) for _, m in memindex.records(env.conn, "episode"))}
    every[episode.id] = episode
    known = list_recipes(env, archived=True)
    taken = {i for r in known for i in r.episodes} | {e.id for e in every.values() if e.recipe}
    live = [r for r in known if r.learned and not r.archived]
    candidates = [e for e in every.values() if e.success and e.id not in taken and e.id != episode.id]
    candidates.sort(key=lambda e: e.id)
    members = {r.name: [every[i] for i in r.episodes if i in every] for r in live}
    pool = [episode, *candidates, *(e for ms in members.values() for e in ms)]
    unique = list({e.id: e for e in pool}.values())
    vecs = memindex.embed_cached(env.conn, env.embedder(), [(f"episode:{e.id}", e.request) for e in unique])
    row = {e.id: n for n, e in enumerate(unique)}
    mine = vecs[row[episode.id]]
    # It joins the recipe with the most members within the threshold, when it has as many as a new
    # recipe would need (the same test as promotion, against the recipe's own episodes) and at least a
    # third of the recipe's episodes (a grown recipe is not joined for resembling two of its members).
    best: tuple[int, float, Recipe] | None = None
    for recipe in live:
        ms = members[recipe.name]
        sims = sorted((float(vecs[row[m.id]] @ mine) for m in ms), reverse=True)
        close = sum(1 for x in sims if x >= s.recipe_similarity)
        if close and close >= max(min(s.recipe_min_episodes - 1, len(ms)), -(-len(ms) // 3)):
            key = (close, sum(sims[:close]) / close, recipe)
            if best is None or key[:2] > best[:2]:
                best = key
    if best is not None:
        recipe = best[2]
        requests = [m.request for m in members[recipe.name]] + [episode.request]
        joined = recipe_result(env, recipe.name, success=True, episode=episode, requests=requests)
        return EpisodeRecord(episode, joined, "joined")
    rows = [row[episode.id], *(row[e.id] for e in candidates)]
    group = recipes.promotion_group(0, vecs[rows], s.recipe_similarity, s.recipe_min_episodes)
    if group is None:
        return EpisodeRecord(episode)
    chosen = [([episode, *candidates])[i] for i in group]
    draft = recipes.generalise(chosen, vecs[[rows[i] for i in group]])
    notes: list[str] = []
    if env.model is not None:
        try:
            system, user = recipes.llm_prompt(chosen)
            draft = recipes.llm_draft(env.model.ask(system, user, max_tokens=1200), env.model.model)
        except SummariserError as exc:
            notes.append(f"llm: {exc}; offline recipe")
    return EpisodeRecord(episode, _write_recipe(env, draft, chosen), "promoted", tuple(notes))


def _write_recipe(env: MemoryEnv, draft: recipes.Draft, group: Sequence[Episode]) -> Recipe:
    now = format_ts(env.clock())
    with env.lock():
        taken = {r.name for r in list_recipes(env, archived=True)}
        name = recipes.recipe_name(
            draft.title, lambda n: n in taken or env.layout.abs(f"recipes/{n}.md").exists()
        )
        rel = f"{recipes.RECIPES_DIR}/{name}.md"
        recipe = Recipe(
            name=name,
            path=rel,
            title=draft.title,
            trigger=draft.trigger,
            description=draft.description,
            steps=draft.steps,
            success_count=len(group),
            failure_count=0,
            modes=tuple(dict.fromkeys(e.mode for e in group)),
            learned=True,
            episodes=tuple(e.id for e in group),
            created=now,
            last_used=now,
            summariser=draft.summariser,
        )
        links = [(e.path.rsplit("/", 1)[-1].removesuffix(".md"), e.request) for e in group]
        coremem.write(env, rel, recipes.render(recipe, body=recipes.render_body(recipe, links)), None)
        env.commit(f"memory: recipe {name} learnt from {len(group)} episodes")
        _cap(env, keep=name)
    return recipe


def _cap(env: MemoryEnv, keep: str) -> None:
    """Archive the least used learned recipes beyond the cap (the caller holds the write lock)."""
    live = [r for r in list_recipes(env) if r.learned and not r.archived]
    excess = len(live) - env.settings.recipe_max_learned
    if excess <= 0:
        return
    order = sorted(
        (r for r in live if r.name != keep), key=lambda r: (r.success_count, r.last_used or "", r.name)
    )
    for recipe in order[:excess]:
        target = f"{recipes.RECIPES_DIR}/{recipes.ARCHIVE_DIR}/{recipe.name}.md"
        n = 2
        while env.layout.abs(target).exists():
            target = f"{recipes.RECIPES_DIR}/{recipes.ARCHIVE_DIR}/{recipe.name}-{n}.md"
            n += 1
        fsio.move_file(env.layout.root, env.layout.abs(recipe.path), env.layout.abs(target))
        memindex.delete(env.conn, recipe.path)
        memindex.index_file(env.conn, env.layout, target, env.max_bytes, env.settings.core)
        env.commit(f"memory: recipe {recipe.name} archived (over {env.settings.recipe_max_learned} learned)")


def recipe_result(
    env: MemoryEnv,
    name: str,
    *,
    success: bool,
    episode: Episode | None = None,
    requests: Sequence[str] = (),
) -> Recipe:
    """Count a successful or failed use of a recipe (and link the episode when one is given). A learned
    recipe an episode joined grows its trigger with the words its episodes' ``requests`` share."""
    if not isinstance(success, bool):
        raise InvalidInput("success must be true or false")
    for _ in range(coremem.ATTEMPTS):
        recipe = _find(env, name)
        found = coremem.read_text(env, recipe.path)
        if found is None:
            raise NodeNotFound(f"recipe {name!r} is gone from {recipe.path}")
        text, digest = found
        parsed = recipes.parse(text, recipe.path)
        if parsed is None:
            raise InvalidInput(f"{recipe.path} is not a recipe any more (no kind: recipe)")
        current, doc = parsed
        ids = current.episodes
        body = doc.body
        if episode is not None and episode.id not in ids:
            ids = (*ids, episode.id)[-recipes.MAX_EPISODE_LINKS :]
            if body.rstrip().split("\n## ")[-1].startswith("Episodes"):
                stem = episode.path.rsplit("/", 1)[-1].removesuffix(".md")
                body = body.rstrip("\n") + "\n" + recipes.link_line(stem, episode.request) + "\n"
        modes = current.modes
        if episode is not None and episode.mode not in modes:
            modes = (*modes, episode.mode)
        trigger = current.trigger
        if current.learned and requests:
            trigger = recipes.grown_trigger(trigger, requests)
        updated = replace(
            current,
            trigger=trigger,
            success_count=current.success_count + (1 if success else 0),
            failure_count=current.failure_count + (0 if success else 1),
            episodes=ids,
            modes=modes,
            last_used=format_ts(env.clock()),
        )
        with env.lock():
            try:
                coremem.write(env, recipe.path, recipes.render(updated, keep=doc, body=body), digest)
            except ConflictError:
                continue
            env.commit(f"memory: recipe {name} {'succeeded' if success else 'failed'}")
        return updated
    raise ConflictError(f"{name}: the recipe kept changing while it was updated; try again")


def recipes_for(
    env: MemoryEnv, request: str, *, limit: int | None = None, max_chars: int | None = None
) -> RecipeMatch:
    if not isinstance(request, str) or not request.strip():
        raise InvalidInput("the request is empty; give the user's request as text")
    n = limit if limit is not None else env.settings.recipe_max_in_prompt
    chars = max_chars if max_chars is not None else env.settings.recipe_max_chars
    if n < 1 or chars < 1:
        raise InvalidInput("limit and max_chars must be positive")
    return recipes.match(request, list_recipes(env), n, chars, env.settings.recipe_trigger_min)
