"""Which fine-tune serves: the site's own name for it (VLLM_MODEL_REVISION), else a fingerprint
of the weights the bundle computes, so that an old and a new fine-tune can be told apart on the
dashboards (the loop exports it as leave_loop_model_info).

The fingerprint reads each file's name and size and its first and last 4 MiB: a retrained
model of the same shape has files of the same sizes, but not the same bytes, and reading
whole weights (tens of GB) at every `make up` would take minutes.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

EDGE_BYTES = 4 * 1024 * 1024


def fingerprint(folder: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        size = path.stat().st_size
        digest.update(f"{path.relative_to(folder)}\0{size}\0".encode())
        with path.open("rb") as file:
            digest.update(file.read(EDGE_BYTES))
            if size > 2 * EDGE_BYTES:
                file.seek(-EDGE_BYTES, 2)
                digest.update(file.read(EDGE_BYTES))
    return f"sha256:{digest.hexdigest()[:16]}"


def revision(project: dict[str, Any], values: Mapping[str, str], *, sim: bool) -> str:
    """The name of what serves: the site's, the simulator's profile, or the weights' print."""
    given = values.get("VLLM_MODEL_REVISION", "").strip()
    if given:
        return given
    engine = project["services"]["vllm-0"]
    if sim:
        return f"simulator:{(engine.get('environment') or {}).get('SIM_PROFILE', 'gpu')}"
    model = str(engine["command"][0])
    mounts = [v for v in engine.get("volumes", []) if v.get("target") == "/models"]
    if not mounts or not model.startswith("/models/"):
        return "unknown"  # a hub id in the cache volume: the site should name it
    folder = Path(mounts[0]["source"]) / model.removeprefix("/models/")
    return fingerprint(folder) if folder.is_dir() else "unknown"
