// `moesim serve [FILE] [--requests N] [--rate R | --concurrency C] [--isl L] [--osl L] [--requests-file F]
// [--max-batch B] [--max-num-tokens T] [--tp T] [--scheduler round_robin|kv_balanced] [--mem-fraction F]
// [--kv-dtype bf16|fp8] [--routing model|balanced|power_law:ALPHA] [--no-counterfactuals] [--set KEY=VALUE]...
// [--format table|json|csv|markdown|html]`: a request stream served by the experiment's model on its expert-parallel
// GPUs (placement.devices, attention DP = devices / tp), scheduled as an engine does (src/serve/scheduler.hpp), each
// step costed by the step model; TTFT, TPOT, end-to-end latency, tokens/s per GPU and per user, the ranks' balance,
// and the same stream with balanced routing and with balanced attention (docs/serve.md).
// Covered by tests/cli/serve_cli_test.cpp.
#include <algorithm>
#include <cctype>
#include <cstdio>
#include <iostream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "src/cli/cli_common.hpp"
#include "src/common/error.hpp"
#include "src/cost/hardware_profile.hpp"
#include "src/report/serve_report.hpp"
#include "src/report/text_format.hpp"
#include "src/serve/serve_memory.hpp"
#include "src/serve/serve_search.hpp"
#include "src/serve/serve_run.hpp"
#include "src/sweep/published_serve.hpp"
#include "src/sweep/sweep.hpp"

namespace moesim::cli {
namespace {

using nlohmann::json;

struct ServeOptions {
  int64_t requests = 0, concurrency = 0, max_batch = 256, max_num_tokens = 8192;  // requests 0: not given (256)
  double rate = 0, mem_fraction = 0.9;
  std::string isl, osl;  // empty: not given (1024, 256)
  std::string requests_file, scheduler, kv_dtype = "bf16", routing = "model";  // scheduler "": not given
  int tp = -1;  // -1: not given (placement.attention_tp)
  bool no_counterfactuals = false;
  bool search = false;
  std::string disaggregated;
  int64_t rebalance_every = -1, drift_steps = 50;
  int draws = 16;
  int mtp_draft = 0;
  double mtp_accept = 0;
  std::vector<std::string> varies;
  std::string batches = "1..256*2";
  double tpot_ms = 0, ttft_ms = 0;
  int top = 5;
};

// A length option: an integer (every request that long) or a lengths spec (uniform:LO:HI, lognormal:M:S, file:P).
RequestLengths length_option(const std::string& flag, const std::string& v, int64_t& fixed) {
  const bool digits = !v.empty() && std::all_of(v.begin(), v.end(), [](unsigned char c) { return std::isdigit(c); });
  if (digits) {
    if (v.size() > 8 || std::stoll(v) < 1 || std::stoll(v) > kMaxRequestLength)
      throw InputError(flag + ": expected a length from 1 to " + std::to_string(kMaxRequestLength) + ", got '" + v + "'");
    fixed = std::stoll(v);
    return parse_request_lengths("fixed", flag);
  }
  if (v == "fixed") throw InputError(flag + ": expected a length or uniform:LO:HI, lognormal:MEDIAN:SIGMA, file:PATH, got 'fixed'");
  RequestLengths l = parse_request_lengths(v, flag);
  fixed = static_cast<int64_t>(l.mean(0) + 0.5);
  return l;
}

json latency_json(const LatencySummary& s) {
  return {{"mean", s.mean * 1e3}, {"p50", s.p50 * 1e3}, {"p90", s.p90 * 1e3}, {"p99", s.p99 * 1e3}};
}

json metrics_json(const ServeMetrics& m) {
  return {{"output_tokens_per_s_per_gpu", m.output_tokens_per_s_per_gpu},
          {"total_tokens_per_s_per_gpu", m.total_tokens_per_s_per_gpu},
          {"tokens_per_s_per_user", m.tokens_per_s_per_user},
          {"ttft_ms", latency_json(m.ttft_s)},
          {"tpot_ms", latency_json(m.tpot_s)},
          {"e2e_ms", latency_json(m.e2e_s)},
          {"balance_ratio", {{"mean", m.balance_ratio_mean}}},
          {"duration_s", m.duration_s},
          {"requests", m.requests},
          {"prompt_tokens", m.prompt_tokens},
          {"output_tokens", m.output_tokens},
          {"steps", m.steps},
          {"step_mean_ms", m.step_mean_s * 1e3},
          {"preemptions", m.preemptions}};
}

std::string fixed(double v, int d) { return text::fixed(v, d); }

std::string latency_line(const char* name, const LatencySummary& s) {
  char line[200];
  std::snprintf(line, sizeof line, "  %-26s %10s %10s %10s %10s\n", name, fixed(s.mean * 1e3, 2).c_str(),
                fixed(s.p50 * 1e3, 2).c_str(), fixed(s.p90 * 1e3, 2).c_str(), fixed(s.p99 * 1e3, 2).c_str());
  return line;
}

std::string table_text(const std::string& header, const KvCapacity& kv, const ServeResult& r,
                       bool counterfactuals) {
  std::ostringstream os;
  const ServeMetrics& m = r.metrics;
  os << header;
  os << "  KV cache: " << kv.tokens << " tokens a GPU (" << fixed(kv.kv_bytes / 1073741824.0, 1) << " GiB left of "
     << fixed(kv.usable_bytes / 1073741824.0, 1) << " after " << fixed(kv.weight_bytes / 1073741824.0, 1)
     << " GiB of weights and " << fixed(kv.activation_bytes / 1073741824.0, 1) << " GiB of activations; "
     << fixed(kv.bytes_per_token / 1024.0, 1) << " KiB a token)\n\n";
  os << "served " << m.requests << " requests (" << m.prompt_tokens << " prompt and " << m.output_tokens
     << " output tokens) in " << fixed(m.duration_s, 3) << " s: " << m.steps << " steps of " << fixed(m.step_mean_s * 1e3, 2)
     << " ms on average, " << m.preemptions << " preemptions\n";
  char line[200];
  std::snprintf(line, sizeof line, "  %-26s %10s %10s %10s %10s\n", "latency (ms)", "mean", "p50", "p90", "p99");
  os << line << latency_line("TTFT", m.ttft_s) << latency_line("TPOT", m.tpot_s) << latency_line("end to end", m.e2e_s);
  os << "\n  output tokens/s a GPU      " << fixed(m.output_tokens_per_s_per_gpu, 1) << "\n"
     << "  total tokens/s a GPU       " << fixed(m.total_tokens_per_s_per_gpu, 1) << "\n"
     << "  tokens/s a user            " << fixed(m.tokens_per_s_per_user, 2) << "\n"
     << "  balance over the DP ranks  " << fixed(m.balance_ratio_mean, 3)
     << " (mean over max tokens a rank, the mean over steps)\n";
  if (r.static_plan.steps > 0) {
    const double gain = r.static_plan.output_tokens_per_s_per_gpu > 0
                            ? m.output_tokens_per_s_per_gpu / r.static_plan.output_tokens_per_s_per_gpu - 1
                            : 0;
    os << "\nEPLB over time: " << r.eplb.replans << " re-plans, the busiest GPU receiving " << r.eplb.moved_slots
       << " expert slots a layer in all, " << fixed(r.eplb.transfer_s, 3) << " s of weight transfer ("
       << fixed(m.duration_s > 0 ? 100 * r.eplb.transfer_s / m.duration_s : 0.0, 1) << " % of the run)\n"
       << "  plan made once             " << fixed(r.static_plan.output_tokens_per_s_per_gpu, 1)
       << " output tokens/s a GPU, TPOT p50 " << fixed(r.static_plan.tpot_s.p50 * 1e3, 2) << " ms\n"
       << "  re-planned                 " << fixed(m.output_tokens_per_s_per_gpu, 1) << " output tokens/s a GPU ("
       << (gain >= 0 ? "+" : "") << fixed(100 * gain, 1) << " % net of the transfers)"
       << (gain <= 0 ? ": re-planning does not pay here" : "") << "\n";
  }
  if (counterfactuals) {
    const double base = m.output_tokens_per_s_per_gpu;
    auto cost = [&](const ServeMetrics& c) {
      const double gain = base > 0 ? c.output_tokens_per_s_per_gpu / base - 1 : 0;
      return fixed(c.output_tokens_per_s_per_gpu, 1) + " output tokens/s a GPU (" + (gain >= 0 ? "+" : "") +
             fixed(100 * gain, 1) + " %), TPOT p50 " + fixed(c.tpot_s.p50 * 1e3, 2) + " ms";
    };
    os << "\nwhat imbalance costs (the same stream):\n"
       << "  balanced routing           " << cost(r.balanced_routing) << "\n"
       << "  balanced attention         " << cost(r.balanced_attention) << "\n";
  }
  return os.str();
}

const char* const kCsvHeader =
    "run,requests,duration_s,steps,preemptions,output_tokens_per_s_per_gpu,total_tokens_per_s_per_gpu,"
    "tokens_per_s_per_user,ttft_ms_mean,ttft_ms_p50,ttft_ms_p90,ttft_ms_p99,tpot_ms_mean,tpot_ms_p50,tpot_ms_p90,"
    "tpot_ms_p99,e2e_ms_mean,e2e_ms_p99,balance_ratio_mean\n";

std::string csv_row(const char* run, const ServeMetrics& m) {
  std::ostringstream os;
  os << run << "," << m.requests << "," << text::real(m.duration_s) << "," << m.steps << "," << m.preemptions << ","
     << text::real(m.output_tokens_per_s_per_gpu) << "," << text::real(m.total_tokens_per_s_per_gpu) << ","
     << text::real(m.tokens_per_s_per_user) << "," << text::real(m.ttft_s.mean * 1e3) << ","
     << text::real(m.ttft_s.p50 * 1e3) << "," << text::real(m.ttft_s.p90 * 1e3) << "," << text::real(m.ttft_s.p99 * 1e3)
     << "," << text::real(m.tpot_s.mean * 1e3) << "," << text::real(m.tpot_s.p50 * 1e3) << ","
     << text::real(m.tpot_s.p90 * 1e3) << "," << text::real(m.tpot_s.p99 * 1e3) << "," << text::real(m.e2e_s.mean * 1e3)
     << "," << text::real(m.e2e_s.p99 * 1e3) << "," << text::real(m.balance_ratio_mean) << "\n";
  return os.str();
}

std::string point_cells(const SteadyPoint& p) {
  char line[200];
  std::snprintf(line, sizeof line, "%7lld %10s %10s %10s %10s", static_cast<long long>(p.batch),
                fixed(p.output_tokens_per_s_per_gpu, 1).c_str(), fixed(p.tokens_per_s_per_user, 2).c_str(),
                fixed(p.tpot_s * 1e3, 2).c_str(), fixed(p.ttft_s * 1e3, 1).c_str());
  return line;
}

json point_json(const SteadyPoint& p) {
  return {{"batch", p.batch},
          {"output_tokens_per_s_per_gpu", p.output_tokens_per_s_per_gpu},
          {"tokens_per_s_per_user", p.tokens_per_s_per_user},
          {"tpot_ms", p.tpot_s * 1e3},
          {"ttft_ms", p.ttft_s * 1e3},
          {"step_ms", p.step_s * 1e3},
          {"fits", p.fits}};
}

// --mtp-draft and --mtp-accept into the setup, checked against the batch limits (a run and the search alike).
void set_mtp(const ServeOptions& o, ServeSetup& setup) {
  if (o.mtp_draft < 0 || o.mtp_draft > 16) throw InputError("--mtp-draft: expected 0 to 16, got " + std::to_string(o.mtp_draft));
  if (!(o.mtp_accept >= 0 && o.mtp_accept <= 1)) throw InputError("--mtp-accept: expected a chance in [0, 1]");
  if (o.mtp_draft == 0 && o.mtp_accept != 0) throw InputError("--mtp-accept: expected with --mtp-draft");
  if (o.max_num_tokens < o.max_batch * (1 + o.mtp_draft))
    throw InputError("--max-num-tokens: expected at least --max-batch x (1 + --mtp-draft) (" +
                     std::to_string(o.max_batch * (1 + o.mtp_draft)) + "), got " + std::to_string(o.max_num_tokens));
  setup.mtp_draft = o.mtp_draft;
  setup.mtp_accept = o.mtp_accept;
}

int serve_search(const CommonOptions& opts, const ServeOptions& o, bool html, ReportFormat format) {
  if (o.varies.empty()) throw InputError("--search: expected at least one --vary KEY=VALUES (the layouts to search)");
  if (!o.requests_file.empty() || o.concurrency != 0 || o.rate != 0)
    throw InputError("--search: expected without --requests-file, --concurrency or --rate (the steady state of a "
                     "closed loop of --isl/--osl requests)");
  if (o.top < 1) throw InputError("--top: expected at least 1, got " + std::to_string(o.top));
  if (o.tpot_ms < 0 || o.ttft_ms < 0) throw InputError("--tpot-ms, --ttft-ms: expected 0 (none) or a target in ms");
  int64_t isl = 0, osl = 0;
  const RequestLengths il = length_option("--isl", o.isl, isl), ol = length_option("--osl", o.osl, osl);
  if (il.kind != LengthKind::fixed || ol.kind != LengthKind::fixed)
    throw InputError("--search: expected fixed --isl and --osl lengths (the steady state of one request shape)");
  std::vector<int64_t> batches;
  for (const std::string& v : expand_sweep_values(o.batches, "--batches " + o.batches)) {
    char* end = nullptr;
    const long long b = std::strtoll(v.c_str(), &end, 10);
    if (*end != '\0' || b < 1 || b > o.max_batch)
      throw InputError("--batches: expected requests a rank from 1 to --max-batch (" + std::to_string(o.max_batch) +
                       "), got '" + v + "'");
    batches.push_back(b);
  }
  const std::vector<SweepAxis> axes = parse_varies(o.varies);
  for (const SweepAxis& a : axes)
    for (const std::string& k : a.keys) check_route_once_key(k, "serve --search");
  const std::vector<SweepPoint> points = sweep_points(axes);
  ServeSetup setup;
  setup.attention_tp = std::max(1, o.tp);
  setup.routing = o.routing;
  setup.kv_bytes = o.kv_dtype == "fp8" ? 1.0 : 2.0;
  setup.mem_fraction = o.mem_fraction;
  setup.limits.max_batch = o.max_batch;
  setup.limits.max_num_tokens = o.max_num_tokens;
  set_mtp(o, setup);
  // Route once, at the largest layout's step: every layout scales those loads to its own tokens.
  std::vector<Experiment> exps;
  std::vector<HardwareProfile> hws;
  std::vector<SweepPoint> kept;
  std::vector<std::string> skipped;  // layouts the config refuses (EPLB's divisibility), each with its reason
  int most = 1;
  bool plan = false, replan_noted = false;
  for (const SweepPoint& p : points) {
    CommonOptions po = opts;
    po.overrides.insert(po.overrides.end(), p.settings.begin(), p.settings.end());
    try {
      exps.push_back(load_experiment_for(po));
    } catch (const ConfigError& x) {
      skipped.push_back(x.what());
      continue;
    }
    kept.push_back(p);
    if (exps.back().placement.rebalance_every > 0 && !replan_noted) {
      replan_noted = true;
      std::cerr << "moesim serve --search: placement.rebalance_every is not modeled by the steady state (its plan is "
                   "made once); a run without --search re-plans\n";
    }
    hws.push_back(load_hardware_profile(exps.back().hardware, exps.back().source_file));
    const PlacementConfig& pc = exps.back().placement;
    most = std::max(most, pc.kind == PlacementKind::expert_parallel ? pc.devices : 1);
    plan = plan || (pc.kind == PlacementKind::expert_parallel && pc.replicas > 0);
  }
  if (exps.empty())
    throw InputError("--search: expected at least one layout the config accepts, got none (" + skipped.front() + ")");
  StepRow row;
  row.routing = o.routing;
  row.redundant_experts = plan ? 1 : 0;
  const StepRouting routed = route_loads(row, exps.front(), o.max_num_tokens * most, plan);
  std::vector<SearchLayout> layouts;
  for (size_t i = 0; i < kept.size(); ++i) {
    std::string label;
    for (const std::string& x : kept[i].settings)  // placement.devices=16 reads devices=16
      label += (label.empty() ? "" : " ") + (x.rfind("placement.", 0) == 0 ? x.substr(10) : x);
    ServeSetup layout_setup = setup;  // --tp, or each layout's placement.attention_tp
    if (o.tp == -1 && exps[i].placement.kind == PlacementKind::expert_parallel)
      layout_setup.attention_tp = exps[i].placement.attention_tp;
    ServeModelInput m;
    try {
      m = serve_input_for(exps[i], hws[i], layout_setup, {}, &routed);
    } catch (const ConfigError& x) {
      skipped.push_back(label + ": " + x.what());  // the weights do not fit, or the shape is refused
      continue;
    } catch (const InputError& x) {
      skipped.push_back(label + ": " + x.what());  // --tp does not divide this layout's GPUs
      continue;
    }
    const ServingStepInput balanced = with_balanced_routing(m.input.step);
    SearchLayout l;
    l.label = label;
    for (int64_t b : batches) {
      l.actual.push_back(steady_state(m.input.step, b, isl, osl, o.max_num_tokens, m.kv.tokens));
      l.balanced.push_back(steady_state(balanced, b, isl, osl, o.max_num_tokens, m.kv.tokens));
    }
    layouts.push_back(std::move(l));
  }
  if (layouts.empty())
    throw InputError("--search: expected at least one layout the model fits, got none (" + skipped.front() + ")");
  const auto best = best_under_targets(layouts, o.tpot_ms * 1e-3, o.ttft_ms * 1e-3, static_cast<size_t>(o.top));
  const auto front = pareto_front(layouts, false), bfront = pareto_front(layouts, true);
  const std::string mtp = o.mtp_draft > 0 ? "; MTP " + std::to_string(o.mtp_draft) + " draft token(s) at " +
                                                 fixed(o.mtp_accept, 2) + " acceptance"
                                           : std::string();
  std::string text;
  if (html) {
    std::vector<std::string> lines = {"moesim serve --search: " + exps.front().model.name + ", " +
                                          std::to_string(layouts.size()) + " layouts x " + std::to_string(batches.size()) +
                                          " batches, routed once; " + std::to_string(isl) + "/" + std::to_string(osl) +
                                          "-token requests in a closed loop" + mtp};
    if (o.tpot_ms > 0) lines.push_back("TPOT target " + fixed(o.tpot_ms, 1) + " ms");
    if (o.ttft_ms > 0) lines.push_back("TTFT target " + fixed(o.ttft_ms, 1) + " ms");
    if (!skipped.empty()) lines.push_back("skipped " + std::to_string(skipped.size()) + " layout(s): " + skipped.front());
    emit(opts, format_search_html("moesim serve --search: " + exps.front().model.name, lines, layouts, best, front, bfront));
    return kExitOk;
  }
  if (format == ReportFormat::json) {
    json ls = json::array();
    for (const SearchLayout& l : layouts) {
      json a = json::array(), b = json::array();
      for (const SteadyPoint& p : l.actual) a.push_back(point_json(p));
      for (const SteadyPoint& p : l.balanced) b.push_back(point_json(p));
      ls.push_back({{"settings", l.label}, {"actual", a}, {"balanced", b}});
    }
    auto pairs = [&](const std::vector<std::pair<size_t, size_t>>& v, bool bal) {
      json out = json::array();
      for (const auto& [li, pi] : v)
        out.push_back({{"settings", layouts[li].label},
                       {"point", point_json(bal ? layouts[li].balanced[pi] : layouts[li].actual[pi])}});
      return out;
    };
    text = json{{"isl", isl},
                {"mtp_draft", o.mtp_draft},
                {"mtp_accept", o.mtp_accept},
                {"skipped", skipped},
                {"osl", osl},
                {"tpot_ms_target", o.tpot_ms},
                {"ttft_ms_target", o.ttft_ms},
                {"layouts", ls},
                {"best", pairs(best, false)},
                {"front", {{"actual", pairs(front, false)}, {"balanced", pairs(bfront, true)}}}}
               .dump(2) + "\n";
  } else if (format == ReportFormat::csv) {
    std::ostringstream os;
    os << "settings,batch,routing,output_tokens_per_s_per_gpu,tokens_per_s_per_user,tpot_ms,ttft_ms,step_ms,fits\n";
    for (const SearchLayout& l : layouts)
      for (int bal = 0; bal < 2; ++bal)
        for (const SteadyPoint& p : bal ? l.balanced : l.actual)
          os << text::csv_cell(l.label) << "," << p.batch << "," << (bal ? "balanced" : "actual") << ","
             << text::real(p.output_tokens_per_s_per_gpu) << "," << text::real(p.tokens_per_s_per_user) << ","
             << text::real(p.tpot_s * 1e3) << "," << text::real(p.ttft_s * 1e3) << "," << text::real(p.step_s * 1e3)
             << "," << (p.fits ? 1 : 0) << "\n";
    text = os.str();
  } else {
    std::ostringstream os;
    const Experiment& e = exps.front();
    os << "moesim serve --search: " << e.model.name << ", " << layouts.size() << " layouts x " << batches.size()
       << " batches, routed once; the steady state of a closed loop of " << isl << "/" << osl << "-token requests, "
       << o.max_num_tokens << " tokens a rank a step" << mtp << "\n";
    if (!skipped.empty())
      os << "  skipped " << skipped.size() << " layout(s) the config refuses, e.g. " << skipped.front() << "\n";
    os << "best layouts";
    if (o.tpot_ms > 0) os << " with TPOT <= " << fixed(o.tpot_ms, 1) << " ms";
    if (o.ttft_ms > 0) os << (o.tpot_ms > 0 ? " and" : " with") << " TTFT <= " << fixed(o.ttft_ms, 1) << " ms";
    os << " (output tokens/s a GPU; balanced: the same layout and batch with balanced routing):\n";
    char line[400];
    std::snprintf(line, sizeof line, "  %-72s %7s %10s %10s %10s %10s %10s %8s\n", "layout", "batch", "tok/s/GPU",
                  "tok/s/user", "TPOT ms", "TTFT ms", "balanced", "skew %");
    os << line;
    if (best.empty()) os << "  (no layout meets the targets at these batches)\n";
    for (const auto& [li, pi] : best) {
      const SteadyPoint& a = layouts[li].actual[pi];
      const SteadyPoint& b = layouts[li].balanced[pi];
      const double loss = b.output_tokens_per_s_per_gpu > 0 ? 1 - a.output_tokens_per_s_per_gpu / b.output_tokens_per_s_per_gpu : 0;
      std::snprintf(line, sizeof line, "  %-72s %s %10s %8s\n", layouts[li].label.c_str(),
                    point_cells(a).c_str(), fixed(b.output_tokens_per_s_per_gpu, 1).c_str(), fixed(100 * loss, 1).c_str());
      os << line;
    }
    for (int bal = 0; bal < 2; ++bal) {
      os << "\nthe front of output tokens/s a GPU against tokens/s a user, " << (bal ? "balanced routing" : "actual routing")
         << ":\n";
      std::snprintf(line, sizeof line, "  %-72s %7s %10s %10s %10s %10s\n", "layout", "batch", "tok/s/GPU", "tok/s/user",
                    "TPOT ms", "TTFT ms");
      os << line;
      for (const auto& [li, pi] : bal ? bfront : front) {
        std::snprintf(line, sizeof line, "  %-72s %s\n", layouts[li].label.c_str(),
                      point_cells(bal ? layouts[li].balanced[pi] : layouts[li].actual[pi]).c_str());
        os << line;
      }
    }
    text = os.str();
    if (format == ReportFormat::markdown) text = "```text\n" + text + "```\n";
  }
  emit(opts, text);
  return kExitOk;
}

}  // namespace

int cmd_serve(int argc, char** argv) {
  CommonOptions opts;
  bool help = false;
  ServeOptions o;
  po::options_description desc("moesim serve [FILE] [options]");
  desc.add_options()("help,h", po::bool_switch(&help), "show this help")(
      "file", po::value(&opts.files),
      "experiment YAML: its model, router, workload, hardware and placement: section (default: the built-in quickstart)")(
      "requests", po::value(&o.requests)->default_value(0, "256"), "synthetic stream: requests")(
      "rate", po::value(&o.rate)->default_value(0.0),
      "synthetic stream: Poisson arrivals a second (0: every request at the start)")(
      "concurrency", po::value(&o.concurrency)->default_value(0),
      "a closed loop of this many clients: each finish releases the next request (0: arrivals as the stream gives)")(
      "isl", po::value(&o.isl)->default_value("", "1024"),
      "prompt tokens: a length, uniform:LO:HI, lognormal:MEDIAN:SIGMA or file:PATH (a CSV of one `tokens` column)")(
      "osl", po::value(&o.osl)->default_value("", "256"), "output tokens: as --isl")(
      "requests-file", po::value(&o.requests_file),
      "requests from a file instead: the Azure LLM inference trace's CSV (TIMESTAMP,ContextTokens,GeneratedTokens) "
      "or arrival_s,prompt_tokens,output_tokens")(
      "max-batch", po::value(&o.max_batch)->default_value(256), "requests a rank holds")(
      "max-num-tokens", po::value(&o.max_num_tokens)->default_value(8192),
      "tokens a rank runs a step: decode tokens, then prefill chunks")(
      "tp", po::value(&o.tp), "attention tensor parallel (attention DP = GPUs / tp; default placement.attention_tp)")(
      "scheduler", po::value(&o.scheduler),
      "how arriving requests are spread over the DP ranks: round_robin or kv_balanced (the fewest KV tokens; default: "
      "placement.request_balance, kv_tokens reading kv_balanced)")(
      "mem-fraction", po::value(&o.mem_fraction)->default_value(0.9, "0.9"),
      "of the GPU's memory the engine takes for weights, activations and the KV cache")(
      "kv-dtype", po::value(&o.kv_dtype)->default_value("bf16"), "the KV cache's dtype: bf16 or fp8")(
      "routing", po::value(&o.routing)->default_value("model"),
      "model (the experiment's router and workload), balanced, or power_law:ALPHA")(
      "disaggregated", po::value(&o.disaggregated),
      "P:D: prefill on P GPUs and decode on D (each expert-parallel over itself; placement.devices unread), the "
      "prompts' KV cache moved over the scale-out link")(
      "mtp-draft", po::value(&o.mtp_draft)->default_value(0),
      "multi-token prediction: draft tokens a decoding request verifies each step")(
      "mtp-accept", po::value(&o.mtp_accept)->default_value(0.0),
      "the chance each draft token is accepted, given the ones before it, in [0, 1]")(
      "rebalance-every", po::value(&o.rebalance_every),
      "EPLB over time (placement.replicas > 0): re-plan every N steps from past loads (placement.load_estimator), the "
      "moved experts' weights costed on the links, against the plan made once (0: only the plan made once; default: "
      "placement.rebalance_every when above 0)")(
      "drift-steps", po::value(&o.drift_steps)->default_value(50),
      "with --rebalance-every: steps each routed batch's loads hold before the next (the routing's drift)")(
      "draws", po::value(&o.draws)->default_value(16),
      "with --rebalance-every: routed batches of a synthetic workload in the drift (a trace or profile: its own)")(
      "no-counterfactuals", po::bool_switch(&o.no_counterfactuals),
      "skip the balanced-routing and balanced-attention runs")(
      "search", po::bool_switch(&o.search),
      "instead: the steady state of a closed loop of --isl/--osl requests over every --vary layout and --batches "
      "requests a rank (routed once): the best layouts under --tpot-ms/--ttft-ms and the front of tokens/s a GPU "
      "against tokens/s a user, balanced routing beside actual")(
      "vary", po::value(&o.varies)->composing(),
      "with --search: KEY=v1,v2 over a placement.* or hardware key (repeatable: the cartesian product)")(
      "batches", po::value(&o.batches)->default_value("1..256*2"),
      "with --search: requests a rank, values and ranges as in sweep --vary (at most --max-batch)")(
      "tpot-ms", po::value(&o.tpot_ms)->default_value(0.0), "with --search: the TPOT target (0: none)")(
      "ttft-ms", po::value(&o.ttft_ms)->default_value(0.0), "with --search: the TTFT target (0: none)")(
      "top", po::value(&o.top)->default_value(5), "with --search: the layouts listed");
  desc.add_options()("set", po::value(&opts.overrides)->composing(), "override a config key: KEY=VALUE (repeatable)")(
      "format", po::value(&opts.format)->default_value("table"),
      "table|json|csv|markdown|html (a page with the batch, KV use, step time and balance over time, and the latency "
      "distributions)")(
      "out", po::value(&opts.out), "write the report to this file (atomically) instead of stdout");
  if (parse_or_help(argc, argv, desc, "file", 1, help)) return kExitOk;
  const bool html = opts.format == "html";
  const ReportFormat format = html ? ReportFormat::table : parse_report_format(opts.format);
  if (o.tp != -1 && (o.tp < 1 || o.tp > 1024))
    throw InputError("--tp: expected an integer from 1 to 1024, got " + std::to_string(o.tp));

  // A stream from a file takes neither the synthetic stream's options nor a rate; the search runs no stream.
  if (!o.requests_file.empty() && (o.requests != 0 || !o.isl.empty() || !o.osl.empty() || o.rate != 0))
    throw InputError("--requests-file: expected without --requests, --isl, --osl or --rate (the file gives them)");
  if (o.search && (o.requests != 0 || o.no_counterfactuals || !o.scheduler.empty() || o.rebalance_every >= 0 ||
                   o.drift_steps != 50 || o.draws != 16 || !o.disaggregated.empty()))
    throw InputError("--search: expected without --requests, --no-counterfactuals, --scheduler, --rebalance-every, "
                     "--drift-steps, --draws or --disaggregated (the steady state of one layout's closed loop, every "
                     "rank alike)");
  if (o.isl.empty()) o.isl = "1024";
  if (o.osl.empty()) o.osl = "256";
  if (o.requests == 0) o.requests = 256;
  if (o.search) return serve_search(opts, o, html, format);
  if (!o.varies.empty() || o.tpot_ms != 0 || o.ttft_ms != 0 || o.batches != "1..256*2" || o.top != 5)
    throw InputError("--vary, --batches, --tpot-ms, --ttft-ms, --top: expected with --search only");
  const Experiment e = load_experiment_for(opts);
  const HardwareProfile hw = load_hardware_profile(e.hardware, e.source_file);
  const bool ep = e.placement.kind == PlacementKind::expert_parallel;
  const int gpus = ep ? e.placement.devices : 1;
  const std::string tp_from = o.tp == -1 ? "placement.attention_tp" : "--tp";
  if (o.tp == -1) o.tp = ep ? e.placement.attention_tp : 1;
  if (o.rebalance_every < 0 && ep && e.placement.rebalance_every > 0) o.rebalance_every = e.placement.rebalance_every;
  if (o.disaggregated.empty() && (o.tp < 1 || gpus % o.tp != 0))
    throw InputError(tp_from + ": expected a divisor of placement.devices (" + std::to_string(gpus) + "), got " +
                     std::to_string(o.tp));  // before the stream is drawn
  if (o.scheduler.empty())
    o.scheduler = ep && e.placement.request_balance == RequestBalance::kv_tokens ? "kv_balanced" : "round_robin";
  if (o.scheduler != "round_robin" && o.scheduler != "kv_balanced")
    throw InputError("--scheduler: expected round_robin or kv_balanced, got '" + o.scheduler + "'");
  if (o.kv_dtype != "bf16" && o.kv_dtype != "fp8")
    throw InputError("--kv-dtype: expected bf16 or fp8, got '" + o.kv_dtype + "'");
  if (o.routing != "model" && o.routing != "balanced" && o.routing.rfind("power_law:", 0) != 0)
    throw InputError("--routing: expected model, balanced or power_law:ALPHA, got '" + o.routing + "'");
  if (o.max_batch < 1 || o.max_batch > (int64_t{1} << 16))
    throw InputError("--max-batch: expected 1 to 65536 requests a rank, got " + std::to_string(o.max_batch));
  if (o.max_num_tokens < o.max_batch || o.max_num_tokens > (int64_t{1} << 20))
    throw InputError("--max-num-tokens: expected --max-batch (" + std::to_string(o.max_batch) +
                     ") to 1048576 tokens a rank, got " + std::to_string(o.max_num_tokens));
  if (o.concurrency < 0 || o.concurrency > kMaxStreamRequests)
    throw InputError("--concurrency: expected 0 to " + std::to_string(kMaxStreamRequests) + ", got " +
                     std::to_string(o.concurrency));
  if (o.concurrency > 0 && o.rate > 0) throw InputError("--concurrency: expected without --rate (a closed loop sets the arrivals)");

  std::vector<Request> requests;
  std::string stream;
  if (!o.requests_file.empty()) {
    requests = load_request_file(o.requests_file);
    stream = std::to_string(requests.size()) + " requests of " + o.requests_file;
  } else {
    SyntheticStream s;
    s.requests = o.requests;
    s.rate_per_s = o.rate;
    s.prompt = length_option("--isl", o.isl, s.prompt_tokens);
    s.output = length_option("--osl", o.osl, s.output_tokens);
    s.seed = static_cast<uint64_t>(e.workload.seed);
    requests = synthetic_requests(s);
    stream = std::to_string(requests.size()) + " requests, prompts " + o.isl + ", outputs " + o.osl + " tokens";
  }
  stream += o.concurrency > 0 ? ", " + std::to_string(o.concurrency) + " clients in a closed loop"
            : o.rate > 0     ? ", Poisson arrivals at " + fixed(o.rate, 2) + " a second"
                             : ", all arriving at the start";

  ServeSetup setup;
  setup.attention_tp = o.tp;
  setup.attention_tp_from = tp_from;
  setup.routing = o.routing;
  setup.kv_bytes = o.kv_dtype == "fp8" ? 1.0 : 2.0;
  setup.mem_fraction = o.mem_fraction;
  setup.limits.max_batch = o.max_batch;
  setup.limits.max_num_tokens = o.max_num_tokens;
  setup.limits.concurrency = o.concurrency;
  setup.limits.balance = o.scheduler == "kv_balanced" ? RequestBalance::kv_tokens : RequestBalance::round_robin;
  if (!o.disaggregated.empty()) {
    const size_t colon = o.disaggregated.find(':');
    auto count = [&](const std::string& v) {
      const bool digits = !v.empty() && v.size() <= 5 &&
                          std::all_of(v.begin(), v.end(), [](unsigned char c) { return std::isdigit(c); });
      const int n = digits ? std::stoi(v) : 0;
      if (n < 1 || n > 4096)
        throw InputError("--disaggregated: expected P:D, prefill and decode GPUs from 1 to 4096, got '" +
                         o.disaggregated + "'");
      return n;
    };
    if (colon == std::string::npos) count("");
    setup.prefill_gpus = count(o.disaggregated.substr(0, colon));
    setup.decode_gpus = count(o.disaggregated.substr(colon + 1));
    if (o.concurrency > 0)
      throw InputError("--disaggregated: expected arrivals (--rate or a file), not --concurrency (a closed loop over "
                       "two stages is not modeled)");
  }
  if (o.rebalance_every < 0 && (o.drift_steps != 50 || o.draws != 16))
    throw InputError("--drift-steps, --draws: expected with --rebalance-every only");
  set_mtp(o, setup);
  setup.rebalance_every = o.rebalance_every;
  setup.drift_steps = o.drift_steps;
  setup.draws = o.draws;
  ServeModelInput model = serve_input_for(e, hw, setup, std::move(requests));
  ServeInput& in = model.input;
  const KvCapacity& kv = model.kv;
  const int redundant = ep ? e.placement.replicas : 0;
  const int dp = in.step.attention_dp;
  in.counterfactuals = !o.no_counterfactuals;
  const ServeResult r = run_serve(in);

  std::ostringstream head;
  head << "moesim serve: " << e.model.name << " on " << model.gpus << " x " << hw.name;
  if (in.disaggregated)
    head << ": prefill on " << setup.prefill_gpus << ", decode on " << setup.decode_gpus << ", the KV cache moved at "
         << fixed(in.kv_transfer_s_per_token * 1e6, 3) << " us a token";
  head << " (attention DP " << dp << (o.tp > 1 ? " x TP " + std::to_string(o.tp) : std::string()) << ", EP "
       << (in.disaggregated ? setup.decode_gpus : gpus)
       << (redundant > 0 ? " + " + std::to_string(redundant) + " redundant" : std::string()) << ", "
       << to_string(e.placement.a2a_kernel) << " all-to-all, overlap " << to_string(e.placement.overlap) << ")\n"
       << "  " << stream << "\n  scheduler: " << o.scheduler << ", max batch " << o.max_batch << " and "
       << o.max_num_tokens << " tokens a rank, chunked prefill; routing: " << o.routing
       << (o.routing == "model" && redundant > 0 ? "; " + plan_source_note(e) : std::string());
  if (o.mtp_draft > 0)
    head << "; MTP " << o.mtp_draft << " draft token(s) at " << fixed(o.mtp_accept, 2) << " acceptance";
  head << "\n";
  if (html) {
    const std::string table = table_text(head.str(), kv, r, in.counterfactuals);
    const std::vector<std::string> lines = header_lines(table);
    emit(opts, format_serve_html("moesim serve: " + e.model.name, lines, r, in.counterfactuals));
    return kExitOk;
  }
  std::string text;
  switch (format) {
    case ReportFormat::json: {
      json j = metrics_json(r.metrics);
      j["gpus"] = r.gpus;
      if (in.disaggregated) j["disaggregated"] = {{"prefill_gpus", setup.prefill_gpus}, {"decode_gpus", setup.decode_gpus},
                                                  {"kv_transfer_us_per_token", in.kv_transfer_s_per_token * 1e6}};
      j["attention_dp"] = dp;
      j["tp"] = o.tp;
      j["scheduler"] = o.scheduler;
      j["routing"] = o.routing;
      j["kv_capacity_tokens_per_gpu"] = kv.tokens;
      j["kv_bytes_per_token"] = kv.bytes_per_token;
      j["weight_bytes_per_gpu"] = kv.weight_bytes;
      if (in.counterfactuals)
        j["counterfactual"] = {{"balanced_routing", metrics_json(r.balanced_routing)},
                               {"balanced_attention", metrics_json(r.balanced_attention)}};
      if (in.eplb_over_time)
        j["eplb"] = {{"rebalance_every", in.eplb.rebalance_every},
                     {"drift_steps", in.eplb.steps_per_draw},
                     {"draws", static_cast<int64_t>(in.eplb.loads.size())},
                     {"replans", r.eplb.replans},
                     {"moved_slots", r.eplb.moved_slots},
                     {"transfer_s", r.eplb.transfer_s},
                     {"static_plan", metrics_json(r.static_plan)}};
      text = j.dump(2) + "\n";
      break;
    }
    case ReportFormat::csv:
      text = std::string(kCsvHeader) + csv_row("actual", r.metrics);
      if (in.counterfactuals)
        text += csv_row("balanced_routing", r.balanced_routing) + csv_row("balanced_attention", r.balanced_attention);
      break;
    case ReportFormat::markdown: text = "```text\n" + table_text(head.str(), kv, r, in.counterfactuals) + "```\n"; break;
    default: text = table_text(head.str(), kv, r, in.counterfactuals);
  }
  emit(opts, text);
  return kExitOk;
}

}  // namespace moesim::cli
