"""Records fields of decoded messages expand into batches on request."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

import kprotocol
from kprotocol.records import Record, read_batches, to_json_with_records, write_batch
from kprotocol.records.message import records_json

SHARED = Path(__file__).resolve().parents[2] / "shared"
WITH_RECORDS = [json.loads(line) for name in ("ProduceRequest", "FetchResponse")
                for line in (SHARED / "vectors" / f"{name}.jsonl").open() if '"recordsPatched":true' in line]


def _records_fields(plain, expanded):
    """Pairs of (base64 records, expanded records) found at the same place in both documents."""
    if isinstance(plain, dict):
        for key, value in plain.items():
            if key == "records" and isinstance(value, str):
                yield value, expanded[key]
            else:
                yield from _records_fields(value, expanded[key])
    elif isinstance(plain, list):
        for a, b in zip(plain, expanded):
            yield from _records_fields(a, b)


@pytest.mark.parametrize("vector", WITH_RECORDS, ids=lambda v: f"{v['name']}-v{v['version']}")
def test_vector_records_fields_expand(vector):
    msg = kprotocol.message_class(vector["name"]).decode(bytes.fromhex(vector["hex"]), vector["version"])
    expanded = to_json_with_records(msg, vector["version"])
    pairs = list(_records_fields(vector["json"], expanded))
    assert pairs
    for encoded, records in pairs:
        raw = base64.b64decode(encoded)
        assert records == {"batches": [b.to_dict() for b in read_batches(raw)]}


def test_partial_last_batch_is_reported():
    raw = write_batch([Record(0, 1, b"k", b"v")]) + write_batch([Record(1, 2, b"k", b"w")])[:30]
    out = records_json(raw)
    assert [b["baseOffset"] for b in out["batches"]] == [0]
    assert out["problems"] == [{"position": len(raw) - 30, "length": 30, "kind": "truncated",
                                "message": out["problems"][0]["message"]}]
