// libmoesim_cuda.so's one export (kernels/cuda_backend_module.hpp): the table of the backend's functions,
// each entry the device_impl function of kernels/cuda_backend.hpp itself; the layer behind an opaque handle.
#include "kernels/cuda_backend_module.hpp"

namespace moesim {
namespace {

CudaMoeLayer* as_layer(void* layer) { return static_cast<CudaMoeLayer*>(layer); }
const CudaMoeLayer* as_layer(const void* layer) { return static_cast<const CudaMoeLayer*>(layer); }

void* layer_create(const ExpertWeights& w, const ExpertWeights* shared, Dtype dtype, CudaGemmPath path) {
  return new CudaMoeLayer(w, shared, dtype, path);
}
void layer_destroy(void* layer) { delete as_layer(layer); }
CudaLayerOutput layer_forward(void* layer, const RouterConfig& cfg, const RouteRequest& req, RouterState* state,
                              const float* x, float* y) {
  return as_layer(layer)->forward(cfg, req, state, x, y);
}
void layer_forward_routed(void* layer, const float* x, const Routing& r, const DispatchPlan& plan, float* y,
                          MoePhaseTimes* times) {
  as_layer(layer)->forward_routed(x, r, plan, y, times);
}
int64_t layer_hidden(const void* layer) { return as_layer(layer)->hidden(); }
Dtype layer_dtype(const void* layer) { return as_layer(layer)->dtype(); }

CudaModuleTable make_table() {
  CudaModuleTable t;
  t.device_available = &cuda_device_available;
  t.device_description = &cuda_device_description;
  t.route = &route_cuda;
  t.token_choice_topk = &token_choice_topk_cuda;
  t.plan_dispatch = &plan_dispatch_cuda;
  t.gather_rows = &gather_rows_cuda;
  t.combine = &combine_cuda;
  t.grouped_gemm_available = &cuda_grouped_gemm_available;
  t.supports_dtype = &cuda_supports_dtype;
  t.grouped_gemm = &grouped_gemm_cuda;
  t.grouped_swiglu = &grouped_swiglu_cuda;
  t.layer_create = &layer_create;
  t.layer_destroy = &layer_destroy;
  t.layer_forward = &layer_forward;
  t.layer_forward_routed = &layer_forward_routed;
  t.layer_hidden = &layer_hidden;
  t.layer_dtype = &layer_dtype;
  t.time_layer = &time_layer_cuda;
  t.moe_forward = &moe_forward_cuda;
  t.measure_device = &measure_cuda_device;
  t.cached_attention = &cached_attention_cuda;
  t.cached_attention_device = &cached_attention_cuda_device;
  return t;
}

}  // namespace

extern "C" const CudaModuleTable* moesim_cuda_backend_module() {
  static const CudaModuleTable table = make_table();
  return &table;
}

}  // namespace moesim
