"""A workspace on PostgreSQL: `PostgresStore` (in `ctxkeep.postgres.store`), its versioned schema, its connection
pools (`ctxkeep.postgres.pool`: one per URL for the process), and what acts on the whole database
(`ctxkeep.postgres.database`: migrate, list, measure and drop workspaces).

Naming a store by URL (``postgresql://…``) is all a caller does; this package imports psycopg only when such
a store is opened, so ``import ctxkeep`` needs no database driver (the ``postgres`` extra installs it).
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from .store import PostgresStore

URL_SCHEMES = ("postgresql://", "postgres://")


def is_url(name: object) -> bool:
    """Whether `name` names a PostgreSQL database (``postgresql://…`` or ``postgres://…``) rather than a folder."""
    return isinstance(name, str) and name.startswith(URL_SCHEMES)


def open_store(url: str, workspace: str) -> PostgresStore:
    """The workspace called `workspace` in the database at `url` (made when new), on the process's connection
    pool for `url` (`Session.open`: a proxy opens a workspace per request); close it when done. Raises
    `StorageError` when the database cannot be reached, and `ModuleNotFoundError` without the postgres extra."""
    from .store import PostgresStore

    return PostgresStore(url, workspace, shared=True)
