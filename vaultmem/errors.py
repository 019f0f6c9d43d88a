"""The one exception hierarchy of vaultmem.

Every error the library raises on bad input or a bad state is a ``VaultError`` whose message tells the
user what happened and what to do. Anything else escaping the library is a bug.

    VaultError
    ├── VaultNotFound        no vault at the given path (run `vaultmem init`)
    ├── VaultExists          `init` on a directory that already holds a vault
    ├── InvalidInput         input the adapters cannot read: bad JSON, binary, too large, bad UTF-8
    │   ├── UnsafePath       `../`, absolute paths, symlinks leaving the vault, bad ids or source names
    │   └── UnknownFormat    a file no input adapter recognises (the message names the formats tried)
    ├── FrontmatterError     a Markdown file whose YAML frontmatter is malformed or not a mapping
    ├── ConflictError        a file changed on disk since it was read; refusing to overwrite it
    ├── VaultLocked          another process holds the vault's lock
    ├── ReadOnlyVault        the vault cannot be written
    ├── DiskFull             no space left for a write: what finished is kept, free space and re-run
    ├── NodeNotFound         no leaf or summary with that id
    ├── ModelError           the embedding model is missing, mismatched or failed to load
    ├── SummariserError      the LLM endpoint failed or answered junk (callers fall back to extractive)
    └── GitError             git is missing or a commit failed (the vault's files are unaffected)
        └── GitBusy          a git operation (revert, merge, rebase...) is under way: writes pause
"""

from __future__ import annotations


class VaultError(Exception):
    """Base of every error vaultmem raises on purpose."""


class VaultNotFound(VaultError):
    pass


class VaultExists(VaultError):
    pass


class InvalidInput(VaultError):
    pass


class UnsafePath(InvalidInput):
    pass


class UnknownFormat(InvalidInput):
    pass


class FrontmatterError(VaultError):
    pass


class ConflictError(VaultError):
    pass


class VaultLocked(VaultError):
    pass


class ReadOnlyVault(VaultError):
    pass


class DiskFull(VaultError):
    pass


class NodeNotFound(VaultError):
    pass


class ModelError(VaultError):
    pass


class SummariserError(VaultError):
    pass


class GitError(VaultError):
    pass


class GitBusy(GitError):
    """A git operation is in progress in the vault's repository (a revert or merge stopped on a conflict,
    a rebase, a bisect, a detached HEAD, a live ``index.lock``): vaultmem writes nothing until it ends."""
