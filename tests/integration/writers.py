"""Delta tables written by someone else: delta-rs of other versions, Spark with other settings.

Each delta-rs version runs in its own virtualenv under
`~/.cache/lakefs-delta-exporter/writers/deltalake-<version>/`, built on first use, and writes a
table to a local directory; the directory is then uploaded to lakeFS byte for byte. The source a
test compares the export with is that local directory: the lakeFS copy holds the same bytes.
"""

from __future__ import annotations

import fcntl
import io
import json
import os
import re
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

WRITERS_DIR = Path(os.environ.get("LAKEFS_DELTA_WRITERS_DIR",
                                  Path.home() / ".cache" / "lakefs-delta-exporter" / "writers"))

# deltalake version -> the pyarrow/pandas/numpy of its time that install on Python 3.11
DELTALAKE_WRITERS: dict[str, list[str]] = {
    "0.18.2": ["pyarrow==16.1.0", "pandas==2.2.2", "numpy==1.26.4"],  # mid 2024: pyarrow engine by default
    "0.25.5": ["pyarrow==19.0.1", "pandas==2.2.3", "numpy==2.2.6"],  # 2025: last 0.x, rust engine
    "1.6.6": ["pyarrow==23.0.1", "pandas==2.3.3", "numpy==2.3.5"],  # newest 1.x: delta-kernel based
}
_READY = ".ready"  # written last: a venv without it is half-built and is rebuilt


class WriterEnvironmentError(RuntimeError):
    """A writer's virtualenv could not be built or its script failed; the message says why."""


def deltalake_python(version: str) -> Path:
    """The python of a virtualenv holding `deltalake==version`, built on first use."""
    return isolated_python(f"deltalake-{version}", [f"deltalake=={version}", *DELTALAKE_WRITERS[version]])


def isolated_python(name: str, pins: list[str]) -> Path:
    """The python of a virtualenv `name` holding exactly `pins` (kept apart from the project's own
    packages: other pyarrow versions), built on first use."""
    venv = WRITERS_DIR / name
    python = venv / "bin" / "python"
    WRITERS_DIR.mkdir(parents=True, exist_ok=True)
    with open(WRITERS_DIR / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # two test processes never build one venv at once
        ready = venv / _READY
        if ready.exists() and ready.read_text() == " ".join(pins):
            return python
        shutil.rmtree(venv, ignore_errors=True)
        interpreter = shutil.which("python3.11")
        if interpreter is None:
            raise WriterEnvironmentError("python3.11 is not on PATH: cannot build the deltalake writer virtualenvs")
        _run([interpreter, "-m", "venv", str(venv)], f"python3.11 -m venv {venv}")
        _run([str(python), "-m", "pip", "install", "--disable-pip-version-check", "--no-input", "-q", *pins],
             f"pip install {' '.join(pins)} into {venv}", timeout=900)
        ready.write_text(" ".join(pins))
    return python


def _run(command: list[str], what: str, timeout: float = 300) -> str:
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as error:
        raise WriterEnvironmentError(f"{what}: {error}") from None
    if done.returncode != 0:
        output = (done.stdout + done.stderr).strip().splitlines()
        raise WriterEnvironmentError(f"{what} exited {done.returncode}:\n" + "\n".join(output[-30:]))
    return done.stdout


# One script for every deltalake version: features are detected, not assumed, and what the script
# did is printed as JSON for the test to check.
DELTALAKE_SCRIPT = r'''
import datetime as dt
import decimal
import json
import sys

import deltalake
import pyarrow as pa
from deltalake import DeltaTable, write_deltalake

path = sys.argv[1]
UTC = dt.timezone.utc
schema = pa.schema([
    ("id", pa.int64()),
    ("part", pa.string()),
    ("amount", pa.decimal128(10, 2)),
    ("day", pa.date32()),
    ("at", pa.timestamp("us", tz="UTC")),
    ("note", pa.string()),
])
PARTS = ["a b", "50%", "x+y", "ünï çødé", None]


def batch(ids, note):
    return pa.Table.from_pylist([{
        "id": i,
        "part": PARTS[i % len(PARTS)],
        "amount": decimal.Decimal(i * 125) / 100,
        "day": dt.date(2024, 1, 1) + dt.timedelta(days=i),
        "at": dt.datetime(2024, 1, 1, 12, 0, tzinfo=UTC) + dt.timedelta(hours=i, microseconds=i),
        "note": note,
    } for i in ids], schema=schema)


done = []
write_deltalake(path, batch(range(1, 6), "first"), partition_by=["part"])
done.append("create")
write_deltalake(path, batch(range(6, 9), "second"), mode="append")
write_deltalake(path, batch(range(9, 12), "third"), mode="append")
done.append("append")
write_deltalake(path, batch(range(1, 10), "overwritten"), mode="overwrite")
done.append("overwrite")
table = DeltaTable(path)
if hasattr(table, "delete"):
    table.delete("id = 2")
    done.append("delete")
else:
    write_deltalake(path, batch([20], "no delete in this version"), mode="append")
table = DeltaTable(path)
table.create_checkpoint()
checkpoint_version = table.version()
write_deltalake(path, batch(range(12, 17), "after checkpoint"), mode="append")
table = DeltaTable(path)
if hasattr(table, "delete"):
    table.delete("part = 'x+y'")
else:
    write_deltalake(path, batch([21], "no delete in this version"), mode="append")
table = DeltaTable(path)
print(json.dumps({"deltalake": deltalake.__version__, "pyarrow": pa.__version__, "done": done,
                  "checkpoint_version": checkpoint_version, "head_version": table.version()}))
'''


def write_with_deltalake(version: str, table_dir: Path) -> dict:
    """Run the writer script with `deltalake==version`; what it did, as it printed it."""
    python = deltalake_python(version)
    script = table_dir.parent / f"write_deltalake_{version}.py"
    script.write_text(DELTALAKE_SCRIPT)
    output = _run([str(python), str(script), str(table_dir)], f"deltalake {version} writer script")
    return json.loads(output.strip().splitlines()[-1])


# ------------------------------------------------------------------------------ upload


def upload_directory(gateway, repository: str, branch: str, local_dir: Path, path: str) -> None:
    """Every file under `local_dir` (hidden ones included) to `<path>/` through lakeFS's S3 gateway."""
    files = sorted(p for p in local_dir.rglob("*") if p.is_file())
    keys = [f"{path}/{file.relative_to(local_dir).as_posix()}" for file in files]
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda item: gateway.put_object(Bucket=repository, Key=f"{branch}/{item[1]}",
                                                      Body=item[0].read_bytes()), zip(files, keys)))


# ------------------------------------------------------------------------------ comparing


def local_uri(local_dir: Path) -> str:
    return local_dir.resolve().as_uri()


def spark_rows(spark, location: str, version: int | None = None, where: str | None = None) -> list[tuple]:
    from tests.integration.deltatables import rows

    reader = spark.read.format("delta")
    if version is not None:
        reader = reader.option("versionAsOf", version)
    frame = reader.load(location)
    return rows(frame.where(where) if where else frame)


def assert_export_reads_like_local(spark, local_dir: Path, outcome, where: str | None = None) -> list[tuple]:
    """Spark reads the export like the local source directory, at every version from the checkpoint on,
    and without a version (the head, found through `_last_checkpoint`). Returns the head's rows."""
    assert outcome.ok, outcome.error
    source = local_uri(local_dir)
    first = outcome.checkpoint_version if outcome.checkpoint_version is not None else 0
    for version in range(first, outcome.head_version + 1):
        source_rows = spark_rows(spark, source, version, where)
        assert spark_rows(spark, outcome.location, version, where) == source_rows, f"version {version} differs"
    assert spark_rows(spark, outcome.location, where=where) == source_rows, "the head read without a version differs"
    return source_rows


def local_delta_rs_rows(local_dir: Path, version: int | None = None) -> list[tuple]:
    """The project's delta-rs reads the local source the way `delta_rs_rows` reads an export."""
    import pyarrow as pa
    from deltalake import DeltaTable, QueryBuilder

    table = DeltaTable(str(local_dir), version=version)
    result = pa.table(QueryBuilder().register("t", table).execute("select * from t").read_all())
    return sorted((tuple(row.values()) for row in result.to_pylist()), key=repr)


# ------------------------------------------------------------------------------ the exported log itself


def _exported(s3, outcome, name: str) -> bytes:
    bucket, _, prefix = outcome.location.removeprefix("s3://").partition("/")
    return s3.get_object(Bucket=bucket, Key=f"{prefix}_delta_log/{name}")["Body"].read()


_JSON_STRING = r'"(?:[^"\\]|\\.)*"'
_FILE_ACTIONS = ("add", "remove", "cdc")


def _rewritten_values(source: dict, exported: dict) -> list[tuple[str, str, str]]:
    """(key, source value, exported value) for each path and deletion-vector field the export changed."""
    changed = []
    for kind in _FILE_ACTIONS:
        before, after = source.get(kind), exported.get(kind)
        if not isinstance(before, dict) or not isinstance(after, dict):
            continue
        if before.get("path") != after.get("path"):
            changed.append(("path", before.get("path"), after.get("path")))
        dv_before, dv_after = before.get("deletionVector") or {}, after.get("deletionVector") or {}
        for key in ("storageType", "pathOrInlineDv"):
            if dv_before.get(key) != dv_after.get(key):
                changed.append((key, dv_before.get(key), dv_after.get(key)))
    return changed


def _expected_line(source_line: bytes, exported_line: bytes) -> bytes:
    """The source line with only its rewritten string values swapped, every other byte as written."""
    if not any(f'"{kind}"'.encode() in source_line for kind in _FILE_ACTIONS):
        return source_line
    try:
        changed = _rewritten_values(json.loads(source_line), json.loads(exported_line))
    except ValueError:
        return source_line
    text = source_line.decode()
    for key, old, new in changed:
        for match in re.finditer(rf'"{key}"\s*:\s*({_JSON_STRING})', text):
            if json.loads(match.group(1)) == old:
                text = text[:match.start(1)] + json.dumps(new, ensure_ascii=False) + text[match.end(1):]
                break
    return text.encode()


def assert_commits_differ_only_in_paths(s3, local_dir: Path, outcome) -> None:
    """Each exported JSON commit is the writer's, byte for byte, but for the rewritten path values."""
    first = outcome.checkpoint_version if outcome.checkpoint_version is not None else 0
    for version in range(first, outcome.head_version + 1):
        name = f"{version:020d}.json"
        source_lines = (local_dir / "_delta_log" / name).read_bytes().split(b"\n")
        exported_lines = _exported(s3, outcome, name).split(b"\n")
        assert len(exported_lines) == len(source_lines), f"{name}: {len(exported_lines)} lines, source has {len(source_lines)}"
        for number, (source_line, exported_line) in enumerate(zip(source_lines, exported_lines), start=1):
            expected = _expected_line(source_line, exported_line)
            assert exported_line == expected, f"{name} line {number}:\n  written:  {source_line[:400]!r}\n  exported: {exported_line[:400]!r}"


def _parquet_columns(raw: bytes) -> list[tuple]:
    import pyarrow.parquet as pq

    schema = pq.ParquetFile(io.BytesIO(raw)).schema
    return [(column.path, column.physical_type, str(column.logical_type), column.converted_type)
            for column in (schema.column(i) for i in range(len(schema)))]


def assert_checkpoint_schema_kept(s3, local_dir: Path, outcome) -> None:
    """The exported checkpoint's Parquet files (parts, sidecars) keep the writer's column types."""
    assert outcome.checkpoint_version is not None
    log = local_dir / "_delta_log"
    prefix = f"{outcome.checkpoint_version:020d}.checkpoint"
    names = [p.relative_to(log).as_posix() for p in log.rglob(prefix + "*.parquet")]
    assert names, f"no Parquet checkpoint file or sidecar at version {outcome.checkpoint_version}"
    for name in names:
        written, exported = _parquet_columns((log / name).read_bytes()), _parquet_columns(_exported(s3, outcome, name))
        differing = [(w, e) for w, e in zip(written, exported) if w != e]
        assert written == exported, f"{name}: column types changed (written, exported): {differing[:4] or 'column count'}"
