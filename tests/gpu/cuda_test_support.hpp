// Shared by the CUDA backend tests (tests/gpu): the device check every test begins with, which skips the
// test with the reason ("no CUDA device: ...") when no device can be used, so that `ctest -L gpu` on a
// machine without a GPU reports skips, never passes. Host only, header only; used by tests/gpu/*_test.cpp.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "kernels/cuda_backend.hpp"

// Skips the current test when no CUDA device is usable; the message carries the reason.
#define MOESIM_SKIP_WITHOUT_CUDA_DEVICE()                                    \
  do {                                                                       \
    std::string moesim_no_device_reason_;                                    \
    if (!::moesim::cuda_device_available(&moesim_no_device_reason_)) {       \
      GTEST_SKIP() << "no CUDA device: " << moesim_no_device_reason_;        \
    }                                                                        \
  } while (0)

namespace moesim::test {

// Fixtures whose SetUp performs the device check.
class CudaTest : public ::testing::Test {
 protected:
  void SetUp() override { MOESIM_SKIP_WITHOUT_CUDA_DEVICE(); }
};

template <class Param>
class CudaTestWithParam : public ::testing::TestWithParam<Param> {
 protected:
  void SetUp() override { MOESIM_SKIP_WITHOUT_CUDA_DEVICE(); }
};

}  // namespace moesim::test
