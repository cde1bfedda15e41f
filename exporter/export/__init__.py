"""Exports: cold and incremental, tag copies, branch tables, retention, catch-up."""
