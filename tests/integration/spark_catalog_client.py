"""Spark reading tables through the service's Iceberg REST catalog (`SparkCatalog`, `type=rest`),
with no S3 keys: every object request is signed by the catalog. Run by `test_every_engine.py` with
the Python of a virtualenv of its own (a pyspark its Iceberg runtime supports); it imports nothing of
the project.

    python spark_catalog_client.py REQUEST.json

REQUEST: {"runtime": "1.12.0", "uri": ..., "token": ..., "ivy": ..., "out": folder,
"reads": [{"table": "repo.ref.name" parts, "snapshot_id": id or null}]}. Each read's rows are written
as Parquet to `out/<index>/`; stdout's last line is JSON: {"spark": version, "reads": count}.
"""

from __future__ import annotations

import json
import sys

from pyspark.sql import SparkSession


def session(request: dict) -> SparkSession:
    runtime = request["runtime"]
    packages = (f"org.apache.iceberg:iceberg-spark-runtime-3.5_2.12:{runtime},"
                f"org.apache.iceberg:iceberg-aws-bundle:{runtime}")
    builder = (SparkSession.builder.master("local[2]").appName(f"iceberg-{runtime}")
               .config("spark.jars.packages", packages)
               .config("spark.jars.ivy", request["ivy"])
               .config("spark.driver.host", "127.0.0.1")
               .config("spark.driver.bindAddress", "127.0.0.1")
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.sql.session.timeZone", "UTC")
               .config("spark.sql.parquet.outputTimestampType", "TIMESTAMP_MICROS")
               .config("spark.sql.catalog.lake", "org.apache.iceberg.spark.SparkCatalog")
               .config("spark.sql.catalog.lake.type", "rest")
               .config("spark.sql.catalog.lake.uri", request["uri"])
               .config("spark.sql.catalog.lake.token", request["token"]))
    return builder.getOrCreate()


def main() -> None:
    with open(sys.argv[1]) as opened:
        request = json.load(opened)
    spark = session(request)
    spark.sparkContext.setLogLevel("ERROR")
    try:
        for index, read in enumerate(request["reads"]):
            name = ".".join(f"`{part}`" for part in read["table"])
            frame = spark.table(f"lake.{name}")
            if read.get("snapshot_id") is not None:
                frame = spark.read.option("snapshot-id", str(read["snapshot_id"])).table(f"lake.{name}")
            frame.coalesce(1).write.mode("overwrite").parquet(f"{request['out']}/{index}")
        print(json.dumps({"spark": spark.version, "reads": len(request["reads"])}))
    finally:
        spark.stop()


if __name__ == "__main__":
    main()
