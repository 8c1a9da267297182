#include <doctest/doctest.h>

#include <stdexcept>

#include "metalrt/tensor.h"

using namespace metalrt;

TEST_CASE("Tensor::Select drops the dimension and points into the allocation") {
  Tensor t = Tensor::Empty({4, 3, 5}, DType::kF32, DeviceType::kCPU);
  Tensor row = t.Select(0, 2);
  CHECK(row.shape() == Shape{3, 5});
  CHECK(row.data_as<float>() == t.data_as<float>() + 2 * 15);
  CHECK(row.storage().get() == t.storage().get());
  CHECK(row.is_contiguous());

  Tensor column = t.Select(-1, 4);           // negative dim counts from the end
  CHECK(column.shape() == Shape{4, 3});
  CHECK(column.strides() == Shape{15, 5});
  CHECK(column.data_as<float>() == t.data_as<float>() + 4);
  CHECK_FALSE(column.is_contiguous());

  Tensor scalar = t.Select(0, 3).Select(0, 2).Select(0, 1);
  CHECK(scalar.ndim() == 0);
  CHECK(scalar.numel() == 1);
  CHECK(scalar.data_as<float>() == t.data_as<float>() + 3 * 15 + 2 * 5 + 1);
}

TEST_CASE("Tensor::Select rejects out-of-range indices and dims") {
  Tensor t = Tensor::Empty({2, 3}, DType::kI32, DeviceType::kCPU);
  CHECK_THROWS_AS(t.Select(0, 2), std::invalid_argument);
  CHECK_THROWS_AS(t.Select(1, -1), std::invalid_argument);
  CHECK_THROWS_AS(t.Select(2, 0), std::invalid_argument);
}
