"""A workspace on PostgreSQL: `PostgresStore` (in `ctxkeep.postgres.store`) and its versioned schema.

Naming a store by URL (``postgresql://…``) is all a caller does; this package imports psycopg only when such
a store is opened, so ``import ctxkeep`` needs no database driver (the ``postgres`` extra installs it).
"""

from __future__ import annotations

URL_SCHEMES = ("postgresql://", "postgres://")


def is_url(name: object) -> bool:
    """Whether `name` names a PostgreSQL database (``postgresql://…`` or ``postgres://…``) rather than a folder."""
    return isinstance(name, str) and name.startswith(URL_SCHEMES)
