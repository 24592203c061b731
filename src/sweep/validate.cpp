// Predicted vs measured expert time over a batch sweep (see validate.hpp). The model sees exactly what
// the executed layer computed: the routing's loads, its layout's padding, the shared experts, fp32 at
// the execute: size, one device. Host only. Covered by tests/sweep/validate_test.cpp.
#include "src/sweep/validate.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "src/common/error.hpp"
#include "src/common/host.hpp"
#include "src/common/median.hpp"
#include "src/config/load_config.hpp"
#include "src/cost/placement.hpp"
#include "src/cost/roofline.hpp"

namespace moesim {
namespace {

// Rows the routed experts' GEMMs compute for `load` under the layout (DispatchPlan's rule).
int64_t layout_rows(const std::vector<int64_t>& load, Layout layout, int block_size, int64_t capacity) {
  int64_t rows = 0;
  const int64_t max_load = load.empty() ? 0 : *std::max_element(load.begin(), load.end());
  for (int64_t n : load) {
    if (layout == Layout::dropless) rows += n;
    else if (layout == Layout::block) rows += (n + block_size - 1) / block_size * block_size;
    else rows += std::max(capacity > 0 ? capacity : max_load, n);
  }
  return rows;
}

}  // namespace

ValidateResult run_validation(const Experiment& base, const HardwareRef& hardware,
                              const std::vector<std::string>& batch_values, const RunOptions& run_opts,
                              const std::function<void(size_t, size_t)>& progress) {
  if (batch_values.empty()) throw InputError("validate: expected at least one batch size");
  const HardwareProfile hw = load_hardware_profile(hardware, base.source_file);
  ValidateResult out;
  out.experiment = base.name;
  out.source_file = base.source_file;
  out.hardware = hw.name;
  out.hardware_digest = hardware_digest(hw);
  out.base = base;
  out.base.hardware = hardware;
  out.hidden = base.execute.hidden;
  out.ffn = base.execute.ffn;
  out.experts = base.model.experts;
  out.top_k = base.model.top_k;
  out.shared_experts = base.model.shared_experts;
  out.repeats = base.execute.repeats;
  out.gating = to_string(base.router.gating);
  out.weight_bytes = static_cast<double>(base.model.experts + base.model.shared_experts) * 3.0 *
                     static_cast<double>(out.hidden) * static_cast<double>(out.ffn) * sizeof(float);
  out.llc_bytes = hw.l2_bytes;
  // Build (and so validate) every point first.
  std::vector<Experiment> experiments;
  for (const std::string& b : batch_values) {
    Experiment e = base;
    try {
      apply_override(e, "workload.batch=" + b);
    } catch (const ConfigError& ex) {
      throw ConfigError("--batches (batch " + b + "): " + ex.what());
    }
    e.execute.enabled = true;
    // The run's own cost model then describes what executes: the execute: size in fp32 on one device
    // of the host profile.
    e.model.hidden = e.execute.hidden;
    e.model.ffn = e.execute.ffn;
    e.model.dtype = Dtype::fp32;
    e.hardware = hardware;
    e.placement = PlacementConfig{};
    experiments.push_back(std::move(e));
  }
  RunOptions opts = run_opts;
  opts.execute = true;
  out.cores_online = static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
  out.load_before = load_average_1min();
  std::vector<double> ape;
  for (size_t i = 0; i < experiments.size(); ++i) {
    const Experiment& e = experiments[i];
    const RunResult run = run_experiment(e, own_variant(e), opts);
    const VariantResult& v = run.variants.front();
    const BalanceMetrics& m = v.last();
    LayerCostInput in = layer_cost_input(e, v.variant.router, CostedSize::executed, run.num_tokens, m.load, m.capacity);
    in.format = Dtype::fp32;  // the CPU backend's GEMMs are fp32
    const LayerCost cost = model_moe_layer(hw, in);
    ValidatePoint p;
    p.num_tokens = run.num_tokens;
    p.active_experts = static_cast<int>(std::count_if(m.load.begin(), m.load.end(), [](int64_t n) { return n > 0; }));
    p.rows = layout_rows(m.load, in.layout, in.block_size, m.capacity);
    p.predicted_s = cost.actual.quantized_s;
    // Regime of the kernel model: the grouped kernel's compute term against its memory term.
    const ExpertRoofline er(hw, in.hidden, in.ffn, in.format);
    const double rows_all = static_cast<double>(p.rows) + static_cast<double>(in.shared_experts) * run.num_tokens;
    const double experts_all = p.active_experts + (run.num_tokens > 0 ? in.shared_experts : 0);
    const double mem_s = (experts_all * er.weight_bytes + rows_all * er.act_bytes_per_row) /
                         (er.bandwidth_bytes_per_s * er.figures.efficiency_bw);
    p.compute_bound = rows_all * er.flops_per_row / (er.peak_flops_per_s * er.figures.efficiency_flops) > mem_s;
    p.measured_s = v.measured.experts_s;
    p.error = p.measured_s > 0 ? (p.predicted_s - p.measured_s) / p.measured_s : 0.0;
    ape.push_back(std::fabs(p.error));
    out.points.push_back(p);
    if (progress) progress(i + 1, experiments.size());
  }
  out.load_after = load_average_1min();
  out.median_ape = median(ape);
  double sum = 0;
  for (double a : ape) sum += a;
  out.mean_ape = sum / static_cast<double>(ape.size());
  return out;
}

}  // namespace moesim
