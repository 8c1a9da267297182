"""bench/shapes_gguf.py: GGUF files at released shapes with random quantized blocks,
checked at tiny shapes against the gguf package's reader and dequantizer, and loaded
by metalrt."""
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from gguf import GGMLQuantizationType as T
from gguf import GGUFReader
from gguf.quants import dequantize

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from bench import shapes_gguf as sg  # noqa: E402


@pytest.mark.parametrize("kind", sorted(sg.BLOCKS))
def test_random_blocks_have_the_planned_statistics(kind):
    w = dequantize(sg.random_blocks(kind, 256 * 512, np.random.default_rng(1)), T[kind])
    assert np.isfinite(w).all()
    assert abs(float(w.mean())) < 1e-3
    assert abs(float(w.std()) - sg.WEIGHT_STD) < 0.1 * sg.WEIGHT_STD


def test_random_blocks_refuse_a_partial_block():
    with pytest.raises(ValueError, match="multiple of 256"):
        sg.random_blocks("Q4_K", 300, np.random.default_rng(1))


def test_q4_k_m_plan_follows_llama_cpp():
    plan = {name: kind for name, _, kind in sg.tensor_plan(sg.SHAPES["llama-3.1-8b"], "q4_k_m")}
    assert plan["output.weight"] == "Q6_K" and plan["token_embd.weight"] == "Q4_K"
    more = [i for i in range(32) if plan[f"blk.{i}.ffn_down.weight"] == "Q6_K"]
    assert more == [0, 1, 2, 3, 6, 9, 12, 15, 18, 21, 24, 27, 28, 29, 30, 31]
    tied = {n: k for n, _, k in sg.tensor_plan(sg.SHAPES["llama-3.2-1b"], "q4_k_m")}
    assert tied["token_embd.weight"] == "Q6_K" and "output.weight" not in tied


@pytest.mark.parametrize("key,quant", [("llama-3.2-1b", "q4_k_m"), ("llama-3.2-1b", "q8_0"),
                                       ("qwen3-30b-a3b", "q4_k_m")])
def test_tiny_file_reads_back_and_loads(tmp_path, key, quant):
    import metalrt
    shape = replace(sg.SHAPES[key], hidden=256, layers=2, heads=4, kv_heads=2, head_dim=64,
                    ffn=512 if sg.SHAPES[key].ffn else 0, vocab=2048,
                    expert_ffn=256 if sg.SHAPES[key].experts else 0, experts=8 if sg.SHAPES[key].experts else 0,
                    experts_used=2 if sg.SHAPES[key].experts else 0)
    path = sg.write(tmp_path / "m.gguf", shape, quant)
    reader = GGUFReader(str(path))
    planned = sg.tensor_plan(shape, quant)
    assert [t.name for t in reader.tensors] == [name for name, _, _ in planned]
    for t, (_, dims, kind) in zip(reader.tensors, planned):
        assert t.tensor_type.name == kind
        assert tuple(int(x) for x in reversed(t.shape)) == dims
    model, tokenizer = metalrt.load(str(path), device="cpu")
    assert model.config["vocab_size"] == 2048
    assert len(tokenizer.encode("The history of the city")) > 0


def test_shape_of_refuses_a_bad_cut():
    with pytest.raises(ValueError, match="1..47"):
        sg.shape_of("qwen3-30b-a3b", 0)
    assert sg.shape_of("qwen3-30b-a3b", 8).released_layers == 48
