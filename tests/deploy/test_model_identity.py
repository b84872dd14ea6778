"""Which fine-tune serves, as the dashboards show it: the site's name for it, else a print of
the weights that changes when they are retrained, whatever their sizes."""

from __future__ import annotations

import os

from prometheus_client import generate_latest

from loop.metrics import LoopMetrics
from ops import compose, layout
from ops.model_identity import fingerprint


def test_a_retrained_model_of_the_same_shape_gets_another_fingerprint(tmp_path):
    model = tmp_path / "leave-copilot"
    model.mkdir()
    (model / "config.json").write_text('{"hidden_size": 8}')
    weights = model / "model.safetensors"
    weights.write_bytes(bytes(range(256)) * 40_000)  # over 8 MiB: both ends are read
    first = fingerprint(model)
    assert first == fingerprint(model) and first.startswith("sha256:")
    data = bytearray(weights.read_bytes())
    data[-10] ^= 1  # one byte of the last block, same size
    weights.write_bytes(bytes(data))
    assert fingerprint(model) != first


def test_the_layout_gives_the_loop_the_revision_to_export(tmp_path):
    out = tmp_path / "compose.layout.yaml"
    environ = {**os.environ, "VLLM_MODEL_REVISION": ""}
    layout.write_for(compose.EXAMPLE_ENV, sim=True, environ=environ, path=out)
    loop = compose.config(sim=True, environ=environ, extra_files=[out])["services"]["loop"]
    assert loop["environment"]["LOOP_MODEL_REVISION"] == "simulator:gpu"
    environ["VLLM_MODEL_REVISION"] = "ft-2026-11-30"  # the site's own name wins
    layout.write_for(compose.EXAMPLE_ENV, sim=True, environ=environ, path=out)
    loop = compose.config(sim=True, environ=environ, extra_files=[out])["services"]["loop"]
    assert loop["environment"]["LOOP_MODEL_REVISION"] == "ft-2026-11-30"


def test_the_loop_exports_which_fine_tune_answers():
    text = generate_latest(LoopMetrics("leave-copilot", "ft-2026-11-30").registry).decode()
    assert 'leave_loop_model_info{model="leave-copilot",revision="ft-2026-11-30"} 1.0' in text
