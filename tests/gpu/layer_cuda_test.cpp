// The whole layer on the CUDA backend (CudaMoeLayer, moe_forward_cuda) against the host pipeline:
// forward() returns route_omp's routing (integers exactly), plan_dispatch_omp's plan (exactly) and
// moe_forward_omp's output within a written tolerance, for token and expert choice, capacity drops,
// every layout and shared experts; bf16 within an NMSE bound of the double reference; two runs give
// the same bytes; the phase times add up. Label gpu; each test skips with the reason without a device.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "tests/gpu/cuda_test_support.hpp"
#include "kernels/cuda_backend.hpp"
#include "kernels/moe_layer.hpp"
#include "router/route.hpp"
#include "tests/support/kernel_support.hpp"
#include "tests/support/router_support.hpp"

namespace moesim {
namespace {

struct LayerCase {
  std::string name;
  RouterConfig cfg;
  int shared_experts;
};

// Test names and failure messages show the case name, not the bytes of the struct.
void PrintTo(const LayerCase& c, std::ostream* os) { *os << c.name; }

std::vector<LayerCase> layer_cases() {
  std::vector<LayerCase> cases;
  RouterConfig c;
  cases.push_back({"TokenChoiceDropless", c, 0});
  c.capacity_factor = 1.0;
  c.layout = Layout::block;
  c.block_size = 16;
  cases.push_back({"TokenChoiceCapacityBlockLayout", c, 0});
  c.layout = Layout::capacity;
  c.renormalize_after_drop = true;
  cases.push_back({"TokenChoiceCapacityLayoutShared", c, 2});
  RouterConfig ec;
  ec.gating = Gating::expert_choice;
  cases.push_back({"ExpertChoice", ec, 1});
  RouterConfig g;
  g.gating = Gating::group_limited;
  g.score = ScoreFunction::sigmoid;
  g.groups = 3;
  g.topk_groups = 2;
  g.layout = Layout::block;
  g.block_size = 8;
  cases.push_back({"GroupLimitedBlockLayout", g, 0});
  return cases;
}

class LayerCuda : public test::CudaTestWithParam<LayerCase> {};

// Tolerance 1e-4 + 1e-3 * |ref| per element: two float32 GEMM libraries sum in different orders and the
// device expf differs from the host's in the last bits; the same bound moe_layer_test uses against the
// double reference.
TEST_P(LayerCuda, ForwardMatchesHostPipeline) {
  const LayerCase& lc = GetParam();
  const uint64_t seed = 8100;
  const int num_e = 6, k = 2;
  const int64_t hidden = 32, ffn = 48;
  const ExpertWeights w = make_expert_weights(num_e, hidden, ffn, seed);
  const ExpertWeights shared = make_expert_weights(lc.shared_experts, hidden, ffn, seed + 1);
  const ExpertWeights* shared_ptr = lc.shared_experts > 0 ? &shared : nullptr;
  CudaMoeLayer layer(w, shared_ptr, Dtype::fp32);
  for (int64_t n : {0, 1, 100}) {
    const std::vector<float> logits = test::skewed_logits(n, num_e, seed + n, 2, 1.0);
    const std::vector<float> x = test::random_floats(seed + 2 + n, n * hidden, -1.0f, 1.0f);
    const RouteRequest req = test::make_request(logits, n, num_e, k, seed);
    std::vector<float> y(n * hidden, 5.0f), y_host(n * hidden);
    RouterState state_cuda, state_host;
    const CudaLayerOutput out = layer.forward(lc.cfg, req, &state_cuda, x.data(), y.data());
    const Routing r = route_omp(lc.cfg, req, &state_host);
    const DispatchPlan plan = plan_dispatch_omp(r, lc.cfg.layout, lc.cfg.block_size);
    moe_forward_omp(w, shared_ptr, x.data(), r, plan, y_host.data(), nullptr);
    const std::string what = lc.name + " N " + std::to_string(n) + " seed " + std::to_string(seed);
    ASSERT_TRUE(test::same_routing(out.routing, r)) << what;
    ASSERT_TRUE(test::plans_equal(out.plan, plan)) << what;
    EXPECT_TRUE(test::all_near(y, y_host, 1e-4, 1e-3)) << what;
    EXPECT_EQ(state_cuda.batches_seen, state_host.batches_seen) << what;
  }
}

TEST_P(LayerCuda, SameInputsSameBytesAndPhasesAddUp) {
  const LayerCase& lc = GetParam();
  const uint64_t seed = 8200;
  const int num_e = 6, k = 2;
  const int64_t n = 300, hidden = 64, ffn = 32;
  const ExpertWeights w = make_expert_weights(num_e, hidden, ffn, seed);
  const ExpertWeights shared = make_expert_weights(lc.shared_experts, hidden, ffn, seed + 1);
  CudaMoeLayer layer(w, lc.shared_experts > 0 ? &shared : nullptr, Dtype::fp32);
  const std::vector<float> logits = test::random_logits(n, num_e, seed);
  const std::vector<float> x = test::random_floats(seed + 2, n * hidden, -1.0f, 1.0f);
  const RouteRequest req = test::make_request(logits, n, num_e, k, seed);
  std::vector<float> a(n * hidden), b(n * hidden), c(n * hidden);
  const CudaLayerOutput first = layer.forward(lc.cfg, req, nullptr, x.data(), a.data());
  layer.forward(lc.cfg, req, nullptr, x.data(), b.data());
  EXPECT_TRUE(test::same_bytes(a, b)) << lc.name << " seed " << seed;
  MoePhaseTimes phases;
  layer.forward_routed(x.data(), first.routing, first.plan, c.data(), &phases);
  EXPECT_TRUE(test::same_bytes(a, c)) << lc.name << " seed " << seed << ": forward_routed differs from forward";
  const CudaLayerTimes& t = first.times;
  for (double v : {t.router_s, t.dispatch_s, t.experts_s, t.combine_s}) EXPECT_GE(v, 0.0);
  EXPECT_GT(t.layer_s, 0.0);
  EXPECT_NEAR(t.layer_s, t.router_s + t.dispatch_s + t.experts_s + t.combine_s, 1e-3 * t.layer_s + 1e-5);
  EXPECT_GT(phases.experts_s, 0.0);
}

// The pipeline's timing entry: a fresh router state per repeat (aux-free bias would otherwise drift), the
// last run's routing and output, and medians that are positive and no larger than the layer's.
TEST_P(LayerCuda, TimeLayerReturnsMediansAndTheLastRun) {
  const LayerCase& lc = GetParam();
  const uint64_t seed = 8250;
  const int num_e = 6, k = 2;
  const int64_t n = 64, hidden = 16, ffn = 16;
  const ExpertWeights w = make_expert_weights(num_e, hidden, ffn, seed);
  const ExpertWeights shared = make_expert_weights(lc.shared_experts, hidden, ffn, seed + 1);
  const ExpertWeights* shared_ptr = lc.shared_experts > 0 ? &shared : nullptr;
  const std::vector<float> logits = test::random_logits(n, num_e, seed);
  const std::vector<float> x = test::random_floats(seed + 2, n * hidden, -1.0f, 1.0f);
  const RouteRequest req = test::make_request(logits, n, num_e, k, seed);
  std::vector<float> y(n * hidden), y_host(n * hidden);
  Routing r_cuda;
  const CudaLayerTimes t = time_layer_cuda(lc.cfg, req, w, shared_ptr, Dtype::fp32, x.data(), y.data(), 3, &r_cuda);
  const Routing r = route_omp(lc.cfg, req, nullptr);
  EXPECT_TRUE(test::same_routing(r_cuda, r)) << lc.name << " seed " << seed;
  moe_forward_omp(w, shared_ptr, x.data(), r, plan_dispatch_omp(r, lc.cfg.layout, lc.cfg.block_size), y_host.data(),
                  nullptr);
  EXPECT_TRUE(test::all_near(y, y_host, 1e-4, 1e-3)) << lc.name << " seed " << seed;
  EXPECT_GT(t.layer_s, 0.0);
  for (double v : {t.router_s, t.dispatch_s, t.experts_s, t.combine_s}) {
    EXPECT_GE(v, 0.0);
    EXPECT_LE(v, t.layer_s * 1.001 + 1e-6);
  }
}

INSTANTIATE_TEST_SUITE_P(Routers, LayerCuda, ::testing::ValuesIn(layer_cases()),
                         [](const ::testing::TestParamInfo<LayerCase>& info) { return info.param.name; });

class LayerCudaDtypes : public test::CudaTest {};

// bf16 and fp16 weights and activations with fp32 accumulation against the double reference: NMSE bounds
// of 2e-3 (bf16: 8 significant bits, rounded at the gather, up-projection, activation and output) and
// 5e-5 (fp16: 11 bits). moe_forward_cuda with shared experts, every layout.
TEST_F(LayerCudaDtypes, HalfPrecisionWithinNmseBound) {
  const uint64_t seed = 8300;
  const int num_e = 5, k = 2;
  const int64_t n = 120, hidden = 48, ffn = 64;
  const ExpertWeights w = make_expert_weights(num_e, hidden, ffn, seed);
  const ExpertWeights shared = make_expert_weights(1, hidden, ffn, seed + 1);
  Routing r = test::random_token_choice(seed, n, num_e, k, 0.1);
  const std::vector<float> x = test::random_floats(seed + 2, n * hidden, -1.0f, 1.0f);
  std::vector<float> ref(n * hidden);
  moe_forward_ref(w, &shared, x.data(), r, ref.data());
  for (Dtype d : {Dtype::bf16, Dtype::fp16, Dtype::tf32}) {
    for (Layout layout : {Layout::dropless, Layout::block, Layout::capacity}) {
      const DispatchPlan plan = plan_dispatch_omp(r, layout, 32);
      std::vector<float> y(n * hidden, 9.0f);
      moe_forward_cuda(w, &shared, x.data(), r, plan, y.data(), nullptr, d);
      double num = 0, den = 0;
      for (size_t i = 0; i < y.size(); ++i) {
        num += (static_cast<double>(y[i]) - ref[i]) * (static_cast<double>(y[i]) - ref[i]);
        den += static_cast<double>(ref[i]) * ref[i];
      }
      const double bound = d == Dtype::bf16 ? 2e-3 : 5e-5;
      EXPECT_LE(num / den, bound) << to_string(d) << " layout " << test::layout_name(layout) << " seed " << seed;
    }
  }
}

// Timings cannot be asserted, but every figure must be measured (positive, finite) and one per row count.
TEST_F(LayerCudaDtypes, DeviceMeasurementsAreFilled) {
  CudaMeasureConfig cfg;
  cfg.hidden = 64;
  cfg.ffn = 96;
  cfg.expert_rows = {1, 7, 64};
  cfg.copy_bytes = 1 << 20;
  cfg.repeats = 3;
  for (Dtype d : {Dtype::fp32, Dtype::bf16}) {
    cfg.dtype = d;
    const CudaMeasurements m = measure_cuda_device(cfg);
    EXPECT_FALSE(m.device.empty());
    EXPECT_GT(m.copy_bandwidth_bytes_per_s, 0.0);
    EXPECT_GT(m.launch_overhead_s, 0.0);
    ASSERT_EQ(m.expert.size(), cfg.expert_rows.size());
    for (size_t i = 0; i < m.expert.size(); ++i) {
      EXPECT_EQ(m.expert[i].rows, cfg.expert_rows[i]);
      EXPECT_GT(m.expert[i].seconds, 0.0);
      EXPECT_TRUE(std::isfinite(m.expert[i].flops_per_s) && m.expert[i].flops_per_s > 0.0);
    }
  }
  cfg.expert_rows.clear();
  EXPECT_THROW(measure_cuda_device(cfg), PreconditionError);
}

TEST_F(LayerCudaDtypes, MismatchedInputsAreRejected) {
  const ExpertWeights w = make_expert_weights(4, 16, 16, 1);
  const ExpertWeights other = make_expert_weights(1, 8, 16, 2);
  EXPECT_THROW(CudaMoeLayer(w, &other, Dtype::fp32), PreconditionError);
  EXPECT_THROW(CudaMoeLayer(w, nullptr, Dtype::int8), PreconditionError);
  CudaMoeLayer layer(w, nullptr, Dtype::fp32);
  const Routing r = test::random_token_choice(3, 10, 5, 2, 0.0);  // 5 experts, the layer has 4
  const DispatchPlan plan = plan_dispatch_omp(r, Layout::dropless, 1);
  std::vector<float> x(10 * 16), y(10 * 16);
  EXPECT_THROW(layer.forward_routed(x.data(), r, plan, y.data(), nullptr), PreconditionError);
}

}  // namespace
}  // namespace moesim
