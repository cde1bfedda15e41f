"""Redis: export status and locks, result caches, Delta Sharing recipients."""
