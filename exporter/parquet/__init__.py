"""Parquet without a reader: the Thrift footer codec and the column-chunk splice."""
