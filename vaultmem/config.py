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

from vaultmem.errors import InvalidInput
from vaultmem.scoring import DEFAULT_THRESHOLD

DEFAULT_TEXT = """\
# vaultmem configuration. Every key is optional; the values shown are the defaults.

[ingest]
chunk_max_tokens = 256      # a chunk never exceeds this many tokens (see docs/format.md)
score_threshold = 0.3       # leaves scoring below this are kept but `dropped` (never summarised)
max_file_bytes = 10485760   # larger input files are refused

[embed]
model = "default"           # "default" = packaged all-MiniLM-L6-v2; or a local sentence-transformers path
backend = "auto"            # auto | numpy | torch
batch_size = 64

[git]
auto_commit = false         # commit every logical change to the vault's git repository

[llm]
base_url = ""               # OpenAI-compatible endpoint (Ollama, vLLM, llama.cpp); empty = extractive only
model = ""
api_key_env = "OPENAI_API_KEY"
"""

_SECTIONS = {
    "ingest": {
        "chunk_max_tokens": "chunk_max_tokens",
        "score_threshold": "score_threshold",
        "max_file_bytes": "max_file_bytes",
    },
    "embed": {"model": "embed_model", "backend": "embed_backend", "batch_size": "embed_batch_size"},
    "git": {"auto_commit": "git_auto_commit"},
    "llm": {"base_url": "llm_base_url", "model": "llm_model", "api_key_env": "llm_api_key_env"},
}


@dataclass(frozen=True)
class Config:
    chunk_max_tokens: int = 256
    score_threshold: float = DEFAULT_THRESHOLD
    max_file_bytes: int = 10 * 1024 * 1024
    embed_model: str = "default"
    embed_backend: str = "auto"
    embed_batch_size: int = 64
    git_auto_commit: bool = False
    llm_base_url: str = ""
    llm_model: str = ""
    llm_api_key_env: str = "OPENAI_API_KEY"


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
        for key, value in body.items():
            attr = _SECTIONS[section].get(key)
            if attr is None:
                raise InvalidInput(f"{where}: unknown key {section}.{key}")
            expected = type(getattr(defaults, attr))
            if expected is float and isinstance(value, int) and not isinstance(value, bool):
                value = float(value)
            if not isinstance(value, expected) or (expected is int and isinstance(value, bool)):
                raise InvalidInput(f"{where}: {section}.{key} must be {types[attr]}, got {value!r}")
            values[attr] = value
    config = Config(**values)
    if config.chunk_max_tokens < 16:
        raise InvalidInput(f"{where}: ingest.chunk_max_tokens must be at least 16")
    return config


def load_config(path: Path) -> Config:
    if not path.exists():
        return Config()
    return parse_config(path.read_text(encoding="utf-8"), str(path))
