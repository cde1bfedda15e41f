"""The Iceberg REST catalog, read-only (apache/iceberg open-api/rest-catalog-open-api.yaml): the app
(`app`), its routes (`namespaces`, `tables`, `writes`), what they share (`deps`) and its one mapping
of errors to the spec's error model (`errors`)."""

from hooks.iceberg.app import create_iceberg_app

__all__ = ["create_iceberg_app"]
