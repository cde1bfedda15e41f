"""Exports: per commit (tag copy, incremental, else cold), the write order and manifest, path
rewriting, branch tables, retention, catch-up."""
