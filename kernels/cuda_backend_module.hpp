// The boundary between moesim and its CUDA backend module. The backend (kernels/cuda/*.cu) links the CUDA
// runtime and cuBLAS, whose static initialisers cost a process about 0.6 s at start whether or not it
// ever touches a GPU; so it is built as a module, libmoesim_cuda.so, which exports one symbol,
// moesim_cuda_backend_module, and is loaded by src/pipeline/cuda_backend_loader.cpp the first time a
// caller needs the device. The table holds one entry per function of kernels/cuda_backend.hpp, with the
// same contract; the layer is an opaque handle. Both sides are built from this tree by the same
// compiler, so C++ types cross it; kCudaModuleAbi changes whenever the table or a type in it does.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/cuda_backend.hpp"

namespace moesim {

inline constexpr int kCudaModuleAbi = 1;

struct CudaModuleTable {
  int abi = kCudaModuleAbi;
  bool (*device_available)(std::string* why);
  std::string (*device_description)();
  Routing (*route)(const RouterConfig& cfg, const RouteRequest& req, RouterState* state);
  void (*token_choice_topk)(const float* logits, int64_t num_tokens, int num_experts, int top_k,
                            const GateWeightRule& rule, int32_t* expert, float* weight);
  DispatchPlan (*plan_dispatch)(const Routing& r, Layout layout, int block_size);
  void (*gather_rows)(const float* x, int64_t hidden, const Routing& r, const DispatchPlan& plan, float* xg);
  void (*combine)(const Routing& r, const DispatchPlan& plan, const float* expert_out, const float* shared_out,
                  int64_t hidden, float* y);
  bool (*grouped_gemm_available)();
  bool (*supports_dtype)(Dtype dtype);
  void (*grouped_gemm)(const float* a, const float* b, const int64_t* offsets, int num_groups, int64_t k, int64_t n,
                       float* c, Dtype dtype, CudaGemmPath path);
  void (*grouped_swiglu)(const ExpertWeights& w, const float* xg, const int64_t* offsets, float* out, Dtype dtype,
                         CudaGemmPath path);
  // The layer: create returns an owning handle that destroy releases.
  void* (*layer_create)(const ExpertWeights& w, const ExpertWeights* shared, Dtype dtype, CudaGemmPath path);
  void (*layer_destroy)(void* layer);
  CudaLayerOutput (*layer_forward)(void* layer, const RouterConfig& cfg, const RouteRequest& req, RouterState* state,
                                   const float* x, float* y);
  void (*layer_forward_routed)(void* layer, const float* x, const Routing& r, const DispatchPlan& plan, float* y,
                               MoePhaseTimes* times);
  int64_t (*layer_hidden)(const void* layer);
  Dtype (*layer_dtype)(const void* layer);
  CudaLayerTimes (*time_layer)(const RouterConfig& cfg, const RouteRequest& req, const ExpertWeights& w,
                               const ExpertWeights* shared, Dtype dtype, const float* x, float* y, int repeats,
                               Routing* routing_out, std::vector<CudaLayerTimes>* per_repeat);
  void (*moe_forward)(const ExpertWeights& w, const ExpertWeights* shared, const float* x, const Routing& r,
                      const DispatchPlan& plan, float* y, MoePhaseTimes* times, Dtype dtype);
  CudaMeasurements (*measure_device)(const CudaMeasureConfig& cfg);
  void (*cached_attention)(const float* q, const float* k_cache, const float* v_cache, const int64_t* seq_offset,
                           int num_seqs, const int32_t* seq, const int32_t* pos, int64_t num_tokens, int heads,
                           int kv_heads, int head_dim, float* out);
  void (*cached_attention_device)(const float* q, const float* k_cache, const float* v_cache,
                                  const int64_t* seq_offset, const int32_t* seq, const int32_t* pos,
                                  int64_t num_tokens, int heads, int kv_heads, int head_dim, float* out);
};

// The module's one export: its table (static storage; never null).
inline constexpr const char* kCudaModuleEntry = "moesim_cuda_backend_module";
extern "C" const CudaModuleTable* moesim_cuda_backend_module();

}  // namespace moesim
