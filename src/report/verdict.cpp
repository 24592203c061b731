// The imbalance verdict of a run's report (see verdict.hpp).
#include "src/report/verdict.hpp"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "src/cost/hardware_profile.hpp"
#include "src/cost/roofline.hpp"
#include "src/report/report.hpp"
#include "src/sweep/published.hpp"
#include "src/report/text_format.hpp"

namespace moesim {
namespace {

// A share in percent: whole percents from 10, one decimal below.
std::string percent(double share) {
  const double p = 100.0 * share;
  return text::fixed(p, std::fabs(p) >= 9.95 ? 0 : 1) + " %";
}

// Microseconds: whole from 100 us, one decimal below.
std::string micro(double s) {
  const double us = s * 1e6;
  return text::fixed(us, std::fabs(us) >= 99.95 ? 0 : 1);
}

}  // namespace

bool in_decode_regime(const RunResult& run, const ModeledPlacement& p) {
  // A GPU profile (its GEMMs in row tiles), as the published tables are.
  return p.placement == "expert_parallel" && p.devices >= kWideEp && run.num_tokens >= 1 &&
         run.num_tokens <= kDecodeMaxTokens && has_row_tiles(run.hardware);
}

ImbalanceVerdict imbalance_verdict(const Erosion& x) {
  ImbalanceVerdict v;
  v.layer_s = x.actual_s;
  v.saves_s = std::max(0.0, -x.idle_saving_s);
  v.costs_s = imbalance_cost_s(x) + std::max(0.0, x.idle_saving_s);
  return v;
}

std::string verdict_line(const RunResult& run, const VariantResult& v) {
  const ModeledPlacement* p = primary_of(v.modeled);
  if (!p) return "";
  const ImbalanceVerdict x = imbalance_verdict(p->cost.erosion);
  const double layer = x.layer_s > 0 ? x.layer_s : 1.0;
  std::ostringstream os;
  if (x.costs_s == 0 && x.saves_s == 0) {
    os << v.variant.label << ": imbalance costs nothing (0 of " << micro(x.layer_s) << " us)";
  } else if (x.costs_s < 0) {
    // Below 0 only where the straggler runs on a plan made for past skew (EPLB) that fits these loads better than
    // the plan balanced loads get fits those: nothing is lost to imbalance, and the line says why.
    os << v.variant.label << ": imbalance costs nothing (the plan, made for past skew, fits it " << micro(-x.costs_s)
       << " us better than balanced loads fit theirs, of " << micro(x.layer_s) << " us)";
  } else
    os << v.variant.label << ": imbalance costs " << percent(x.costs_s / layer) << " of the layer (" << micro(x.costs_s)
       << " of " << micro(x.layer_s) << " us)";
  if (x.saves_s > 0)
    os << ", saves " << percent(x.saves_s / layer) << " (" << micro(x.saves_s) << " us: idle experts' weights and tiles)";
  const std::optional<double> drop = metric_value(run, v, "drop_rate", "value");
  const std::optional<double> unrouted = metric_value(run, v, "tokens_unrouted", "value");
  if (drop && *drop > 0) {
    const double pct = 100.0 * *drop;
    os << "; drops " << text::fixed(pct, pct >= 9.95 ? 0 : pct >= 0.995 ? 1 : 2) << " %";
  }
  if (unrouted && *unrouted > 0)
    os << "; leaves " << text::fixed(*unrouted, 0) << (*unrouted == 1 ? " token" : " tokens") << " unrouted";
  // The routing's skew, the assumption every figure rests on: its busiest expert's share (max / mean over E).
  const std::optional<double> imbalance = metric_value(run, v, "imbalance", "value");
  const int experts = run.experiment.model.experts;
  if (imbalance && experts > 1 && *imbalance > 1.0005) {
    const double share = 100.0 * *imbalance / experts;
    os << "; top expert " << text::fixed(share, share >= 9.95 ? 0 : 1) << " % (" << text::fixed(*imbalance, 2)
       << "x mean)";
  }
  if (in_decode_regime(run, *p))
    os << "; decode regime: the kernel model's held-out error there is " << percent(DecodeRegimeError::decode_median_abs)
       << " median (" << (DecodeRegimeError::decode_mean >= 0 ? "+" : "") << percent(DecodeRegimeError::decode_mean)
       << " mean) on " << DecodeRegimeError::decode_points << " published points";
  return os.str();
}

std::vector<std::string> replica_gain_lines(const RunResult& run) {
  struct Row {
    std::string base;  // the label without its placement.replicas setting
    int replicas = 0;
    const ModeledPlacement* p = nullptr;
    std::string label;
  };
  std::vector<Row> rows;
  for (const VariantResult& v : run.variants) {
    const ModeledPlacement* p = nullptr;
    for (const ModeledPlacement& m : v.modeled)
      if (m.placement == "expert_parallel") p = &m;
    if (!p || p->cost.placement.expert.empty()) continue;
    Row r;
    r.p = p;
    r.label = v.variant.label;
    r.replicas = static_cast<int>(p->cost.placement.expert.size() - p->cost.placement.replicas.size());
    r.base = v.variant.label;
    const size_t at = r.base.find(" placement.replicas=");
    if (at != std::string::npos) {
      const size_t end = r.base.find(' ', at + 1);
      r.base.erase(at, end == std::string::npos ? std::string::npos : end - at);
    }
    rows.push_back(r);
  }
  std::vector<std::string> out;
  for (const Row& r : rows) {
    if (r.replicas == 0) continue;
    const Row* base = nullptr;
    for (const Row& b : rows)
      if (b.replicas == 0 && b.base == r.base) base = &b;
    if (!base) continue;
    const double before = base->p->cost.actual.quantized_s, after = r.p->cost.actual.quantized_s;
    std::ostringstream os;
    os << r.base << ": " << r.replicas << " redundant experts: MoE layer " << micro(before) << " -> " << micro(after)
       << " us, " << text::fixed(after > 0 ? before / after : 1.0, 2) << "x; balancedness "
       << text::fixed(base->p->cost.balancedness, 2) << " -> " << text::fixed(r.p->cost.balancedness, 2);
    out.push_back(os.str());
  }
  return out;
}

}  // namespace moesim
