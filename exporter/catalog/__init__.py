"""The Iceberg REST catalog's read side: which table, at which commit, and its metadata."""
