#include <doctest/doctest.h>

#include <cstdint>
#include <stdexcept>
#include <vector>

#include "metalrt/tensor.h"

using namespace metalrt;

namespace {
Tensor Iota(const Shape& shape) {
  Tensor t = Tensor::Empty(shape, DType::kI32, DeviceType::kCPU);
  for (int64_t i = 0; i < t.numel(); ++i) t.data_as<int32_t>()[i] = static_cast<int32_t>(i);
  return t;
}
}  // namespace

TEST_CASE("CopyToHost gathers a strided view in row-major order") {
  Tensor t = Iota({4, 5, 3});
  Tensor view = t.Slice(1, 1, 4).Slice(2, 1, 3);   // [4, 3, 2], not contiguous
  std::vector<int32_t> host(static_cast<size_t>(view.numel()), -1);
  CopyToHost(view, host.data());
  size_t k = 0;
  for (int64_t i = 0; i < 4; ++i)
    for (int64_t j = 1; j < 4; ++j)
      for (int64_t c = 1; c < 3; ++c) CHECK(host[k++] == (i * 5 + j) * 3 + c);
}

TEST_CASE("CopyToDevice makes an independent contiguous copy") {
  Tensor t = Iota({3, 4});
  Tensor column = t.Select(1, 2);
  Tensor copy = CopyToDevice(column, DeviceType::kCPU);
  CHECK(copy.is_contiguous());
  CHECK(copy.storage().get() != t.storage().get());
  CHECK(copy.shape() == Shape{3});
  for (int64_t i = 0; i < 3; ++i) CHECK(copy.data_as<int32_t>()[i] == i * 4 + 2);
  t.data_as<int32_t>()[2] = 99;
  CHECK(copy.data_as<int32_t>()[0] == 2);
}

TEST_CASE("CopyFromHost fills a contiguous tensor and rejects strided ones") {
  Tensor t = Tensor::Empty({2, 3}, DType::kI32, DeviceType::kCPU);
  const std::vector<int32_t> src = {5, 6, 7, 8, 9, 10};
  CopyFromHost(src.data(), t);
  for (int64_t i = 0; i < 6; ++i) CHECK(t.data_as<int32_t>()[i] == src[i]);
  CHECK_THROWS_AS(CopyFromHost(src.data(), t.Slice(1, 0, 2)), std::invalid_argument);
  CHECK_THROWS_AS(CopyToHost(Tensor(), nullptr), std::invalid_argument);
}

TEST_CASE("empty tensors copy as no-ops") {
  Tensor t = Tensor::Empty({0, 7}, DType::kF32, DeviceType::kCPU);
  CopyToHost(t, nullptr);
  CHECK(CopyToDevice(t, DeviceType::kCPU).shape() == Shape{0, 7});
}
