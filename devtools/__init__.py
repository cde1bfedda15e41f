"""Development tooling, not part of the product (never in the wheel or the image): the local
stack (`python -m devtools.stack up|down|status|env|build`), the Spark session helper and the demo
(`python -m devtools.demo`). Run from a checkout of the repository."""
