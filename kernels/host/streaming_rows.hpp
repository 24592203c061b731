// The gather of kernels/gather.hpp for outputs far larger than the caches: each row copied with
// non-temporal (streaming) stores, so the destination is written without first being read into the cache
// (the read-for-ownership that makes a plain store loop move three bytes for every two a copy moves).
// Bodies: AVX-512F and AVX2 (chosen at run time, as memcpy's large copies do), a plain copy otherwise.
// Same bytes as gather_rows; parallel over rows (OpenMP). Host only. Used by kernels/host/moe_layer_omp.cpp
// above kStreamingGatherBytes; test: tests/dispatch/gather_test.cpp (against gather_rows_ref). The combine
// keeps its plain stores: each token's row is summed in place in the cache, and a buffer streamed out
// measured slower (docs/performance.md "Dispatch").
#pragma once

#include <cstdint>

namespace moesim {

// Outputs at least this large are gathered with streaming stores: past any last-level cache, where the
// rows would be evicted before the experts read them anyway.
constexpr int64_t kStreamingGatherBytes = int64_t(64) << 20;

// out[row] = x[token[row_assignment[row]]], zeros for row_assignment[row] < 0. x: [num_tokens, hidden];
// out: [rows, hidden].
void gather_rows_streaming(const float* x, int64_t hidden, const int32_t* token, const int32_t* row_assignment,
                           int64_t rows, float* out);

}  // namespace moesim
