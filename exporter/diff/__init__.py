"""Diffs: a table's history between refs, schema and operation changes, rows."""
