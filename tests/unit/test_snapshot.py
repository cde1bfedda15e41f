"""The one reconciliation rule (PROTOCOL.md#action-reconciliation): a logical file is (path, dvId)."""

import pytest

from exporter.snapshot import UNTRACKED, TableLog, reconcile, snapshot_state

pytestmark = pytest.mark.unit

PROTOCOL = {"protocol": {"minReaderVersion": 3, "minWriterVersion": 7}}
METADATA = {"metaData": {"id": "t", "schemaString": '{"type":"struct","fields":[]}', "partitionColumns": [],
                         "configuration": {}}}


def add(path: str, dv: str | None = None, rows: int = 10) -> dict:
    action = {"path": path, "size": 100, "stats": f'{{"numRecords":{rows}}}'}
    if dv:
        action["deletionVector"] = {"storageType": "u", "pathOrInlineDv": dv, "offset": 1, "sizeInBytes": 4,
                                    "cardinality": 2}
    return {"add": action}


def remove(path: str, dv: str | None = None) -> dict:
    action = {"path": path}
    if dv:
        action["deletionVector"] = {"storageType": "u", "pathOrInlineDv": dv, "offset": 1}
    return {"remove": action}


def test_a_deletion_vector_update_replaces_the_logical_file():
    commits = [(0, [PROTOCOL, METADATA, add("a"), add("b")]),
               (1, [remove("a"), add("a", "dv1")]),  # DELETE with deletion vectors
               (2, [remove("a", "dv1"), add("a", "dv2")])]
    state = snapshot_state(TableLog(None, [], [], commits))
    assert (state.num_files, state.num_rows) == (2, 10 + 10 - 2)


def test_a_remove_of_another_deletion_vector_leaves_the_file_live():
    live: dict = {}
    for action in (add("a", "dv1"), remove("a"), remove("a", "dv2")):
        reconcile(live, action)
    assert list(live) == [("a", "udv1@1")]
    reconcile(live, remove("a", "dv1"))
    assert live == {}


def test_untracked_adds_stay_out():
    live: dict = {}
    for action in (add("a"), add("b")):
        reconcile(live, action, lambda a: a["path"] if a["path"] == "b" else UNTRACKED)
    assert live == {("b", ""): "b"}
