"""Bad MoE checkpoints are ValueErrors naming the file and the tensor or key: an MLX
quantized MoE directory (mlx-lm's ``switch_mlp`` stacks, written here from the tiny
qwen3_moe fixture) with an expert tensor missing or expert stacks whose bits or group
size do not fit, and GGUF qwen35 / qwen35moe files whose value-head count
(``ssm.time_step_rank``) does not match their tensors."""
import json
import os
import shutil

import gguf
import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

import metalrt
import moe_gguf_fixtures
import tiny_hybrid
from tiny_quant import affine_quantize

BITS, GS = 4, 32
PROJ = ("gate_proj", "up_proj", "down_proj")


def _write_mlx_moe(directory, bits=None, group_sizes=None, drop=(), config_extra=None):
    """The tiny qwen3_moe model as mlx-lm writes it quantized: every layer's experts as
    ``mlp.switch_mlp.<proj>`` stacks [E, N, K·bits/32] with scales and biases, ``bits``
    / ``group_sizes``: stack name -> its own (the config is not told), ``drop``: tensor
    names left out, ``config_extra``: keys merged into the quantization entry."""
    source = tiny_hybrid.path("qwen3_moe")
    os.makedirs(directory, exist_ok=True)
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json"):
        shutil.copy(source / name, directory / name)
    tensors = load_file(str(source / "model.safetensors"))
    config = json.loads((source / "config.json").read_text())
    out = {k: v for k, v in tensors.items() if ".mlp.experts." not in k}
    for layer in range(config["num_hidden_layers"]):
        if layer in config.get("mlp_only_layers", []):
            continue
        for proj in PROJ:
            stack = f"model.layers.{layer}.mlp.switch_mlp.{proj}"
            b, g = (bits or {}).get(stack, BITS), (group_sizes or {}).get(stack, GS)
            parts = [affine_quantize(tensors[f"model.layers.{layer}.mlp.experts.{e}.{proj}.weight"],
                                     b, g) for e in range(config.get("num_experts") or config["num_local_experts"])]
            for i, field in enumerate(("weight", "scales", "biases")):
                out[f"{stack}.{field}"] = np.stack([p[i] for p in parts])
    for name in drop:
        del out[name]
    save_file(out, str(directory / "model.safetensors"))
    config["quantization"] = {"group_size": GS, "bits": BITS, "mode": "affine",
                              **(config_extra or {})}
    (directory / "config.json").write_text(json.dumps(config))
    return str(directory / "model.safetensors")


def _load(path):
    return metalrt.load(str(path), device="cpu")


STACK = "model.layers.2.mlp.switch_mlp.up_proj"


def test_a_well_formed_mlx_moe_directory_loads(tmp_path):
    _write_mlx_moe(tmp_path)
    model, tokenizer = _load(tmp_path)
    logits = model.logits(tokenizer.encode("t1 t2 t3"))
    assert logits.shape == (3, tiny_hybrid.VOCAB) and np.all(np.isfinite(logits))


@pytest.mark.parametrize("field", ["weight", "scales", "biases"])
def test_missing_expert_tensor_of_an_mlx_moe_directory(tmp_path, field):
    shard = _write_mlx_moe(tmp_path, drop=[f"{STACK}.{field}"])
    with pytest.raises(ValueError) as e:
        _load(tmp_path)
    assert shard in str(e.value) or str(tmp_path) in str(e.value), str(e.value)
    assert STACK in str(e.value) or STACK.replace("switch_mlp", "experts") in str(e.value), str(e.value)


def test_missing_expert_stack_of_an_mlx_moe_directory(tmp_path):
    _write_mlx_moe(tmp_path, drop=[f"{STACK}.{f}" for f in ("weight", "scales", "biases")])
    with pytest.raises(ValueError) as e:
        _load(tmp_path)
    assert str(tmp_path) in str(e.value), str(e.value)
    assert "model.layers.2.mlp.experts.up_proj" in str(e.value), str(e.value)


def test_expert_bits_the_config_contradicts(tmp_path):
    shard = _write_mlx_moe(tmp_path, config_extra={STACK: {"group_size": GS, "bits": 8}})
    with pytest.raises(ValueError, match=rf"{shard}: tensor '{STACK}.weight' .* holds 4-bit "
                                         rf"values, but the config's quantization entry for "
                                         rf"'{STACK}' says 8 bits"):
        _load(tmp_path)


def test_expert_stacks_of_other_bits_or_group_size(tmp_path):
    """gate at 8 bits and up at 4 (or another group size) in one layer: mlx-lm's mixed
    exports do this per module, so it loads, or is refused naming both stacks."""
    gate = STACK.replace("up_proj", "gate_proj")
    for kind, kwargs in (("bits", dict(bits={gate: 8})), ("group", dict(group_sizes={gate: 64}))):
        directory = tmp_path / kind
        _write_mlx_moe(directory, **kwargs)
        try:
            model, tokenizer = _load(directory)
        except ValueError as e:
            assert str(directory) in str(e) and gate.replace("switch_mlp", "experts") in str(e), str(e)
        else:
            reference, _ = _load_reference(tmp_path / f"{kind}-ref")
            ids = tokenizer.encode("t1 t2 t3")
            np.testing.assert_allclose(model.logits(ids), reference.logits(ids), atol=0.15)


def _load_reference(directory):
    _write_mlx_moe(directory)
    return _load(directory)


def test_expert_stack_with_a_missing_expert(tmp_path):
    """scales of E-1 experts next to a weight of E."""
    shard = _write_mlx_moe(tmp_path)
    tensors = load_file(shard)
    for field in ("scales", "biases"):
        tensors[f"{STACK}.{field}"] = tensors[f"{STACK}.{field}"][:-1]
    save_file(tensors, shard)
    with pytest.raises(ValueError, match=rf"{shard}: tensor '{STACK}\.(weight|scales)'"):
        _load(tmp_path)


def _with_metadata(source, target, key, value):
    shutil.copy(source, target)
    reader = gguf.GGUFReader(str(target), "r+")
    field = reader.fields[key]
    field.parts[field.data[0]][0] = value
    del reader
    return str(target)


@pytest.mark.parametrize("name, arch", [("qwen3_5", "qwen35"), ("qwen3_5_moe", "qwen35moe")])
def test_gguf_with_the_wrong_value_head_count(tmp_path, name, arch):
    source = moe_gguf_fixtures.fixture(name)["f32"]
    key = f"{arch}.ssm.time_step_rank"
    heads = int(gguf.GGUFReader(str(source)).fields[key].parts[-1][0])
    for wrong in (heads * 2, heads // 2):
        path = _with_metadata(source, tmp_path / f"{wrong}.gguf", key, wrong)
        with pytest.raises(ValueError, match=rf"^\[gguf\] {path}: (tensor 'blk\.0\.ssm_\w+\.weight' "
                                             rf"must have shape|{key})"):
            _load(path)
    path = _with_metadata(source, tmp_path / "k.gguf", f"{arch}.ssm.group_count", heads + 1)
    with pytest.raises(ValueError, match=rf"^\[gguf\] {path}: {key} \(value heads, {heads}\) must "
                                         rf"be a multiple of {arch}.ssm.group_count"):
        _load(path)
