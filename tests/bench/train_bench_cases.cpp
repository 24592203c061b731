// moesim_bench's training case: a search over DeepSeek-V3's training layouts (61 layers, 256 H100s; TP, PP, VPP, EP,
// dispatcher and precision: 288 layouts, the ones that divide kept), each costed by model_train_step with the
// model's own router. Two ways, timed in the same run: one TrainRouter for the whole search (route once, cost many:
// a source rank's segment is routed once per segment size and reused by every layout that shares it) and a fresh
// router per layout (the baseline, on the search's first kBaselineLayouts layouts). Checked first: both give the same
// steps on the first layouts. Host only; run by scripts/bench-train.sh.
#include "tests/bench/moe_bench_support.hpp"
#include "tests/bench/moe_bench.hpp"

#include <benchmark/benchmark.h>

#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "src/common/embedded.hpp"
#include "src/config/load_config.hpp"
#include "src/cost/hardware_profile.hpp"
#include "src/train/train_input.hpp"
#include "src/train/train_routing.hpp"
#include "src/train/train_step.hpp"

namespace moesim::bench::detail {
namespace {

constexpr size_t kBaselineLayouts = 8;

struct Search {
  Experiment e;
  HardwareProfile hw;
  TrainShape shape;
  std::vector<TrainLayout> layouts;
};

const Search& search() {
  static const Search s = [] {
    Search out;
    out.e = load_experiment_text(embedded_files().at("configs/deepseek-v3.yaml"), "configs/deepseek-v3.yaml", {});
    out.hw = load_hardware_profile(out.e.hardware, "");
    out.shape = train_shape(out.e.model);
    for (int tp : {1, 2})
      for (int pp : {4, 8, 16})
        for (int vpp : {1, 2})
          for (int ep : {8, 16, 32, 64})
            for (Dispatcher d : {Dispatcher::alltoall, Dispatcher::deepep, Dispatcher::hybridep})
              for (TrainPrecision p : {TrainPrecision::bf16, TrainPrecision::fp8}) {
                TrainConfig c = out.e.train;
                c.gpus = 256;
                c.tp = tp;
                c.pp = pp;
                c.vpp = vpp;
                c.ep = ep;
                c.dispatcher = d;
                c.precision = p;
                c.global_batch = 1024;
                c.seq_len = 4096;
                try {
                  out.layouts.push_back(train_layout(c, out.shape, out.hw.devices_per_node));
                } catch (const ConfigError&) {
                  // a layout that does not divide is not searched
                }
              }
    return out;
  }();
  return s;
}

double step_of(const Search& s, TrainRouter& router, const TrainLayout& l) {
  const TrainLoads loads = router.loads(s.e.train.routing, l);
  const TrainLoads ref = router.reference(l);
  return model_train_step(s.hw, s.shape, l, ExpertRows{}, loads, ref, TrainFigures::fitted()).step_s;
}

}  // namespace

// shared: one router for the whole search; else a fresh one per layout, on the first kBaselineLayouts.
void bench_train_search(State& state, bool shared) {
  const Search& s = search();
  static bool verified = false;
  if (!verified && moesim::bench::options().verify) {
    verified = true;
    TrainRouter one(s.e);
    for (size_t i = 0; i < 3 && i < s.layouts.size(); ++i) {
      TrainRouter fresh(s.e);
      const double a = step_of(s, one, s.layouts[i]), b = step_of(s, fresh, s.layouts[i]);
      if (a != b) return fail(state, "layout " + std::to_string(i) + ": a shared router's step differs from a fresh one's");
    }
  }
  const size_t n = shared ? s.layouts.size() : std::min(kBaselineLayouts, s.layouts.size());
  int64_t segments = 0;
  for (auto _ : state) {
    double sum = 0;
    TrainRouter router(s.e);
    for (size_t i = 0; i < n; ++i) {
      if (shared) {
        sum += step_of(s, router, s.layouts[i]);
      } else {
        TrainRouter fresh(s.e);
        sum += step_of(s, fresh, s.layouts[i]);
        segments += fresh.routed_segments();
      }
    }
    if (shared) segments += router.routed_segments();
    benchmark::DoNotOptimize(sum);
  }
  state.counters["layouts"] = static_cast<double>(n);
  state.counters["segments_routed"] = static_cast<double>(segments) / static_cast<double>(state.iterations());
  state.counters["layouts_per_second"] =
      benchmark::Counter(static_cast<double>(n), benchmark::Counter::kIsIterationInvariantRate);
}

}  // namespace moesim::bench::detail
