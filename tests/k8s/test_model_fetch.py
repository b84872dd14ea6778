"""A model upgrade on Kubernetes: the fetch Job's script (as rendered) run here against a
temporary cache with a stand-in for the hub, the vLLM pods' wait for the wanted revision, and
a revision change that leaves every pod template, the Job's included, as it was."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from ops import k8s

from .objects import find

HUB_STAND_IN = """
import os, pathlib

def snapshot_download(repo_id, revision, local_dir):
    target = pathlib.Path(local_dir)
    target.mkdir(parents=True, exist_ok=True)
    (target / "config.json").write_text(f"{repo_id}@{revision}")
    with open(os.environ["HUB_CALLS"], "a") as calls:
        calls.write(f"{revision}\\n")
    return str(target)
"""


@pytest.fixture
def fetch(rendered, tmp_path):
    """fetch(revision) runs the gpu overlay's model-fetch script on tmp_path/models."""
    job = find(rendered("gpu"), "Job", "model-fetch")
    script = job["spec"]["template"]["spec"]["containers"][0]["args"][0]
    (tmp_path / "hub" / "huggingface_hub").mkdir(parents=True)
    (tmp_path / "hub" / "huggingface_hub" / "__init__.py").write_text(HUB_STAND_IN)
    root = tmp_path / "models"
    root.mkdir()

    def run(revision: str) -> str:
        env = {
            **os.environ,
            "PYTHONPATH": str(tmp_path / "hub"),
            "HUB_CALLS": str(tmp_path / "calls"),
            "MODEL_ROOT": str(root),
            "MODEL_NAME": "leave-copilot",
            "MODEL_REPO": "your-org/leave-copilot",
            "MODEL_REVISION": revision,
        }
        done = subprocess.run(
            [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    run.root = root  # type: ignore[attr-defined]
    run.calls = lambda: (tmp_path / "calls").read_text().split()  # type: ignore[attr-defined]
    return run


def served(root: Path) -> tuple[str, str]:
    """(the marker's revision, the weights' origin) of what vLLM would load."""
    model = root / "leave-copilot"
    return (model / ".complete").read_text(), (model / "config.json").read_text()


def test_a_new_revision_is_fetched_and_served(fetch):
    fetch("aaaa")
    assert served(fetch.root) == ("aaaa", "your-org/leave-copilot@aaaa")
    fetch("bbbb")
    assert served(fetch.root) == ("bbbb", "your-org/leave-copilot@bbbb")
    assert fetch.calls() == ["aaaa", "bbbb"]
    # the revision before stays on the claim, whole, for a rollback
    kept = fetch.root / ".revisions" / "leave-copilot" / "aaaa"
    assert (kept / ".complete").read_text() == "aaaa"


def test_a_revision_there_already_is_not_fetched_again_and_a_rollback_moves_the_link(fetch):
    fetch("aaaa")
    assert "is already in" in fetch("aaaa")
    fetch("bbbb")
    fetch("aaaa")
    assert fetch.calls() == ["aaaa", "bbbb"]
    assert served(fetch.root) == ("aaaa", "your-org/leave-copilot@aaaa")
    assert (fetch.root / "leave-copilot").is_symlink()


def test_a_cache_filled_before_revisions_is_kept_as_its_revision(fetch):
    before = fetch.root / "leave-copilot"
    before.mkdir()
    (before / ".complete").write_text("aaaa")
    (before / "config.json").write_text("your-org/leave-copilot@aaaa")
    fetch("bbbb")
    assert served(fetch.root) == ("bbbb", "your-org/leave-copilot@bbbb")
    fetch("aaaa")
    assert fetch.calls() == ["bbbb"]  # the old directory is revision aaaa: no download
    assert served(fetch.root) == ("aaaa", "your-org/leave-copilot@aaaa")


def _wait_for_model(rendered, root: Path, revision: str) -> subprocess.CompletedProcess[str]:
    vllm = find(rendered("gpu"), "Deployment", "vllm")
    init = vllm["spec"]["template"]["spec"]["initContainers"][0]
    assert {"name": "MODEL_REVISION", "valueFrom": {"configMapKeyRef": {
        "name": "model-source", "key": "MODEL_REVISION"}}} in init["env"]  # fmt: skip
    env = {**os.environ, "MODEL_ROOT": str(root), "MODEL_REVISION": revision}
    return subprocess.run(
        ["timeout", "3", *init["command"]], env=env, capture_output=True, text=True
    )


def test_vllm_pods_wait_for_the_revision_model_source_names(rendered, fetch):
    fetch("aaaa")
    assert _wait_for_model(rendered, fetch.root, "aaaa").returncode == 0
    waiting = _wait_for_model(rendered, fetch.root, "bbbb")
    assert waiting.returncode == 124  # still waiting when timeout stopped it
    assert "waiting for the model-fetch Job to fill revision bbbb" in waiting.stdout


def test_a_revision_change_changes_no_pod_template(rendered, tmp_path):
    """`kubectl apply` after a new revision: only the ConfigMap differs, so the finished Job's
    immutable template is never asked to change."""
    (tmp_path / "kustomization.yaml").write_text(
        textwrap.dedent(f"""\
        apiVersion: kustomize.config.k8s.io/v1beta1
        kind: Kustomization
        resources: [{os.path.relpath(k8s.K8S / "overlays" / "prod", tmp_path)}]
        patches:
          - patch: |
              apiVersion: v1
              kind: ConfigMap
              metadata: {{name: model-source}}
              data: {{MODEL_REVISION: 0123456789abcdef}}
        """)
    )
    before, after = rendered("prod"), k8s.render(tmp_path)
    changed = [k8s.ref(b) for b, a in zip(before, after, strict=True) if a != b]
    assert changed == ["ConfigMap/model-source"]
    assert find(after, "ConfigMap", "model-source")["data"]["MODEL_REVISION"] == "0123456789abcdef"
