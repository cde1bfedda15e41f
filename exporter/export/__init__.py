"""Exports: per commit (tag copy, incremental, else cold), the write order and the manifest, path
rewriting, and the export's Iceberg metadata."""
