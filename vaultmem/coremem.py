"""Core memory operations: read the block, update a file within its budget, onboard; and what the
agent-memory tiers share (``MemoryEnv``: the vault's connection, paths, lock, commit, clock, models).

``core_update`` enforces the budget **when writing**. The file is read (its hash kept), the new entries
merged by the configured LLM (told the budget; its reply validated) or by the offline policy
(``corepolicy``), outside the write lock; then, under the lock and only if the file still has the hash
that was read (a person's edit is never overwritten: the update starts again from the edited file, up to
three times), what leaves goes first to its destination, then the file is written. What leaves an
in-prompt file goes to ``knowledge.md`` (whose own overflow, like that of every other file and of
merged entries, goes to ``core/_archive/<file>.md``), so a crash between the two writes leaves an entry
in two places, never in none. Every write is atomic (``fsio``), indexed at once, and committed to git
when auto-commit is on. Missing files are created from templates on first use.

``core_block`` reads the in-prompt files and assembles the block deterministically within the budgets
(``write=False``, the reading path of recall, hooks and MCP, creates and indexes nothing):
a file over its own budget (a hand edit) is shown cut by the same order the policy evicts in (its
file is untouched), then the whole block is kept within the total budget the same way. Every piece is
``frame.neutralise``d.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from vaultmem import corefile, corepolicy, fsio, memindex
from vaultmem.agentllm import ChatModel
from vaultmem.corefile import CoreDoc, CoreSettings, Entry, Item
from vaultmem.embed import Embedder
from vaultmem.errors import ConflictError, InvalidInput, NodeNotFound
from vaultmem.frame import neutralise
from vaultmem.layout import Layout

if TYPE_CHECKING:
    from vaultmem import review

ATTEMPTS = 3
QUESTIONS: tuple[tuple[str, str], ...] = (
    ("name", "What should I call you?"),
    ("language", "Which language should I answer in?"),
    ("use", "What will you mainly use me for?"),
)
MAX_ANSWER_CHARS = 200


@dataclass(frozen=True)
class MemorySettings:
    """The ``[core]``, ``[sessions]`` and ``[recipes]`` sections of the config."""

    core: CoreSettings = field(default_factory=CoreSettings)
    session_auto: bool = True  # a session note when a chat session has been idle for session_idle_s
    session_idle_s: float = 1800.0
    session_max_age_days: float = 7.0  # ...unless its newest message is older than this (an import)
    recipe_similarity: float = 0.32  # cosine of requests for promotion (MiniLM; bench/recipes.py)
    recipe_min_episodes: int = 3
    recipe_max_learned: int = 50
    recipe_max_in_prompt: int = 3
    recipe_max_chars: int = 2000
    recipe_trigger_min: float = 0.15


@dataclass(frozen=True)
class MemoryEnv:
    """What the tiers' operations need from the open vault; the vault builds one per call."""

    conn: sqlite3.Connection
    layout: Layout
    settings: MemorySettings
    max_bytes: int
    lock: Callable[[], AbstractContextManager[object]]
    commit: Callable[[str], None]
    clock: Callable[[], datetime]
    embedder: Callable[[], Embedder]
    model: ChatModel | None = None
    read_only: bool = False
    # Told the paths of a person's edits the engine is about to build on (git auto-commit commits them
    # first, as their own commit); None when nothing needs telling.
    hand_edits: Callable[[list[str]], None] | None = None
    # The update tier (issue #20): the confidence at which a core entry's new version replaces the old
    # one at once (None: auto-apply off, the update is only reported, from ``detect.PROPOSE_AT``).
    updates_auto_at: float | None = None


@dataclass(frozen=True)
class CoreFileView:
    name: str
    path: str
    title: str
    in_prompt: bool
    budget: int
    chars: int
    entries: tuple[tuple[str | None, str], ...]  # (tag, text)
    exists: bool = True

    @property
    def over_budget(self) -> bool:
        return self.chars > self.budget

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "path": self.path,
            "title": self.title,
            "in_prompt": self.in_prompt,
            "budget": self.budget,
            "chars": self.chars,
            "over_budget": self.over_budget,
            "exists": self.exists,
            "entries": [{"tag": tag, "text": text} for tag, text in self.entries],
        }


@dataclass(frozen=True)
class CoreBlock:
    """The prompt block: ``text`` (``chars`` <= ``budget``), the files in it, entries left out."""

    text: str
    chars: int
    budget: int
    files: tuple[str, ...]
    left_out: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        return {
            "text": self.text,
            "chars": self.chars,
            "budget": self.budget,
            "files": list(self.files),
            "left_out": list(self.left_out),
        }


@dataclass(frozen=True)
class CoreUpdate:
    file: str
    added: tuple[str, ...]
    refreshed: tuple[str, ...]  # entries a duplicate re-tagged with this month
    moved: tuple[tuple[str, str, str], ...]  # (entry, where it went, why)
    chars: int
    budget: int
    by: str  # "policy" or "llm:<model>"
    notes: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        return {
            "file": self.file,
            "added": list(self.added),
            "refreshed": list(self.refreshed),
            "moved": [{"entry": e, "to": to, "why": why} for e, to, why in self.moved],
            "chars": self.chars,
            "budget": self.budget,
            "by": self.by,
            "notes": list(self.notes),
        }


@dataclass(frozen=True)
class Onboarding:
    created: tuple[str, ...]
    answered: tuple[str, ...]
    skipped: tuple[str, ...]
    updates: tuple[CoreUpdate, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        return {
            "created": list(self.created),
            "answered": list(self.answered),
            "skipped": list(self.skipped),
            "updates": [u.as_dict() for u in self.updates],
        }


# --- shared helpers ----------------------------------------------------------------------------------


def sync(env: MemoryEnv, kinds: Iterable[str]) -> memindex.SyncReport:
    """Bring the index in step with hand edits of the agent files of ``kinds`` (a ``stat`` each when
    nothing changed; the write lock only when something did). Nothing on a read-only vault."""
    if env.read_only:
        return memindex.SyncReport()
    stale = memindex.stale(env.conn, env.layout, kinds)
    if not stale:
        return memindex.SyncReport()
    with env.lock():
        report = memindex.reconcile(env.conn, env.layout, stale, env.max_bytes, env.settings.core)[0]
        edited = [*report.new, *report.changed, *report.deleted, *(rel for rel, _ in report.invalid)]
        if edited and env.hand_edits is not None:
            env.hand_edits(edited)
        return report


def write(env: MemoryEnv, rel: str, text: str, expected: str | None) -> None:
    """Write an agent file atomically, guarded by the hash read (None: it must not exist), and index it.
    A file whose bytes are not what the index last saw was edited by a person: ``hand_edits`` hears of
    it first (their edit is committed as theirs before the engine's change). The caller holds the
    write lock."""
    if (
        expected is not None
        and env.hand_edits is not None
        and memindex.indexed_hash(env.conn, rel) != expected
    ):
        env.hand_edits([rel])
    fsio.atomic_write(env.layout.abs(rel), text.encode("utf-8"), root=env.layout.root, expected=expected)
    memindex.index_file(env.conn, env.layout, rel, env.max_bytes, env.settings.core)


def read_text(env: MemoryEnv, rel: str) -> tuple[str, str] | None:
    try:
        return fsio.read_text_guarded(env.layout.abs(rel), env.max_bytes)
    except FileNotFoundError:
        return None


# --- core files ----------------------------------------------------------------------------------------


def load(env: MemoryEnv, name: str) -> tuple[CoreDoc, str | None]:
    """A core file and the hash of its bytes; a template (and None) when it does not exist yet."""
    found = read_text(env, corefile.rel_path(name))
    if found is None:
        return corefile.template(env.settings.core.spec(name)), None
    text, digest = found
    return corefile.parse(text, corefile.rel_path(name), env.settings.core), digest


def _load_archive(env: MemoryEnv, name: str) -> tuple[CoreDoc, str | None]:
    rel = corefile.archive_rel(name)
    found = read_text(env, rel)
    if found is None:
        return corefile.archive_template(env.settings.core.spec(name)), None
    return corefile.parse(found[0], rel, env.settings.core), found[1]


def names(env: MemoryEnv) -> list[str]:
    """Every core file: the known ones in prompt order, then those a person added, by name."""
    extra = sorted(
        p.stem
        for p in (env.layout.root / corefile.CORE_DIR).glob("*.md")
        if p.stem not in corefile.KNOWN_NAMES and corefile.NAME_RE.match(p.stem) and not p.is_symlink()
    )
    return [*corefile.KNOWN_NAMES, *extra]


def ensure(env: MemoryEnv, wanted: Sequence[str] | None = None) -> list[str]:
    """Create missing core files from their templates; returns the paths created."""
    if env.read_only:
        return []
    todo = [n for n in (wanted or corefile.KNOWN_NAMES) if not env.layout.abs(corefile.rel_path(n)).exists()]
    if not todo:
        return []
    created = []
    with env.lock():
        for name in todo:
            doc = corefile.template(env.settings.core.spec(name))
            rel = corefile.rel_path(name)
            try:
                write(env, rel, corefile.render(doc, doc.items), None)
            except ConflictError:
                continue  # made meanwhile (by a person, or another process): theirs stands
            created.append(rel)
        if created:
            env.commit(f"memory: core files created ({', '.join(n.split('/')[-1] for n in created)})")
    return created


def view(env: MemoryEnv, name: str) -> CoreFileView:
    name = corefile.check_name(name)
    doc, digest = load(env, name)
    return _view(doc, digest is not None)


def _view(doc: CoreDoc, exists: bool) -> CoreFileView:
    entries = tuple((e.tag, e.text) for e in doc.entries)
    return CoreFileView(
        doc.name,
        corefile.rel_path(doc.name),
        doc.title,
        doc.in_prompt,
        doc.budget,
        doc.chars,
        entries,
        exists,
    )


def files(env: MemoryEnv) -> list[CoreFileView]:
    ensure(env)
    sync(env, ["core"])
    return [view(env, n) for n in names(env)]


def block(env: MemoryEnv, *, write: bool = True, as_of: datetime | None = None) -> CoreBlock:
    """The in-prompt core files as one block within the budgets (module docstring). Deterministic.
    With ``write``, missing files are created and hand edits indexed on the way (a ``stat`` per file
    when there are none); without it nothing is written: a missing file counts as its template (which
    adds nothing to the block), the files are read as they are. ``as_of``: the block as core memory
    stood then (entries learnt by then and valid then, archived ones that had not left yet, those the
    budget moved to knowledge.md after then; the budgets as now)."""
    if write and as_of is None:
        ensure(env)
        sync(env, ["core"])
    now = as_of or env.clock()
    tag = corefile.month(now)
    total = env.settings.core.total_budget
    parts: list[tuple[CoreDoc, list[Item]]] = []
    left: list[str] = []
    away = _moved_out(env, now) if as_of is not None else {}
    for name in names(env):
        doc, _ = load(env, name)
        if not doc.in_prompt:
            continue
        # An entry outside its validity window (a comment on its line) or replaced by a newer version is
        # not shown; the file keeps it.

        def holds(x: Entry) -> bool:
            return x.held_at(now) if as_of is not None else x.valid_at(now)

        held = [x for x in doc.items if not isinstance(x, Entry) or holds(x)]
        left += [f"{name}: {x.text} (not valid now)" for x in doc.entries if not holds(x)]
        if as_of is not None:  # what had not left the file yet (for its archive, or for knowledge.md)
            archive, _ = _load_archive(env, name)
            held += [x for x in archive.entries if x.held_at(now)]
            held += away.get(name, [])
        kept, evicted = corepolicy.evict(held, doc.budget, tag)
        left += [f"{name}: {x.entry.text}" for x in evicted]
        parts.append((doc, kept))

    def render() -> str:
        sections = []
        for doc, items in parts:
            text = corefile.prompt_text(items)
            if text:
                sections.append(neutralise(f"## {doc.title}\n{text}"))
        return "\n\n".join(sections)

    text = render()
    while len(text) > total:
        candidates = [
            (e.tag or tag, corepolicy_score(e), f, i)
            for f, (_, items) in enumerate(parts)
            for i, e in enumerate(items)
            if isinstance(e, Entry)
        ]
        if not candidates:
            text = text[: max(0, total - 1)] + "…" if total else ""
            break
        _, _, f, i = min(candidates)
        doc, items = parts[f]
        left.append(f"{doc.name}: {items[i].text}")  # type: ignore[union-attr]
        parts[f] = (doc, items[:i] + items[i + 1 :])
        text = render()
    shown = tuple(doc.name for doc, items in parts if corefile.prompt_text(items))
    return CoreBlock(text, len(text), total, shown, tuple(left))


def _moved_out(env: MemoryEnv, moment: datetime) -> dict[str, list[Entry]]:
    """The entries of ``knowledge.md`` (and its archive) the budget moved out of an in-prompt file
    after ``moment`` and that held then, by the file they left (``corefile.moved``)."""
    out: dict[str, list[Entry]] = {}
    for doc in (load(env, corefile.OVERFLOW)[0], _load_archive(env, corefile.OVERFLOW)[0]):
        for entry in doc.entries:
            origin = entry.left_prompt()
            if origin is not None and origin[1] > moment and entry.held_at(moment):
                out.setdefault(origin[0], []).append(entry)
    return out


def _changed(old: str, new: str) -> bool:
    """Whether a near duplicate changes a value of the entry (issue #20): the words alone, no vectors."""
    from vaultmem import detect

    return detect.judge(old, new, 0.0) is not None


def _versions(
    env: MemoryEnv,
    doc: CoreDoc,
    new: Sequence[Entry],
    now: datetime,
    why: dict[tuple[str, str], tuple[str, ...]] | None = None,
    sure: dict[tuple[str, str], float] | None = None,
) -> corepolicy.Versions:
    """Cross-entry detection for an update of ``doc`` (issue #20): the supersede detector over each pair
    of an entry and a new one that share a content word, with their cosine from the vault's embedder
    (every text embedded once, in one batch, only when some pair needs it). ``why`` collects the
    detector's reasons per (old, new) text, for the review inbox, and ``sure`` its confidence."""
    from vaultmem import detect

    vectors: dict[str, Any] = {}
    reasons = why if why is not None else {}
    confidences = sure if sure is not None else {}

    def judge(old: str, fresh: str) -> float | None:
        if not corepolicy.words(old) & corepolicy.words(fresh):
            return None
        if not vectors:
            texts = list(dict.fromkeys([*(e.text for e in doc.entries), *(e.text for e in new)]))
            vectors.update(zip(texts, env.embedder().embed(texts), strict=True))
        verdict = detect.judge(old, fresh, float(vectors[old] @ vectors[fresh]))
        if verdict is None:
            return None
        reasons[old, fresh] = verdict.why
        confidences[old, fresh] = verdict.confidence
        return verdict.confidence

    return corepolicy.Versions(now.strftime("%Y-%m-%d"), judge, env.updates_auto_at, detect.PROPOSE_AT)


def corepolicy_score(entry: Entry) -> float:
    from vaultmem.scoring import FastScorer

    return FastScorer().score(entry.text).value


def update(env: MemoryEnv, name: str, entries: str | Sequence[str]) -> CoreUpdate:
    """Add entries to a core file within its budget (module docstring)."""
    name = corefile.check_name(name)
    now = env.clock()
    tag = corefile.month(now)
    new = corefile.learnt(corefile.new_entries(entries, tag), now.strftime("%Y-%m-%d"))
    if not new:
        raise InvalidInput("nothing to add: give at least one entry (a line of text)")
    for attempt in range(ATTEMPTS):
        doc, digest = load(env, name)
        spec = env.settings.core.spec(name)
        model = env.model
        why: dict[tuple[str, str], tuple[str, ...]] = {}
        sure: dict[tuple[str, str], float] = {}
        versions = _versions(env, doc, new, now, why, sure)
        if model is not None:

            def ask(system: str, user: str, model: ChatModel = model) -> str:
                return model.ask(system, user, max_tokens=1024)

            fits = corepolicy.apply(doc.items, new, doc.budget, tag, _changed, versions)
            if fits.leaving and not all(
                x.successor for x in fits.leaving
            ):  # over budget or near duplicates: the model condenses
                outcome = corepolicy.ask_model(
                    doc.items,
                    new,
                    doc.budget,
                    tag,
                    doc.title,
                    spec.purpose,
                    ask,
                    model.model,
                    changed=_changed,
                    versions=versions,
                )
            else:
                outcome = fits
        else:
            outcome = corepolicy.apply(doc.items, new, doc.budget, tag, _changed, versions)
        with env.lock():
            rel = corefile.rel_path(name)
            if fsio.file_hash(env.layout.abs(rel)) != digest:
                if attempt == ATTEMPTS - 1:
                    raise ConflictError(f"{rel} kept changing while it was updated; try again")
                continue  # a person edited it meanwhile: start again from their version
            moved = _place(env, doc, outcome.leaving, now)
            write(env, rel, corefile.render(doc, outcome.items), digest)
            _log_applied(env, name, outcome, why, sure, now)
            proposed = _propose(env, name, outcome, why, now)
            result = CoreUpdate(
                name,
                tuple(e.text for e in outcome.added),
                tuple(e.text for e in outcome.retagged),
                tuple(moved),
                corepolicy.size(outcome.items),
                doc.budget,
                outcome.by,
                (*outcome.notes, *proposed),
            )
            env.commit(_message(result))
            return result
    raise ConflictError(f"core/{name}.md kept changing while it was updated; try again")  # pragma: no cover


def _log_applied(
    env: MemoryEnv,
    name: str,
    outcome: corepolicy.Outcome,
    why: Mapping[tuple[str, str], tuple[str, ...]],
    sure: Mapping[tuple[str, str], float],
    now: datetime,
) -> None:
    """Each entry replaced at once by a new version (an update at the auto-apply confidence, or a near
    duplicate that changes a value) as an ``applied`` line in the week's log with its undo command
    (``vaultmem review --revert NEW-OLD``), like a leaf's; under the write lock, after the file is
    written (a crash between the two leaves an applied update unlogged, never a logged one undone)."""
    from vaultmem import review
    from vaultmem.model import format_ts

    texts = {e.id: e.text for e in outcome.items if isinstance(e, Entry)}
    for x in outcome.leaving:
        if x.successor is None or x.successor not in texts:
            continue
        pair = (x.entry.text, texts[x.successor])
        p = review.Proposal(
            x.entry.id,
            x.successor,
            round(sure.get(pair, 1.0), 3),
            why.get(pair, ()),
            format_ts(now) or "",
            file=name,
        )
        review.log(env.layout, now, "applied", p, x.entry.text, texts[x.successor])


def _propose(
    env: MemoryEnv,
    name: str,
    outcome: corepolicy.Outcome,
    why: Mapping[tuple[str, str], tuple[str, ...]],
    now: datetime,
) -> list[str]:
    """Each update the detector found below the auto-apply level as a proposal in the review inbox
    (``review/core-<file>-<new>-updates-<old>.md``), both entries still in the file (a pair decided
    before is not proposed again); under the write lock. Returns a note per proposal written."""
    from vaultmem import review
    from vaultmem.model import format_ts

    held = {x.id for x in outcome.items if isinstance(x, Entry)}
    decided = review.decided_pairs(env.layout) if outcome.proposed else set()
    rel = corefile.rel_path(name)
    notes = []
    for old, fresh, confidence in outcome.proposed:
        if old.id not in held or fresh.id not in held or (fresh.id, old.id) in decided:
            continue
        reasons = why.get((old.text, fresh.text), ())
        p = review.Proposal(old.id, fresh.id, round(confidence, 3), reasons, format_ts(now) or "", file=name)
        if review.write(env.layout, p, old.text, fresh.text, rel, rel):
            notes.append(
                f"may update [{old.tag or ''}] {old.text[:80]} (confidence {confidence:.2f}): {p.path}"
            )
    return notes


def holds_pair(env: MemoryEnv, p: review.Proposal) -> bool:
    """Whether a core proposal's file still holds both of its entries (a person may have deleted one)."""
    held = {e.id for e in load(env, p.file)[0].entries}
    return p.old in held and p.new in held


def settle(env: MemoryEnv, p: review.Proposal, outcome: str, now: datetime) -> tuple[str, str, str]:
    """Carry out a decided core proposal (``review.Proposal`` with a ``file``): ``accepted`` versions the
    entries as auto-apply does (the new one gains ``valid_from`` and ``supersedes``, the old one leaves
    for the archive with ``valid_to`` and ``superseded_by``); ``rejected`` or ``expired`` leave both.
    Returns (outcome, old text, new text); ``gone`` when either entry is no longer in the file. The
    caller holds the write lock; a file changed since it was read is a ``ConflictError``."""
    doc, digest = load(env, p.file)
    entries = {e.id: e for e in doc.entries}
    old, fresh = entries.get(p.old), entries.get(p.new)
    if old is None or fresh is None:
        return "gone", old.text if old else "(gone)", fresh.text if fresh else "(gone)"
    if outcome == "accepted":
        # The successor keeps the day it was learnt (``corefile.learnt``): it held from then, not only
        # from the day a person accepted the proposal; an entry without one holds from today.
        keys = [(k, v) for k, v in corefile.carried(fresh) if k != "supersedes"]
        if not any(k == "valid_from" for k, _ in keys):
            keys.insert(0, ("valid_from", now.strftime("%Y-%m-%d")))
        successor = corefile.keyed(
            Entry(fresh.text, fresh.tag, None, fresh.bullet), [*keys, ("supersedes", old.id)]
        )
        items = [successor if x is fresh else x for x in doc.items if x is not old]
        reason = f"superseded by [{fresh.tag or corefile.month(now)}] {fresh.text[:80]}"
        rel = corefile.rel_path(p.file)
        if fsio.file_hash(env.layout.abs(rel)) != digest:
            raise ConflictError(f"{rel} changed while the proposal was applied; try again")
        _archive(env, doc, [corepolicy.Leaving(old, reason, fresh.id)], now)
        write(env, rel, corefile.render(doc, items), digest)
    return outcome, old.text, fresh.text


def revert(env: MemoryEnv, new_id: str, old_id: str, now: datetime) -> tuple[str, str, str]:
    """Undo a version link between two entries of a core file (an accepted proposal or an update applied
    at once): the old entry comes back from the file's archive, right before its successor and with the
    keys it had, and the successor loses its ``supersedes``. The file's budget is applied again (what no
    longer fits leaves as an update would move it, written before the file). The file is written first,
    then the archive loses the line, so a crash between the two leaves the entry in two places, never in
    none. Returns
    (the file's name, old text, new text); ``NodeNotFound`` when no file holds the pair. The caller holds
    the write lock."""
    for name in names(env):
        doc, digest = load(env, name)
        if digest is None:
            continue
        fresh = next((e for e in doc.entries if e.id == new_id and old_id in e.supersedes), None)
        if fresh is None:
            continue
        archive, archive_digest = _load_archive(env, name)
        old = next((e for e in archive.entries if e.id == old_id and new_id in e.superseded_by), None)
        if old is None or archive_digest is None:
            raise NodeNotFound(
                f"{corefile.rel_path(name)}: the entry {old_id} that {new_id} replaced is not in"
                f" {corefile.archive_rel(name)}; put it back by hand"
            )
        items: list[Item] = []
        for x in doc.items:
            if x is fresh:
                items += [corefile.unarchived(old), corefile.unlinked(fresh, old_id)]
            else:
                items.append(x)
        items, evicted = corepolicy.evict(items, doc.budget, corefile.month(now))
        _place(env, doc, evicted, now)
        write(env, corefile.rel_path(name), corefile.render(doc, items), digest)
        archive, archive_digest = _load_archive(env, name)  # read again: the budget may have added to it
        rest = [
            x
            for x in archive.items
            if not (isinstance(x, Entry) and x.id == old_id and new_id in x.superseded_by)
        ]
        if archive_digest is not None:
            write(env, corefile.archive_rel(name), corefile.render(archive, rest), archive_digest)
        return name, old.text, fresh.text
    raise NodeNotFound(f"no core file holds an entry {new_id} that supersedes {old_id}")


def _message(result: CoreUpdate) -> str:
    said = [f"{len(result.added)} added"] if result.added else []
    if result.refreshed:
        said.append(f"{len(result.refreshed)} refreshed")
    places = sorted({to for _, to, _ in result.moved})
    if places:
        said.append(f"{len(result.moved)} moved to {', '.join(places)}")
    return f"memory: core {result.file}: {', '.join(said) or 'unchanged'}"


def _place(
    env: MemoryEnv, doc: CoreDoc, leaving: Sequence[corepolicy.Leaving], now: datetime
) -> list[tuple[str, str, str]]:
    """Write what leaves ``doc`` where it goes (knowledge.md, or the archive); under the write lock,
    before ``doc`` itself is written. Returns (entry, destination, reason)."""
    moved: list[tuple[str, str, str]] = []
    overflow = [
        x
        for x in leaving
        if x.reason != "merged"
        and not x.reason.startswith("superseded")
        and doc.in_prompt
        and doc.name != corefile.OVERFLOW
    ]
    archive = [x for x in leaving if x not in overflow]
    if overflow:
        target, digest = load(env, corefile.OVERFLOW)
        # Redacted text, never a raw line; the version keys and the day it left the prompt travel along.
        fresh = [corefile.moved(x.entry, doc.name, now.strftime("%Y-%m-%d")) for x in overflow]
        outcome = corepolicy.apply(target.items, fresh, target.budget, corefile.month(now), _changed)
        _archive(env, target, outcome.leaving, now)
        write(env, corefile.rel_path(corefile.OVERFLOW), corefile.render(target, outcome.items), digest)
        moved += [(x.entry.text, corefile.rel_path(corefile.OVERFLOW), x.reason) for x in overflow]
    if archive:
        _archive(env, doc, archive, now)
        moved += [(x.entry.text, corefile.archive_rel(doc.name), x.reason) for x in archive]
    return moved


def _archive(env: MemoryEnv, doc: CoreDoc, leaving: Sequence[corepolicy.Leaving], now: datetime) -> None:
    if not leaving:
        return
    archive, digest = _load_archive(env, doc.name)
    there = archive.entries
    day = now.strftime("%Y-%m-%d")
    add = [
        corefile.archived(x.entry, day, x.reason, x.successor)
        for x in leaving
        if not any(corepolicy.same(x.entry, e) and x.entry.tag == e.tag for e in there)
    ]
    if add:
        write(env, corefile.archive_rel(doc.name), corefile.render(archive, [*archive.items, *add]), digest)


def onboard(env: MemoryEnv, answers: Mapping[str, str] | None = None) -> Onboarding:
    """First run: create the core files and record the answers given (name, language, use); every
    question may be skipped (missing or empty)."""
    given = dict(answers or {})
    known = [k for k, _ in QUESTIONS]
    unknown = [k for k in given if k not in known]
    if unknown:
        raise InvalidInput(f"unknown onboarding answer {unknown[0]!r}; the questions are {', '.join(known)}")
    clean: dict[str, str] = {}
    for key, value in given.items():
        if value is None:
            continue
        if not isinstance(value, str):
            raise InvalidInput(f"the answer to {key!r} must be text")
        text = " ".join(value.split())
        if len(text) > MAX_ANSWER_CHARS:
            raise InvalidInput(f"the answer to {key!r} is over {MAX_ANSWER_CHARS} characters; shorten it")
        if text:
            clean[key] = text
    created = ensure(env)
    profile: list[str] = []
    soul: list[str] = []
    if "name" in clean:
        profile.append(f"Name: {clean['name']}")
    if "language" in clean:
        profile.append(f"Preferred language: {clean['language']}")
        soul.append(f"Answer in {clean['language']} unless asked otherwise.")
    if "use" in clean:
        profile.append(f"Uses the agent mainly for: {clean['use']}")
        soul.append(f"Main job: help with {clean['use']}.")
    updates = []
    if profile:
        updates.append(update(env, "user-profile", profile))
    if soul:
        updates.append(update(env, "soul", soul))
    skipped = tuple(k for k in known if k not in clean)
    return Onboarding(tuple(created), tuple(k for k in known if k in clean), skipped, tuple(updates))
