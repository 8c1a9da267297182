"""A tensor on the wrong device is rejected by every op with a ValueError naming the
op, and numpy arguments follow the device of the op's Tensor arguments."""
import numpy as np
import pytest

import metalrt
from metalrt import ops

f32 = np.float32
i32 = np.int32

# op -> (tensor arguments as numpy arrays, other arguments, has out=)
CASES = {
    "add": ([np.ones((2, 3), f32), np.ones(3, f32)], {}, True),
    "mul": ([np.ones((2, 3), f32), np.ones(3, f32)], {}, True),
    "relu": ([np.ones((2, 3), f32)], {}, True),
    "gelu": ([np.ones((2, 3), f32)], {}, True),
    "silu_and_mul": ([np.ones((2, 4), f32)], {}, True),
    "cast": ([np.ones((2, 3), f32)], {"dtype": "bfloat16"}, True),
    "matmul": ([np.ones((2, 3), f32), np.ones((3, 5), f32)], {}, True),
    "matmul_bt": ([np.ones((2, 3), f32), np.ones((5, 3), f32)], {}, True),
    "layer_norm": ([np.ones((2, 3), f32), np.ones(3, f32), np.zeros(3, f32)], {}, True),
    "rms_norm": ([np.ones((2, 3), f32), np.ones(3, f32)], {}, True),
    "softmax": ([np.ones((2, 3), f32)], {}, True),
    "embedding": ([np.ones((4, 3), f32), np.array([1, 3], i32)], {}, True),
    "reshape_and_cache": ([np.ones((2, 1, 4), f32), np.ones((2, 1, 4), f32),
                           np.zeros((2, 4, 1, 4), f32), np.zeros((2, 4, 1, 4), f32),
                           np.array([0, 5], np.int64)], {}, False),
    "paged_attention": ([np.ones((2, 2, 4), f32), np.ones((2, 4, 1, 4), f32),
                         np.ones((2, 4, 1, 4), f32), np.array([[1, 0]], i32),
                         np.array([3], i32), np.array([0, 2], i32)], {"scale": 0.5}, True),
    "greedy_argmax": ([np.ones((2, 3), f32)], {}, True),
    "rope_neox": ([np.ones((2, 3, 4), f32), np.array([0, 7], i32)],
                  {"rotary_dim": 4, "base": 1e4}, True),
    "rope_interleaved": ([np.ones((2, 3, 4), f32), np.array([0, 7], i32)],
                         {"rotary_dim": 4, "base": 1e4}, True),
    "rope_cos_sin_cache": ([np.array([0, 7], i32)], {"rotary_dim": 4, "base": 1e4}, True),
    "rope_from_cache": ([np.ones((2, 3, 4), f32), np.ones((8, 4), f32), np.array([0, 7], i32)],
                        {}, True),
    "qk_norm_rope": ([np.ones((2, 3, 4), f32), np.ones((2, 1, 4), f32), np.ones(4, f32),
                      np.ones(4, f32), np.array([0, 7], i32)],
                     {"eps": 1e-6, "rotary_dim": 4, "base": 1e4}, False),
}


def run(name, tensors, kwargs):
    return getattr(ops, name)(*tensors, **kwargs)


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_cpu_tensor_among_metal_tensors_is_rejected(name):
    arrays, kwargs, has_out = CASES[name]
    on_metal = [metalrt.asarray(a, device="metal") for a in arrays]
    result = run(name, on_metal, kwargs)          # the all-Metal call is valid
    for i, array in enumerate(arrays):
        if len(arrays) == 1:
            break
        mixed = list(on_metal)
        mixed[i] = metalrt.asarray(array, device="cpu")
        with pytest.raises(ValueError, match=rf"^\[{name}\] all tensors must be on one device"):
            run(name, mixed, kwargs)
    if has_out:
        wrong_out = metalrt.zeros(result.shape, dtype=result.dtype, device="cpu")
        with pytest.raises(ValueError, match=rf"^\[{name}\] (out must be on metal|all tensors)"):
            run(name, on_metal, {**kwargs, "out": wrong_out})


@pytest.mark.parametrize("name", sorted(CASES))
def test_numpy_arguments_follow_the_metal_tensor(name):
    arrays, kwargs, _ = CASES[name]
    tensors = [metalrt.asarray(arrays[0], device="metal"), *arrays[1:]]
    results, on_cpu = run(name, tensors, kwargs), run(name, arrays, kwargs)
    if results is None:   # reshape_and_cache writes its (copied) caches in place
        return
    for result, expected in zip(*((r,) if isinstance(r, metalrt.Tensor) else r
                                  for r in (results, on_cpu))):
        assert result.device == "metal"
        np.testing.assert_array_equal(result.numpy(), expected.numpy())
