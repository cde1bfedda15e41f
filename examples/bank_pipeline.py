"""A PySpark pipeline on lakeFS: daily bank transactions into a partitioned Delta table, and the
"retention and column remover" ETL that a data engineer tries on a branch.

The ETL has a planted mistake: after removing old rows and two columns it appends rows it had
already written, so the table ends with *more* rows than it should. The history diff shows it.
"""

from __future__ import annotations

import random
from datetime import date, timedelta

from exporter.lakefs.client import LakeFS

COLUMNS = "txn_id BIGINT, date STRING, amount DOUBLE, description STRING, account STRING, merchant STRING"
DESCRIPTIONS = ["coffee at Café Zürich", "rent payment", "groceries – Ünïmarkt", "salary", "book: 北京 travel guide",
                "refund 50% off", "taxi + tip"]


def daily_transactions(day: date, count: int, seed: int) -> list[tuple]:
    rng = random.Random(seed)
    return [(seed * 10_000 + i, day.isoformat(), round(rng.uniform(-500, 2500), 2), rng.choice(DESCRIPTIONS),
             f"acct-{rng.randint(1, 5):03d}", f"merchant {rng.randint(1, 40)}") for i in range(count)]


def table_uri(repository: str, branch: str, table: str) -> str:
    return f"s3a://{repository}/{branch}/tables/{table}"


def ingest(spark, lakefs: LakeFS, repository: str, branch: str, first_day: date, days: int) -> list[str]:
    """One commit per daily file, partitioned by date; a second table of accounts in the first commit."""
    commits = []
    uri = table_uri(repository, branch, "transactions")
    for offset in range(days):
        day = first_day + timedelta(days=offset)
        frame = spark.createDataFrame(daily_transactions(day, 40, offset + 1), COLUMNS)
        writer = frame.write.format("delta").mode("append").partitionBy("date")
        if offset == 0:
            accounts = spark.createDataFrame([(f"acct-{i:03d}", f"Owner {i}") for i in range(1, 6)], "account STRING, owner STRING")
            accounts.write.format("delta").save(table_uri(repository, branch, "accounts"))
        writer.save(uri)
        commits.append(lakefs.commit_branch(repository, branch, f"ingest transactions of {day}",
                                            {"pipeline": "bank-ingest", "day": day.isoformat()}))
    return commits


def retention_and_column_remover(spark, lakefs: LakeFS, repository: str, branch: str, keep_from: date) -> str:
    """Delete rows older than the retention window, drop two columns, then (the bug) append duplicates."""
    uri = table_uri(repository, branch, "transactions")
    spark.sql(f"ALTER TABLE delta.`{uri}` SET TBLPROPERTIES ('delta.enableDeletionVectors' = 'true')")
    spark.sql(f"DELETE FROM delta.`{uri}` WHERE date < '{keep_from.isoformat()}'")  # leaves deletion vectors
    kept = spark.read.format("delta").load(uri).drop("description", "merchant").localCheckpoint()
    kept.write.format("delta").mode("overwrite").option("overwriteSchema", "true").partitionBy("date").save(uri)
    kept.write.format("delta").mode("append").save(uri)  # the planted bug: every kept row once more
    return lakefs.commit_branch(repository, branch, "retention and column remover",
                                {"pipeline": "retention-etl", "keep_from": keep_from.isoformat()})
