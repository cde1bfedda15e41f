"""lakeFS: the client, table descriptors, a table's log at a commit, the address listing, the action installer."""
