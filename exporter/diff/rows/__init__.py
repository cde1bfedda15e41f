"""The row diff: which rows of one table differ between two refs (`compute`), read from the
exports (`read`), compared in this process (`compare`) or as a Spark job (`spark`), its rows
kept as a Parquet file the API pages (`file`)."""
