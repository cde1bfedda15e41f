"""Vended credentials: a temporary, read-only S3 credential for the objects a table's readers read,
from the object store's STS (`AssumeRole` with a session policy), for readers that cannot have their
requests signed (DuckDB, Trino, iceberg-rust: the Iceberg REST catalog's
`X-Iceberg-Access-Delegation: vended-credentials`).

What such a credential reaches is what its session policy allows: `s3:GetObject` on every object
lakeFS wrote for the repository (`<namespace>/data/`, where lakeFS puts every object it is given) and
on the table's own export or Iceberg location, minus the storage namespaces of other repositories
nested inside them. Nothing else under the namespace: not lakeFS's own `_lakefs/` (metaranges, from
which every commit's objects could be read; other exports). S3's policies select objects by key
pattern, and a table's data files lie wherever lakeFS put them (`<namespace>/data/...`, beside every
other table's), so the repository's data is the narrowest set a policy of at most 2,048 characters
(AWS's and MinIO's limit) can name for a table: the credential reaches every object of the
repository, and the catalog vends one only to whom may read them all (`iceberg.vended_credentials`,
`iceberg.vended_credentials_readers`; README, "Read an export through the catalog"). Objects lakeFS
keeps elsewhere (imported from other buckets) are not reached: their readers sign.
https://docs.aws.amazon.com/STS/latest/APIReference/API_AssumeRole.html
"""

from __future__ import annotations

import functools
import json
import os
import time
from dataclasses import dataclass

import boto3
import botocore.config
import botocore.exceptions

from exporter.config import ObjectStoreConfig
from exporter.errors import CredentialsNotVended
from exporter.storage.objectstore import split_uri

MAX_POLICY_CHARACTERS = 2048  # a session policy's limit, AWS's and MinIO's (cmd/sts-handlers.go)
MIN_SECONDS = 900  # the shortest session STS grants
ROLE_SESSION = "lakefs-delta-reader"
DATA_FOLDER = "data/"  # lakeFS's: where it writes every object of a repository, under its storage namespace


@dataclass(frozen=True)
class VendedCredential:
    access_key_id: str
    secret_access_key: str
    session_token: str
    expires_at_ms: int

    def s3_properties(self) -> dict[str, str]:
        """The credential as Iceberg's FileIO properties (the REST spec's `storage-credentials` config)."""
        return {"s3.access-key-id": self.access_key_id, "s3.secret-access-key": self.secret_access_key,
                "s3.session-token": self.session_token, "s3.session-token-expires-at-ms": str(self.expires_at_ms)}


def read_policy(readable: tuple[str, ...], excluded: tuple[str, ...] = ()) -> str:
    """The session policy: GET (and HEAD) of the objects under the `readable` folders, none under
    `excluded` (folders inside them); each ends in `/`. No listing, no write."""
    def objects(folder: str) -> str:
        bucket, key = split_uri(folder.rstrip("/") + "/")
        return f"arn:aws:s3:::{bucket}/{key}*"

    statements = [{"Effect": "Allow", "Action": ["s3:GetObject"], "Resource": [objects(f) for f in readable]}]
    if excluded:
        statements.append({"Effect": "Deny", "Action": ["s3:GetObject"], "Resource": [objects(f) for f in excluded]})
    policy = json.dumps({"Version": "2012-10-17", "Statement": statements}, separators=(",", ":"))
    if len(policy) > MAX_POLICY_CHARACTERS:
        raise CredentialsNotVended(f"the read policy for {', '.join(readable)} is {len(policy)} characters, more than "
                                   f"the {MAX_POLICY_CHARACTERS} a session policy may have ({len(excluded)} nested "
                                   "namespaces)")
    return policy


def repository_data(namespace: str) -> str:
    """The folder of every object lakeFS writes for a repository: `<namespace>/data/`."""
    return namespace.rstrip("/") + "/" + DATA_FOLDER


def vend(store: ObjectStoreConfig, readable: tuple[str, ...], excluded: tuple[str, ...], seconds: int,
         role_arn: str = "") -> VendedCredential:
    """A credential for reading under `readable` (`read_policy`) for `seconds` (at least STS's 900),
    from the STS of the store that holds them; CredentialsNotVended when the store has none or refuses."""
    if seconds < MIN_SECONDS:
        raise CredentialsNotVended(f"a vended credential lives at least {MIN_SECONDS} s, longer than the "
                                   f"{seconds} s left to this session: sign in again")
    client = _sts_client(store.endpoint, store.region, store.access_key_id, store.secret_access_key.get_secret_value())
    asked = {"RoleSessionName": ROLE_SESSION, "Policy": read_policy(readable, excluded), "DurationSeconds": seconds,
             "RoleArn": role_arn or "arn:aws:iam::000000000000:role/lakefs-delta-reader"}  # MinIO ignores the role
    started = time.time()
    try:
        issued = client.assume_role(**asked)["Credentials"]
    except botocore.exceptions.ClientError as refused:
        error = refused.response.get("Error", {})
        raise CredentialsNotVended(f"the object store's STS refused AssumeRole: {error.get('Code', '')} "
                                   f"{error.get('Message', '')}".rstrip()) from None
    except (botocore.exceptions.BotoCoreError, KeyError) as failed:
        raise CredentialsNotVended(f"the object store offers no STS AssumeRole ({type(failed).__name__}): "
                                   "readers must have their requests signed") from None
    expires = issued.get("Expiration")
    expires_ms = int(expires.timestamp() * 1000) if expires is not None else int((started + seconds) * 1000)
    return VendedCredential(issued["AccessKeyId"], issued["SecretAccessKey"], issued["SessionToken"], expires_ms)


@functools.lru_cache(maxsize=16)
def _sts_client(endpoint: str, region: str, access_key_id: str, secret_access_key: str):
    """One STS client per store and process, as `objectstore._client` keeps one S3 client: making one
    costs more CPU than the request. boto3 clients are thread-safe."""
    return boto3.client("sts", endpoint_url=endpoint or None, region_name=region,
                        aws_access_key_id=access_key_id or None, aws_secret_access_key=secret_access_key or None,
                        config=botocore.config.Config(retries={"max_attempts": 2, "mode": "standard"},
                                                      connect_timeout=5, read_timeout=30))


os.register_at_fork(after_in_child=_sts_client.cache_clear)  # a forked worker opens its own connections
