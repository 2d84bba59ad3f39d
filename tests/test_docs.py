"""The examples in README.md and docs/*.md are executed, so they cannot rot.

Convention for fenced code blocks (the word after the language is the block's role):

    ```yaml suite    (or ```json suite)   the suite of the examples that follow
    ```json trace                         the trace of the examples that follow
    ```json expect                        grade the current trace with the current suite, with
                                          `trajgrade.compile_suite(suite).grade(trace)`, and
                                          compare: every key given must equal the produced
                                          value ("verdict", "score", "mean_score",
                                          "soft_failures", and per entry of "results": "name",
                                          "status", "severity", "reason_code", "reason",
                                          "positions", "score")
    ```python quickstart                  README: run with the venv's Python (cwd = the repo)
                                          against a real `trajgrade serve`; its stdout must
                                          equal the next ```text output block
    ```sh grpcurl                         README: run with bash (cwd = the repo, grpcurl on
                                          PATH) against the same server; the printed
                                          GradeTraceResponse must equal the library's result

A suite or trace stays current until the next one in the same file. In every command,
`127.0.0.1:50051` is replaced by the test server's address. Blocks without a role are prose.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import trajgrade
import yaml
from clients.clients_support import TOOLS_BIN, free_port, start_server, stop_server, wait_serving
from clients.test_grpcurl import grpcurl  # noqa: F401 - the fixture that installs grpcurl once
from google.protobuf import json_format
from trajgrade.v1 import assertion_pb2, grader_service_pb2, result_pb2

REPO = Path(__file__).resolve().parents[1]
DOCS = sorted([REPO / "README.md", *(REPO / "docs").rglob("*.md")])
DEFAULT_ADDRESS = "127.0.0.1:50051"
# A fence may be indented (inside a list item); its lines lose that indentation.
FENCE = re.compile(r"^([ \t]*)```([\w-]*)[ \t]*([\w-]*)[ \t]*\n(.*?)^\1```[ \t]*$", re.M | re.S)


@dataclass(frozen=True)
class Block:
    path: Path
    line: int
    lang: str
    role: str
    text: str

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(REPO)}:{self.line}"


def blocks(path: Path) -> list[Block]:
    text = path.read_text(encoding="utf-8")
    found = []
    for m in FENCE.finditer(text):
        indent, lang, role, body = m.groups()
        body = "".join(line.removeprefix(indent) for line in body.splitlines(keepends=True))
        found.append(Block(path, text.count("\n", 0, m.start()) + 1, lang, role, body))
    return found


def parse(block: Block) -> Any:
    return yaml.safe_load(block.text) if block.lang == "yaml" else json.loads(block.text)


@dataclass(frozen=True)
class Example:
    where: str
    suite: Any
    trace: Any
    expect: dict[str, Any]


def examples(path: Path) -> Iterator[Example]:
    suite: Any = None
    trace: Any = None
    for block in blocks(path):
        if block.role == "suite":
            suite = parse(block)
        elif block.role == "trace":
            trace = parse(block)
        elif block.role == "expect":
            assert suite is not None and trace is not None, f"{block.where}: no suite/trace yet"
            yield Example(block.where, suite, trace, parse(block))


ALL_EXAMPLES = [e for path in DOCS for e in examples(path)]


def as_dict(result: result_pb2.GradeResult) -> dict[str, Any]:
    return json_format.MessageToDict(
        result, preserving_proto_field_name=True, always_print_fields_with_no_presence=True
    )


def check(expect: dict[str, Any], got: dict[str, Any], where: str) -> None:
    for key, value in expect.items():
        if key == "results":
            assert len(got["results"]) == len(value), where
            for want, have in zip(value, got["results"], strict=True):
                for k, v in want.items():
                    assert have[k] == v, f"{where}: results[].{k}: {have[k]!r} != {v!r}"
        else:
            assert got[key] == value, f"{where}: {key}: {got[key]!r} != {value!r}"


@pytest.mark.parametrize("example", ALL_EXAMPLES, ids=[e.where for e in ALL_EXAMPLES])
def test_documented_example(example: Example) -> None:
    result = trajgrade.compile_suite(example.suite).grade(example.trace)
    check(example.expect, as_dict(result), example.where)


def test_assertions_md_covers_every_kind_and_reason_code() -> None:
    path = REPO / "docs" / "assertions.md"
    found = list(examples(path))
    declared = {f.name for f in assertion_pb2.Assertion.DESCRIPTOR.oneofs_by_name["kind"].fields}
    common = {f.name for f in assertion_pb2.Assertion.DESCRIPTOR.fields} - declared
    kinds = {
        kind
        for e in found
        for assertion in e.suite["assertions"]
        for kind in assertion
        if kind not in common
    }
    assert kinds == declared
    table = _section(path.read_text(encoding="utf-8"), "## Reason codes")
    spec_codes = set(re.findall(r"^\| `([A-Z_]+)` \|", table, re.M))
    shown = {r.get("reason_code", "") for e in found for r in e.expect.get("results", ())}
    shown.discard("")
    pending = spec_codes - shown
    assert not pending, f"codes without an example: {sorted(pending)}"
    assert len(spec_codes) >= 18


def _section(text: str, heading: str) -> str:
    start = text.index(heading)
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else len(text)]


def test_links_resolve_and_every_doc_is_linked() -> None:
    link = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")
    for path in DOCS:
        for target in link.findall(path.read_text(encoding="utf-8")):
            if "://" in target or target.startswith("mailto:"):
                continue
            resolved = (path.parent / target).resolve()
            assert resolved.exists(), f"{path}: {target}"
    docs = {p for p in DOCS if p.name != "README.md"} - {REPO / "docs" / "index.md"}
    index = (REPO / "docs" / "index.md").read_text(encoding="utf-8")
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    for doc in docs:
        relative = doc.relative_to(REPO / "docs").as_posix()
        assert f"({relative})" in index, f"docs/index.md does not link {relative}"
        assert f"(docs/{relative})" in readme, f"README.md does not link docs/{relative}"


def test_example_files_are_one_suite() -> None:
    assert trajgrade.load_suite(REPO / "examples" / "suite.yaml") == trajgrade.load_suite(
        REPO / "examples" / "suite.json"
    )


# --- the README quickstart, against a real `trajgrade serve` ----------------------------------


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    address = f"127.0.0.1:{free_port()}"
    log = tmp_path_factory.mktemp("docs-server") / "serve.log"
    proc = start_server([address], log)
    try:
        wait_serving(address, proc)
        yield address
    finally:
        stop_server(proc)


def _readme_block(role: str) -> tuple[Block, Block | None]:
    found = blocks(REPO / "README.md")
    for i, block in enumerate(found):
        if block.role == role:
            following = found[i + 1] if i + 1 < len(found) else None
            return block, following
    raise AssertionError(f"README.md has no ```... {role} block")


def _expected_result() -> result_pb2.GradeResult:
    trace = json.loads((REPO / "examples" / "trace.json").read_text(encoding="utf-8"))
    return trajgrade.compile_suite(REPO / "examples" / "suite.yaml").grade(trace)


def test_readme_python_quickstart(served: str) -> None:
    code, output = _readme_block("quickstart")
    assert output is not None and output.role == "output", "quickstart needs a text output block"
    assert DEFAULT_ADDRESS in code.text
    proc = subprocess.run(
        [sys.executable, "-c", code.text.replace(DEFAULT_ADDRESS, served)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == output.text


def test_readme_grpcurl(served: str, grpcurl: Path) -> None:  # noqa: F811 - the fixture
    command, _ = _readme_block("grpcurl")
    assert DEFAULT_ADDRESS in command.text
    env = {**os.environ, "PATH": f"{grpcurl.parent}{os.pathsep}{os.environ['PATH']}"}
    assert grpcurl.parent == TOOLS_BIN
    proc = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", command.text.replace(DEFAULT_ADDRESS, served)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    response = json_format.Parse(proc.stdout, grader_service_pb2.GradeTraceResponse())
    assert response.result == _expected_result()
