"""Decode rows (``ops.decode_rows``, op_registry.h ``DecodeRowsScope``): inside it every op
computes each row of a call with the arithmetic of a one-row call, so a speculative verify
step's k + 1 rows, a batch's rows and short prompt chunks get the bits of one-row decode
steps. Gates: the quantized GEMV (GGUF formats whose one-row kernel differs from the
multi-row one, m = 5 and m = 20: past the CPU GEMV's 16 rows and Metal's 8) and the float
matmul, row by row against one-row calls, with the provider that ran; a model's verify
chunk of 5 tokens against 5 decode steps, logits bit for bit, for every KV cache type on
the CPU (the default model's Q4_1 weights, dense, hybrid Gated-DeltaNet and MoE twins) and
for float16 and q4_0 on the simulated device; the setting's scope and bad input."""
import numpy as np
import pytest

import metalrt
import tiny_hf
import tiny_hybrid
from conftest import DEVICES, poisoned
from metalrt import ops, providers
from metalrt.cache import ScheduledChunk, build_step
from test_quantized import random_blocks

KV_TYPES = ("float32", "float16", "bfloat16", "q8_0", "q4_0")
# Every KV type on the CPU; the simulated device's float16 default and q4_0.
KV_CASES = [("cpu", t) for t in KV_TYPES] + \
    [("metal", t) for t in ("float16", "q4_0") if "metal" in DEVICES]


def one_row_calls(op, x, w):
    return np.concatenate([op(x[i:i + 1], w).numpy() for i in range(len(x))])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("fmt", ["q4_0", "q4_1", "q8_0", "q5_1", "q4_k", "q6_k"])
def test_quantized_gemv_rows_are_one_row_calls(fmt, device):
    k, n = 512, 200
    w = metalrt.quantized_tensor(fmt, (n, k), random_blocks(fmt, n, k, seed=3), device=device)
    x = metalrt.asarray(np.random.default_rng(4).uniform(-1, 1, (20, k)).astype(np.float32),
                        device=device)
    alone = one_row_calls(ops.quantized_matmul_bt, x, w)
    for m in (5, 20):
        with ops.decode_rows():
            got = ops.quantized_matmul_bt(x[:m], w, out=poisoned((m, n), "float32", device))
        np.testing.assert_array_equal(got.numpy().view(np.uint32), alone[:m].view(np.uint32))
        selected = providers.stats("quantized_matmul_bt", device)["last_selected"]
        assert selected == ("cpu_fast_quantized_matmul_bt" if device == "cpu"
                            else "metal_quantized_matmul_bt")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_float_matmul_rows_are_one_row_calls(dtype, device):
    rng = np.random.default_rng(5)
    w = metalrt.asarray(rng.uniform(-1, 1, (96, 256)).astype(np.float32), device=device,
                        dtype=dtype)
    x = metalrt.asarray(rng.uniform(-1, 1, (20, 256)).astype(np.float32), device=device,
                        dtype=dtype)
    alone = one_row_calls(ops.matmul_bt, x, w)
    providers.reset_stats()
    with ops.decode_rows():
        got = ops.matmul_bt(x, w, out=poisoned((20, 96), dtype, device))
    np.testing.assert_array_equal(got.numpy(), alone)
    assert not providers.stats("matmul_bt", device)["reference_hits"]


def verify_against_decode(model, kv_type, prompt, drafts):
    """(logits of len(drafts) one-token decode steps, logits of one verify chunk of them)
    after a prefill of ``prompt`` on fresh caches of ``kv_type``."""
    model.set_kv_type(kv_type)
    device, table = model.device, [0, 1, 2, 3]
    rows = []
    for chunks in ([[t] for t in drafts], [drafts]):
        cache = model.new_cache(4)
        model.forward(build_step([ScheduledChunk(prompt, 0, table, "last")], device), cache)
        start, logits = len(prompt), []
        for chunk in chunks:
            step = build_step([ScheduledChunk(chunk, start, table, "all")], device)
            assert step.decode_rows
            logits.append(model.forward(step, cache).numpy())
            start += len(chunk)
        rows.append(np.concatenate(logits))
    return rows


def models_of(device):
    names = [None] if device == "cpu" else []   # None: the default model (Q4_1 GGUF)
    return names + ["qwen3", "qwen3_5", "qwen3_next"]


@pytest.fixture(scope="module")
def qwen3_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("rows")
    tiny_hf.build("qwen3", root / "qwen3")
    return root / "qwen3"


@pytest.mark.parametrize("device,kv_type", KV_CASES)
def test_a_verify_chunk_gives_the_logits_of_decode_steps(device, kv_type, qwen3_dir):
    """Dense (tiny Qwen3, head_dim 128), hybrid (Qwen3.5 twin: Gated-DeltaNet layers) and
    MoE hybrid (Qwen3-Next twin) models, and on the CPU the default model: the 5 rows of
    a verify chunk equal 5 decode steps bit for bit."""
    for name in models_of(device):
        if name is None:
            model = metalrt.load(device=device)[0]
            prompt, drafts = list(range(1000, 1037)), [6403, 1980, 253, 655, 28]
        else:
            path = qwen3_dir if name == "qwen3" else tiny_hybrid.path(name)
            model = metalrt.load(str(path), device=device)[0]
            prompt, drafts = tiny_hf.prompt(37, 1), tiny_hf.prompt(5, 2)
        decode, verify = verify_against_decode(model, kv_type, prompt, drafts)
        np.testing.assert_array_equal(verify, decode, err_msg=f"{name or 'default'} {kv_type}")


def test_the_setting_is_scoped_and_checked():
    x = metalrt.asarray(np.ones((20, 64), np.float32))
    w = metalrt.asarray(np.ones((8, 64), np.float32))
    with ops.decode_rows():
        with ops.decode_rows(False):
            ops.matmul_bt(x, w)
            outer = providers.stats("matmul_bt", "cpu")["last_selected"]
        ops.matmul_bt(x, w)
        inner = providers.stats("matmul_bt", "cpu")["last_selected"]
    ops.matmul_bt(x, w)
    assert inner == "cpu_matmul_bt"   # the oracle: float rows one by one
    assert outer == providers.stats("matmul_bt", "cpu")["last_selected"] != "cpu_matmul_bt"
    with pytest.raises(TypeError, match=r"^\[decode_rows\] on must be a bool, got int"):
        with ops.decode_rows(1):
            pass
