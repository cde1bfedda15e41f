"""Delta Sharing over exports and branch tables: catalog, versions, answer lines (no HTTP)."""
