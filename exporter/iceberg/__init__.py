"""Iceberg metadata over an exported Delta table's data files: `table.write_table` and
`table.append_table` (no HTTP, no lakeFS: a log to read, a place to write)."""
