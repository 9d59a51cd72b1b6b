"""What a newcomer trips over in the decoding commands: the transaction log in a data directory, a pcap
given to `offsets decode`, stdin for captures, `-c 0`, hex typos, `message encode` defaults, a group
that is not there, a missing optional dependency, and credentials in captured logins."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT
from kprotocol.cli import main
from kprotocol.framing import encode_request, encode_response
from kprotocol.registry import message_class

DATA = ROOT / "fixtures" / "kafka" / "data"
CAPTURES = ROOT / "fixtures" / "captures"
CLIENTS_PORT, SASL_PORT = 60127, 46333
PASSWORD = b"alice-test-pw"  # sasl.pcap's throwaway password


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def kprotocol(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([sys.executable, "-m", "kprotocol", *args], cwd=ROOT, input=stdin, capture_output=True,
                          timeout=120)


def test_a_data_directory_gives_the_transaction_log_too(capsys) -> None:
    code, out, err = run(["offsets", "decode", str(DATA)], capsys)
    lines = [json.loads(line) for line in out.splitlines()]
    assert code == 0 and err == ""
    transactions = [d for d in lines if "__transaction_state-0" in d["segment"]]
    assert len(transactions) == 9 and {d["recordType"] for d in transactions} == {"TransactionLog"}
    assert all("transactionalId" in d["key"]["data"] for d in transactions)
    assert len(lines) - len(transactions) == 41  # the __consumer_offsets records, as before
    code, out, err = run(["offsets", "decode", str(DATA / "__transaction_state-0")], capsys)
    assert code == 0 and err == "" and [json.loads(line) for line in out.splitlines()] == transactions
    code, _, err = run(["offsets", "decode", "--topic", "__consumer_offsets", str(DATA / "__transaction_state-0")],
                       capsys)
    assert code == 2 and "a segment of __transaction_state, not of --topic __consumer_offsets" in err


def test_a_capture_is_not_a_log_segment(capsys) -> None:
    for capture in ("clients.pcap", "clients.pcapng"):
        code, out, err = run(["offsets", "decode", str(CAPTURES / capture)], capsys)
        assert code == 2 and out == "" and err.count("\n") == 1 and "not a log segment" in err, err
    text = ROOT / "README.md"
    code, out, err = run(["offsets", "state", str(text)], capsys)
    assert code == 2 and out == "" and "not a log segment" in err


def test_count_zero_means_none(capsys) -> None:
    assert run(["offsets", "decode", str(DATA), "-c", "0"], capsys)[:2] == (0, "")
    assert run(["offsets", "decode", str(DATA), "--max-records", "0"], capsys)[:2] == (0, "")
    assert len(run(["offsets", "decode", str(DATA), "--count", "2"], capsys)[1].splitlines()) == 2
    capture = str(CAPTURES / "clients.pcap")
    for jobs in ("1", "2"):
        assert run(["capture", "decode", capture, "--ports", str(CLIENTS_PORT), "-c", "0", "-j", jobs], capsys)[:2] \
            == (0, "")
        assert len(run(["capture", "decode", capture, "--ports", str(CLIENTS_PORT), "-c", "3", "-j", jobs],
                       capsys)[1].splitlines()) == 3


def test_capture_decode_reads_stdin() -> None:
    capture = CAPTURES / "clients.pcapng"
    piped = kprotocol("capture", "decode", "-", "--ports", str(CLIENTS_PORT), stdin=capture.read_bytes())
    given = kprotocol("capture", "decode", str(capture), "--ports", str(CLIENTS_PORT))
    assert piped.returncode == given.returncode == 0 and piped.stdout == given.stdout and given.stdout


@pytest.mark.parametrize("payload, says", [("0003617070000000010001g6d", "not hex: 'g' at position 22"),
                                           ("000361707000000001000106d", "odd number of digits (25)"),
                                           ("0x00036170zz", "not hex: 'z'")])
def test_a_hex_typo_is_told_as_such(capsys, payload: str, says: str) -> None:
    code, out, err = run(["message", "decode", "HeartbeatRequest", "0", payload], capsys)
    assert code == 2 and out == "" and says in err, err
    code, out, _ = run(["message", "decode", "HeartbeatRequest", "0", "base64:AANhcHAAAAABAAFt"], capsys)
    assert code == 0 and json.loads(out) == {"groupId": "app", "generationId": 1, "memberId": "m"}


def test_message_encode_applies_the_specs_defaults(capsys) -> None:
    join = message_class("JoinGroupRequest")
    code, out, err = run(["message", "encode", "joingrouprequest", "9", '{"groupId": "g", "protocols": [{"name": "x"}]}'],
                         capsys)
    assert code == 0, err
    expected = join(group_id="g", protocols=[join.JoinGroupRequestProtocol(name="x")])
    assert out.strip() == expected.encode(9).hex()
    assert expected.rebalance_timeout_ms == -1  # the spec's default, not zero
    code, _, err = run(["message", "encode", "JoinGroupRequest", "9", '{"groupId": 7}'], capsys)
    assert code == 1 and "groupId" in err


def test_offsets_state_of_a_group_that_is_not_there(capsys) -> None:
    code, out, err = run(["offsets", "state", str(DATA), "--group", "nope"], capsys)
    assert code == 2 and out == "" and err.count("\n") == 1 and "no group 'nope'" in err


def test_assign_without_scipy_names_the_extra() -> None:
    scenario = ROOT / "fixtures" / "assignor" / "scale_out_rack_aware.json"
    blocked = ("import sys; sys.modules['scipy'] = None; sys.modules['scipy.optimize'] = None; "
               "from kprotocol.cli import main; sys.exit(main(sys.argv[1:]))")
    done = subprocess.run([sys.executable, "-c", blocked, "assign", str(scenario)], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 2 and done.stdout == "" and done.stderr.count("\n") == 1, done.stderr
    assert "kprotocol[rack]" in done.stderr and "Traceback" not in done.stderr


# --- credentials ------------------------------------------------------------------------------------------


def test_capture_decode_redacts_passwords(capsys) -> None:
    argv = ["capture", "decode", str(CAPTURES / "sasl.pcap"), "--ports", str(SASL_PORT), "--api", "SaslAuthenticate"]
    code, out, _ = run(argv, capsys)
    lines = [json.loads(line) for line in out.splitlines()]
    assert code == 0 and len(lines) == 11
    assert PASSWORD not in out.encode() and base64.b64encode(b"\0alice\0" + PASSWORD).decode()[4:] not in out
    assert {(d["request"]["authBytesSummary"]["mechanism"], d["request"]["authBytesSummary"]["username"])
            for d in lines} == {("PLAIN", "alice")}
    code, shown, _ = run([*argv, "--show-credentials"], capsys)
    tokens = {base64.b64decode(json.loads(line)["request"]["authBytes"]) for line in shown.splitlines()}
    assert code == 0 and any(t.endswith(b"\0" + PASSWORD) for t in tokens)


@pytest.mark.parametrize("token, secret, summary", [
    (b"n,,n=alice,r=abc", None, {"mechanism": "SCRAM (client-first)", "username": "alice"}),
    (b"c=biws,r=abcdef,p=c2VjcmV0cHJvb2Y=", b"c2VjcmV0cHJvb2Y=", {"mechanism": "SCRAM (client-final)", "nonce": "abcdef"}),
    (b"n,,\x01auth=Bearer eyJhbGciOi.secret.token\x01\x01", b"eyJhbGciOi", {"mechanism": "OAUTHBEARER"}),
    (b"\0bob\0hunter2", b"hunter2", {"mechanism": "PLAIN", "username": "bob"}),
])
def test_frames_decode_redacts_every_mechanism(tmp_path: Path, capsys, token: bytes, secret: bytes | None,
                                               summary: dict) -> None:
    header = message_class("RequestHeader")(request_api_key=36, request_api_version=2, correlation_id=5,
                                            client_id="c")
    request = message_class("SaslAuthenticateRequest")(auth_bytes=token)
    response = message_class("SaslAuthenticateResponse")(error_code=0, auth_bytes=b"")
    client, server = tmp_path / "client.bin", tmp_path / "server.bin"
    client.write_bytes(encode_request(header, request))
    server.write_bytes(encode_response(message_class("ResponseHeader")(correlation_id=5), response, 2))
    code, out, _ = run(["frames", "decode", str(client), str(server)], capsys)
    doc = json.loads(out)
    assert code == 0 and doc["request"]["authBytes"].startswith("<redacted")
    assert summary.items() <= doc["request"]["authBytesSummary"].items()
    if secret is not None:
        assert secret.decode() not in out and base64.b64encode(token).decode() not in out
    code, out, _ = run(["frames", "decode", str(client), str(server), "--show-credentials"], capsys)
    assert base64.b64decode(json.loads(out)["request"]["authBytes"]) == token


def test_the_pipelines_exchanges_table_redacts_passwords() -> None:
    from kprotocol.capture import decode_capture
    from kprotocol.cli import build_parser
    from kprotocol.pipeline.capture_rows import exchange_row

    logins = [e for e in decode_capture(CAPTURES / "sasl.pcap", (SASL_PORT,)) if e.api_key == 36]
    rows = [exchange_row("sasl.pcap", e) for e in logins]
    assert len(rows) == 11 and all(b"redacted" in r["request_json"] and PASSWORD not in r["request_json"]
                                   for r in rows)
    shown = [json.loads(exchange_row("sasl.pcap", e, credentials=True)["request_json"]) for e in logins]
    assert any(base64.b64decode(d["authBytes"]).endswith(b"\0" + PASSWORD) for d in shown)
    args = build_parser("pipeline").parse_args(["pipeline", "captures", "x.pcap", "--out", "o", "--show-credentials"])
    assert args.show_credentials
