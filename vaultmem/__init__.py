"""vaultmem: long-term memory for AI agents, kept as plain Markdown on disk.

The public surface is re-exported here; everything else is internal. ``Vault``, ``SessionTree`` and
``SummaryNode`` are imported on first access (PEP 562), so that importing one small module of the
package (``vaultmem.errors``, ``vaultmem.embed``) does not import the whole engine.
"""

from typing import TYPE_CHECKING, Any

from vaultmem.errors import (
    ConflictError,
    DiskFull,
    FrontmatterError,
    GitError,
    InvalidInput,
    ModelError,
    NodeNotFound,
    ReadOnlyVault,
    SummariserError,
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

_LAZY = {"SessionTree": "vaultmem.sessions", "SummaryNode": "vaultmem.summaryfile", "Vault": "vaultmem.vault"}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'vaultmem' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__all__ = [
    "ConflictError",
    "DiskFull",
    "FrontmatterError",
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
    "UnsafePath",
    "Vault",
    "VaultError",
    "VaultExists",
    "VaultLocked",
    "VaultNotFound",
]
__version__ = "0.1.0"
