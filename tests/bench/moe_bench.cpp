// moesim_bench cases (Google Benchmark): per phase of the host MoE layer (gating, permutation, gather,
// grouped GEMM, combine, full layer) over the layer shapes, dispatch-only and router-only shapes,
// small-expert thread scaling and the cost model, each beside this machine's ceilings timed in the same
// process (large copy bandwidth; dense sgemm over the same total rows). Every case checks its output
// against the serial references (kernels/*_ref.hpp, route_ref) once before timing, unless --no-verify.
// float32 inputs from bench_inputs.hpp (the PyTorch reference rebuilds them). Host only (g++, OpenMP).
#include "tests/bench/moe_bench.hpp"

#include <benchmark/benchmark.h>
#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <sstream>
#include <string>
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
#include "tests/bench/moe_bench_support.hpp"

namespace moesim::bench {

using namespace detail;

BenchOptions& options() {
  static BenchOptions o;
  return o;
}

namespace {

using benchmark::State;

// ---- layer cases --------------------------------------------------------------------------------

struct LayerCase {
  LayerShape shape;
  RouterConfig router = mixtral_router();
  std::vector<float> x, router_w, logits;
  ExpertWeights w, dense;  // dense: expert 0 alone, the one-GEMM baseline over the same rows
  Routing routing, balanced;
  DispatchPlan plan, balanced_plan, dense_plan;
  std::vector<float> xg, expert_out, scratch, y, balanced_xg;
  std::vector<std::string> verified;  // phases already checked (and so warmed up)

  explicit LayerCase(const LayerShape& s) : shape(s) {
    const int64_t n = s.num_tokens, d = s.hidden;
    x = uniform_tensor(kSeed, kTensorHidden, n * d, 1.0f);
    router_w = uniform_tensor(kSeed, kTensorRouter, d * s.num_experts, router_scale(d));
    logits.resize(static_cast<size_t>(n * s.num_experts));
    sgemm(x.data(), router_w.data(), logits.data(), n, d, s.num_experts);
    w = make_expert_weights(s.num_experts, d, s.ffn, kSeed);
    dense.num_experts = 1;
    dense.hidden = d;
    dense.ffn = s.ffn;
    const size_t per = static_cast<size_t>(d * s.ffn);
    dense.w1.assign(w.w1.begin(), w.w1.begin() + per);
    dense.w3.assign(w.w3.begin(), w.w3.begin() + per);
    dense.w2.assign(w.w2.begin(), w.w2.begin() + per);
    routing = route_omp(router, request(), nullptr);
    plan = plan_dispatch_omp(routing, Layout::dropless, 1);
    RouterConfig bal = router;
    bal.gating = Gating::balanced;
    balanced = route_omp(bal, request(), nullptr);
    balanced_plan = plan_dispatch_omp(balanced, Layout::dropless, 1);
    dense_plan.num_experts = 1;
    dense_plan.rows = plan.rows;
    dense_plan.padded_offsets = {0, plan.rows};
    dense_plan.row_assignment = plan.row_assignment;
    const size_t rows = static_cast<size_t>(std::max(plan.rows, balanced_plan.rows));
    xg.resize(rows * d);
    balanced_xg.resize(rows * d);
    expert_out.resize(rows * d);
    scratch.resize(rows * 2 * s.ffn);
    y.resize(static_cast<size_t>(n * d));
    gather_rows_omp(x.data(), d, routing, plan, xg.data());
    gather_rows_omp(x.data(), d, balanced, balanced_plan, balanced_xg.data());
  }

  RouteRequest request() const {
    RouteRequest req;
    req.logits = logits.data();
    req.num_tokens = shape.num_tokens;
    req.num_experts = shape.num_experts;
    req.top_k = shape.top_k;
    req.seed = kSeed;
    return req;
  }

  bool first(const std::string& phase) {
    if (std::find(verified.begin(), verified.end(), phase) != verified.end()) return false;
    verified.push_back(phase);
    return true;
  }

  // The full layer as a user runs it: router linear, gating, dispatch plan, gather, experts, combine.
  void full_layer(MoePhaseTimes* times) {
    sgemm(x.data(), router_w.data(), logits.data(), shape.num_tokens, shape.hidden, shape.num_experts);
    const Routing r = route_omp(router, request(), nullptr);
    const DispatchPlan p = plan_dispatch_omp(r, Layout::dropless, 1);
    moe_forward_omp(w, nullptr, x.data(), r, p, y.data(), times);
  }

  double gemm_flops(int64_t rows) const { return 6.0 * rows * shape.hidden * shape.ffn; }
  double router_flops() const { return 2.0 * shape.num_tokens * shape.hidden * shape.num_experts; }
  // Bytes the dispatch must move: gather reads and writes N k rows, combine reads N k rows, writes N.
  double dispatch_bytes() const {
    return 4.0 * shape.hidden * (3.0 * plan.num_kept + static_cast<double>(shape.num_tokens));
  }
};

// One shape is held at a time (the largest needs about 3 GB); cases run grouped by shape.
LayerCase& layer_case(const LayerShape& s) {
  static std::unique_ptr<LayerCase> held;
  if (!held || held->shape.label() != s.label()) {
    held.reset();
    held = std::make_unique<LayerCase>(s);
  }
  return *held;
}

void bench_gating(State& state, LayerShape s) {
  LayerCase& c = layer_case(s);
  if (c.first("gating")) {
    const Routing got = route_omp(c.router, c.request(), nullptr);
    if (options().verify) {
      const std::string m = compare_routing(got, route_ref(c.router, c.request(), nullptr));
      if (!m.empty()) return fail(state, m);
    }
  }
  for (auto _ : state) benchmark::DoNotOptimize(route_omp(c.router, c.request(), nullptr));
  state.counters["bytes"] = 4.0 * s.num_tokens * s.num_experts;
}

void bench_permutation(State& state, LayerShape s) {
  LayerCase& c = layer_case(s);
  if (c.first("permutation")) {
    const DispatchPlan got = plan_dispatch_omp(c.routing, Layout::dropless, 1);
    if (options().verify) {
      const std::string m = compare_plans(got, plan_dispatch_ref(c.routing, Layout::dropless, 1));
      if (!m.empty()) return fail(state, m);
    }
  }
  for (auto _ : state) benchmark::DoNotOptimize(plan_dispatch_omp(c.routing, Layout::dropless, 1));
}

void bench_gather(State& state, LayerShape s) {
  LayerCase& c = layer_case(s);
  const int64_t d = s.hidden;
  if (c.first("gather")) {
    gather_rows_omp(c.x.data(), d, c.routing, c.plan, c.xg.data());
    if (options().verify) {
      std::vector<float> want(static_cast<size_t>(c.plan.rows * d));
      gather_rows_ref(c.x.data(), d, c.routing, c.plan, want.data());
      if (std::memcmp(want.data(), c.xg.data(), want.size() * sizeof(float)) != 0) {
        return fail(state, "gather differs from gather_rows_ref");
      }
    }
  }
  for (auto _ : state) {
    gather_rows_omp(c.x.data(), d, c.routing, c.plan, c.xg.data());
    benchmark::ClobberMemory();
  }
  state.counters["bytes"] = 8.0 * c.plan.rows * d;
}

// which: 0 routed experts (actual routing), 1 routed experts under balanced routing, 2 one dense expert
// over the same rows (grouped_swiglu_omp with one group), 3 the three sgemm calls alone (the ceiling).
void bench_experts(State& state, LayerShape s, int which) {
  LayerCase& c = layer_case(s);
  const DispatchPlan& plan = which == 1 ? c.balanced_plan : which == 0 ? c.plan : c.dense_plan;
  const std::vector<float>& xg = which == 1 ? c.balanced_xg : c.xg;
  const ExpertWeights& w = which >= 2 ? c.dense : c.w;
  const int64_t rows = plan.rows, d = s.hidden, f = s.ffn;
  float* g = c.scratch.data();
  float* u = g + rows * f;
  auto run = [&] {
    if (which == 3) {
      sgemm(xg.data(), w.w1.data(), g, rows, d, f);
      sgemm(xg.data(), w.w3.data(), u, rows, d, f);
      sgemm(g, w.w2.data(), c.expert_out.data(), rows, f, d);
    } else {
      grouped_swiglu_omp(w, xg.data(), plan.padded_offsets.data(), c.expert_out.data(), c.scratch.data());
    }
  };
  const std::string phase = "experts" + std::to_string(which);
  if (c.first(phase)) {
    run();
    if (options().verify) {
      std::string m;
      if (which == 3) {
        // Row 0 of the last GEMM: expert_out = g W2 with g = x W1 (the unmodified first product).
        std::vector<double> want(static_cast<size_t>(d), 0.0);
        std::vector<double> g0(static_cast<size_t>(f), 0.0);
        for (int64_t j = 0; j < f; ++j) {
          for (int64_t i = 0; i < d; ++i) g0[j] += static_cast<double>(xg[i]) * w.w1[i * f + j];
        }
        for (int64_t j = 0; j < f; ++j) {
          for (int64_t col = 0; col < d; ++col) want[col] += static_cast<double>(g[j]) * w.w2[j * d + col];
        }
        m = compare_floats(g, g0, "x W1 row 0");
        if (m.empty()) m = compare_floats(c.expert_out.data(), want, "g W2 row 0");
      } else {
        m = check_swiglu_rows(w, plan, xg, c.expert_out);
      }
      if (!m.empty()) return fail(state, m);
    }
  }
  for (auto _ : state) {
    run();
    benchmark::ClobberMemory();
  }
  state.counters["flops"] = c.gemm_flops(rows);
  state.counters["flops_per_second"] =
      benchmark::Counter(c.gemm_flops(rows), benchmark::Counter::kIsIterationInvariantRate);
}

void bench_combine(State& state, LayerShape s) {
  LayerCase& c = layer_case(s);
  const int64_t d = s.hidden;
  if (c.first("combine")) {
    combine_omp(c.routing, c.plan, c.xg.data(), nullptr, d, c.y.data());
    if (options().verify) {
      std::vector<float> want(c.y.size());
      combine_ref(c.routing, c.plan, c.xg.data(), nullptr, d, want.data());
      for (size_t i = 0; i < want.size(); ++i) {
        // float accumulation of k <= 8 products against a double sum rounded once.
        if (!(std::fabs(c.y[i] - want[i]) <= 1e-5f * (1.0f + std::fabs(want[i])))) {
          return fail(state, "combine differs from combine_ref at " + std::to_string(i));
        }
      }
    }
  }
  for (auto _ : state) {
    combine_omp(c.routing, c.plan, c.xg.data(), nullptr, d, c.y.data());
    benchmark::ClobberMemory();
  }
  state.counters["bytes"] = 4.0 * d * (c.plan.num_kept + s.num_tokens);
}

void bench_layer(State& state, LayerShape s) {
  LayerCase& c = layer_case(s);
  if (c.first("layer")) {
    c.full_layer(nullptr);
    if (options().verify) {
      // Sampled tokens against the serial expert reference, summed in double over the token's slots.
      std::vector<double> acc, out;
      for (int64_t t : sample_rows(s.num_tokens, 24)) {
        acc.assign(static_cast<size_t>(s.hidden), 0.0);
        for (int j = 0; j < s.top_k; ++j) {
          const int64_t a = t * s.top_k + j;
          swiglu_token_ref(c.w, c.routing.expert[a], c.x.data() + t * s.hidden, out);
          for (int64_t col = 0; col < s.hidden; ++col) acc[col] += c.routing.weight[a] * out[col];
        }
        const std::string m = compare_floats(c.y.data() + t * s.hidden, acc, "token " + std::to_string(t));
        if (!m.empty()) return fail(state, m);
      }
    }
  }
  MoePhaseTimes times;
  double dispatch = 0, experts = 0, combine = 0;
  for (auto _ : state) {
    c.full_layer(&times);
    dispatch += times.dispatch_s;
    experts += times.experts_s;
    combine += times.combine_s;
  }
  const double iters = static_cast<double>(state.iterations());
  state.counters["gather_s"] = dispatch / iters;
  state.counters["experts_s"] = experts / iters;
  state.counters["combine_s"] = combine / iters;
  state.counters["flops"] = c.gemm_flops(c.plan.rows) + c.router_flops();
  state.counters["dispatch_bytes"] = c.dispatch_bytes();
}

// ---- registration --------------------------------------------------------------------------------

double min_of(const std::vector<double>& v) { return *std::min_element(v.begin(), v.end()); }

// Heavy cases (seconds per call) run one iteration per repetition; light ones let the library pick.
benchmark::internal::Benchmark* configure(benchmark::internal::Benchmark* b, bool heavy) {
  b->Unit(benchmark::kMillisecond)->UseRealTime()->MeasureProcessCPUTime()->ComputeStatistics("min", min_of);
  if (heavy) {
    b->Iterations(1)->Repetitions(options().heavy_repetitions);
  } else {
    b->MinTime(options().min_time_s)->Repetitions(options().repetitions);
  }
  // The console shows the aggregates; the JSON file keeps every repetition (scripts/bench.sh reads them).
  return b->DisplayAggregatesOnly(true);
}

}  // namespace

void register_benchmarks() {
  using benchmark::RegisterBenchmark;
  for (const LayerShape& s : layer_shapes()) {
    const std::string p = "layer/" + s.label() + "/";
    const bool heavy = 6.0 * s.num_tokens * s.top_k * s.hidden * s.ffn > 2e10;
    configure(RegisterBenchmark((p + "ceiling_copy").c_str(), run_copy_ceiling), false);
    configure(RegisterBenchmark((p + "gating").c_str(), bench_gating, s), false);
    configure(RegisterBenchmark((p + "permutation").c_str(), bench_permutation, s), false);
    configure(RegisterBenchmark((p + "gather").c_str(), bench_gather, s), false);
    configure(RegisterBenchmark((p + "grouped_gemm").c_str(), bench_experts, s, 0), heavy);
    configure(RegisterBenchmark((p + "grouped_gemm_balanced").c_str(), bench_experts, s, 1), heavy);
    configure(RegisterBenchmark((p + "dense_swiglu").c_str(), bench_experts, s, 2), heavy);
    configure(RegisterBenchmark((p + "ceiling_sgemm").c_str(), bench_experts, s, 3), heavy);
    configure(RegisterBenchmark((p + "combine").c_str(), bench_combine, s), false);
    configure(RegisterBenchmark((p + "layer").c_str(), bench_layer, s), heavy);
  }
  for (const DispatchShape& s : dispatch_shapes()) {
    const std::string p = "dispatch/" + s.label() + "/";
    configure(RegisterBenchmark((p + "ceiling_copy").c_str(), run_copy_ceiling), false);
    configure(RegisterBenchmark((p + "permutation").c_str(), bench_dispatch, s, 0), false);
    configure(RegisterBenchmark((p + "gather").c_str(), bench_dispatch, s, 1), false);
    configure(RegisterBenchmark((p + "combine").c_str(), bench_dispatch, s, 2), false);
    configure(RegisterBenchmark((p + "dispatch").c_str(), bench_dispatch, s, 3), false);
  }
  for (const RouterShape& s : kRouterShapes) {
    const std::string p = "router/N" + std::to_string(s.num_tokens) + "_E" + std::to_string(s.num_experts) + "_k" +
                          std::to_string(s.top_k) + "/";
    configure(RegisterBenchmark((p + "ceiling_read").c_str(), bench_router_read, s), false);
    configure(RegisterBenchmark((p + "softmax_topk").c_str(), bench_router, s, mixtral_router()), false);
    RouterConfig topk_softmax = mixtral_router();
    topk_softmax.pre_softmax = false;
    topk_softmax.renormalize = false;
    configure(RegisterBenchmark((p + "topk_then_softmax").c_str(), bench_router, s, topk_softmax), false);
  }
  const int all = max_threads();
  for (int which = 0; which < 2; ++which) {
    const std::string p = which == 0 ? "small_experts/E16_rows8_d1024_f1024/grouped_swiglu"
                                     : "small_experts/E16_rows8_d1024_f1024/one_sgemm_8rows";
    configure(RegisterBenchmark((p + "/threads:1").c_str(), bench_small, which, 1), false);
    if (all > 1) {
      configure(RegisterBenchmark((p + "/threads:" + std::to_string(all)).c_str(), bench_small, which, all), false);
    }
  }
  for (int experts : {8, 256}) {
    const std::string p = experts == 8 ? "cost_model/mixtral_E8_k2/" : "cost_model/deepseek_v3_E256_k8/";
    configure(RegisterBenchmark((p + "single").c_str(), bench_cost_model, experts, 1), false)
        ->Unit(benchmark::kMicrosecond);
    configure(RegisterBenchmark((p + "expert_parallel_8").c_str(), bench_cost_model, experts, 8), false)
        ->Unit(benchmark::kMicrosecond);
  }
  // Route once, cost many: the whole search with one router, and the baseline (a router per layout) on a few.
  RegisterBenchmark("train/deepseek_v3_layout_search/shared_router", bench_train_search, true)
      ->Iterations(1)->Repetitions(1)->Unit(benchmark::kSecond);
  RegisterBenchmark("train/deepseek_v3_layout_search/router_per_layout", bench_train_search, false)
      ->Iterations(1)->Repetitions(1)->Unit(benchmark::kSecond);
}

// --export-check DIR: a small layer with its inputs, weights (moesim layout [E, d, f]) and output, for
// scripts/torch_moe_reference.py --check DIR.
void export_check(const std::string& dir) {
  const LayerShape s{256, 256, 512, 8, 2};
  LayerCase c(s);
  c.full_layer(nullptr);
  const int64_t n = s.num_tokens, d = s.hidden, f = s.ffn, e = s.num_experts;
  write_npy(dir + "/x.npy", c.x.data(), {n, d});
  write_npy(dir + "/router_w.npy", c.router_w.data(), {d, e});
  write_npy(dir + "/w1.npy", c.w.w1.data(), {e, d, f});
  write_npy(dir + "/w3.npy", c.w.w3.data(), {e, d, f});
  write_npy(dir + "/w2.npy", c.w.w2.data(), {e, f, d});
  write_npy(dir + "/y.npy", c.y.data(), {n, d});
  write_npy(dir + "/expert.npy", c.routing.expert.data(), {n, static_cast<int64_t>(s.top_k)});
}

}  // namespace moesim::bench
