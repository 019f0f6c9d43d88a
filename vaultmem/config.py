"""Vault configuration: ``.vaultmem/config.toml`` read into a frozen ``Config``.

Only composition roots (``Vault.open``/``Vault.init``, the CLI, the daemon, the server) call
``load_config``; every other module receives the values it needs as arguments. Unknown keys are an
error, so a typo never silently falls back to a default.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from vaultmem.entities import KINDS
from vaultmem.errors import InvalidInput, VaultError
from vaultmem.model import portable_name

DEFAULT_TEXT = """\
# vaultmem configuration. Every key is optional; the values shown are the defaults.

[ingest]
chunk_max_tokens = 256      # a chunk never exceeds this many tokens (see docs/format.md)
score_threshold = 0.3       # leaves scoring below this are kept but `dropped` (never summarised)
max_file_bytes = 10485760   # larger input files are refused ...
max_export_bytes = 536870912  # ... except recognised exports (ChatGPT, Claude, ZIPs...), up to this

[embed]
model = "default"           # "default" = packaged all-MiniLM-L6-v2; or a local sentence-transformers path
backend = "auto"            # auto (bf16 where the CPU has it) | fp32 | numpy | onnx | bf16 | torch
batch_size = 64

[git]
auto_commit = false         # commit every logical change to the vault's git repository

[compact]
fresh_keep_leaves = 24      # the newest leaves of a source always stay verbatim in _fresh/ ...
fresh_keep_tokens = 2000    # ... up to this many tokens
seal_min_leaves = 48        # seal when the buffer beyond that tail holds this many leaves ...
seal_min_tokens = 4000      # ... or this many tokens
bucket_target_leaves = 12   # clustering aims at levels of about this many leaves
bucket_min_leaves = 3
bucket_max_leaves = 32
bucket_max_tokens = 2400
cluster_batch = 256         # leaves clustered at once (bounds time and memory per step)
merge_threshold = 0.8       # cosine of centroids above which new leaves join an existing level
episode_gap_s = 10800.0     # a new session id or this long a pause starts a new episode: levels form within one
condense_fanout = 8         # this many sibling levels at a source's top are grouped under parents
condense_target = 4         # children per new parent, on average
max_wait_s = 86400.0        # a buffer older than this is sealed even below the thresholds
workers = 3                 # worker threads running queued jobs

[topics]
enabled = true              # follow hot entities in topic trees under topics/
half_life_days = 7.0        # heat halves every this many days without news (see docs/architecture.md)
mention_weight = 1.0        # heat per new leaf mentioning the entity
source_weight = 2.0         # heat when the entity shows up in a source for the first time
query_weight = 3.0          # heat per query that names it
create_at = 12.0            # a topic tree is made for an entity this hot ...
min_leaves = 5              # ... that at least this many leaves mention ...
min_sessions = 2            # ... from at least this many sessions (conversations, threads, documents) ...
person_min_leaves = 8       # ... and a person who is never a leaf's speaker needs this many leaves
kinds = ["person", "place", "org", "product", "project", "repo", "ticker"]   # kinds that get topic trees
archive_below = 1.0         # a topic colder than this moves to topics/_archive/ (kept, not routed)
keep_recent = 12            # the newest linked leaves listed at a topic's root
seal_min = 12               # sealed into levels once this many more wait beyond them
level_leaves = 12           # leaves per topic level
llm_entities = false        # also ask the [llm] endpoint for entities as leaves are admitted (slow)

[digest]
enabled = true              # keep the global tree: a digest per UTC day, rolled up into weeks and months

[decay]
half_life_days = 0.0        # > 0: a leaf nobody asked about ranks lower, halving every this many days (0 = off)
floor = 0.25                # ... never below this share of its score; nothing is ever deleted

[updates]
auto_apply = true           # link a supersede proposal at once (no review) when its confidence is at least ...
auto_apply_at = 0.9         # ... this, which only a firm change reaches (a change word, one slot, one subject)

[core]
file_budget = 800           # characters of each in-prompt core file (soul, user-profile, projects, patterns)
total_budget = 4000         # characters of the whole core block (vault.core_block)
knowledge_budget = 8000     # knowledge.md: searched on demand, where entries leaving the others go
ondemand_budget = 2000      # errors.md, tools.md and core files you add

[sessions]
auto = true                 # write a session note when a chat session has been idle ...
idle_s = 1800.0             # ... this many seconds (through the job queue: `vaultmem watch` runs it)
max_age_days = 7.0          # ... unless its newest message is older than this (an imported history)

[recipes]
similarity = 0.32           # cosine between requests for promotion (measured for MiniLM: bench/recipes.py)
min_episodes = 3            # similar successful episodes that make a recipe
max_learned = 50            # learned recipes kept live; the least used beyond it are archived
max_in_prompt = 3           # recipes recipes_for returns at most ...
max_chars = 2000            # ... within this many characters
trigger_min = 0.15          # a trigger matches a request at this weighted share of its keywords (measured)

[llm]
base_url = ""               # OpenAI-compatible endpoint (Ollama, vLLM, llama.cpp); empty = extractive only
model = ""
api_key_env = "OPENAI_API_KEY"
timeout_s = 60.0            # per request; a slow model falls back to a shorter prompt, then extractive
max_concurrent = 2          # LLM calls in flight at once across all workers

[sources]
# Folders (or files) the dashboard's "Run ingest" reads again (through the job queue), one source name
# each; ~ is your home, a relative path starts at the vault. None by default, e.g.:
# mail = "~/Mail/inbox.mbox"
# notes = "~/notes"
"""

_COMPACT_KEYS = (
    "fresh_keep_leaves",
    "fresh_keep_tokens",
    "seal_min_leaves",
    "seal_min_tokens",
    "bucket_target_leaves",
    "bucket_min_leaves",
    "bucket_max_leaves",
    "bucket_max_tokens",
    "cluster_batch",
    "merge_threshold",
    "episode_gap_s",
    "condense_fanout",
    "condense_target",
    "max_wait_s",
    "workers",
)

_TOPIC_KEYS = (
    "enabled",
    "half_life_days",
    "mention_weight",
    "source_weight",
    "query_weight",
    "create_at",
    "min_leaves",
    "min_sessions",
    "person_min_leaves",
    "kinds",
    "archive_below",
    "keep_recent",
    "seal_min",
    "level_leaves",
    "llm_entities",
)

_MEMORY_KEYS = {
    "core": ("file_budget", "total_budget", "knowledge_budget", "ondemand_budget"),
    "sessions": ("auto", "idle_s", "max_age_days"),
    "recipes": ("similarity", "min_episodes", "max_learned", "max_in_prompt", "max_chars", "trigger_min"),
}

_SECTIONS = {
    "ingest": {
        "chunk_max_tokens": "chunk_max_tokens",
        "score_threshold": "score_threshold",
        "max_file_bytes": "max_file_bytes",
        "max_export_bytes": "max_export_bytes",
    },
    "embed": {"model": "embed_model", "backend": "embed_backend", "batch_size": "embed_batch_size"},
    "git": {"auto_commit": "git_auto_commit"},
    "compact": {key: f"compact_{key}" for key in _COMPACT_KEYS},
    "topics": {key: f"topics_{key}" for key in _TOPIC_KEYS},
    "digest": {"enabled": "digest_enabled"},
    "decay": {"half_life_days": "decay_half_life_days", "floor": "decay_floor"},
    "updates": {"auto_apply": "updates_auto_apply", "auto_apply_at": "updates_auto_apply_at"},
    **{section: {key: f"{section}_{key}" for key in keys} for section, keys in _MEMORY_KEYS.items()},
    "sources": {},  # free keys: source name = folder or file to ingest (parsed by ``_sources``)
    "llm": {
        "base_url": "llm_base_url",
        "model": "llm_model",
        "api_key_env": "llm_api_key_env",
        "timeout_s": "llm_timeout_s",
        "max_concurrent": "llm_max_concurrent",
    },
}


@dataclass(frozen=True)
class Config:
    chunk_max_tokens: int = 256
    # scoring.DEFAULT_THRESHOLD (tests/test_scoring.py checks they agree); not imported from there, since
    # the scorer's rules cost a read-only command start-up time for nothing.
    score_threshold: float = 0.3
    max_file_bytes: int = 10 * 1024 * 1024
    max_export_bytes: int = 512 * 1024 * 1024
    embed_model: str = "default"
    embed_backend: str = "auto"
    embed_batch_size: int = 64
    git_auto_commit: bool = False
    llm_base_url: str = ""
    llm_model: str = ""
    llm_api_key_env: str = "OPENAI_API_KEY"
    llm_timeout_s: float = 60.0
    llm_max_concurrent: int = 2
    compact_fresh_keep_leaves: int = 24
    compact_fresh_keep_tokens: int = 2000
    compact_seal_min_leaves: int = 48
    compact_seal_min_tokens: int = 4000
    compact_bucket_target_leaves: int = 12
    compact_bucket_min_leaves: int = 3
    compact_bucket_max_leaves: int = 32
    compact_bucket_max_tokens: int = 2400
    compact_cluster_batch: int = 256
    compact_merge_threshold: float = 0.8
    compact_episode_gap_s: float = 10800.0
    compact_condense_fanout: int = 8
    compact_condense_target: int = 4
    compact_max_wait_s: float = 86400.0
    compact_workers: int = 3
    topics_enabled: bool = True
    topics_half_life_days: float = 7.0
    topics_mention_weight: float = 1.0
    topics_source_weight: float = 2.0
    topics_query_weight: float = 3.0
    topics_create_at: float = 12.0
    topics_min_leaves: int = 5
    topics_min_sessions: int = 2
    topics_person_min_leaves: int = 8
    topics_kinds: tuple[str, ...] = ("person", "place", "org", "product", "project", "repo", "ticker")
    topics_archive_below: float = 1.0
    topics_keep_recent: int = 12
    topics_seal_min: int = 12
    topics_level_leaves: int = 12
    topics_llm_entities: bool = False
    digest_enabled: bool = True
    decay_half_life_days: float = 0.0
    decay_floor: float = 0.25
    # detect.AUTO_APPLY_AT (not imported: the detector's rules are loaded by the writes that need them)
    updates_auto_apply: bool = True
    updates_auto_apply_at: float = 0.9
    core_file_budget: int = 800
    core_total_budget: int = 4000
    core_knowledge_budget: int = 8000
    core_ondemand_budget: int = 2000
    sessions_auto: bool = True
    sessions_idle_s: float = 1800.0
    sessions_max_age_days: float = 7.0
    recipes_similarity: float = 0.32
    recipes_min_episodes: int = 3
    recipes_max_learned: int = 50
    recipes_max_in_prompt: int = 3
    recipes_max_chars: int = 2000
    recipes_trigger_min: float = 0.15
    # [sources]: (source name, folder or file as written) to ingest again on request, in file order
    sources: tuple[tuple[str, str], ...] = ()

    def memory_values(self, section: str) -> dict[str, Any]:
        """The ``[core]``, ``[sessions]`` or ``[recipes]`` section as keyword arguments."""
        return {key: getattr(self, f"{section}_{key}") for key in _MEMORY_KEYS[section]}

    def compact_values(self) -> dict[str, Any]:
        """The ``[compact]`` section as keyword arguments (for ``CompactSettings``)."""
        return {key: getattr(self, f"compact_{key}") for key in _COMPACT_KEYS}

    def topic_values(self) -> dict[str, Any]:
        """The ``[topics]`` section as keyword arguments (``TopicSettings`` / ``HeatSettings``)."""
        return {key: getattr(self, f"topics_{key}") for key in _TOPIC_KEYS}


def parse_config(text: str, where: str = "config.toml") -> Config:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise InvalidInput(f"{where}: not valid TOML: {exc}") from exc
    values: dict[str, Any] = {}
    types = {f.name: f.type for f in fields(Config)}
    defaults = Config()
    for section, body in data.items():
        if section not in _SECTIONS or not isinstance(body, dict):
            raise InvalidInput(f"{where}: unknown section [{section}]; known: {', '.join(_SECTIONS)}")
        if section == "sources":
            values["sources"] = _sources(body, where)
            continue
        for key, value in body.items():
            attr = _SECTIONS[section].get(key)
            if attr is None:
                raise InvalidInput(f"{where}: unknown key {section}.{key}")
            expected = type(getattr(defaults, attr))
            if expected is tuple:
                value = _kinds(value, f"{where}: {section}.{key}")
            if expected is float and isinstance(value, int) and not isinstance(value, bool):
                value = float(value)
            if not isinstance(value, expected) or (expected is int and isinstance(value, bool)):
                raise InvalidInput(f"{where}: {section}.{key} must be {types[attr]}, got {value!r}")
            values[attr] = value
    config = Config(**values)
    if config.chunk_max_tokens < 16:
        raise InvalidInput(f"{where}: ingest.chunk_max_tokens must be at least 16")
    for key in _COMPACT_KEYS:
        if getattr(config, f"compact_{key}") <= 0:
            raise InvalidInput(f"{where}: compact.{key} must be positive")
    if config.compact_bucket_min_leaves > config.compact_bucket_max_leaves:
        raise InvalidInput(f"{where}: compact.bucket_min_leaves is larger than compact.bucket_max_leaves")
    if config.compact_condense_fanout < 2:
        raise InvalidInput(f"{where}: compact.condense_fanout must be at least 2")
    for key in _TOPIC_KEYS:
        if key not in ("enabled", "llm_entities", "kinds") and getattr(config, f"topics_{key}") < 0:
            raise InvalidInput(f"{where}: topics.{key} must not be negative")
    if config.topics_half_life_days <= 0 or min(config.topics_keep_recent, config.topics_level_leaves) < 1:
        raise InvalidInput(f"{where}: topics.half_life_days, keep_recent and level_leaves must be positive")
    if min(config.memory_values("core").values()) < 1:
        raise InvalidInput(f"{where}: the [core] budgets must be at least 1 character")
    if config.sessions_idle_s < 0 or config.sessions_max_age_days < 0:
        raise InvalidInput(f"{where}: sessions.idle_s and sessions.max_age_days must not be negative")
    if not 0 < config.recipes_similarity <= 1:
        raise InvalidInput(f"{where}: recipes.similarity must be above 0 and at most 1")
    if config.recipes_min_episodes < 2 or min(config.recipes_max_learned, config.recipes_max_in_prompt) < 1:
        raise InvalidInput(
            f"{where}: recipes.min_episodes must be at least 2, max_learned and max_in_prompt 1"
        )
    if not 0 < config.recipes_trigger_min <= 1:
        raise InvalidInput(f"{where}: recipes.trigger_min must be above 0 and at most 1")
    if config.recipes_max_chars < 100:
        raise InvalidInput(f"{where}: recipes.max_chars must be at least 100")
    if config.llm_max_concurrent < 1:
        raise InvalidInput(f"{where}: llm.max_concurrent must be at least 1")
    if not 0 < config.updates_auto_apply_at <= 1:
        raise InvalidInput(f"{where}: updates.auto_apply_at must be above 0 and at most 1")
    if config.decay_half_life_days < 0:
        raise InvalidInput(f"{where}: decay.half_life_days must not be negative (0 turns decay off)")
    if not 0 <= config.decay_floor <= 1:
        raise InvalidInput(f"{where}: decay.floor must be between 0 and 1 (a share of a leaf's score)")
    return config


def _kinds(value: object, where: str) -> tuple[str, ...]:
    """A list of entity kinds (``[topics] kinds``), each one ``entities.KINDS`` knows."""
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise InvalidInput(f"{where} must be a list of entity kinds, got {value!r}")
    unknown = [v for v in value if v not in KINDS]
    if unknown:
        raise InvalidInput(f"{where}: unknown kind {unknown[0]!r}; known: {', '.join(KINDS)}")
    return tuple(value)


def _sources(body: dict[str, Any], where: str) -> tuple[tuple[str, str], ...]:
    """``[sources]``: each key a portable source name, each value a non-empty path string."""
    out = []
    for name, value in body.items():
        try:
            portable_name(name)
        except VaultError as exc:
            raise InvalidInput(f"{where}: [sources] {exc}") from None
        if not isinstance(value, str) or not value.strip():
            raise InvalidInput(
                f"{where}: sources.{name} must be a folder or file path (a string), got {value!r}"
            )
        out.append((name, value))
    return tuple(out)


def load_config(path: Path) -> Config:
    if not path.exists():
        return Config()
    return parse_config(path.read_text(encoding="utf-8"), str(path))
