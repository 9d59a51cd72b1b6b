"""Kafka JSON of a decoded message with its `records` fields decoded into batches, on request.

`msg.to_json(version)` keeps records as base64 (the lossless form of Kafka's shape);
`to_json_with_records(msg, version)` replaces each non-null records field with
`{"batches": [...]}` (each `RecordBatch.to_dict()`), plus `"problems"` for bytes that did not
decode, such as the partial last batch a Fetch response may end with.
"""

from __future__ import annotations

from typing import Any

from kprotocol.records.segment import SegmentProblem, read_segment_bytes
from kprotocol.runtime.struct import Message, Struct


def to_json_with_records(msg: Message, version: int) -> dict[str, Any]:
    doc = msg.to_json(version)
    _expand(msg, doc)
    return doc


def records_json(data: bytes) -> dict[str, Any]:
    """`{"batches": [...]}` of a records field, with `"problems"` when some bytes did not decode."""
    batches, problems = [], []
    for entry in read_segment_bytes(data, "records"):
        if isinstance(entry, SegmentProblem):
            problems.append({k: v for k, v in entry.to_dict().items() if k != "source"})
        else:
            batches.append(entry.to_dict())
    return {"batches": batches, "problems": problems} if problems else {"batches": batches}


def _expand(obj: Struct, doc: dict[str, Any]) -> None:
    for field, value in zip(obj._spec, obj):
        if value is None or field.json_name not in doc:
            continue
        if field.type == "records":
            doc[field.json_name] = records_json(value)
        elif field.type == "struct":
            _expand(value, doc[field.json_name])
        elif field.type == "array" and field.element == "struct":
            for item, item_doc in zip(value, doc[field.json_name]):
                _expand(item, item_doc)
