"""metalrt.Tensor: metadata, numpy export, views, reshape, device copies."""
import gc

import numpy as np
import pytest

import metalrt


def test_metadata(device):
    t = metalrt.asarray(np.zeros((3, 31, 2), np.float16), device=device)
    assert t.shape == (3, 31, 2) and isinstance(t.shape, tuple)
    assert t.dtype == "float16" and t.device == device
    assert t.ndim == 3 and len(t) == 3 and t.nbytes == 3 * 31 * 2 * 2
    assert repr(t) == f"metalrt.Tensor(float16[3, 31, 2] on {device})"


def test_zero_dim_tensor(device):
    t = metalrt.asarray(np.float32(2.5), device=device)
    assert t.shape == () and t.ndim == 0
    assert t.numpy() == np.float32(2.5)
    with pytest.raises(TypeError, match="0-d"):
        len(t)


@pytest.mark.parametrize("dtype", ["float32", "float16", "int8", "uint8", "int32", "int64", "uint32"])
def test_numpy_round_trip_is_exact(dtype, device):
    info = np.finfo(dtype) if dtype.startswith("float") else np.iinfo(dtype)
    values = np.array([info.min, info.max, 0, 1, 33], dtype=dtype)
    out = metalrt.asarray(values, device=device).numpy()
    assert out.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(out, values)


def test_numpy_is_a_copy(device):
    t = metalrt.asarray(np.arange(4, dtype=np.int32), device=device)
    first = t.numpy()
    first[0] = 100
    assert t.numpy()[0] == 0
    np.testing.assert_array_equal(np.asarray(t), [0, 1, 2, 3])
    assert np.asarray(t, dtype=np.float64).dtype == np.float64


def test_index_and_slice_views_share_the_allocation(device):
    base = np.arange(4 * 33, dtype=np.float32).reshape(4, 33)
    t = metalrt.asarray(base, device=device)
    item_size = 4
    rows = t[1:3]
    assert rows.shape == (2, 33)
    assert rows.data_ptr() == t.data_ptr() + 33 * item_size
    np.testing.assert_array_equal(rows.numpy(), base[1:3])
    row = t[-1]                                  # an int index drops the dimension
    assert row.shape == (33,) and row.data_ptr() == t.data_ptr() + 3 * 33 * item_size
    col = t[:, 32]
    assert col.shape == (4,) and not col.is_contiguous()
    np.testing.assert_array_equal(col.numpy(), base[:, 32])
    block = t[1:4, 31:40]                         # stop clamps like Python slices
    np.testing.assert_array_equal(block.numpy(), base[1:4, 31:40])
    assert t[2, 5].numpy() == base[2, 5]
    assert t[3:1].shape == (0, 33)
    assert t[np.int64(1)].shape == (33,)


@pytest.mark.parametrize("key", [
    np.s_[::2], np.s_[1::2], np.s_[::3], np.s_[5:30:4], np.s_[31::7], np.s_[::32], np.s_[::33],
    np.s_[1:3:5], np.s_[3:1:2], np.s_[:, ::2], np.s_[1::2, 1:32:3], np.s_[::2, 7],
    np.s_[-3::2, -20::8],
])
def test_stepped_slices_are_strided_views(device, key):
    base = np.arange(33 * 40, dtype=np.float32).reshape(33, 40)
    t = metalrt.asarray(base, device=device)
    view = t[key]
    want = base[key]
    assert view.shape == want.shape
    np.testing.assert_array_equal(view.numpy(), want)
    # A view: it starts at its first element inside the base (base[i] == flat index i).
    if want.size:
        assert view.data_ptr() == t.data_ptr() + 4 * int(want.flat[0])
    assert view.is_contiguous() == (want.size <= 1 or want.flags.c_contiguous)
    copy = view.to(device)                        # the way to a contiguous tensor
    assert copy.is_contiguous() and copy.data_ptr() != t.data_ptr()
    np.testing.assert_array_equal(copy.numpy(), want)


def test_ops_refuse_a_stepped_view_until_copied(device):
    x = metalrt.asarray(np.ones((8, 32), np.float32), device=device)
    w = metalrt.asarray(np.ones(32, np.float32), device=device)
    with pytest.raises(ValueError, match=r"^\[rms_norm\] x must be contiguous"):
        metalrt.ops.rms_norm(x[::2], w, eps=1e-5)
    assert metalrt.ops.rms_norm(x[::2].to(device), w, eps=1e-5).shape == (4, 32)


def test_bad_indices(device):
    t = metalrt.asarray(np.zeros((4, 3), np.float32), device=device)
    with pytest.raises(IndexError):
        t[4]
    with pytest.raises(IndexError):
        t[-5]
    # The rank is the tensor's, not that of the view left after the first two indices.
    with pytest.raises(IndexError, match=r"^too many indices for a tensor of rank 2$"):
        t[0, 0, 0]
    with pytest.raises(IndexError, match=r"^too many indices for a tensor of rank 2$"):
        t[:, :, 0]
    with pytest.raises(ValueError, match=r"^\[Tensor\] slice step must be positive, got -1"):
        t[::-1]
    with pytest.raises(ValueError, match="step cannot be zero"):
        t[::0]
    with pytest.raises(TypeError):
        t["a"]
    for key in (None, (0, None)):
        with pytest.raises(TypeError, match=r"^\[Tensor\] None \(numpy.newaxis\) is not a supported "
                                            r"index.*t\.reshape\(1, \*t\.shape\)"):
            t[key]
    with pytest.raises(TypeError):
        t[1.0]


def test_iteration_stops_at_the_end(device):
    base = np.arange(6, dtype=np.int32).reshape(3, 2)
    rows = [r.numpy() for r in metalrt.asarray(base, device=device)]
    np.testing.assert_array_equal(np.stack(rows), base)


def test_reshape_is_a_view(device):
    base = np.arange(24, dtype=np.int32)
    t = metalrt.asarray(base, device=device)
    for r in (t.reshape(2, 3, 4), t.reshape((4, -1)), t.reshape([24])):
        assert r.data_ptr() == t.data_ptr()
        np.testing.assert_array_equal(r.numpy(), base.reshape(r.shape))
    with pytest.raises(ValueError):
        t.reshape(5, 5)
    with pytest.raises(ValueError, match="contiguous"):
        t.reshape(4, 6)[:, 1:3].reshape(8)


def test_reshape_bad_dimensions(device):
    t = metalrt.asarray(np.arange(24, dtype=np.int32), device=device)
    for shape in ((2**64,), (2**63, -1)):
        with pytest.raises(ValueError, match=rf"^\[reshape\] dimension {shape[0]} does not fit in int64$"):
            t.reshape(*shape)
    with pytest.raises(ValueError, match=r"^\[reshape\] dimension -18446744073709551616 does not fit"):
        t.reshape([-(2**64)])
    for bad in ((2.0, 12), (True, 24), ("24",)):
        with pytest.raises(TypeError, match=r"^\[reshape\] dimensions must be ints, got "):
            t.reshape(*bad)
    assert t.reshape(np.int64(4), 6).shape == (4, 6)   # numpy integers are ints


def test_view_keeps_its_allocation_alive(device):
    base = np.random.default_rng(0).normal(size=(64, 33)).astype(np.float32)
    t = metalrt.asarray(base, device=device)
    view = t[10:12, 1:]
    del t
    gc.collect()
    metalrt.asarray(np.zeros((64, 33), np.float32), device=device)   # reuse freed memory
    np.testing.assert_array_equal(view.numpy(), base[10:12, 1:])


def test_to_copies(device):
    base = np.arange(12, dtype=np.float32).reshape(3, 4)
    t = metalrt.asarray(base, device=device)
    for target in ("cpu", device):
        c = t[:, 1:3].to(target)
        assert c.device == target and c.is_contiguous() and c.shape == (3, 2)
        assert c.data_ptr() != t.data_ptr()
        np.testing.assert_array_equal(c.numpy(), base[:, 1:3])
    with pytest.raises(ValueError, match="unknown device"):
        t.to("gpu")
    with pytest.raises(TypeError):
        t.to(None)


def test_empty_and_zeros(device):
    z = metalrt.zeros((2, 33), dtype="bfloat16", device=device)
    assert z.shape == (2, 33) and z.dtype == "bfloat16" and z.device == device
    np.testing.assert_array_equal(z.numpy(), np.zeros((2, 33), np.float32))
    e = metalrt.empty(5, dtype=np.int32, device=device)
    assert e.shape == (5,) and e.dtype == "int32"
    assert metalrt.zeros((0, 3), device=device).numpy().shape == (0, 3)
    with pytest.raises(ValueError, match="negative"):
        metalrt.empty((2, -1))
    with pytest.raises(TypeError, match="float64"):
        metalrt.zeros(3, dtype="float64")
    with pytest.raises(TypeError):
        metalrt.empty("3")


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "int32", "int64"])
def test_copy_from_writes_in_place(dtype, device):
    t = metalrt.zeros((4, 6), dtype, device)
    ptr = t.data_ptr()
    host = (np.arange(24).reshape(4, 6) * 3 - 20).astype(np.float32 if dtype == "bfloat16" else dtype)
    t.copy_from(host)
    assert t.data_ptr() == ptr
    np.testing.assert_array_equal(t.numpy(), host)
    rows = t[1:3]                                # a contiguous view: only its rows change
    rows.copy_from(np.full((2, 6), 7, dtype=host.dtype))
    expected = host.copy()
    expected[1:3] = 7
    np.testing.assert_array_equal(t.numpy(), expected)


def test_copy_from_rounds_to_bfloat16_like_asarray(device):
    values = np.array([1 + 2**-8, 1 + 3 * 2**-8, -3.1415927, 1e-40], np.float32)
    t = metalrt.empty(4, "bfloat16", device)
    t.copy_from(values)
    np.testing.assert_array_equal(t.numpy(), metalrt.asarray(values, dtype="bfloat16").numpy())


def test_copy_from_bad_arguments(device):
    t = metalrt.zeros((4, 6), "float32", device)
    with pytest.raises(ValueError, match=r"copy_from: the host array has shape \[6, 4\]"):
        t.copy_from(np.zeros((6, 4), np.float32))
    with pytest.raises(TypeError, match="copy_from: a float32 tensor needs a host array of float32"):
        t.copy_from(np.zeros((4, 6), np.float64))
    with pytest.raises(ValueError, match="copy_from: the tensor must be contiguous"):
        t[:, 1:3].copy_from(np.zeros((4, 2), np.float32))
    np.testing.assert_array_equal(t.numpy(), np.zeros((4, 6)))


@pytest.mark.parametrize("shape", [(2**62,), (2**40, 2**40), (3, 2**62), (2**61, 0, 8)])
def test_a_shape_too_large_to_address_is_refused(device, shape):
    """Elements x 8 bytes must fit in int64; a wrapped size would allocate a few bytes
    for a huge shape and let reads run off the end."""
    with pytest.raises(ValueError, match=r"has more elements than a tensor can address"):
        metalrt.empty(shape, dtype="float32", device=device)


@pytest.mark.parametrize("values, dtype", [([1.5, -2.7], "int32"), ([1e10], "int32"), ([-1.0], "uint8"),
                                           (float("nan"), "int32"), ([float("inf")], "int64")])
def test_python_floats_given_an_integer_dtype_must_be_whole_numbers_in_range(values, dtype):
    with pytest.raises(ValueError, match=rf"asarray: .* is not a whole number in {dtype}"):
        metalrt.asarray(values, dtype=dtype)


def test_whole_python_floats_convert_to_an_integer_dtype():
    t = metalrt.asarray([1.0, -3.0, 2.0**31 - 1], dtype="int32")
    assert t.dtype == "int32" and t.numpy().tolist() == [1, -3, 2**31 - 1]
    # numpy arrays keep numpy's astype semantics (documented): truncation, no check.
    assert metalrt.asarray(np.array([1.5]), dtype="int32").numpy().tolist() == [1]


def test_is_int_is_an_integer_but_not_a_bool():
    from metalrt.tensor import is_int
    assert all(is_int(v) for v in (0, -3, 2**70, np.int8(1), np.uint64(5)))
    assert not any(is_int(v) for v in (True, np.bool_(False), 1.0, np.float32(2), "1", None))
