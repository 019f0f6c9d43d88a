"""vaultmem: long-term memory for AI agents, kept as plain Markdown on disk.

The public surface is re-exported here; everything else is internal.
"""

import importlib
from typing import TYPE_CHECKING, Any

from vaultmem.errors import (
    ConflictError,
    DiskFull,
    FrontmatterError,
    GitBusy,
    GitError,
    InvalidInput,
    ModelError,
    NodeNotFound,
    ReadOnlyVault,
    SummariserError,
    UnknownFormat,
    UnsafePath,
    VaultError,
    VaultExists,
    VaultLocked,
    VaultNotFound,
)
from vaultmem.model import InputKind, Leaf, Message, Status

if TYPE_CHECKING:
    from vaultmem.sessions import SessionTree
    from vaultmem.summaryfile import SummaryNode
    from vaultmem.vault import Vault

# Imported on first use (PEP 562): `import vaultmem.<module>` stays cheap, so a command that never opens
# a vault (or opens it after answering, as `vaultmem mcp` does) does not pay for the whole engine.
_LAZY = {"SessionTree": "vaultmem.sessions", "SummaryNode": "vaultmem.summaryfile", "Vault": "vaultmem.vault"}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'vaultmem' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__all__ = [
    "ConflictError",
    "DiskFull",
    "FrontmatterError",
    "GitBusy",
    "GitError",
    "InputKind",
    "InvalidInput",
    "Leaf",
    "Message",
    "ModelError",
    "NodeNotFound",
    "ReadOnlyVault",
    "SessionTree",
    "Status",
    "SummariserError",
    "SummaryNode",
    "UnknownFormat",
    "UnsafePath",
    "Vault",
    "VaultError",
    "VaultExists",
    "VaultLocked",
    "VaultNotFound",
]
__version__ = "0.1.0"
