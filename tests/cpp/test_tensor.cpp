// Core gates of Tensor: views (Slice, Reshape) point into one allocation, shape rules.
#include <doctest/doctest.h>

#include <cstring>
#include <numeric>
#include <stdexcept>
#include <vector>

#include "metalrt/tensor.h"

using namespace metalrt;

namespace {

// A [4, 6] f32 tensor holding 0..23.
Tensor Iota46() {
  Tensor t = Tensor::Empty({4, 6}, DType::kF32, DeviceType::kCPU);
  std::iota(t.data_as<float>(), t.data_as<float>() + 24, 0.0f);
  return t;
}

// The elements of a view in row-major order (the strided gather of CopyToHost).
std::vector<float> HostValues(const Tensor& t) {
  std::vector<float> out(static_cast<size_t>(t.numel()));
  CopyToHost(t, out.data());
  return out;
}

}  // namespace

TEST_CASE("tensor: a new tensor is contiguous with row-major strides") {
  Tensor t = Tensor::Empty({4, 6}, DType::kBF16, DeviceType::kCPU);
  CHECK(t.defined());
  CHECK(t.strides() == Shape{6, 1});
  CHECK(t.numel() == 24);
  CHECK(t.nbytes() == 48);
  CHECK(t.is_contiguous());
  CHECK(t.dim(-1) == 6);
  CHECK(t.Describe() == "bfloat16[4, 6] on cpu");
  CHECK(t.storage()->bytes() == 48);
  Tensor scalar = Tensor::Empty({}, DType::kI64, DeviceType::kCPU);
  CHECK(scalar.numel() == 1);
  CHECK(scalar.nbytes() == 8);
  CHECK(!Tensor().defined());
}

TEST_CASE("tensor: Slice along dim 0 is a contiguous view into the same allocation") {
  Tensor t = Iota46();
  Tensor rows = t.Slice(0, 1, 3);
  CHECK(rows.shape() == Shape{2, 6});
  CHECK(rows.data() == static_cast<char*>(t.data()) + 6 * sizeof(float));
  CHECK(rows.storage().get() == t.storage().get());
  CHECK(rows.is_contiguous());
  rows.data_as<float>()[0] = -1.0f;   // a write through the view is visible in the base
  CHECK(t.data_as<float>()[6] == -1.0f);
  CHECK(rows.data_as<float>()[11] == 17.0f);
}

TEST_CASE("tensor: Slice along the last dim is a strided view; slices of slices compose") {
  Tensor t = Iota46();
  Tensor cols = t.Slice(-1, 2, 5);
  CHECK(cols.shape() == Shape{4, 3});
  CHECK(cols.strides() == Shape{6, 1});
  CHECK(!cols.is_contiguous());
  CHECK(cols.data() == static_cast<char*>(t.data()) + 2 * sizeof(float));
  Tensor cell = cols.Slice(0, 3, 4).Slice(1, 1, 2);   // row 3, column 2 + 1
  CHECK(cell.data_as<float>()[0] == 21.0f);
  cell.data_as<float>()[0] = 100.0f;
  CHECK(t.data_as<float>()[21] == 100.0f);
  CHECK(t.Slice(0, 2, 2).numel() == 0);   // an empty slice is valid
}

TEST_CASE("tensor: Slice with a step folds it into the stride; steps compose") {
  Tensor t = Iota46();
  Tensor rows = t.Slice(0, 1, 4, 2);   // rows 1 and 3
  CHECK(rows.shape() == Shape{2, 6});
  CHECK(rows.strides() == Shape{12, 1});
  CHECK(rows.data() == static_cast<char*>(t.data()) + 6 * sizeof(float));
  CHECK(rows.storage().get() == t.storage().get());
  CHECK(!rows.is_contiguous());
  CHECK(HostValues(rows) == std::vector<float>{6, 7, 8, 9, 10, 11, 18, 19, 20, 21, 22, 23});
  Tensor cols = t.Slice(1, 1, 6, 3);   // columns 1 and 4
  CHECK(cols.shape() == Shape{4, 2});
  CHECK(cols.strides() == Shape{6, 3});
  CHECK(HostValues(cols) == std::vector<float>{1, 4, 7, 10, 13, 16, 19, 22});
  // Every second column of rows 1 and 3, then every second of those columns: 0 and 4.
  CHECK(HostValues(rows.Slice(1, 0, 6, 2).Slice(1, 0, 3, 2)) == std::vector<float>{6, 10, 18, 22});
  cols.data_as<float>()[3] = -4.0f;   // column 4 of row 0, through the view
  CHECK(t.data_as<float>()[4] == -4.0f);
}

TEST_CASE("tensor: stepped lengths round up; a single stepped row stays contiguous") {
  Tensor t = Tensor::Empty({8, 4}, DType::kF32, DeviceType::kCPU);
  CHECK(t.Slice(0, 0, 8, 3).shape() == Shape{3, 4});   // rows 0, 3, 6
  CHECK(t.Slice(0, 1, 8, 3).shape() == Shape{3, 4});   // rows 1, 4, 7
  CHECK(t.Slice(0, 2, 8, 3).shape() == Shape{2, 4});   // rows 2, 5
  CHECK(t.Slice(0, 8, 8, 5).numel() == 0);
  Tensor one = t.Slice(0, 5, 8, 4);                    // row 5 only
  CHECK(one.shape() == Shape{1, 4});
  CHECK(one.is_contiguous());
  CHECK(one.data() == t.Slice(0, 5, 6).data());
  CHECK_THROWS_AS(t.Slice(0, 0, 8, 0), std::invalid_argument);
  CHECK_THROWS_AS(t.Slice(0, 0, 8, -1), std::invalid_argument);
}

TEST_CASE("tensor: a view keeps its allocation alive after the base is gone") {
  Tensor view;
  {
    Tensor t = Iota46();
    view = t.Slice(0, 3, 4);
  }
  CHECK(view.storage().use_count() == 1);
  CHECK(view.data_as<float>()[5] == 23.0f);
}

TEST_CASE("tensor: Reshape views the same bytes; one -1 is inferred") {
  Tensor t = Iota46();
  Tensor r = t.Reshape({3, -1});
  CHECK(r.shape() == Shape{3, 8});
  CHECK(r.strides() == Shape{8, 1});
  CHECK(r.data() == t.data());
  r.data_as<float>()[8] = -5.0f;
  CHECK(t.data_as<float>()[8] == -5.0f);
  CHECK(t.Reshape({-1}).shape() == Shape{24});
  CHECK(t.Reshape({2, 2, 1, -1}).shape() == Shape{2, 2, 1, 6});
  CHECK(t.Slice(0, 1, 3).Reshape({-1, 4}).data() == t.Slice(0, 1, 3).data());
  CHECK(Tensor::Empty({0, 6}, DType::kF32, DeviceType::kCPU).Reshape({-1, 3}).shape() == Shape{0, 3});
}

TEST_CASE("tensor: bad shapes, slices and reshapes throw std::invalid_argument") {
  Tensor t = Iota46();
  CHECK_THROWS_AS(Tensor::Empty({1, 1, 1, 1, 1, 1, 1, 1, 1}, DType::kF32, DeviceType::kCPU), std::invalid_argument);
  CHECK(Tensor::Empty({1, 1, 1, 1, 1, 1, 1, 2}, DType::kF32, DeviceType::kCPU).ndim() == kMaxDims);
  CHECK_THROWS_AS(Tensor::Empty({2, -3}, DType::kF32, DeviceType::kCPU), std::invalid_argument);
  CHECK_THROWS_AS(t.Reshape({1, 1, 1, 1, 1, 1, 1, 4, 6}), std::invalid_argument);
  CHECK_THROWS_AS(t.Reshape({5, -1}), std::invalid_argument);
  CHECK_THROWS_AS(t.Reshape({-1, -1}), std::invalid_argument);
  CHECK_THROWS_AS(t.Reshape({5, 5}), std::invalid_argument);
  CHECK_THROWS_AS(t.Slice(1, 0, 3).Reshape({12}), std::invalid_argument);   // not contiguous
  CHECK_THROWS_AS(t.Slice(0, -1, 2), std::invalid_argument);
  CHECK_THROWS_AS(t.Slice(0, 3, 2), std::invalid_argument);
  CHECK_THROWS_AS(t.Slice(0, 0, 5), std::invalid_argument);
  CHECK_THROWS_AS(t.Slice(2, 0, 1), std::invalid_argument);
  CHECK_THROWS_AS(t.Slice(-3, 0, 1), std::invalid_argument);
  CHECK_THROWS_AS(t.dim(2), std::invalid_argument);
}

TEST_CASE("tensor: FromBlob wraps caller memory without owning it") {
  float host[6] = {1, 2, 3, 4, 5, 6};
  Tensor t = Tensor::FromBlob(host, {2, 3}, DType::kF32, DeviceType::kCPU);
  CHECK(t.defined());
  CHECK(t.data() == host);
  CHECK(t.storage().get() == nullptr);
  t.Slice(1, 2, 3).data_as<float>()[3] = 60.0f;   // row 1, column 2
  CHECK(host[5] == 60.0f);
}
