"""The compiled path of `kprotocol offsets decode` (kprotocol.coordinator_topics.lines, _offsets.c) against the
reference path (the segment reader, `decode_record`, orjson): the same JSON lines byte for byte, the
same problems and exit code, on the kept segments (a real broker's included), Kafka's golden record
vectors and hypothesis-made segments of every `__consumer_offsets` record type, damaged or not."""

from __future__ import annotations

import argparse
import functools
import io
import json
import struct
from pathlib import Path

import crc32c
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kprotocol.coordinator_topics import CONSUMER_OFFSETS, lines, record_types
from kprotocol.fuzz.strategies import messages
from kprotocol.records import Header, Record, marker_record, read_segment, write_batch
from kprotocol.records.cli import run_decode
from kprotocol.registry import message_class

ROOT = Path(__file__).resolve().parents[1]
KEPT = sorted((ROOT / "fixtures" / "offsets").glob("*.log")) + \
    sorted((ROOT / "fixtures" / "kafka" / "data").glob(f"{CONSUMER_OFFSETS}-*"))
VECTORS = ROOT.parent / "shared" / "vectors"
TYPES = record_types(CONSUMER_OFFSETS)
CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]

pytestmark = pytest.mark.skipif(not lines.ENABLED, reason="the compiled path is not built")


def _decode(paths: list[Path], compiled: bool, monkeypatch: pytest.MonkeyPatch, **options) -> tuple[int, bytes, str]:
    monkeypatch.setattr(lines, "ENABLED", compiled)
    out, err = io.TextIOWrapper(io.BytesIO(), encoding="utf-8"), io.StringIO()
    args = argparse.Namespace(paths=paths, topic=CONSUMER_OFFSETS, type=None, max_records=None, pretty=False,
                              group=None, progress=False)
    vars(args).update(options)
    code = run_decode(args, out, err)
    out.flush()
    return code, out.buffer.getvalue(), err.getvalue()


def _same(paths: list[Path], monkeypatch: pytest.MonkeyPatch, **options) -> bytes:
    compiled = _decode(paths, True, monkeypatch, **options)
    reference = _decode(paths, False, monkeypatch, **options)
    assert compiled[0] == reference[0] and compiled[2] == reference[2]
    assert compiled[1].splitlines() == reference[1].splitlines()
    assert compiled[1] == reference[1]
    return compiled[1]


def test_kept_segments_byte_for_byte(monkeypatch: pytest.MonkeyPatch) -> None:
    taken = []
    monkeypatch.setattr(lines.Lines, "tail", lambda self, *a, tail=lines.Lines.tail: taken.append(a) or tail(self, *a))
    out = _same(KEPT, monkeypatch)
    records = out.count(b"\n")
    assert records > 150 and len(taken) <= records // 10, len(taken)  # the compiled path took nearly all
    docs = [json.loads(line) for line in out.splitlines()]
    streams = [d for d in docs if d.get("recordType") == "GroupMetadata" and d["value"]
               and d["value"]["data"]["protocol"] == "stream"]
    assert streams and "streamsUserData" in streams[0]["value"]["data"]["members"][0]["decodedSubscription"]["data"]


def test_record_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    for limit in (0, 1, 7, 40):
        assert _same(KEPT, monkeypatch, max_records=limit).count(b"\n") == limit


def _vector_pairs() -> list[tuple[bytes, bytes | None]]:
    """Every coordinator key vector with a tombstone, and every value vector under a key of its type."""
    keys: dict[int, bytes] = {}
    values = []
    for path in sorted(VECTORS.glob("*Key.jsonl")) + sorted(VECTORS.glob("*Value.jsonl")):
        for line in path.open():
            vector = json.loads(line)
            if vector.get("type") == "coordinator-key":
                keys.setdefault(vector["apiKey"], struct.pack(">h", vector["apiKey"]) + bytes.fromhex(vector["hex"]))
            elif vector.get("type") == "coordinator-value":
                values.append((vector["apiKey"], struct.pack(">h", vector["version"]) + bytes.fromhex(vector["hex"])))
    return [(key, None) for key in keys.values()] + [(keys[t], value) for t, value in values if t in keys]


@pytest.mark.skipif(not VECTORS.is_dir(), reason="no shared golden vectors")
def test_kafka_golden_vectors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pairs = _vector_pairs()
    assert len(pairs) >= 300
    segment = tmp_path / "00000000000000000000.log"
    segment.write_bytes(b"".join(write_batch([Record(i + j, 1_700_000_000_000 + j, k, v)
                                              for j, (k, v) in enumerate(pairs[i:i + 50])])
                                 for i in range(0, len(pairs), 50)))
    assert _same([segment], monkeypatch).count(b"\n") == len(pairs)


def _consumer_payload(name: str, version: int, draw) -> bytes:
    return struct.pack(">h", version) + draw(messages(message_class(name), min(version, 3))).encode(min(version, 3))


@st.composite
def coordinator_record(draw) -> tuple[bytes, bytes | None]:
    """A key and value of any __consumer_offsets type and version; classic groups often use the
    consumer protocol, with range, Kafka Streams (random userdata) or other assignors."""
    type_id = draw(st.sampled_from(sorted(TYPES)))
    record_type = TYPES[type_id]
    key = struct.pack(">h", type_id) + draw(messages(record_type.key, record_type.key_version)).encode(
        record_type.key_version)
    if draw(st.integers(0, 9)) == 0:
        return key, None
    version = draw(st.integers(*record_type.value.valid_versions))
    value = draw(messages(record_type.value, version))
    if type_id == 2 and draw(st.booleans()):
        members = tuple(m.replace(
            subscription=_consumer_payload("ConsumerProtocolSubscription", draw(st.integers(0, 4)), draw),
            assignment=_consumer_payload("ConsumerProtocolAssignment", draw(st.integers(0, 4)), draw))
            for m in value.members)
        value = value.replace(protocol_type="consumer", members=members,
                              protocol=draw(st.sampled_from(["range", "stream", "", None])))
    return key, struct.pack(">h", version) + value.encode(version)


@st.composite
def segment(draw) -> bytes:
    """A few batches of coordinator records (any codec, some transactional, markers, a header now and
    then), sometimes with bytes changed (and the checksums made valid again)."""
    out, offset = bytearray(), 0
    for _ in range(draw(st.integers(1, 4))):
        if draw(st.integers(0, 5)) == 0:
            records = [marker_record(draw(st.booleans()), draw(st.integers(0, 9)), offset, 1_700_000_000_000)]
            out += write_batch(records, control=True, transactional=True, producer_id=7)
        else:
            pairs = draw(st.lists(coordinator_record(), min_size=1, max_size=4))
            headers = (Header("h", b"v"),) if draw(st.integers(0, 9)) == 0 else ()
            records = [Record(offset + i, 1_700_000_000_000 + i, k, v, headers) for i, (k, v) in enumerate(pairs)]
            out += write_batch(records, compression=draw(st.sampled_from(CODECS)),
                               transactional=draw(st.integers(0, 4)) == 0, producer_id=7)
        offset += len(records)
    for _ in range(draw(st.sampled_from([0, 0, 0, 1, 3]))):
        out[draw(st.integers(0, len(out) - 1))] = draw(st.integers(0, 255))
    if draw(st.booleans()):
        _restamp(out)
    return bytes(out)


def _restamp(data: bytearray) -> None:
    """Give every v2 batch whose length still holds a valid CRC again, so that changed bytes reach the
    record decoders instead of failing the batch's checksum."""
    pos = 0
    while pos + 61 <= len(data):
        (length,) = struct.unpack_from(">i", data, pos + 8)
        end = pos + 12 + length
        if length < 49 or end > len(data):
            return
        if data[pos + 16] == 2:
            struct.pack_into(">I", data, pos + 17, crc32c.crc32c(bytes(data[pos + 21:end])))
        pos = end


# The examples share tmp_path and monkeypatch (each writes the one segment file anew and sets the same patches); a
# whole segment is large and slow to draw.
SEGMENT_CHECKS = [HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large]


@given(segment())
@settings(max_examples=60, deadline=None, suppress_health_check=SEGMENT_CHECKS)
def test_made_segments_byte_for_byte(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, data: bytes) -> None:
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(data)
    _same([path], monkeypatch)


def _split_rows(path: Path, compiled: bool, monkeypatch: pytest.MonkeyPatch) -> dict:
    from kprotocol.pipeline.offsets_rows import split_rows
    from kprotocol.pipeline.splits import SegmentSplit

    monkeypatch.setattr(lines, "ENABLED", compiled)
    return split_rows(SegmentSplit(str(path), CONSUMER_OFFSETS, 0, 0, path.stat().st_size))


def _same_rows(path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, list[dict]]:
    """The compiled path's tables are the Python path's, row for row and in order: its records and
    offsets_committed Arrow tables (full validation, the schema of SCHEMAS) as dicts, and as tables
    equal to the Python rows converted by `to_arrow`."""
    from kprotocol.pipeline.offsets_rows import COLUMNAR, as_dicts
    from kprotocol.pipeline.tables import SCHEMAS, to_arrow

    compiled, reference = _split_rows(path, True, monkeypatch), _split_rows(path, False, monkeypatch)
    assert compiled.keys() == reference.keys()
    for table in COLUMNAR:
        compiled[table].validate(full=True)
        assert compiled[table].schema.equals(SCHEMAS[table])
        assert compiled[table].equals(to_arrow(reference[table], SCHEMAS[table])), table
    assert {t: as_dicts(rows) for t, rows in compiled.items()} == reference
    return reference


def test_pipeline_rows_of_kept_segments(monkeypatch: pytest.MonkeyPatch) -> None:
    for path in KEPT:
        for segment in [path] if path.is_file() else sorted(path.glob("*.log")):
            tables = _same_rows(segment, monkeypatch)
            assert tables["records"]
    assert _same_rows(KEPT[0], monkeypatch)["group_members"]


@given(segment())
@settings(max_examples=40, deadline=None, suppress_health_check=SEGMENT_CHECKS)
def test_pipeline_rows_of_made_segments(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, data: bytes) -> None:
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(data)
    _same_rows(path, monkeypatch)


def _every_kind() -> bytes:
    """Batches of every kind of record, in one segment: offset commits (a legacy key, values v1 with an
    expire time and v3, tombstones, non-ASCII names, a gzip batch), transactional commits with their
    COMMIT and ABORT markers, group records of a member type (the kept segment's), records the plans
    do not take (no key, an unknown type, a value version past the latest, invalid UTF-8), a corrupt
    batch in the middle and a batch with a header (both for the Python reader), an all-zero tail."""
    commit_key = lambda group, topic, partition: struct.pack(">h", 1) + TYPES[1].key(  # noqa: E731
        group=group, topic=topic, partition=partition).encode(0)
    value = TYPES[1].value
    v3 = lambda offset: struct.pack(">h", 3) + value(offset=offset, leader_epoch=7, metadata="m",  # noqa: E731
                                                     commit_timestamp=1_700_000_000_000).encode(3)
    v1 = struct.pack(">h", 1) + value(offset=5, metadata="", commit_timestamp=1_700_000_000_000,
                                      expire_timestamp=1_800_000_000_000).encode(1)
    legacy_key = struct.pack(">h", 0) + TYPES[0].key(group="old", topic="t", partition=1).encode(0)
    legacy_value = struct.pack(">h", 0) + TYPES[0].value(offset=9, metadata="x", commit_timestamp=1).encode(0)
    members = [r for batch in read_segment(KEPT[0]) if not batch.is_control for r in batch.records
               if r.key and struct.unpack_from(">h", r.key)[0] in (2, 5, 7, 8, 19, 21, 22)]
    assert len(members) >= 5
    bad_utf8 = struct.pack(">h", 1) + struct.pack(">h", 2) + b"\xff\xfe" + struct.pack(">h", 1) + b"t" + bytes(4)
    batches: list[bytes] = []
    offset = 0

    def batch(pairs: list[tuple[bytes | None, bytes | None]], **options) -> None:
        nonlocal offset
        records = [Record(offset + i, 1_700_000_000_000 + offset + i, k, v, options.pop("headers", ()))
                   for i, (k, v) in enumerate(pairs)]
        batches.append(write_batch(records, **options))
        offset += len(records)

    def marker(commit: bool) -> None:
        nonlocal offset
        batches.append(write_batch([marker_record(commit, 3, offset, 1_700_000_000_000)], control=True,
                                   transactional=True, producer_id=42))
        offset += 1

    batch([(commit_key("g", "orders", p), v3(100 + p)) for p in range(3)] + [(legacy_key, legacy_value)])
    batch([(commit_key("grüppe", "tópico", 0), v1), (commit_key("g", "orders", 0), None)])
    batch([(commit_key("txn", "t", 0), v3(1)), (commit_key("txn", "t", 1), v3(2))], transactional=True,
          producer_id=42)
    marker(True)
    batch([(commit_key("txn", "t", 0), v3(3))], transactional=True, producer_id=42)
    marker(False)
    batch([(m.key, m.value) for m in members[:4]])
    batch([(None, b"\x00\x01"), (struct.pack(">h", 99) + b"x", b"\x00\x00"), (commit_key("g", "t", 0),
           struct.pack(">h", 99) + bytes(8)), (bad_utf8, v3(4)), (commit_key("g", "t", 1), v3(5))])
    batch([(commit_key("gz", "t", p), v3(p)) for p in range(5)], compression="gzip")
    corrupt = bytearray(write_batch([Record(offset, 1, commit_key("lost", "t", 0), v3(6))]))
    corrupt[-1] ^= 0xFF  # the CRC no longer matches
    batches.append(bytes(corrupt))
    offset += 1
    batch([(commit_key("h", "t", 0), v3(7))], headers=(Header("h", b"v"),))
    batch([(m.key, m.value) for m in members[4:]] + [(commit_key("end", "t", 0), v3(8))], transactional=True,
          producer_id=43)
    return b"".join(batches) + bytes(40)


def test_pipeline_tables_of_every_record_kind(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(_every_kind())
    tables = _same_rows(path, monkeypatch)
    records, commits = tables["records"], tables["offsets_committed"]
    assert [r["control"] for r in records if r["control"]] == ["COMMIT", "ABORT"]
    assert [p["kind"] for p in tables["problems"]] == ["record"] * 4 + ["corrupt"]
    assert tables["problems"][0]["message"] == "record has no key"
    assert [r["offset"] for r in records if r["problem"]] == [p["offset"] for p in tables["problems"][:4]]
    assert tables["group_members"] and any(r["offset"] == 26 and r["group"] == "h" for r in records)
    assert [c["group"] for c in commits if c["deleted"]] == ["g"]
    assert {c["producer_id"] for c in commits if c["transactional"]} == {42, 43}
    assert any(c["expire_timestamp"] for c in commits) and any(c["group"] == "grüppe" for c in commits)
    assert all(r["topic"] == CONSUMER_OFFSETS and r["segment"] == str(path) for r in records)
    # String columns cut into chunks (as past 2 GiB of JSON in one split): the same tables.
    longest = max(len(value.encode()) for row in records + commits for value in row.values()
                  if isinstance(value, str))
    columns = lines.columns
    monkeypatch.setattr(lines, "columns", functools.partial(columns, max_chunk=longest))
    assert _same_rows(path, monkeypatch) == tables
    compiled = _split_rows(path, True, monkeypatch)
    assert compiled["records"].column("value_json").num_chunks > 2
    # A value longer than a chunk holds is refused, not cut or overflowed.
    monkeypatch.setattr(lines, "columns", functools.partial(columns, max_chunk=longest - 1))
    with pytest.raises(ValueError, match="longer than a string array holds"):
        _split_rows(path, True, monkeypatch)


def test_pipeline_tables_are_written_alike(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`write_part` writes the compiled path's Arrow tables and the Python path's rows to the same Parquet."""
    import pyarrow.parquet as pq

    from kprotocol.pipeline.tables import write_part

    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(_every_kind())
    for compiled in (True, False):
        for table, rows in _split_rows(path, compiled, monkeypatch).items():
            write_part(str(tmp_path / str(compiled)), table, 0, rows)
    for table in ("records", "offsets_committed", "group_members", "problems"):
        read = [pq.read_table(tmp_path / str(c) / table / "part-00000.parquet") for c in (True, False)]
        assert read[0].equals(read[1]) and read[0].num_rows, table


def test_column_builder_refuses_what_its_columns_do_not_hold() -> None:
    """A row that does not fit is refused whole (the builder stays usable); rows convert by column kind."""
    from kprotocol.pipeline.tables import SCHEMAS, column_kinds, from_columns

    schema = SCHEMAS["offsets_committed"]
    builder = lines.columns(schema.names, column_kinds(schema, {"source_partition"}))
    row = {"group": "g", "topic": "t", "partition": 1, "offset": 2, "deleted": False, "transactional": True}
    for bad in ({"partition": 1 << 31}, {"offset": "2"}, {"group": b"g"}, {"offset": 1 << 64}, {"topic": "\ud800"}):
        with pytest.raises((TypeError, OverflowError, UnicodeEncodeError)):
            builder.append({**row, **bad})
        assert len(builder) == 0
    builder.append(row)
    builder.append({})
    with pytest.raises(TypeError):
        builder.append([row])
    table = from_columns(builder.finish(), schema, {"source_partition": None})
    table.validate(full=True)
    assert table.to_pylist() == [{**dict.fromkeys(schema.names), **row}, dict.fromkeys(schema.names)]
    assert len(builder) == 0 and from_columns(builder.finish(), schema, {"source_partition": 3}).num_rows == 0


def test_column_builders_cannot_be_finished_while_the_decoder_fills_them() -> None:
    """A callback that finishes a builder in the middle of Decoder.columns is refused, and a call that
    failed leaves builders that refuse further use (a row may be half written), never a bad table."""
    from kprotocol.pipeline.offsets_rows import MEMBER_TYPES
    from kprotocol.pipeline.tables import SCHEMAS, column_kinds

    constant = {"topic", "partition", "segment", "source_partition"}
    records, commits = (lines.columns(SCHEMAS[t].names, column_kinds(SCHEMAS[t], constant & (
        {"source_partition"} if t == "offsets_committed" else {"topic", "partition", "segment"})))
        for t in ("records", "offsets_committed"))
    data = write_batch([Record(0, 1, None, b"\x00\x00")])  # no key: the fallback's
    decoder = lines.decoder(lambda *record: records.finish(), frozenset(MEMBER_TYPES))
    with pytest.raises(RuntimeError, match="while Decoder.columns fills"):
        decoder.columns(data, 0, len(data), 0, records, commits, {}, print)
    with pytest.raises(RuntimeError, match="failed in the middle"):
        records.finish()
    with pytest.raises(ValueError, match="not the layout"):
        decoder.columns(data, 0, len(data), 0, commits, records, {}, print)
