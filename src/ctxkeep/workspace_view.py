"""Moved to `ctxkeep.workspace.view`; this name stays only until the command line imports it from there."""

from ctxkeep.workspace.view import View, read, render_compaction, render_text

__all__ = ["View", "read", "render_compaction", "render_text"]
