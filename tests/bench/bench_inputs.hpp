// Inputs of moesim_bench that scripts/torch_moe_reference.py rebuilds bit for bit from the same seed:
// a counter-based uniform generator (value i of tensor t depends on (seed, t, i) only), the benchmark
// shapes, and a small .npy writer for the agreement check (--export-check). float32, row-major.
// Host only, header only; used by tests/bench/*.cpp. The Python twin is uniform_tensor() in the script.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <type_traits>
#include <vector>

#include "src/common/error.hpp"

namespace moesim::bench {

// Tensor ids of the shared generator (the Python script uses the same numbers).
constexpr uint64_t kTensorHidden = 1;    // x: [num_tokens, hidden], uniform in [-1, 1)
constexpr uint64_t kTensorRouter = 2;    // router weight: [hidden, num_experts], uniform * sqrt(3 / hidden)
constexpr uint64_t kTensorLogits = 3;    // logits of the router-only and dispatch-only cases: [num_tokens, E]
constexpr uint64_t kSeed = 2024;

// SplitMix64 finaliser.
inline uint64_t mix64(uint64_t z) {
  z += 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// out[i] = (2 u_i - 1) * scale in float32, u_i = (mix64(key + i) >> 40) / 2^24 with
// key = mix64(seed ^ mix64(tensor)). 2 u - 1 is exact in float32, so one rounding (the product) remains,
// and numpy reproduces every value exactly.
inline std::vector<float> uniform_tensor(uint64_t seed, uint64_t tensor, int64_t n, float scale) {
  std::vector<float> out(static_cast<size_t>(n));
  const uint64_t key = mix64(seed ^ mix64(tensor));
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const float u = static_cast<float>(mix64(key + static_cast<uint64_t>(i)) >> 40) * (1.0f / 16777216.0f);
    out[i] = (2.0f * u - 1.0f) * scale;
  }
  return out;
}

inline float router_scale(int64_t hidden) { return static_cast<float>(std::sqrt(3.0 / static_cast<double>(hidden))); }

// One MoE layer shape of the benchmark list.
struct LayerShape {
  int64_t num_tokens, hidden, ffn;
  int num_experts, top_k;
  std::string label() const {
    return "N" + std::to_string(num_tokens) + "_d" + std::to_string(hidden) + "_f" + std::to_string(ffn) + "_E" +
           std::to_string(num_experts) + "_k" + std::to_string(top_k);
  }
};

// Dispatch only: permute + gather + combine, no expert GEMMs.
struct DispatchShape {
  int64_t num_tokens, hidden;
  int num_experts, top_k;
  std::string label() const {
    return "N" + std::to_string(num_tokens) + "_d" + std::to_string(hidden) + "_E" + std::to_string(num_experts) +
           "_k" + std::to_string(top_k);
  }
};

inline const std::vector<LayerShape>& layer_shapes() {
  static const std::vector<LayerShape> shapes = {
      {512, 1024, 2816, 8, 2}, {4096, 1024, 2816, 8, 2}, {4096, 2048, 1408, 64, 6}, {16384, 1024, 512, 64, 8}};
  return shapes;
}

inline const std::vector<DispatchShape>& dispatch_shapes() {
  static const std::vector<DispatchShape> shapes = {{16384, 4096, 64, 2}, {65536, 1024, 256, 8}};
  return shapes;
}

// Router only: 65536 tokens x 256 experts, top-8.
// Router-only shapes: DeepSeek-V3's 256 experts top-8 at 65536 tokens, and a 64-expert top-6 router
// (DeepSeek-V2-Lite, Qwen1.5-MoE's 60 + 4) at 16384.
struct RouterShape {
  int64_t num_tokens;
  int num_experts;
  int top_k;
};
constexpr RouterShape kRouterShapes[] = {{65536, 256, 8}, {16384, 64, 6}};

// Writes a float32 or int32 array as .npy (format 1.0, C order). Throws InputError on I/O failure.
template <class T>
void write_npy(const std::string& path, const T* data, const std::vector<int64_t>& shape) {
  static_assert(sizeof(T) == 4, "write_npy writes 4-byte elements");
  const char* descr = std::is_floating_point<T>::value ? "<f4" : "<i4";
  std::string dims;
  int64_t count = 1;
  for (int64_t s : shape) {
    dims += std::to_string(s) + ",";
    count *= s;
  }
  if (shape.size() > 1) dims.pop_back();
  std::string header = std::string("{'descr': '") + descr + "', 'fortran_order': False, 'shape': (" + dims + "), }";
  const size_t unpadded = 10 + header.size() + 1;
  header.append((64 - unpadded % 64) % 64, ' ');
  header.push_back('\n');
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) throw InputError("cannot write " + path);
  const uint16_t len = static_cast<uint16_t>(header.size());
  const unsigned char magic[8] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0};
  bool ok = std::fwrite(magic, 1, 8, f) == 8;
  const unsigned char len_le[2] = {static_cast<unsigned char>(len & 0xff), static_cast<unsigned char>(len >> 8)};
  ok = ok && std::fwrite(len_le, 1, 2, f) == 2;
  ok = ok && std::fwrite(header.data(), 1, header.size(), f) == header.size();
  ok = ok && std::fwrite(data, sizeof(T), static_cast<size_t>(count), f) == static_cast<size_t>(count);
  ok = std::fclose(f) == 0 && ok;
  if (!ok) throw InputError("cannot write " + path);
}

}  // namespace moesim::bench
