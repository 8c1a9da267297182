"""MoE expert stacks read in place (issue #31 item 3): a GGUF's `ffn_{gate,up}_exps`
and an MLX directory's `switch_mlp.{gate,up}_proj` stay views of the file; the fused
gate+up expert dispatch takes them as two operands (ops.moe_matmul_bt's ``up``).

The RSS gate loads bench/shapes_gguf's Qwen3-30B-A3B geometry cut to 4 layers (Q4_K_M,
2.05 GB, written once into the cache when missing; its gate and up stacks 0.9 GB, so an
interleaved copy of them exceeds the bar) in a fresh process and bounds the peak resident
set after load and after a first forward by the file's tensor bytes + 10% + 300 MB."""
import json
import os
import subprocess
import sys

from pathlib import Path

import pytest

import metalrt
import moe_gguf_fixtures
from linux_memory import smaps_region
from metalrt.loaders import load_model_files
from metalrt.models import build_model
from metalrt.models.sparse_moe import SparseMoE

ROOT = Path(__file__).resolve().parents[2]

# Prints (file tensor bytes, peak RSS after load, after a forward, expert stack bytes)
# of a fresh process, all in bytes.
_PROBE = """
import json, sys
import metalrt
def hwm():
    return next(int(l.split()[1]) for l in open('/proc/self/status') if l.startswith('VmHWM:')) * 1024
start = hwm()
model, tokenizer = metalrt.load(sys.argv[1], device='cpu')
loaded = hwm()
model.logits([1, 2, 3])
forward = hwm()
# gate_up: main's interleaved copy, so that the probe also measures the code before.
stacks = [getattr(l.mlp, a, None) for l in model.layers for a in ("gate", "up", "gate_up")]
print(json.dumps({"start": start, "loaded": loaded, "forward": forward,
                  "stacks": sum(t.nbytes for t in stacks if t is not None)}))
"""


def _tensor_bytes(path: str, monkeypatch) -> int:
    from metalrt.loaders.gguf_file import GGUFFile
    monkeypatch.setenv("METALRT_MMAP", "1")   # the header only: nothing is read
    return sum(t.nbytes for t in GGUFFile(path).tensors.values())


def _mapped_path(address: int) -> str:
    """The file a mapping holding ``address`` maps ("" for anonymous memory)."""
    head = smaps_region(address)[0].split()
    return head[5] if len(head) > 5 else ""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc accounting")
def test_gguf_expert_stacks_are_views_of_the_mapping(monkeypatch):
    monkeypatch.setenv("METALRT_MMAP", "1")   # a file mapping /proc names, not huge pages
    path = str(moe_gguf_fixtures.fixture("qwen3_moe")["q8_0"])
    files = load_model_files(path)
    model = build_model(files.config, files.weights, "cpu")
    moe = model.layers[0].mlp
    assert isinstance(moe, SparseMoE) and moe.up is not None
    for stack in (moe.gate, moe.up, moe.down):
        assert isinstance(stack, metalrt.QuantizedTensor)
        assert _mapped_path(stack.data.data_ptr()) == os.path.realpath(path), stack
    assert moe.gate.data.data_ptr() != moe.up.data.data_ptr()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="VmHWM is Linux's")
def test_peak_rss_of_a_large_moe_gguf_stays_within_its_tensor_bytes(monkeypatch):
    sys.path.insert(0, str(ROOT))   # the repository's bench/
    from bench import shapes_gguf
    path = shapes_gguf.ensure("qwen3-30b-a3b", "q4_k_m", layers=4)
    tensors = _tensor_bytes(str(path), monkeypatch)
    monkeypatch.delenv("METALRT_MMAP")   # the probe loads as users do
    run = subprocess.run([sys.executable, "-c", _PROBE, str(path)], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-2000:]
    got = json.loads(run.stdout.strip().splitlines()[-1])
    bound = tensors * 1.1 + 300e6
    print(f"tensor bytes {tensors / 1e9:.3f} GB, expert gate+up {got['stacks'] / 1e9:.3f} GB, "
          f"peak RSS: after load {got['loaded'] / 1e9:.3f} GB, after a forward "
          f"{got['forward'] / 1e9:.3f} GB, bound {bound / 1e9:.3f} GB")
    assert got["stacks"] > 0.2 * tensors   # the gate and up stacks are a large share
    assert got["loaded"] <= bound and got["forward"] <= bound


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc accounting")
def test_mlx_switch_mlp_stacks_are_views_of_the_mapping(tmp_path, monkeypatch):
    from test_moe_bad_input import _write_mlx_moe
    monkeypatch.setenv("METALRT_MMAP", "1")
    shard = _write_mlx_moe(tmp_path)
    model, _ = metalrt.load(str(tmp_path), device="cpu")
    moe = [layer.mlp for layer in model.layers if isinstance(layer.mlp, SparseMoE)]
    assert moe
    for stack in (t for m in moe for t in (m.gate, m.up, m.down)):
        assert isinstance(stack, metalrt.QuantizedTensor) and stack.format == "affine"
        for field in (stack.data, stack.scales, stack.biases):
            assert _mapped_path(field.data_ptr()) == os.path.realpath(shard), stack
