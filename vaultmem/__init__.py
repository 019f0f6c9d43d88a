"""vaultmem: long-term memory for AI agents, kept as plain Markdown on disk.

The public surface is re-exported here; everything else is internal.
"""

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
    UnsafePath,
    VaultError,
    VaultExists,
    VaultLocked,
    VaultNotFound,
)
from vaultmem.model import InputKind, Leaf, Message, Status
from vaultmem.sessions import SessionTree
from vaultmem.summaryfile import SummaryNode
from vaultmem.vault import Vault

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
    "UnsafePath",
    "Vault",
    "VaultError",
    "VaultExists",
    "VaultLocked",
    "VaultNotFound",
]
__version__ = "0.1.0"
