// The host side of kernels/cuda_backend.hpp: each function calls the backend module, libmoesim_cuda.so
// (kernels/cuda_backend_module.hpp), loaded the first time one is called. cuda_device_available asks the
// CUDA driver first (libcuda.so.1, cuInit, cuDeviceGetCount): on a machine without a driver or a device it
// answers without loading the module, so that a CPU run never pays the CUDA runtime's and cuBLAS's start.
// The module is looked for at $MOESIM_CUDA_MODULE, else beside the running executable, else one folder
// up (the build tree's tests/), else beside the library this code is in and up to two folders up (the
// Python module in build/python/moesim/). Never unloaded: exceptions and handles it made stay valid.
#if defined(MOESIM_HAS_CUDA)

#include <dlfcn.h>

#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <string>
#include <system_error>
#include <vector>

#include "kernels/cuda_backend.hpp"
#include "kernels/cuda_backend_module.hpp"
#include "src/common/error.hpp"

namespace moesim {
namespace {

constexpr const char* kModuleFile = "libmoesim_cuda.so";

// Where the module is looked for, in order.
std::vector<std::filesystem::path> module_candidates() {
  std::vector<std::filesystem::path> out;
  if (const char* env = std::getenv("MOESIM_CUDA_MODULE"); env != nullptr && *env != '\0') {
    out.emplace_back(env);
    return out;
  }
  std::error_code ec;
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    out.push_back(exe.parent_path() / kModuleFile);
    out.push_back(exe.parent_path().parent_path() / kModuleFile);
  }
  // The file this code is linked into, where that is not the executable: the Python module
  // (build/python/moesim/_core*.so) finds the build's module two folders up.
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&module_candidates), &info) != 0 && info.dli_fname != nullptr) {
    const std::filesystem::path self = std::filesystem::absolute(info.dli_fname, ec);
    if (!ec && self != exe) {
      std::filesystem::path dir = self.parent_path();
      for (int up = 0; up < 3 && !dir.empty(); ++up, dir = dir.parent_path()) out.push_back(dir / kModuleFile);
    }
  }
  return out;
}

struct Module {
  const CudaModuleTable* table = nullptr;
  std::string problem;  // why there is no table
};

const Module& module() {
  static const Module m = [] {
    Module got;
    std::string tried;
    for (const std::filesystem::path& path : module_candidates()) {
      std::error_code ec;
      if (!std::filesystem::exists(path, ec)) {
        tried += (tried.empty() ? "" : ", ") + path.string();
        continue;
      }
      void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (handle == nullptr) {
        got.problem = "the CUDA backend module " + path.string() + " does not load: " + dlerror();
        return got;
      }
      using Entry = const CudaModuleTable* (*)();
      auto entry = reinterpret_cast<Entry>(dlsym(handle, kCudaModuleEntry));
      if (entry == nullptr) {
        got.problem = "the CUDA backend module " + path.string() + " has no " + kCudaModuleEntry;
        return got;
      }
      const CudaModuleTable* table = entry();
      if (table == nullptr || table->abi != kCudaModuleAbi) {
        got.problem = "the CUDA backend module " + path.string() + " was built from another moesim (module ABI " +
                      std::to_string(table ? table->abi : -1) + ", this moesim " + std::to_string(kCudaModuleAbi) +
                      ")";
        return got;
      }
      got.table = table;
      return got;
    }
    got.problem = std::string("the CUDA backend module ") + kModuleFile + " was not found (looked at " +
                  (tried.empty() ? std::string("no path: /proc/self/exe unreadable; set MOESIM_CUDA_MODULE") : tried) +
                  ")";
    return got;
  }();
  return m;
}

// The table, or ResourceError naming what is missing.
const CudaModuleTable& table() {
  const Module& m = module();
  if (m.table == nullptr) throw ResourceError(m.problem);
  return *m.table;
}

// The driver's answer, without the runtime: empty when a device is there, else why not.
std::string driver_problem() {
  static const std::string problem = [] {
    void* driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (driver == nullptr) return std::string("no CUDA driver on this machine (libcuda.so.1: ") + dlerror() + ")";
    using Init = int (*)(unsigned);
    using Count = int (*)(int*);
    auto init = reinterpret_cast<Init>(dlsym(driver, "cuInit"));
    auto count = reinterpret_cast<Count>(dlsym(driver, "cuDeviceGetCount"));
    if (init == nullptr || count == nullptr) return std::string("libcuda.so.1 lacks cuInit or cuDeviceGetCount");
    if (const int rc = init(0); rc != 0) return "cuInit: CUDA driver error " + std::to_string(rc) + " (no usable device)";
    int devices = 0;
    if (const int rc = count(&devices); rc != 0)
      return "cuDeviceGetCount: CUDA driver error " + std::to_string(rc);
    if (devices == 0) return std::string("cuDeviceGetCount: no CUDA-capable device is detected");
    return std::string();
  }();
  return problem;
}

// The table for an entry point that needs the device: where the driver already says there is none, the
// same ResourceError the module would throw, without loading it (so the reason is the one
// cuda_device_available gives).
const CudaModuleTable& device_table() {
  if (const std::string& problem = driver_problem(); !problem.empty())
    throw ResourceError("no usable CUDA device: " + problem);
  return table();
}

}  // namespace

inline namespace host_api {

bool cuda_device_available(std::string* why) {
  std::string problem = driver_problem();
  if (problem.empty() && module().table == nullptr) problem = module().problem;
  if (problem.empty()) return table().device_available(why);
  if (why != nullptr) *why = problem;
  return false;
}

std::string cuda_device_description() { return device_table().device_description(); }

Routing route_cuda(const RouterConfig& cfg, const RouteRequest& req, RouterState* state) {
  return device_table().route(cfg, req, state);
}

void token_choice_topk_cuda(const float* logits, int64_t num_tokens, int num_experts, int top_k,
                            const GateWeightRule& rule, int32_t* expert, float* weight) {
  device_table().token_choice_topk(logits, num_tokens, num_experts, top_k, rule, expert, weight);
}

DispatchPlan plan_dispatch_cuda(const Routing& r, Layout layout, int block_size) {
  return device_table().plan_dispatch(r, layout, block_size);
}

void gather_rows_cuda(const float* x, int64_t hidden, const Routing& r, const DispatchPlan& plan, float* xg) {
  device_table().gather_rows(x, hidden, r, plan, xg);
}

void combine_cuda(const Routing& r, const DispatchPlan& plan, const float* expert_out, const float* shared_out,
                  int64_t hidden, float* y) {
  device_table().combine(r, plan, expert_out, shared_out, hidden, y);
}

bool cuda_grouped_gemm_available() { return table().grouped_gemm_available(); }

bool cuda_supports_dtype(Dtype dtype) { return table().supports_dtype(dtype); }

void grouped_gemm_cuda(const float* a, const float* b, const int64_t* offsets, int num_groups, int64_t k, int64_t n,
                       float* c, Dtype dtype, CudaGemmPath path) {
  device_table().grouped_gemm(a, b, offsets, num_groups, k, n, c, dtype, path);
}

void grouped_swiglu_cuda(const ExpertWeights& w, const float* xg, const int64_t* offsets, float* out, Dtype dtype,
                         CudaGemmPath path) {
  device_table().grouped_swiglu(w, xg, offsets, out, dtype, path);
}

struct CudaMoeLayer::Impl {
  void* handle = nullptr;
  ~Impl() {
    if (handle != nullptr) table().layer_destroy(handle);
  }
};

CudaMoeLayer::CudaMoeLayer(const ExpertWeights& w, const ExpertWeights* shared, Dtype dtype, CudaGemmPath path)
    : impl_(std::make_unique<Impl>()) {
  impl_->handle = device_table().layer_create(w, shared, dtype, path);
}
CudaMoeLayer::~CudaMoeLayer() = default;
CudaMoeLayer::CudaMoeLayer(CudaMoeLayer&&) noexcept = default;
CudaMoeLayer& CudaMoeLayer::operator=(CudaMoeLayer&&) noexcept = default;

CudaLayerOutput CudaMoeLayer::forward(const RouterConfig& cfg, const RouteRequest& req, RouterState* state,
                                      const float* x, float* y) {
  return device_table().layer_forward(impl_->handle, cfg, req, state, x, y);
}

void CudaMoeLayer::forward_routed(const float* x, const Routing& r, const DispatchPlan& plan, float* y,
                                  MoePhaseTimes* times) {
  device_table().layer_forward_routed(impl_->handle, x, r, plan, y, times);
}

int64_t CudaMoeLayer::hidden() const { return table().layer_hidden(impl_->handle); }
Dtype CudaMoeLayer::dtype() const { return table().layer_dtype(impl_->handle); }

CudaLayerTimes time_layer_cuda(const RouterConfig& cfg, const RouteRequest& req, const ExpertWeights& w,
                               const ExpertWeights* shared, Dtype dtype, const float* x, float* y, int repeats,
                               Routing* routing_out, std::vector<CudaLayerTimes>* per_repeat) {
  return device_table().time_layer(cfg, req, w, shared, dtype, x, y, repeats, routing_out, per_repeat);
}

void moe_forward_cuda(const ExpertWeights& w, const ExpertWeights* shared, const float* x, const Routing& r,
                      const DispatchPlan& plan, float* y, MoePhaseTimes* times, Dtype dtype) {
  device_table().moe_forward(w, shared, x, r, plan, y, times, dtype);
}

CudaMeasurements measure_cuda_device(const CudaMeasureConfig& cfg) { return device_table().measure_device(cfg); }

void cached_attention_cuda(const float* q, const float* k_cache, const float* v_cache, const int64_t* seq_offset,
                           int num_seqs, const int32_t* seq, const int32_t* pos, int64_t num_tokens, int heads,
                           int kv_heads, int head_dim, float* out) {
  device_table().cached_attention(q, k_cache, v_cache, seq_offset, num_seqs, seq, pos, num_tokens, heads, kv_heads, head_dim,
                           out);
}

void cached_attention_cuda_device(const float* q, const float* k_cache, const float* v_cache,
                                  const int64_t* seq_offset, const int32_t* seq, const int32_t* pos,
                                  int64_t num_tokens, int heads, int kv_heads, int head_dim, float* out) {
  device_table().cached_attention_device(q, k_cache, v_cache, seq_offset, seq, pos, num_tokens, heads, kv_heads, head_dim,
                                  out);
}

}  // inline namespace host_api
}  // namespace moesim

#endif  // MOESIM_HAS_CUDA
