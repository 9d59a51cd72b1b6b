"""The README's code blocks stay true. Every ```python block runs as written (from the checkout, with
the few inputs a block names as its reader's own in GIVEN), and every value a line's comment states
(`cls.api_key, cls.valid_versions  # 11, (0, 9)`) is checked; every `kprotocol ...` line of a ```sh
block names commands and options the command line has, and every `make ...` line a Makefile target."""

from __future__ import annotations

import ast
import contextlib
import json
import re
import shlex
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from conftest import ROOT
from kprotocol.cli import build_parser

README = ROOT / "README.md"
BLOCK = re.compile(r"^( *)```(\w+)\n(.*?)^\1```", re.MULTILINE | re.DOTALL)


def blocks(language: str) -> list[tuple[int, str]]:
    """(line number, code) of every block in `language`, its indentation removed."""
    text = README.read_text(encoding="utf-8")
    found = []
    for match in BLOCK.finditer(text):
        if match.group(2) == language:
            indent = len(match.group(1))
            code = "".join(line[indent:] for line in match.group(3).splitlines(keepends=True))
            found.append((text.count("\n", 0, match.start()) + 1, code))
    return found


def _subscription(shared: Path) -> dict[str, Any]:
    lines = (shared / "streams-userdata" / "SubscriptionInfo.jsonl").read_text().splitlines()
    return {"data": bytes.fromhex(json.loads(lines[-1])["hex"])}  # a version 11 subscription


def _coordinator_inputs(shared: Path) -> dict[str, Any]:
    """A member joining with a one-subtopology topology, and the records its join wrote as (key, value)."""
    from kprotocol.registry import message_class
    from kprotocol.streams_group import GroupConfig, StreamsGroupCoordinator

    hb = message_class("StreamsGroupHeartbeatRequest")
    header = message_class("RequestHeader")(request_api_key=88, request_api_version=0, correlation_id=1,
                                            client_id="app-1")
    request = hb(group_id="app", member_id="m-1", member_epoch=0, process_id="p-1", rebalance_timeout_ms=10_000,
                 topology=hb.Topology(epoch=0, subtopologies=[hb.Subtopology(subtopology_id="0",
                                                                             source_topics=["input"])]),
                 active_tasks=[], standby_tasks=[], warmup_tasks=[])
    _, records = StreamsGroupCoordinator(GroupConfig.from_kafka({}), topics={"input": 4}).handle(header, request, 0)
    return {"header": header, "request": request, "now_ms": 0, "log_records": [r.encode() for r in records]}


# A block that uses one of these names gets the inputs (its reader's own data) before it runs.
GIVEN: dict[str, Callable[[Path], dict[str, Any]]] = {
    "SubscriptionInfo.decode(data)": _subscription,
    "coordinator.handle(header, request, now_ms)": _coordinator_inputs,
}


def run_block(code: str, namespace: dict[str, Any]) -> list[str]:
    """Run `code` statement by statement; an expression statement whose line ends in a comment that is a
    Python literal must evaluate to it. Returns the checks made."""
    lines = code.splitlines()
    checks = []
    for node in ast.parse(code).body:
        if isinstance(node, ast.Expr):
            value = eval(compile(ast.Expression(node.value), "README.md", "eval"), namespace)  # noqa: S307
            comment = lines[node.end_lineno - 1].partition("  # ")[2].strip()
            try:
                stated = ast.literal_eval(comment)
            except (ValueError, SyntaxError):
                continue
            assert value == stated, f"README says `{ast.unparse(node)}` is {comment}, it is {value!r}"
            checks.append(comment)
        else:
            exec(compile(ast.Module([node], []), "README.md", "exec"), namespace)  # noqa: S102
    return checks


def test_every_python_block_runs_and_its_stated_values_hold(shared: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    python = [(line, code) for line, code in blocks("python") if "KafkaBroker.start()" not in code]
    assert len(python) >= 4
    checks = []
    for line, code in python:
        namespace: dict[str, Any] = {}
        for marker, given in GIVEN.items():
            if marker in code:
                namespace.update(given(shared))
        try:
            checks += run_block(code, namespace)
        except Exception as exc:
            raise AssertionError(f"README.md line {line}: {type(exc).__name__}: {exc}") from exc
    assert "11, (0, 9)" in checks


def test_the_broker_block_runs(kafka_broker, monkeypatch: pytest.MonkeyPatch) -> None:
    """Run against the shared broker (the block's own would start and stop another one)."""
    from kprotocol.toolchain import KafkaBroker

    monkeypatch.setattr(KafkaBroker, "start", lambda *args, **kwargs: contextlib.nullcontext(kafka_broker))
    (line, code), = [(line, code) for line, code in blocks("python") if "KafkaBroker.start()" in code]
    namespace: dict[str, Any] = {}
    run_block(code, namespace)
    assert namespace["metadata"].brokers, f"README.md line {line}"


def _command_lines(code: str) -> list[str]:
    """The shell lines of a block, continuations joined, comments and output lines left out."""
    joined = re.sub(r"\\\n\s*", " ", code)
    return [line.split(" # ")[0].strip() for line in joined.splitlines()
            if line.strip().startswith(("kprotocol ", "make "))]


def _alternatives(tokens: list[str]) -> list[list[str]]:
    """`decode|summary` stands for two command lines; `[--api JoinGroup]...` for its option."""
    for i, token in enumerate(tokens):
        if "|" in token and not token.startswith("-"):
            return [line for choice in token.split("|") for line in _alternatives([*tokens[:i], choice,
                                                                                  *tokens[i + 1:]])]
    return [[token.strip("[]").removesuffix("...").strip("[]") for token in tokens]]


def _check_kprotocol(tokens: list[str]) -> None:
    parser = build_parser()
    words = iter(tokens[1:])
    for word in words:
        sub = next((a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction"), None)
        if word.startswith("-"):
            option = word.split("=")[0]
            assert option in parser._option_string_actions, f"{' '.join(tokens)}: {parser.prog} has no {option}"
        elif sub is not None:
            assert word in sub.choices, f"{' '.join(tokens)}: {parser.prog} has no command {word!r}"
            parser = sub.choices[word]


def test_every_command_line_names_real_commands_options_and_targets() -> None:
    targets = set(re.findall(r"^([\w-]+):", (ROOT / "Makefile").read_text(), re.MULTILINE))
    seen = 0
    for line, code in blocks("sh"):
        for command in _command_lines(code):
            for tokens in _alternatives(shlex.split(command)):
                seen += 1
                where = f"README.md line {line}: {command}"
                if tokens[0] == "make":
                    assert all(t in targets for t in tokens[1:] if "=" not in t), where
                else:
                    try:
                        _check_kprotocol(tokens)
                    except AssertionError as exc:
                        raise AssertionError(f"{where}: {exc}") from None
    assert seen > 30


def test_the_checks_catch_a_wrong_readme() -> None:
    with pytest.raises(AssertionError, match="README says"):
        run_block("import kprotocol\nkprotocol.message_class('JoinGroupRequest').api_key  # 12\n", {})
    with pytest.raises(NameError):
        run_block("kprotocol.message_class('JoinGroupRequest')\n", {})  # the import the broker block lacked
    with pytest.raises(AssertionError, match="has no --nope"):
        _check_kprotocol(["kprotocol", "capture", "decode", "x.pcap", "--nope"])
    with pytest.raises(AssertionError, match="has no command 'decod'"):
        _check_kprotocol(["kprotocol", "capture", "decod"])
