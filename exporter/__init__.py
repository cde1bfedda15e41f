"""lakefs-delta-exporter: export Delta Lake logs from lakeFS with absolute physical paths."""

__version__ = "0.2.0"  # 0.2: spliced checkpoints and JSON; bump when export bytes change
