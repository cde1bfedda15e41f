"""The Delta protocol: log file names, actions and commit times, checkpoints, the replay and its
processors (table state, live files, files a head reads), deletion vectors, column identity, paths.
Imports nothing of the product but `exporter.parquet` and `exporter.errors`."""
