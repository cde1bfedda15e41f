"""The vended credential's session policy (exporter/storage/vended.py): what it lets a reader do,
evaluated as S3 evaluates a policy (an explicit Deny wins, else an Allow whose pattern matches)."""

from __future__ import annotations

import fnmatch
import json

import pytest

from exporter.config import ObjectStoreConfig
from exporter.errors import CredentialsNotVended
from exporter.storage.vended import MAX_POLICY_CHARACTERS, read_policy, repository_data, vend

pytestmark = pytest.mark.unit


def allows(policy: str, action: str, key: str) -> bool:
    arn = f"arn:aws:s3:::{key}"
    matched = {statement["Effect"] for statement in json.loads(policy)["Statement"]
               if action in statement["Action"] and any(fnmatch.fnmatchcase(arn, r) for r in statement["Resource"])}
    return "Allow" in matched and "Deny" not in matched


EXPORT = "s3://lake/repo/_lakefs/exported/main/c1/t/"


def test_the_policy_reads_the_repositorys_data_and_the_tables_own_location_and_nothing_else():
    policy = read_policy((repository_data("s3://lake/repo"), EXPORT), ("s3://lake/repo/data/nested-x/",))
    assert allows(policy, "s3:GetObject", "lake/repo/data/g1/abc")
    assert allows(policy, "s3:GetObject", "lake/repo/_lakefs/exported/main/c1/t/metadata/v1.metadata.json")
    assert allows(policy, "s3:GetObject", "lake/repo/_lakefs/exported/main/c1/t/_delta_log/00000000000000000000.json")
    for elsewhere in ("lake/repo/_lakefs/" + "a" * 64,  # a metarange: every commit's objects
                      "lake/repo/_lakefs/exported/main/c1/other/metadata/v1.metadata.json",  # another table's export
                      "lake/repo/_lakefs/exported/main/c2/t/metadata/v1.metadata.json",  # another commit's
                      "lake/repo/_lakefs/actions/log/run.log", "lake/repo/dummy",
                      "lake/repo/data/nested-x/data/f",  # a repository nested inside
                      "lake/repository-2/data/f",  # a sibling sharing the prefix
                      "other/repo/data/f"):
        assert not allows(policy, "s3:GetObject", elsewhere), elsewhere
    for action in ("s3:PutObject", "s3:ListBucket", "s3:DeleteObject"):
        assert not allows(policy, action, "lake/repo/data/f")


def test_a_policy_past_the_session_policy_limit_and_a_session_too_short_are_refused_with_the_reason():
    nested = tuple(f"s3://lake/repo/nested-{i:04d}/" for i in range(60))
    with pytest.raises(CredentialsNotVended, match=f"more than the {MAX_POLICY_CHARACTERS}"):
        read_policy((repository_data("s3://lake/repo"),), nested)
    with pytest.raises(CredentialsNotVended, match="sign in again"):
        vend(ObjectStoreConfig(endpoint="http://127.0.0.1:9"), ("s3://lake/repo/data/",), (), seconds=600)


def test_a_store_without_sts_is_a_refusal_not_an_error():
    with pytest.raises(CredentialsNotVended, match="offers no STS"):
        vend(ObjectStoreConfig(endpoint="http://127.0.0.1:9", access_key_id="k", secret_access_key="s"),
             ("s3://lake/repo/data/",), (), seconds=900)
