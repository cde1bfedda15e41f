"""lakefs-delta-exporter: export Delta Lake logs from lakeFS with absolute physical paths."""

__version__ = "0.1.0"
