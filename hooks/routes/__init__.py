"""The API's routers, one per capability: the lakeFS webhook, exports, diffs, datasets, the diff
page's session, the pages themselves, and operations (health, readiness, metrics)."""
