"""Control records: transaction markers (COMMIT/ABORT) and KRaft's control messages.

A control record's key is `int16 version, int16 type`. A marker's value is
`int16 version, int32 coordinatorEpoch`; the KRaft types carry a message whose first field is
its own int16 version.
"""

from __future__ import annotations

import struct
from typing import Any

from kprotocol.errors import DecodeError, InvalidValueError, TruncatedError
from kprotocol.records.model import Record
from kprotocol.registry import message_class

CONTROL_TYPES = {
    0: "ABORT",
    1: "COMMIT",
    2: "LEADER_CHANGE",
    3: "SNAPSHOT_HEADER",
    4: "SNAPSHOT_FOOTER",
    5: "KRAFT_VERSION",
    6: "KRAFT_VOTERS",
}
KRAFT_MESSAGES = {
    2: "LeaderChangeMessage",
    3: "SnapshotHeaderRecord",
    4: "SnapshotFooterRecord",
    5: "KRaftVersionRecord",
    6: "VotersRecord",
}
_KEY = struct.Struct(">hh")
_MARKER = struct.Struct(">hi")


def marker_record(commit: bool, coordinator_epoch: int, offset: int, timestamp: int) -> Record:
    """A COMMIT or ABORT marker record, to be written in a transactional control batch."""
    return Record(offset, timestamp, _KEY.pack(0, 1 if commit else 0), _MARKER.pack(0, coordinator_epoch))


def decode_control(record: Record) -> dict[str, Any]:
    """`{"type": "COMMIT", "version": 0, "coordinatorEpoch": 7}`, or the KRaft message's JSON in `data`."""
    if record.key is None or len(record.key) < _KEY.size:
        raise TruncatedError("control record key needs 4 bytes", 0, "key")
    version, type_id = _KEY.unpack_from(record.key)
    name = CONTROL_TYPES.get(type_id)
    if name is None:
        return {"type": f"UNKNOWN({type_id})", "version": version, "value_hex": _hex(record.value)}
    value = record.value or b""
    if type_id in (0, 1):
        if len(value) < _MARKER.size:
            raise TruncatedError("transaction marker value needs 6 bytes", 0, "value")
        marker_version, epoch = _MARKER.unpack_from(value)
        return {"type": name, "version": marker_version, "coordinatorEpoch": epoch}
    return {"type": name, "version": version, "data": _kraft_message(type_id, value)}


def _hex(data: bytes | None) -> str | None:
    return None if data is None else data.hex()


def _kraft_message(type_id: int, value: bytes) -> dict[str, Any]:
    if len(value) < 2:
        raise TruncatedError("control message has no version", 0, "value")
    (version,) = struct.unpack_from(">h", value)
    cls = message_class(KRAFT_MESSAGES[type_id])
    low, high = cls.valid_versions
    if not low <= version <= high:
        raise InvalidValueError(f"{cls.__name__} version {version} is not supported", 0, "value")
    try:
        return cls.decode(value, version).to_json(version)
    except DecodeError as exc:
        raise exc.within("value") from None
