// moesim_bench cases beside the layer ones: dispatch-only shapes (plan, gather, combine), the router alone
// (every gating, checked against route_ref), small experts at one thread against all, and the cost model.
// Each checks its output against the references before timing unless --no-verify. Host only.
#include "tests/bench/moe_bench_support.hpp"

#include <benchmark/benchmark.h>
#include <cblas.h>
#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>
#ifdef _OPENMP
#include <omp.h>
#endif
#include "src/cost/hardware_profile.hpp"
#include "src/cost/placement.hpp"
#include "kernels/grouped_gemm.hpp"
#include "kernels/moe_layer.hpp"
#include "router/route.hpp"
#include "tests/bench/bench_inputs.hpp"
#include "tests/bench/moe_bench.hpp"

namespace moesim::bench::detail {

// ---- dispatch-only cases -------------------------------------------------------------------------

struct DispatchCase {
  DispatchShape shape;
  std::vector<float> x, logits, xg, y;
  Routing routing;
  DispatchPlan plan;
  std::vector<std::string> verified;

  explicit DispatchCase(const DispatchShape& s) : shape(s) {
    x = uniform_tensor(kSeed, kTensorHidden, s.num_tokens * s.hidden, 1.0f);
    logits = uniform_tensor(kSeed, kTensorLogits, s.num_tokens * s.num_experts, 1.0f);
    RouteRequest req;
    req.logits = logits.data();
    req.num_tokens = s.num_tokens;
    req.num_experts = s.num_experts;
    req.top_k = s.top_k;
    routing = route_omp(mixtral_router(), req, nullptr);
    plan = plan_dispatch_omp(routing, Layout::dropless, 1);
    xg.resize(static_cast<size_t>(plan.rows * s.hidden));
    y.resize(x.size());
  }
  bool first(const std::string& phase) {
    if (std::find(verified.begin(), verified.end(), phase) != verified.end()) return false;
    verified.push_back(phase);
    return true;
  }
  double bytes() const { return 4.0 * shape.hidden * (3.0 * plan.num_kept + static_cast<double>(shape.num_tokens)); }
};

DispatchCase& dispatch_case(const DispatchShape& s) {
  static std::unique_ptr<DispatchCase> held;
  if (!held || held->shape.label() != s.label()) {
    held.reset();
    held = std::make_unique<DispatchCase>(s);
  }
  return *held;
}

// phase: 0 permutation, 1 gather, 2 combine (identity experts: expert_out = gathered rows), 3 all three.
void bench_dispatch(State& state, DispatchShape s, int phase) {
  DispatchCase& c = dispatch_case(s);
  const int64_t d = s.hidden;
  auto run = [&] {
    if (phase == 0 || phase == 3) benchmark::DoNotOptimize(plan_dispatch_omp(c.routing, Layout::dropless, 1));
    if (phase == 1 || phase == 3) gather_rows_omp(c.x.data(), d, c.routing, c.plan, c.xg.data());
    if (phase == 2 || phase == 3) combine_omp(c.routing, c.plan, c.xg.data(), nullptr, d, c.y.data());
    benchmark::ClobberMemory();
  };
  if (c.first("dispatch" + std::to_string(phase))) {
    run();
    if (options().verify) {
      if (phase == 0 || phase == 3) {
        const std::string m = compare_plans(plan_dispatch_omp(c.routing, Layout::dropless, 1),
                                            plan_dispatch_ref(c.routing, Layout::dropless, 1));
        if (!m.empty()) return fail(state, m);
      }
      if (phase >= 1) {
        std::vector<float> want(c.xg.size());
        gather_rows_ref(c.x.data(), d, c.routing, c.plan, want.data());
        if (std::memcmp(want.data(), c.xg.data(), want.size() * sizeof(float)) != 0) {
          return fail(state, "gather differs from gather_rows_ref");
        }
      }
      if (phase >= 2) {
        // Identity experts: y[t] = (sum of t's weights) x[t]; float sums of k <= 8 terms.
        for (int64_t t = 0; t < s.num_tokens; ++t) {
          double wsum = 0;
          for (int j = 0; j < s.top_k; ++j) wsum += c.routing.weight[t * s.top_k + j];
          for (int64_t col = 0; col < d; col += 7) {
            const double want_v = wsum * c.x[t * d + col];
            if (!(std::fabs(c.y[t * d + col] - want_v) <= 1e-5 * (1.0 + std::fabs(want_v)))) {
              return fail(state, "combine of token " + std::to_string(t) + " differs from the weighted sum");
            }
          }
        }
      }
    }
  }
  for (auto _ : state) run();
  const double bytes = phase == 0 ? 0.0 : phase == 1 ? 8.0 * c.plan.rows * d
                                      : phase == 2 ? 4.0 * d * (c.plan.num_kept + s.num_tokens)
                                                   : c.bytes();
  if (bytes > 0) {
    state.counters["bytes"] = bytes;
    state.counters["bytes_per_second"] = benchmark::Counter(bytes, benchmark::Counter::kIsIterationInvariantRate);
  }
}

// ---- router only ---------------------------------------------------------------------------------

struct RouterCase {
  RouterShape shape;
  std::vector<float> logits;
  bool verified = false;
  explicit RouterCase(RouterShape s)
      : shape(s), logits(uniform_tensor(kSeed, kTensorLogits, s.num_tokens * s.num_experts, 1.0f)) {}
  RouteRequest request() const {
    RouteRequest req;
    req.logits = logits.data();
    req.num_tokens = shape.num_tokens;
    req.num_experts = shape.num_experts;
    req.top_k = shape.top_k;
    return req;
  }
};

RouterCase& router_case(RouterShape s) {
  static std::map<std::tuple<int64_t, int, int>, std::unique_ptr<RouterCase>> cases;
  auto& c = cases[{s.num_tokens, s.num_experts, s.top_k}];
  if (!c) c = std::make_unique<RouterCase>(s);
  return *c;
}

void bench_router(State& state, RouterShape shape, RouterConfig cfg) {
  RouterCase& c = router_case(shape);
  if (!c.verified) {
    c.verified = true;
    const Routing got = route_omp(cfg, c.request(), nullptr);
    if (options().verify) {
      std::string m = compare_routing(got, route_ref(cfg, c.request(), nullptr));
      // The first 4096 tokens again with logits rounded to quarters: ties everywhere (lower expert wins).
      RouteRequest ties = c.request();
      ties.num_tokens = std::min<int64_t>(4096, shape.num_tokens);
      std::vector<float> rounded(c.logits.begin(), c.logits.begin() + ties.num_tokens * shape.num_experts);
      for (float& v : rounded) v = std::round(v * 4.0f) / 4.0f;
      ties.logits = rounded.data();
      if (m.empty()) m = compare_routing(route_omp(cfg, ties, nullptr), route_ref(cfg, ties, nullptr));
      if (!m.empty()) return fail(state, m);
    }
  }
  for (auto _ : state) benchmark::DoNotOptimize(route_omp(cfg, c.request(), nullptr));
  const double bytes = 4.0 * shape.num_tokens * shape.num_experts;
  state.counters["bytes"] = bytes;
  state.counters["bytes_per_second"] = benchmark::Counter(bytes, benchmark::Counter::kIsIterationInvariantRate);
}

// The floor of any router: one parallel pass reading the logits (a sum).
void bench_router_read(State& state, RouterShape shape) {
  RouterCase& c = router_case(shape);
  const int64_t n = shape.num_tokens * shape.num_experts;
  for (auto _ : state) {
    float sum = 0.0f;
#pragma omp parallel for reduction(+ : sum) schedule(static)
    for (int64_t i = 0; i < n; ++i) sum += c.logits[i];
    benchmark::DoNotOptimize(sum);
  }
  state.counters["bytes"] = 4.0 * n;
  state.counters["bytes_per_second"] =
      benchmark::Counter(4.0 * n, benchmark::Counter::kIsIterationInvariantRate);
}

// ---- small experts: M < 16 rows per expert, 1 thread against all threads -------------------------

struct SmallCase {
  static constexpr int kExperts = 16;
  static constexpr int64_t kRows = 8, kHidden = 1024, kFfn = 1024;
  ExpertWeights w = make_expert_weights(kExperts, kHidden, kFfn, kSeed);
  std::vector<float> xg = uniform_tensor(kSeed, kTensorHidden, kExperts * kRows * kHidden, 1.0f);
  std::vector<float> out = std::vector<float>(static_cast<size_t>(kExperts * kRows * kHidden));
  std::vector<float> scratch = std::vector<float>(static_cast<size_t>(kExperts * kRows * 2 * kFfn));
  std::vector<int64_t> offsets;
  DispatchPlan plan;
  bool verified = false;
  SmallCase() {
    for (int e = 0; e <= kExperts; ++e) offsets.push_back(e * kRows);
    plan.num_experts = kExperts;
    plan.rows = kExperts * kRows;
    plan.padded_offsets = offsets;
    for (int64_t r = 0; r < plan.rows; ++r) plan.row_assignment.push_back(static_cast<int32_t>(r));
  }
};

SmallCase& small_case() {
  static SmallCase c;
  return c;
}

// which: 0 grouped SwiGLU over 16 experts of 8 rows, 1 one sgemm of 8 rows (8 x 1024 x 1024).
void bench_small(State& state, int which, int threads) {
  SmallCase& c = small_case();
  const int saved = max_threads();
  set_threads(threads);
  auto run = [&] {
    if (which == 0) {
      grouped_swiglu_omp(c.w, c.xg.data(), c.offsets.data(), c.out.data(), c.scratch.data());
    } else {
      sgemm(c.xg.data(), c.w.w1.data(), c.out.data(), SmallCase::kRows, SmallCase::kHidden, SmallCase::kFfn);
    }
    benchmark::ClobberMemory();
  };
  run();
  if (which == 0 && !c.verified) {
    c.verified = true;
    if (options().verify) {
      const std::string m = check_swiglu_rows(c.w, c.plan, c.xg, c.out);
      if (!m.empty()) {
        set_threads(saved);
        return fail(state, m);
      }
    }
  }
  for (auto _ : state) run();
  set_threads(saved);
  const double flops = (which == 0 ? 6.0 * SmallCase::kExperts : 2.0) * SmallCase::kRows * SmallCase::kHidden *
                       SmallCase::kFfn;
  state.counters["flops_per_second"] = benchmark::Counter(flops, benchmark::Counter::kIsIterationInvariantRate);
}

// ---- cost model ----------------------------------------------------------------------------------

// One cost-model evaluation of a layer at a model's real size: Mixtral 8x7B (hidden 4096, ffn 14336,
// E 8, top-2) or DeepSeek-V3 (7168, 2048, E 256, top-8), 16384 tokens, uneven loads.
void bench_cost_model(State& state, int num_experts, int devices) {
  static const HardwareProfile hw = load_hardware_profile(HardwareRef{}, "");
  const bool mixtral = num_experts == 8;
  LayerCostInput in;
  in.hidden = mixtral ? 4096 : 7168;
  in.ffn = mixtral ? 14336 : 2048;
  in.num_experts = num_experts;
  in.top_k = mixtral ? 2 : 8;
  in.format = Dtype::bf16;
  in.num_tokens = 16384;
  in.load.resize(num_experts);
  const int64_t mean = in.num_tokens * in.top_k / num_experts;
  for (int e = 0; e < num_experts; ++e) in.load[e] = mean / 2 + (e * 37) % mean;
  if (devices > 1) {
    in.placement.kind = PlacementKind::expert_parallel;
    in.placement.devices = devices;
  }
  const LayerCost first = model_moe_layer(hw, in);
  if (options().verify && !(first.actual.quantized_s > 0 && first.balanced.quantized_s > 0)) {
    return fail(state, "cost model returned a non-positive time");
  }
  for (auto _ : state) benchmark::DoNotOptimize(model_moe_layer(hw, in));
  state.counters["evaluations_per_second"] =
      benchmark::Counter(static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
}

}  // namespace moesim::bench::detail
