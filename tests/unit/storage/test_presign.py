"""Presigned URLs: byte for byte the ones botocore signs, never holding a secret, each object signed
with the most specific store configured for it."""

from __future__ import annotations

import datetime
from unittest import mock

import boto3
import botocore.config
import pytest

from exporter.config import Config, ObjectStoreConfig
from exporter.errors import ConfigError
from exporter.storage.presign import Presigner

pytestmark = pytest.mark.unit

STORE = ObjectStoreConfig(endpoint="http://127.0.0.1:19000", region="us-east-1", access_key_id="AKIDEXAMPLE",
                          secret_access_key="wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY")
CONFIG = Config(object_store=STORE)
NOW = 1_795_000_000  # 2026-11-18


def botocore_url(bucket: str, key: str, lifetime: int, operation: str = "get_object") -> str:
    client = boto3.client("s3", endpoint_url=STORE.endpoint, region_name=STORE.region,
                          aws_access_key_id=STORE.access_key_id,
                          aws_secret_access_key=STORE.secret_access_key.get_secret_value(),
                          config=botocore.config.Config(signature_version="s3v4", s3={"addressing_style": "path"}))
    frozen = datetime.datetime.fromtimestamp(NOW, datetime.timezone.utc).replace(tzinfo=None)
    with mock.patch("botocore.auth.get_current_datetime", return_value=frozen):
        return client.generate_presigned_url(operation, Params={"Bucket": bucket, "Key": key}, ExpiresIn=lifetime)


@pytest.mark.parametrize("key", ["data/part-00000.snappy.parquet", "a b/c+d%e é~f=g&h.parquet",
                                 "region=eu/part-1.parquet", "deletion_vector_0a1b.bin"])
def test_presigned_urls_are_the_ones_botocore_signs(key):
    from exporter.delta.paths import physical_uri

    ours = Presigner(CONFIG, 900, now=NOW).presign(physical_uri(f"s3://lakefs-data/{key}"))
    assert ours.url == botocore_url("lakefs-data", key, 900)
    assert ours.expires_ms == (NOW + 900) * 1000


def test_a_head_request_is_signed_as_botocore_signs_it_and_a_request_url_names_its_object():
    """The Iceberg catalog's S3 remote signing: a reader's GET or HEAD URL back to its address."""
    presigner = Presigner(CONFIG, 900, now=NOW)
    key = "data/a b+c.parquet"
    assert presigner.presign(f"s3://lakefs-data/{key}", "HEAD").url == botocore_url("lakefs-data", key, 900, "head_object")
    assert presigner.presign(f"s3://lakefs-data/{key}", "HEAD").url != presigner.presign(f"s3://lakefs-data/{key}").url
    assert presigner.address_of("http://127.0.0.1:19000/lakefs-data/data/a%20b%2Bc.parquet") == \
        "s3://lakefs-data/data/a%20b%2Bc.parquet"
    assert presigner.address_of("http://lakefs-data.127.0.0.1:19000/k.parquet") == "s3://lakefs-data/k.parquet"
    for url in ("http://127.0.0.1:19000/lakefs-data/?list-type=2", "http://127.0.0.1:19000/lakefs-data",
                "http://elsewhere:19000/lakefs-data/k", "https://127.0.0.1:19000/lakefs-data/k"):
        assert presigner.address_of(url) is None, url


def test_a_column_of_addresses_is_signed_as_botocore_signs_each_one():
    """A checkpoint batch's addresses are signed column by column: every URL is still botocore's,
    whatever the batch mixes (keys to quote, to decode, non-ASCII, other buckets, `s3a://`)."""
    import pyarrow as pa

    from exporter.delta.paths import physical_uri

    keys = ["data/part-00000.snappy.parquet", "region=eu/a b+c.parquet", "ü/日本 語.parquet", "x=1/y:z@w!$'()*,;.bin",
            "deletion_vector_0a1b.bin"]
    written = [f"s3://lakefs-data/{key}" for key in keys] + [physical_uri(f"s3://lakefs-data/{key}") for key in keys]
    signed = [("lakefs-data", key) for key in keys] * 2
    written += ["s3a://lakefs-data/p=1/s3a.parquet", "s3://other/p=2/k.parquet"]
    signed += [("lakefs-data", "p=1/s3a.parquet"), ("other", "p=2/k.parquet")]
    expected = {uri: botocore_url(bucket, key, 900) for uri, (bucket, key) in zip(written, signed)}
    other = ObjectStoreConfig(prefix="s3://other/", endpoint=STORE.endpoint, access_key_id=STORE.access_key_id,
                              secret_access_key=STORE.secret_access_key)  # signed as botocore_url signs
    presigner = Presigner(Config(object_store=STORE, extra_object_stores=(other,)), 900, now=NOW)
    for batch in (written, written[:2], written[1:2], written[2:3], written[3:4], written[-2:], written[::-1]):
        assert presigner.presign_column(pa.array(batch, pa.string())).to_pylist() == [expected[uri] for uri in batch]


def test_a_presigned_url_never_holds_the_secret():
    url = Presigner(CONFIG, 60, now=NOW).presign("s3://lakefs-data/x.parquet").url
    assert STORE.secret_access_key.get_secret_value() not in url and "X-Amz-Signature=" in url


def test_each_bucket_is_signed_with_its_own_store():
    other = ObjectStoreConfig(prefix="s3://other/", endpoint="https://s3.eu-west-1.amazonaws.com", region="eu-west-1",
                              access_key_id="OTHER", secret_access_key="secret2")
    presigner = Presigner(Config(object_store=STORE, extra_object_stores=(other,)), 60, now=NOW)
    assert presigner.presign("s3://other/k").url.startswith("https://s3.eu-west-1.amazonaws.com/other/k?")
    assert "OTHER%2F20261118%2Feu-west-1" in presigner.presign("s3://other/k").url
    assert presigner.presign("s3://lakefs-data/k").url.startswith("http://127.0.0.1:19000/lakefs-data/k?")


def test_an_object_is_signed_with_the_most_specific_store_below_its_bucket():
    team = ObjectStoreConfig(prefix="s3://lakefs-data/team-b/", endpoint="http://127.0.0.1:19000", region="us-east-1",
                             access_key_id="TEAMB", secret_access_key="secret-b")
    presigner = Presigner(Config(object_store=STORE, extra_object_stores=(team,)), 60, now=NOW)
    assert "X-Amz-Credential=TEAMB%2F" in presigner.presign("s3://lakefs-data/team-b/data/x.parquet").url
    assert "X-Amz-Credential=AKIDEXAMPLE%2F" in presigner.presign("s3://lakefs-data/team-a/data/x.parquet").url
    narrow = Presigner(Config(object_store=ObjectStoreConfig(prefix="s3://only-this/")), 60, now=NOW)
    with pytest.raises(ConfigError, match="no store configured"):
        narrow.presign("s3://elsewhere/x")
