// Published serving-step measurements against the step model (see published_step.hpp).
#include "src/sweep/published_step.hpp"
#include "src/sweep/table_cells.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <numeric>
#include <optional>
#include <sstream>

#include "router/route.hpp"
#include "src/common/embedded.hpp"
#include "src/common/error.hpp"
#include "src/config/load_config.hpp"
#include "src/pipeline/run_internal.hpp"
#include "src/workload/load_distribution.hpp"
#include "src/workload/load_profile.hpp"
#include "src/workload/megatron_loads.hpp"
#include "src/workload/trace_replay.hpp"
#include "src/pipeline/run_experiment.hpp"
#include "src/workload/logits_batches.hpp"

namespace moesim {

const char* const kStepHeader =
    "phase,model,gpu,gpus,devices_per_node,ep,attention_dp,tp,requests_per_gpu,tokens_per_gpu,isl,osl,kv_len,"
    "mtp_draft,mtp_accept,overlap,a2a_kernel,dispatch_dtype,combine_dtype,weight_dtype,redundant_experts,routing,"
    "quantity,measured,unit,source,notes";

const char* const kBalancednessHeader = "ep,redundant_experts,metric,value,source,notes";

bool is_step_table(const std::string& text) { return text.rfind("phase,model,", 0) == 0; }
bool is_balancedness_table(const std::string& text) { return text.rfind("ep,redundant_experts,metric,", 0) == 0; }

namespace {

namespace fs = std::filesystem;
constexpr const char* kStepDir = "data/serving-step/";
constexpr int kColumns = 27;
constexpr int kMaxRows = 10000;
// Routed draws of a "model" row: placement.warmup_batches batches the EPLB plan is made from (placement.plan_from
// past), then kStepDraws measured ones; at most kStepRoutedTokens tokens routed a batch, the loads scaled to the step's.
constexpr int kStepDraws = 2;
constexpr int64_t kStepRoutedTokens = 65536;
// A balancedness table's setting (data/serving-step/README.md): SGLang's figure routes 256 tokens a GPU, as
// TensorRT-LLM's local batch of 256 a rank does; DeepSeek-V3 decode, its KV length immaterial to the routing.
constexpr int64_t kBalancednessTokensPerGpu = 256, kBalancednessKvLen = 2000;
// A trace's recorded batches taken as draws, at most.
constexpr size_t kStepTraceDraws = 64;

constexpr StepQuantity kQuantities[] = {
    StepQuantity::layer_ms,     StepQuantity::step_ms,      StepQuantity::dispatch_ms,
    StepQuantity::combine_ms,   StepQuantity::experts_ms,   StepQuantity::attention_ms,
    StepQuantity::dense_ms,     StepQuantity::sync_ms,      StepQuantity::output_tokens_per_s_per_gpu,
    StepQuantity::input_tokens_per_s_per_gpu, StepQuantity::balancedness};

const char* unit_of(StepQuantity q) {
  switch (q) {
    case StepQuantity::output_tokens_per_s_per_gpu:
    case StepQuantity::input_tokens_per_s_per_gpu: return "tokens/s";
    case StepQuantity::balancedness: return "";
    default: return "ms";
  }
}

}  // namespace

const char* to_string(StepQuantity q) {
  switch (q) {
    case StepQuantity::layer_ms: return "layer_ms";
    case StepQuantity::step_ms: return "step_ms";
    case StepQuantity::dispatch_ms: return "dispatch_ms";
    case StepQuantity::combine_ms: return "combine_ms";
    case StepQuantity::experts_ms: return "experts_ms";
    case StepQuantity::attention_ms: return "attention_ms";
    case StepQuantity::dense_ms: return "dense_ms";
    case StepQuantity::sync_ms: return "sync_ms";
    case StepQuantity::output_tokens_per_s_per_gpu: return "output_tokens_per_s_per_gpu";
    case StepQuantity::input_tokens_per_s_per_gpu: return "input_tokens_per_s_per_gpu";
    case StepQuantity::balancedness: return "balancedness";
  }
  return "?";
}

StepTable parse_step_csv(const std::string& text, const std::string& origin) {
  StepTable t;
  t.origin = origin;
  t.name = fs::path(origin).stem().string();
  int fitted_column = -1, lengths_column = -1;
  const auto on_header = [&](const std::vector<std::string>& h) {
    for (std::size_t i = kColumns; i < h.size(); ++i) {
      if (h[i] == "fitted") fitted_column = static_cast<int>(i);
      if (h[i] == "lengths") lengths_column = static_cast<int>(i);
    }
  };
  read_table(text, origin, kStepHeader, kMaxRows, on_header, [&](const TableCell& w, const std::string& line) {
    const std::vector<std::string> c = split_csv_line(line);
    if (static_cast<int>(c.size()) < kColumns)
      w.fail("columns", "at least " + std::to_string(kColumns) + " cells", std::to_string(c.size()));
    StepRow r;
    r.line = w.line;
    const StepPhase phases[] = {StepPhase::decode, StepPhase::prefill};
    r.phase = table_choice(w, "phase", c[0], phases);
    if (c[1].empty()) w.fail("model", "a shipped model config name or a model .yaml file", c[1]);
    r.model = c[1];
    if (c[2].empty()) w.fail("gpu", "a hardware profile name or file", c[2]);
    r.gpu = c[2];
    r.gpus = static_cast<int>(w.integer("gpus", c[3], 1, 4096, false));
    r.devices_per_node = static_cast<int>(w.integer("devices_per_node", c[4], 1, 1024, false));
    r.ep = static_cast<int>(w.integer("ep", c[5], 1, 4096, false));
    r.attention_dp = static_cast<int>(w.integer("attention_dp", c[6], 1, 4096, false));
    r.tp = static_cast<int>(w.integer("tp", c[7], 1, 256, false));
    r.requests_per_gpu = w.integer("requests_per_gpu", c[8], 1, 1 << 20, true);
    r.tokens_per_gpu = w.integer("tokens_per_gpu", c[9], 1, 1 << 22, true);
    r.isl = w.integer("isl", c[10], 1, 1 << 22, true);
    r.osl = w.integer("osl", c[11], 1, 1 << 22, true);
    r.kv_len = w.integer("kv_len", c[12], 1, 1 << 22, true);
    r.mtp_draft = static_cast<int>(w.integer("mtp_draft", c[13], 0, 16, true));
    r.mtp_accept = w.real("mtp_accept", c[14], 0, 1, true);
    const A2aOverlap overlaps[] = {A2aOverlap::none, A2aOverlap::two_batch};
    r.overlap = c[15].empty() ? A2aOverlap::none : table_choice(w, "overlap", c[15], overlaps);
    const A2aKernel kernels[] = {A2aKernel::simple, A2aKernel::normal, A2aKernel::low_latency};
    r.a2a_kernel = c[16].empty() ? A2aKernel::normal : table_choice(w, "a2a_kernel", c[16], kernels);
    const A2aDtype dtypes[] = {A2aDtype::model, A2aDtype::fp8, A2aDtype::bf16, A2aDtype::fp16, A2aDtype::fp32};
    // NVFP4 copies (4 bits a value, an FP8 scale a block of 16): the all-to-all model has no 4-bit copy, so they
    // are costed as fp8 ones (twice the payload), and the row says so.
    r.dispatch_nvfp4 = c[17] == "nvfp4";
    r.dispatch_dtype = c[17].empty() ? A2aDtype::model
                       : r.dispatch_nvfp4 ? A2aDtype::fp8
                                          : table_choice(w, "dispatch_dtype (or nvfp4)", c[17], dtypes);
    r.combine_dtype = c[18].empty() ? A2aDtype::model : table_choice(w, "combine_dtype", c[18], dtypes);
    static const char* const kWeights[] = {"", "bf16", "fp16", "fp8", "int4", "mxfp4", "nvfp4"};
    if (std::find(std::begin(kWeights), std::end(kWeights), c[19]) == std::end(kWeights))
      w.fail("weight_dtype", "one of bf16, fp16, fp8, int4, mxfp4, nvfp4 (or empty: the model's)", c[19]);
    r.weight_dtype = c[19];
    r.redundant_experts = static_cast<int>(w.integer("redundant_experts", c[20], 0, 4096, true));
    r.routing = c[21];
    if (r.routing != "balanced" && r.routing != "model") {
      double alpha = 0;
      const bool ok = r.routing.rfind("power_law:", 0) == 0 && [&] {
        try {
          std::size_t used = 0;
          const std::string a = r.routing.substr(10);
          alpha = std::stod(a, &used);
          return used == a.size() && alpha > 0 && alpha <= 10 && alpha != 1;
        } catch (const std::exception&) {
          return false;
        }
      }();
      if (!ok) w.fail("routing", "balanced, model or power_law:ALPHA (ALPHA in (0, 10], not 1)", r.routing);
    }
    r.quantity = table_choice(w, "quantity", c[22], kQuantities);
    r.measured = w.real("measured", c[23], 1e-9, 1e12, false);
    if (r.quantity == StepQuantity::balancedness && r.measured > 1)
      w.fail("measured", "a balancedness from 0 to 1", c[23]);
    r.unit = c[24];
    if (r.unit != unit_of(r.quantity))
      w.fail("unit", std::string("'") + unit_of(r.quantity) + "' for " + to_string(r.quantity), r.unit);
    r.source = c[25];
    r.notes = c[26];
    if (r.phase == StepPhase::decode && r.requests_per_gpu <= 0)
      w.fail("requests_per_gpu", "the requests a GPU decodes (decode rows)", c[8]);
    if (r.phase == StepPhase::decode && r.kv_len <= 0) w.fail("kv_len", "the KV tokens a request attends (decode rows)", c[12]);
    if (r.phase == StepPhase::decode && r.tokens_per_gpu > 0 && r.tokens_per_gpu != r.requests_per_gpu * (1 + r.mtp_draft))
      w.fail("tokens_per_gpu", "requests_per_gpu x (1 + mtp_draft) = " +
                                   std::to_string(r.requests_per_gpu * (1 + r.mtp_draft)) + " in decode, or empty",
             c[9]);
    if (r.phase == StepPhase::prefill && r.tokens_per_gpu <= 0)
      w.fail("tokens_per_gpu", "the prompt tokens a GPU runs (prefill rows)", c[9]);
    if (r.phase == StepPhase::prefill && r.isl <= 0 && r.requests_per_gpu <= 0)
      w.fail("isl", "the prompt length, or requests_per_gpu (prefill rows)", c[10]);
    if (const std::string too_big = step_size_error(r); !too_big.empty())
      w.fail(r.phase == StepPhase::decode ? "requests_per_gpu" : "tokens_per_gpu", too_big,
             r.phase == StepPhase::decode ? c[8] : c[9]);
    if (r.attention_dp * r.tp != r.gpus)
      w.fail("attention_dp", "gpus / tp = " + std::to_string(r.gpus / std::max(1, r.tp)), c[6]);
    if (r.ep != r.gpus) w.fail("ep", "gpus (" + std::to_string(r.gpus) + "): every GPU an expert-parallel rank", c[5]);
    if (fitted_column >= 0 && static_cast<int>(c.size()) > fitted_column) {
      const std::string& f = c[static_cast<std::size_t>(fitted_column)];
      if (f != "" && f != "0" && f != "1") w.fail("fitted", "0 or 1 (or empty: 1)", f);
      r.fitted = f != "0";
    }
    if (lengths_column >= 0 && static_cast<int>(c.size()) > lengths_column &&
        !c[static_cast<std::size_t>(lengths_column)].empty()) {
      const std::string& spec = c[static_cast<std::size_t>(lengths_column)];
      if (spec.rfind("file:", 0) == 0) w.fail("lengths", "fixed, uniform:LO:HI or lognormal:MEDIAN:SIGMA in a table", spec);
      try {
        r.lengths = parse_request_lengths(spec, "lengths");
      } catch (const InputError&) {
        w.fail("lengths", "fixed, uniform:LO:HI or lognormal:MEDIAN:SIGMA", spec);
      }
    }
    r.table = r.source + " / " + to_string(r.phase);
    t.rows.push_back(std::move(r));
  });
  return t;
}

StepTable parse_balancedness_csv(const std::string& text, const std::string& origin) {
  StepTable t;
  t.origin = origin;
  t.name = fs::path(origin).stem().string();
  read_table(text, origin, kBalancednessHeader, kMaxRows, [](const std::vector<std::string>&) {},
             [&](const TableCell& w, const std::string& line) {
    const std::vector<std::string> c = split_csv_line(line);
    if (c.size() < 6) w.fail("columns", "at least 6 cells", std::to_string(c.size()));
    StepRow r;
    r.line = w.line;
    r.phase = StepPhase::decode;
    r.model = "deepseek-v3";
    r.gpu = "h100-sxm";
    r.ep = r.gpus = r.attention_dp = static_cast<int>(w.integer("ep", c[0], 1, 1024, false));
    r.redundant_experts = static_cast<int>(w.integer("redundant_experts", c[1], 0, 4096, false));
    r.requests_per_gpu = kBalancednessTokensPerGpu;
    r.kv_len = kBalancednessKvLen;
    r.a2a_kernel = A2aKernel::low_latency;
    r.routing = "model";
    r.quantity = StepQuantity::balancedness;
    if (c[2] == "gpu_balancedness") {
      r.measured = w.real("value", c[3], 1e-6, 1, false);
    } else if (c[2] == "rank_imbalance_max_minus_mean_over_mean") {
      // (max - mean) / mean tokens per rank is 1 / balancedness - 1.
      r.measured = 1.0 / (1.0 + w.real("value", c[3], 0, 1e6, false));
    } else {
      w.fail("metric", "gpu_balancedness or rank_imbalance_max_minus_mean_over_mean", c[2]);
    }
    r.source = c[4];
    r.notes = c[5];
    r.fitted = false;
    r.table = r.source + " / balancedness";
    t.rows.push_back(std::move(r));
  });
  return t;
}

StepTable parse_step_table(const std::string& text, const std::string& origin) {
  return is_balancedness_table(text) ? parse_balancedness_csv(text, origin) : parse_step_csv(text, origin);
}

std::vector<StepTable> load_step_tables(const std::string& spec) {
  std::vector<StepTable> tables;
  auto ours = [](const std::string& text) { return is_step_table(text) || is_balancedness_table(text); };
  if (spec == "all") {
    for (const auto& [path, text] : embedded_files())
      if (path.rfind(kStepDir, 0) == 0 && fs::path(path).extension() == ".csv" && ours(text))
        tables.push_back(parse_step_table(text, path));
  } else {
    for (const PublishedFile& f : published_files(spec))
      if (ours(f.text)) tables.push_back(parse_step_table(f.text, f.origin));
  }
  std::sort(tables.begin(), tables.end(), [](const StepTable& a, const StepTable& b) { return a.name < b.name; });
  return tables;
}



// placement.plan_from profile: the plan profile's loads (every layer's summed), scaled to `assignments`.
std::vector<int64_t> profile_plan_loads(const Experiment& e, int64_t assignments) {
  const run_detail::PlanProfile p = run_detail::read_plan_profile(e);
  std::vector<int64_t> counts(p.total.size());
  for (size_t x = 0; x < counts.size(); ++x) counts[x] = std::llround(p.total[x] * 1e3);
  return scale_loads(counts, assignments);
}

// The row's per-expert loads of `tokens` tokens (every GPU's), draw by draw, and the loads each draw's EPLB plan is
// made from (with_plan), as placement.plan_from says: placement.warmup_batches batches routed before the draws,
// summed (past; none: equal loads); the draw's own loads (oracle); the plan profile's (profile). A recorded
// workload's draws plan from their own records (the engine's record of past loads) unless a plan profile is given.
StepRouting route_loads(const StepRow& row, const Experiment& base, int64_t tokens, bool with_plan, int draws) {
  const int E = base.model.experts, k = base.model.top_k;
  const bool from_profile = with_plan && base.placement.plan_from == PlanFrom::profile;
  StepRouting out;
  out.tokens = tokens;
  out.routing = row.routing;
  if (row.routing == "balanced") {
    const std::vector<int64_t> l = even_loads(E, tokens * k);
    out.loads = {l};
    out.plan_loads = {l};
    return out;
  }
  if (row.routing.rfind("power_law:", 0) == 0) {
    const double alpha = std::stod(row.routing.substr(10));
    const int ep = E % row.ep == 0 ? row.ep : 1;
    for (int d = 0; d < kStepDraws; ++d)
      out.loads.push_back(power_law_loads(tokens, E, k, alpha, ep, base.workload.seed, static_cast<uint64_t>(d)));
    return out;
  }
  // The plan profile's loads, read once for every draw.
  const std::vector<int64_t> profile_plan =
      from_profile ? profile_plan_loads(base, tokens * k) : std::vector<int64_t>{};
  // model, a load profile: each recorded layer's counts scaled to the step's assignments is one draw (the step's
  // MoE layer is the mean over the recorded layers), each planned from its own record, as `run` plans a profile's
  // layers (the engine's record of past loads).
  if (base.workload.source == WorkloadSource::load_profile) {
    const LoadProfile profile = read_load_profile_file(resolve_workload_path(base), base.workload.format,
                                                       base.workload.profile_key, E, base.workload.expert_map, k);
    for (const std::vector<int64_t>& counts : profile.counts) {
      out.loads.push_back(scale_loads(counts, tokens * k));
      if (with_plan) out.plan_loads.push_back(from_profile ? profile_plan : out.loads.back());
    }
    return out;
  }
  // model, a trace: each recorded batch's kept assignments (a Megatron-LM router trace: each layer's, summed over its
  // forwards) scaled to the step's is one draw, at most kStepTraceDraws of them spread evenly over the trace; each
  // planned from its own record when the step has redundant experts.
  if (base.workload.source == WorkloadSource::trace) {
    const std::string path = resolve_workload_path(base);
    std::vector<std::vector<int64_t>> counts;
    if (is_megatron_router_trace_file(path)) {
      counts = read_megatron_router_trace(path, E, k).counts;
    } else {
      const FlatTrace t = read_flat_trace_file(path, E);
      const size_t n = t.num_batches(), stride = std::max<size_t>(1, n / kStepTraceDraws);
      for (size_t b = 0; b < n && counts.size() < kStepTraceDraws; b += stride) {
        const TraceBatch batch = t.batch(b);
        std::vector<int64_t> l(static_cast<size_t>(E), 0);
        for (size_t a = 0; a < batch.expert.size(); ++a)
          if (batch.kept.empty() || batch.kept[a]) ++l[static_cast<size_t>(batch.expert[a])];
        counts.push_back(l);
      }
    }
    for (const std::vector<int64_t>& c : counts) {
      out.loads.push_back(scale_loads(c, tokens * k));
      if (with_plan) out.plan_loads.push_back(from_profile ? profile_plan : out.loads.back());
    }
    if (out.loads.empty()) throw InputError(path + ": expected at least one recorded batch for the step's loads, got none");
    return out;
  }
  // model: the config's own workload (synthetic), routed at up to kStepRoutedTokens tokens a batch.
  if (base.workload.source != WorkloadSource::synthetic)
    throw InputError("routing model: expected a model config with a synthetic, load_profile or trace workload, got " +
                     std::string(to_string(base.workload.source)) + " in " + row.model);
  Experiment e = base;
  e.router.capacity_factor = 0;
  e.router.layout = Layout::dropless;
  e.workload.batch = std::min<int64_t>(tokens, kStepRoutedTokens);
  e.workload.batches = draws > 0 ? draws : kStepDraws;
  auto loads_of = [&](const std::vector<LogitsBatch>& batches) {
    std::vector<std::vector<int64_t>> loads;
    for (size_t i = 0; i < batches.size(); ++i) {
      const Routing r = route_omp(e.router, run_detail::request_for(e, batches[i], static_cast<int>(i)), nullptr);
      std::vector<int64_t> l(static_cast<size_t>(E), 0);
      for (size_t a = 0; a < r.expert.size(); ++a)
        if (r.kept.empty() || r.kept[a]) ++l[static_cast<size_t>(r.expert[a])];
      loads.push_back(e.workload.batch == tokens ? l : scale_loads_to(l, e.workload.batch, tokens));
    }
    return loads;
  };
  out.loads = loads_of(make_logits_batches(e, ""));
  if (with_plan && from_profile) {
    out.plan_loads.assign(out.loads.size(), profile_plan);
  } else if (with_plan && base.placement.plan_from == PlanFrom::oracle) {
    out.plan_loads = out.loads;
  } else if (with_plan && base.placement.warmup_batches == 0) {
    out.plan_loads.assign(out.loads.size(), even_loads(E, tokens * k));  // no statistics yet
  } else if (with_plan) {
    std::vector<int64_t> past(static_cast<size_t>(E), 0);
    for (const std::vector<int64_t>& l : loads_of(make_warmup_batches(e, base.placement.warmup_batches)))
      for (int x = 0; x < E; ++x) past[static_cast<size_t>(x)] += l[static_cast<size_t>(x)];
    out.plan_loads.assign(out.loads.size(), past);
  }
  return out;
}

std::string plan_source_note(const Experiment& e) {
  if (e.placement.plan_from == PlanFrom::profile) return "EPLB planned from " + e.placement.plan_profile;
  if (e.placement.plan_from == PlanFrom::oracle) return "EPLB planned from each draw's own loads (oracle)";
  return e.workload.source == WorkloadSource::synthetic ? "EPLB planned from earlier batches"
                                                         : "EPLB planned from each draw's own record";
}

ServingStepInput step_input(const StepRow& row, const std::string& origin) {
  // A table row's placement: the automatic policy (EPLB with its redundant_experts) over one node of its GPUs.
  Experiment e = table_model(TableCell{origin, row.line}, row.model, kStepDir);
  e.placement.policy = PlacementPolicy::automatic;
  e.placement.nodes = 1;
  std::string ref;
  const HardwareProfile hw = published_table_profile(origin, row.line, row.gpu, ref);
  try {
    return step_input_for(row, e, hw);
  } catch (const ConfigError& x) {
    throw InputError(origin + ":" + std::to_string(row.line) + ": " + x.what());
  } catch (const InputError& x) {
    throw InputError(origin + ":" + std::to_string(row.line) + ": " + x.what());
  }
}

std::string step_size_error(const StepRow& row) {
  const int64_t gpus = static_cast<int64_t>(row.tp) * row.attention_dp;
  if (row.phase == StepPhase::decode && row.requests_per_gpu * gpus > kMaxStepSequences)
    return "at most " + std::to_string(kMaxStepSequences) + " requests over the " + std::to_string(gpus) +
           " GPUs (" + std::to_string(kMaxStepSequences / gpus) + " a GPU)";
  if (row.phase == StepPhase::prefill && row.tokens_per_gpu * gpus > kMaxStepTokens)
    return "at most " + std::to_string(kMaxStepTokens) + " prompt tokens over the " + std::to_string(gpus) +
           " GPUs (" + std::to_string(kMaxStepTokens / gpus) + " a GPU)";
  return "";
}

int64_t step_tokens(const StepRow& row) {
  return row.phase == StepPhase::decode ? row.requests_per_gpu * row.tp * row.attention_dp * (1 + row.mtp_draft)
                                        : row.tokens_per_gpu * row.tp * row.attention_dp;
}

ServingStepInput step_input_for(const StepRow& row, const Experiment& e, const HardwareProfile& hw,
                                const StepRouting* routed) {
  if (e.placement.tensor_parallel != 1)
    throw ConfigError("placement.tensor_parallel: expected 1 for the serving step (each GPU an expert-parallel rank "
                      "holding whole experts; expert tensor parallelism is not modeled there), got " +
                      std::to_string(e.placement.tensor_parallel));
  ServingStepInput in;
  in.hw = hw;
  in.hw.devices_per_node = row.devices_per_node;
  in.model = e.model;
  if (row.weight_dtype == "int4" || row.weight_dtype == "mxfp4") {
    in.model.weight_dtype = row.weight_dtype == "int4" ? WeightDtype::int4 : WeightDtype::mxfp4;
  } else if (row.weight_dtype == "nvfp4") {
    // NVFP4 (4-bit values, an FP8 scale a block of 16) on Blackwell's FP4 tensor cores: the kernel model has no FP4
    // GEMM, so the layer is costed in fp8 (twice the weight bytes, half the FP4 peak); the row says so.
    in.model.dtype = Dtype::fp8;
    in.model.weight_dtype = WeightDtype::same;
  } else if (!row.weight_dtype.empty()) {
    in.model.dtype = row.weight_dtype == "fp8" ? Dtype::fp8 : row.weight_dtype == "fp16" ? Dtype::fp16 : Dtype::bf16;
    in.model.weight_dtype = WeightDtype::same;
  }
  in.phase = row.phase;
  in.attention_dp = row.attention_dp;
  in.attention_tp = row.tp;
  in.devices_per_node = row.devices_per_node;
  in.mtp_draft = row.mtp_draft;
  in.mtp_accept = row.mtp_accept;
  in.request_balance = e.placement.request_balance;

  Experiment pe = e;
  pe.model = in.model;
  pe.placement.kind = row.ep > 1 ? PlacementKind::expert_parallel : PlacementKind::single;
  pe.placement.devices = row.ep;
  pe.placement.replicas = row.redundant_experts;
  pe.placement.a2a_kernel = row.a2a_kernel;
  pe.placement.dispatch_dtype = row.dispatch_dtype;
  pe.placement.combine_dtype = row.combine_dtype;
  pe.placement.overlap = row.overlap;
  in.moe = layer_cost_input(pe, pe.router, CostedSize::model, 0, {}, 0);
  in.moe.placement = resolve_placement(pe.placement, pe.router);

  // The sequences (docs/serving.md "Request lengths"): decode, requests_per_gpu a GPU (tp GPUs a rank), each
  // attending its KV length (kv_len, or drawn from row.lengths) with 1 + mtp_draft queries, spread over the ranks by
  // placement.request_balance; prefill, each rank filled to its tokens_per_gpu budget with prompts of isl tokens (or
  // drawn from row.lengths), the next request going to the rank the policy picks among those with room, the last
  // prompt of a rank chunked, each attending its own positions after kv_len - isl cached ones.
  const int ranks = row.attention_dp;
  const uint64_t seed = static_cast<uint64_t>(e.workload.seed);
  int64_t tokens = 0;
  if (row.phase == StepPhase::decode) {
    const int64_t requests = row.requests_per_gpu * row.tp * ranks;
    for (int64_t q = 0; q < requests; ++q) {
      StepSequence s;
      s.query_tokens = 1 + row.mtp_draft;
      s.context_tokens = row.lengths.draw(row.kv_len, seed, static_cast<uint64_t>(q));
      s.attended_positions = s.query_tokens * s.context_tokens;
      in.sequences.push_back(s);
      tokens += s.query_tokens;
    }
  } else {
    const int64_t per = row.tokens_per_gpu * row.tp;
    const int64_t isl = row.isl > 0 ? row.isl : (per + row.requests_per_gpu - 1) / row.requests_per_gpu;
    const int64_t cached = std::max<int64_t>(0, row.kv_len - isl);
    std::vector<int64_t> left(static_cast<size_t>(ranks), per);
    int next = 0;
    for (uint64_t q = 0;; ++q) {
      int r = -1;
      if (in.request_balance == RequestBalance::kv_tokens) {
        for (int x = 0; x < ranks; ++x)
          if (left[static_cast<size_t>(x)] > 0 && (r < 0 || left[static_cast<size_t>(x)] > left[static_cast<size_t>(r)])) r = x;
      } else {
        for (int x = 0; x < ranks && r < 0; ++x)
          if (left[static_cast<size_t>((next + x) % ranks)] > 0) r = (next + x) % ranks;
        next = (r + 1) % ranks;
      }
      if (r < 0) break;
      if (static_cast<int64_t>(in.sequences.size()) >= kMaxStepSequences)
        throw InputError("--lengths (a table's lengths column): expected prompts of at least " + std::to_string(tokens / kMaxStepSequences + 1) +
                         " tokens on average (at most " + std::to_string(kMaxStepSequences) +
                         " prompts a step), got " + row.lengths.spec);
      StepSequence s;
      s.query_tokens = std::min(row.lengths.draw(isl, seed, q), left[static_cast<size_t>(r)]);
      s.context_tokens = cached + s.query_tokens;
      s.attended_positions = s.query_tokens * cached + s.query_tokens * (s.query_tokens + 1) / 2;
      in.sequences.push_back(s);
      in.sequence_rank.push_back(r);
      left[static_cast<size_t>(r)] -= s.query_tokens;
      tokens += s.query_tokens;
    }
  }
  // The loads: routed here, or (route once, cost many) the caller's routing of the same router and workload at
  // another size, scaled to this step's tokens.
  if (!routed || routed->routing != row.routing) {
    const StepRouting r = route_loads(row, e, tokens, row.redundant_experts > 0);
    in.loads = r.loads;
    in.plan_loads = r.plan_loads;
  } else {
    const bool balanced = row.routing == "balanced";
    const StepRouting r = balanced ? route_loads(row, e, tokens, false) : StepRouting{};
    const StepRouting& from = balanced ? r : *routed;
    for (const std::vector<int64_t>& l : from.loads)
      in.loads.push_back(from.tokens == tokens ? l : scale_loads_to(l, from.tokens, tokens));
    if (row.redundant_experts > 0)
      for (const std::vector<int64_t>& l : from.plan_loads)
        in.plan_loads.push_back(from.tokens == tokens ? l : scale_loads_to(l, from.tokens, tokens));
  }
  return in;
}

ServingStep model_row(const ServingStepInput& in, const std::string& origin, int line) {
  try {
    return model_serving_step(in);
  } catch (const ConfigError& e) {
    throw InputError(origin + ":" + std::to_string(line) + ": " + e.what());
  }
}

double step_quantity(const ServingStep& s, StepQuantity q) {
  switch (q) {
    case StepQuantity::layer_ms: return s.moe_layer.layer_s * 1e3;
    case StepQuantity::step_ms: return s.step_s * 1e3;
    case StepQuantity::dispatch_ms: return s.moe_layer.dispatch_s * 1e3;
    case StepQuantity::combine_ms: return s.moe_layer.combine_s * 1e3;
    case StepQuantity::experts_ms: return s.moe_layer.experts_s * 1e3;
    case StepQuantity::attention_ms: return s.moe_layer.attention_s * 1e3;
    case StepQuantity::dense_ms: return s.moe_layer.dense_s * 1e3;
    case StepQuantity::sync_ms: return s.moe_layer.sync_s * 1e3;
    case StepQuantity::output_tokens_per_s_per_gpu: return s.output_tokens_per_s_per_gpu;
    case StepQuantity::input_tokens_per_s_per_gpu: return s.input_tokens_per_s_per_gpu;
    case StepQuantity::balancedness: return s.balancedness;
  }
  return 0;
}

namespace {

// One configuration of the tables (the rows that share every column before quantity), routed once.
struct Config {
  ServingStepInput input;
  std::string origin;        // the table's
  std::vector<size_t> rows;  // indices into StepValidation::rows
  std::string approximation;
};

std::string config_key(const StepRow& r) {
  std::ostringstream k;
  k << to_string(r.phase) << '|' << r.model << '|' << r.gpu << '|' << r.gpus << '|' << r.devices_per_node << '|' << r.ep
    << '|' << r.attention_dp << '|' << r.tp << '|' << r.requests_per_gpu << '|' << r.tokens_per_gpu << '|' << r.isl
    << '|' << r.kv_len << '|' << r.mtp_draft << '|' << r.mtp_accept << '|' << to_string(r.overlap) << '|'
    << to_string(r.a2a_kernel) << '|' << to_string(r.dispatch_dtype) << r.dispatch_nvfp4 << '|' << to_string(r.combine_dtype) << '|'
    << r.weight_dtype << '|' << r.redundant_experts << '|' << r.routing << '|' << r.lengths.spec;
  return k.str();
}

// Whether a row's error moves with the figures: a fitted row of a time or a throughput (balancedness is routing's).
bool fit_row(const StepRow& r) { return r.fitted && r.quantity != StepQuantity::balancedness; }
bool moves_figures(const Config& c, const std::vector<StepResult>& rows) {
  return std::any_of(c.rows.begin(), c.rows.end(), [&](size_t i) { return fit_row(rows[i].row); });
}

// The fit's objective: the squared log error of every row the figures move, each table weighted equally
// (1 / its rows), over the tables `use` says.
double objective(const std::vector<Config>& configs, const std::vector<StepResult>& rows,
                 const std::vector<std::string>& tables, const std::vector<bool>& use, const StepFigures& f) {
  std::map<std::string, int> count;
  for (const StepResult& r : rows) ++count[r.row.table];
  double sum = 0;
  for (const Config& c : configs) {
    bool any = false;
    for (size_t i : c.rows) {
      const size_t t = static_cast<size_t>(std::find(tables.begin(), tables.end(), rows[i].row.table) - tables.begin());
      any = any || use[t];
    }
    if (!any || !moves_figures(c, rows)) continue;
    ServingStepInput in = c.input;
    in.figures = f;
    const ServingStep s = model_row(in, c.origin, rows[c.rows.front()].row.line);
    for (size_t i : c.rows) {
      const StepRow& r = rows[i].row;
      const size_t t = static_cast<size_t>(std::find(tables.begin(), tables.end(), r.table) - tables.begin());
      if (!use[t] || !fit_row(r)) continue;
      const double v = step_quantity(s, r.quantity);
      const double e = std::log(std::max(v, 1e-12) / r.measured);
      sum += e * e / count[r.table];
    }
  }
  return sum;
}

// Coordinate descent over the three figures from fixed starting values (so that a refit never depends on what was
// shipped): kFitSweeps sweeps, each a golden-section search of kFitSteps steps on one figure's range with the others
// held. Deterministic.
StepFigures fit_figures(const std::vector<Config>& configs, const std::vector<StepResult>& rows,
                        const std::vector<std::string>& tables, const std::vector<bool>& use) {
  constexpr int kFitSweeps = 3, kFitSteps = 12;
  StepFigures f;
  f.other_kernels = 20;
  f.attention_efficiency = 0.6;
  f.decode_launch_share = 0.5;
  struct Range {
    double StepFigures::*field;
    double lo, hi;
  };
  const Range ranges[] = {{&StepFigures::other_kernels, 0, 60},
                          {&StepFigures::attention_efficiency, 0.2, 1},
                          {&StepFigures::decode_launch_share, 0, 1}};
  const double g = (std::sqrt(5.0) - 1) / 2;
  for (int sweep = 0; sweep < kFitSweeps; ++sweep)
    for (const Range& r : ranges) {
      auto at = [&](double x) {
        StepFigures t = f;
        t.*r.field = x;
        return objective(configs, rows, tables, use, t);
      };
      double a = r.lo, b = r.hi;
      double c = b - g * (b - a), d = a + g * (b - a);
      double fc = at(c), fd = at(d);
      for (int i = 0; i < kFitSteps; ++i) {
        if (fc <= fd) {
          b = d, d = c, fd = fc;
          c = b - g * (b - a);
          fc = at(c);
        } else {
          a = c, c = d, fc = fd;
          d = a + g * (b - a);
          fd = at(d);
        }
      }
      f.*r.field = fc <= fd ? c : d;
    }
  return f;
}

}  // namespace

StepValidation validate_steps(const std::vector<StepTable>& tables) {
  StepValidation v;
  std::vector<Config> configs;
  std::map<std::string, size_t> by_key;
  for (const StepTable& t : tables)
    for (const StepRow& r : t.rows) {
      const std::string key = t.origin + "#" + config_key(r);
      auto it = by_key.find(key);
      if (it == by_key.end()) {
        Config c;
        c.input = step_input(r, t.origin);
        c.origin = t.origin;
        if (r.weight_dtype == "nvfp4") c.approximation = "nvfp4 GEMMs costed in fp8";
        if (r.dispatch_nvfp4)
          c.approximation += std::string(c.approximation.empty() ? "" : "; ") + "nvfp4 dispatch costed as fp8 copies";
        it = by_key.emplace(key, configs.size()).first;
        configs.push_back(std::move(c));
      }
      StepResult res;
      res.row = r;
      res.approximation = configs[it->second].approximation;
      configs[it->second].rows.push_back(v.rows.size());
      v.rows.push_back(res);
      if (std::find(v.tables.begin(), v.tables.end(), r.table) == v.tables.end()) v.tables.push_back(r.table);
    }
  v.fit = StepFigures::fitted();
  auto predict = [&](const StepFigures& f, bool held, const std::vector<bool>& only) {
    for (const Config& c : configs) {
      ServingStepInput in = c.input;
      in.figures = f;
      std::optional<ServingStep> s;
      for (size_t i : c.rows) {
        const size_t t = static_cast<size_t>(std::find(v.tables.begin(), v.tables.end(), v.rows[i].row.table) -
                                             v.tables.begin());
        if (!only[t]) continue;
        if (!s) s = model_row(in, c.origin, v.rows[i].row.line);
        (held ? v.rows[i].held_out : v.rows[i].model) = step_quantity(*s, v.rows[i].row.quantity);
      }
    }
  };
  predict(v.fit, false, std::vector<bool>(v.tables.size(), true));
  v.refit = fit_figures(configs, v.rows, v.tables, std::vector<bool>(v.tables.size(), true));
  for (size_t t = 0; t < v.tables.size(); ++t) {
    std::vector<bool> use(v.tables.size(), true), only(v.tables.size(), false);
    use[t] = false;
    only[t] = true;
    // A table none of whose rows the fit uses (balancedness, rows marked fitted 0) leaves the fit as it is.
    const bool fitted = std::any_of(v.rows.begin(), v.rows.end(),
                                    [&](const StepResult& r) { return r.row.table == v.tables[t] && fit_row(r.row); });
    const StepFigures f = v.tables.size() > 1 && fitted ? fit_figures(configs, v.rows, v.tables, use) : v.refit;
    v.held_out_fits.push_back(f);
    predict(f, true, only);
  }
  std::vector<double> all_m, all_h;
  for (StepQuantity q : kQuantities) {
    std::vector<double> m, h;
    for (const StepResult& r : v.rows)
      if (r.row.quantity == q && (r.row.fitted || q == StepQuantity::balancedness)) {
        m.push_back(r.error(false));
        h.push_back(r.error(true));
      }
    if (m.empty()) continue;
    if (q != StepQuantity::balancedness) {
      all_m.insert(all_m.end(), m.begin(), m.end());
      all_h.insert(all_h.end(), h.begin(), h.end());
    }
    v.quantities.push_back({q, summarize_errors(m), summarize_errors(h)});
  }
  v.model = summarize_errors(all_m);
  v.held_out = summarize_errors(all_h);
  // SGLang's prefill: default routing over perfect balance; TensorRT-LLM's synchronization share.
  const StepResult* dflt = nullptr;
  const StepResult* bal = nullptr;
  const StepResult* sync = nullptr;
  const StepResult* layer = nullptr;
  for (const StepResult& r : v.rows) {
    if (r.row.phase == StepPhase::prefill && r.row.quantity == StepQuantity::input_tokens_per_s_per_gpu &&
        r.row.source.find("lm-sys") != std::string::npos)
      (r.row.routing == "balanced" ? bal : dflt) = &r;
    if (r.row.quantity == StepQuantity::sync_ms) sync = &r;
    if (sync && !layer && r.row.quantity == StepQuantity::layer_ms && r.row.table == sync->row.table) layer = &r;
  }
  if (!layer && sync)
    for (const StepResult& r : v.rows)
      if (r.row.quantity == StepQuantity::layer_ms && r.row.table == sync->row.table) layer = &r;
  if (dflt && bal) {
    v.prefill_balance_ratio_measured = bal->row.measured / dflt->row.measured;
    v.prefill_balance_ratio_model = bal->model / dflt->model;
  }
  if (sync && layer) {
    v.sync_share_measured = sync->row.measured / layer->row.measured;
    v.sync_share_model = sync->model / layer->model;
  }
  return v;
}

}  // namespace moesim
