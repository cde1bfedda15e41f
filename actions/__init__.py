"""Data only, no code: the files users copy into a lakeFS repository, laid out as in one.

`_lakefs_actions/delta-export.yaml` is the lakeFS action `lakefs-delta install-actions` fills in
and commits; `_lakefs_tables/table.example.yaml` is a table descriptor to copy. Shipped in the
wheel as package data and read with `importlib.resources.files("actions")`.
"""
