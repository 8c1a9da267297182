"""Buffers above Metal's maxBufferLength (16 GiB on an M1 Max): the simulated device
enforces a maximum buffer length (METALRT_SIM_MAX_BUFFER_LENGTH), and a model file
and a KV cache larger than it still load and generate the tokens of an unlimited
device: the file is wrapped as runs of whole tensors (metalrt.buffer_windows), the KV
cache as one buffer per layer and side."""
import json
import os
import subprocess
import sys

import pytest

import metalrt
import tiny_models
import tiny_quant
from metalrt.tokenizer import Tokenizer

pytestmark = pytest.mark.skipif(not metalrt.is_available("metal"), reason="no Metal device")

LIMIT = 64 * 1024
# 8-bit MLX layers: wrapped from the file without a copy (float tensors are copied).
MODEL = tiny_models.TinyLlama(layers=4, hidden=128, ffn=256, heads=4, kv_heads=2, head_dim=32)
BLOCKS = 12   # 4 KiB a block, layer and side: 48 KiB a layer's side, 384 KiB in all

GENERATE = """
import json, sys
import numpy as np
import metalrt
from metalrt.runner import Engine, SamplingParams
model, tokenizer = metalrt.load(sys.argv[1], device="metal")
cache = model.kv_cache({blocks})
engine = Engine(model, cache, 64)
engine.add_request([5, 40, 41, 42, 77, 100, 150], SamplingParams(), 16)
tokens = []
while engine.has_work:
    tokens += [out.token for out in engine.step()]
info = metalrt.device_info("metal")
print(json.dumps({{"tokens": tokens, "max_buffer_length": info["max_buffer_length"]}}))
""".format(blocks=BLOCKS)


def run(code, *args, **env):
    proc = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                          timeout=600, env={**os.environ, "METALRT_METAL": "sim", **env})
    return proc


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    directory = tmp_path_factory.mktemp("limit")
    backend = Tokenizer.from_gguf_metadata(tiny_models.tokenizer_metadata()).backend
    tiny_quant.write_mlx_dir(directory, MODEL, backend, bits=8, gs=64)
    return str(directory)


def test_a_model_file_and_kv_cache_above_the_limit_generate_the_unlimited_tokens(model_dir):
    kv_bytes = 2 * MODEL.layers * BLOCKS * 16 * MODEL.kv_heads * MODEL.head_dim * 4
    assert os.path.getsize(os.path.join(model_dir, "model.safetensors")) > 4 * LIMIT
    assert kv_bytes > 4 * LIMIT
    unlimited = run(GENERATE, model_dir)
    assert unlimited.returncode == 0, unlimited.stderr
    limited = run(GENERATE, model_dir, METALRT_SIM_MAX_BUFFER_LENGTH=str(LIMIT))
    assert limited.returncode == 0, limited.stderr
    free, bounded = (json.loads(p.stdout.splitlines()[-1]) for p in (unlimited, limited))
    assert free["max_buffer_length"] == 16 << 30 and bounded["max_buffer_length"] == LIMIT
    assert len(free["tokens"]) == 16 and len(set(free["tokens"])) > 1
    assert bounded["tokens"] == free["tokens"]


REFUSALS = """
import numpy as np, metalrt
for make in (lambda: metalrt.zeros((%(n)d,), "float32", "metal"),
             lambda: metalrt.asarray(np.zeros(%(n)d, np.float32), device="metal", copy=False)):
    try:
        make()
        print("made")
    except RuntimeError as e:
        print(e)
""" % {"n": LIMIT // 4 + 1024}


def test_a_buffer_above_the_limit_is_refused_naming_it():
    proc = run(REFUSALS, METALRT_SIM_MAX_BUFFER_LENGTH=str(LIMIT))
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) == 2
    for line in lines:
        assert "exceeds the device's maximum buffer length (maxBufferLength, 65536 bytes" in line, line


def test_a_bad_limit_is_a_value_error():
    proc = run("import metalrt; metalrt.device_info('metal')", METALRT_SIM_MAX_BUFFER_LENGTH="lots")
    assert "ValueError: METALRT_SIM_MAX_BUFFER_LENGTH must be an integer" in proc.stderr
