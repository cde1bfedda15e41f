"""lakefs-delta-exporter: export Delta Lake logs from lakeFS with absolute physical paths."""

import os
import sys

__version__ = "0.2.0"  # 0.2: spliced checkpoints and JSON; bump when export bytes change


def _arrow_allocator() -> None:
    """Arrow's buffers from jemalloc unless `ARROW_DEFAULT_MEMORY_POOL` says otherwise. pyarrow's
    default, mimalloc, spent most of its time in the kernel here: on a 2-core VM a 100,000-file
    table's cold export took 1.2-2.3 s (median 1.97 s) and its Iceberg step 1.35-1.74 s with it,
    1.1-1.36 s (1.23 s) and 0.61-0.96 s (0.78 s) with jemalloc, 5 runs each, interleaved
    (bench/results/2026-12-02-allocator.md). Set before pyarrow makes its default pool."""
    if "ARROW_DEFAULT_MEMORY_POOL" in os.environ:
        return
    os.environ["ARROW_DEFAULT_MEMORY_POOL"] = "jemalloc"  # read once, when the default pool is first made
    if "pyarrow" in sys.modules:  # imported before this package: its pool may exist already
        import pyarrow as pa

        if "jemalloc" in pa.supported_memory_backends():
            pa.set_memory_pool(pa.jemalloc_memory_pool())


_arrow_allocator()
