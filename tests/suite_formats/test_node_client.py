"""The Node client's importSuite against a live server."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

from client.conftest import ThreadedServer, free_port

NODE_CLIENT = Path(__file__).resolve().parents[2] / "clients" / "node"
SCRIPT = r"""
const { TrajgradeClient } = require('./src/client.js');
(async () => {
  const client = new TrajgradeClient(process.argv[1], { timeoutMs: 30000 });
  const orbit = JSON.stringify({ allowed_tools: ['lookup_account', 'issue_refund'] });
  const imported = await client.importSuite(orbit);
  const bad = { calls: [{ name: 'transfer_to_human', arguments_json: '{}' }] };
  const result = await client.gradeTrace(imported.suite_id, bad);
  const js = "- description: t\n  assert:\n    - type: javascript\n      value: 'true'\n";
  let refused = null;
  try {
    await client.importSuite(js);
  } catch (err) {
    refused = { code: err.code, details: err.details };
  }
  const skipped = await client.importSuite(
    js + "    - type: trajectory:tool-used\n      value: f\n",
    { format: 'promptfoo', skipUnsupported: true },
  );
  console.log(JSON.stringify({ imported, result, refused, skipped }));
  client.close();
})().catch((err) => { console.error(err); process.exit(1); });
"""


def _node_ready(npm: str) -> None:
    if not (NODE_CLIENT / "node_modules" / "@grpc" / "grpc-js").is_dir():
        subprocess.run(
            [npm, "ci", "--no-audit", "--no-fund"], cwd=NODE_CLIENT, check=True, timeout=300
        )


def test_node_client_imports_suites_and_grades_with_them() -> None:
    node, npm = shutil.which("node"), shutil.which("npm")
    assert node is not None and npm is not None, "Node.js and npm are required for this test"
    _node_ready(npm)
    server = ThreadedServer(f"127.0.0.1:{free_port()}").start()
    try:
        done = subprocess.run(
            [node, "-e", SCRIPT, server.target],
            cwd=NODE_CLIENT,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    finally:
        server.stop()
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["imported"]["format"] == "orbit"
    assert out["imported"]["suite_id"].startswith("s1-")
    assert out["result"]["verdict"] == "VERDICT_FAIL"
    assert out["result"]["results"][0]["name"] == "no_unexpected_tool"
    assert "transfer_to_human" in out["result"]["results"][0]["reason"]
    assert out["refused"]["code"] == 3  # INVALID_ARGUMENT
    assert "javascript" in out["refused"]["details"]
    assert len(out["skipped"]["unsupported"]) == 1
    assert len(out["skipped"]["suite"]["assertions"]) == 1
