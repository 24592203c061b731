// Published serving measurements against moesim serve, and a serving run's input (see published_serve.hpp).
#include "src/sweep/published_serve.hpp"

#include <algorithm>
#include <filesystem>
#include <sstream>

#include "src/common/embedded.hpp"
#include "src/common/error.hpp"
#include "src/sweep/published.hpp"
#include "src/sweep/published_step.hpp"
#include "src/sweep/table_cells.hpp"

namespace moesim {

const char* const kServeHeader =
    "system,model,weight_dtype,kv_dtype,gpu,gpus,tp,attention_dp,ep,mtp_draft,mtp_accept,max_batch_size,"
    "max_num_tokens,concurrency,requests,isl,osl,scheduler,disaggregated,prefill_gpus,decode_gpus,quantity,measured,"
    "unit,source,notes";

bool is_serve_table(const std::string& text) { return text.rfind("system,model,", 0) == 0; }

namespace {

namespace fs = std::filesystem;
constexpr const char* kServeDir = "data/serving/";
constexpr int kColumns = 26;
constexpr int kMaxRows = 10000;

constexpr ServeQuantity kQuantities[] = {ServeQuantity::output_tokens_per_s_per_gpu, ServeQuantity::total_tokens_per_s_per_gpu,
                                         ServeQuantity::tokens_per_s_per_user,       ServeQuantity::output_tokens_per_s,
                                         ServeQuantity::ttft_ms,                     ServeQuantity::tpot_ms};

const char* unit_of(ServeQuantity q) {
  return q == ServeQuantity::ttft_ms || q == ServeQuantity::tpot_ms ? "ms" : "tokens/s";
}

}  // namespace

const char* to_string(ServeQuantity q) {
  switch (q) {
    case ServeQuantity::output_tokens_per_s_per_gpu: return "output_tokens_per_s_per_gpu";
    case ServeQuantity::total_tokens_per_s_per_gpu: return "total_tokens_per_s_per_gpu";
    case ServeQuantity::tokens_per_s_per_user: return "tokens_per_s_per_user";
    case ServeQuantity::output_tokens_per_s: return "output_tokens_per_s";
    case ServeQuantity::ttft_ms: return "ttft_ms";
    case ServeQuantity::tpot_ms: return "tpot_ms";
  }
  return "?";
}

namespace {

// What a GPU sends weights or KV caches over to another group of GPUs: its scale-out NIC, or the scale-up link on a
// profile without one.
struct Link {
  double bytes_per_s = 0, latency_s = 0;
};
Link gpu_link(const HardwareProfile& hw) {
  if (hw.inter_node_bandwidth_bytes_per_s > 0) return {hw.inter_node_bandwidth_bytes_per_s, hw.inter_node_latency_s};
  return {hw.link_bandwidth_bytes_per_s, hw.link_latency_s};
}

// One group of GPUs' step model and KV capacity: the experiment's placement over `gpus` expert-parallel GPUs.
struct GroupInput {
  ServingStepInput step;
  KvCapacity kv;
  int ranks = 1;
};

GroupInput group_input(const Experiment& e, const HardwareProfile& hw, const ServeSetup& s, int gpus,
                       const StepRouting* routed) {
  const bool ep = e.placement.kind == PlacementKind::expert_parallel;
  if (s.attention_tp < 1 || gpus % s.attention_tp != 0)
    throw InputError(s.attention_tp_from + ": expected a divisor of the expert-parallel GPUs (" + std::to_string(gpus) +
                     "), got " + std::to_string(s.attention_tp));
  StepRow row;
  row.phase = StepPhase::decode;
  row.gpus = row.ep = gpus;
  row.tp = s.attention_tp;
  row.attention_dp = gpus / s.attention_tp;
  row.devices_per_node = hw.devices_per_node > 0 ? hw.devices_per_node : gpus;
  row.requests_per_gpu = 1;
  row.kv_len = 1;
  row.overlap = e.placement.overlap;
  row.a2a_kernel = e.placement.a2a_kernel;
  row.dispatch_dtype = e.placement.dispatch_dtype;
  row.combine_dtype = e.placement.combine_dtype;
  row.weight_dtype = s.weight_dtype;
  row.redundant_experts = ep ? e.placement.replicas : 0;
  row.routing = s.routing;
  StepRouting own;
  if (!routed) {
    own = route_loads(row, e, s.limits.max_num_tokens * row.attention_dp * row.tp, row.redundant_experts > 0);
    routed = &own;
  }
  Experiment pe = e;
  pe.placement.kind = gpus > 1 ? PlacementKind::expert_parallel : PlacementKind::single;
  pe.placement.devices = gpus;
  GroupInput g;
  g.step = step_input_for(row, pe, hw, routed);
  g.step.request_balance = s.limits.balance;
  g.step.kv_bytes = s.kv_bytes;
  g.step.mtp_draft = s.mtp_draft;
  g.step.mtp_accept = s.mtp_accept;
  g.ranks = row.attention_dp;
  g.kv = kv_capacity(g.step.model, hw.memory_bytes, s.mem_fraction, gpus, row.redundant_experts, s.attention_tp,
                     s.kv_bytes, s.limits.max_num_tokens, s.limits.max_batch, false);
  return g;
}

}  // namespace

ServeModelInput serve_input_for(const Experiment& e, const HardwareProfile& hw, const ServeSetup& s,
                                std::vector<Request> requests, const StepRouting* routed) {
  const bool ep = e.placement.kind == PlacementKind::expert_parallel;
  const bool split = s.prefill_gpus > 0 || s.decode_gpus > 0;
  if (split && (s.prefill_gpus < 1 || s.decode_gpus < 1))
    throw InputError("--disaggregated: expected prefill and decode GPUs, each at least 1");
  const int gpus = split ? s.decode_gpus : ep ? e.placement.devices : 1;
  const GroupInput d = group_input(e, hw, s, gpus, routed);
  ServeModelInput out;
  out.gpus = gpus;
  out.kv = d.kv;
  ServeInput& in = out.input;
  in.step = d.step;
  in.requests = std::move(requests);
  in.limits = s.limits;
  in.limits.ranks = d.ranks;
  in.limits.mtp_draft = s.mtp_draft;
  in.limits.mtp_accept = s.mtp_accept;
  in.limits.seed = static_cast<uint64_t>(e.workload.seed);
  // Each of a rank's tp GPUs holds its part of every token (MLA: the whole latent), so a rank holds a GPU's tokens.
  in.limits.kv_capacity_tokens = d.kv.tokens;
  if (split) {
    const GroupInput p = group_input(e, hw, s, s.prefill_gpus, routed);
    in.disaggregated = true;
    in.prefill_step = p.step;
    in.prefill_limits = s.limits;
    in.prefill_limits.ranks = p.ranks;
    in.prefill_limits.kv_capacity_tokens = p.kv.tokens;
    in.prefill_limits.mtp_draft = 0;  // the prefill GPUs make each request's first token only
    in.prefill_step.mtp_draft = 0;
    // A prompt's KV moves from its prefill rank to its decode rank, each GPU of the rank sending its part over its
    // scale-out NIC (the scale-up link when the profile has none) at the link's latency.
    const Link link = gpu_link(hw);
    if (!(link.bytes_per_s > 0))
      throw ConfigError("hardware.inter_node_bandwidth_gbs: expected a link to move the KV cache between the prefill "
                        "and decode GPUs, got none");
    in.kv_transfer_s_per_token = d.kv.bytes_per_token / link.bytes_per_s;
    in.kv_transfer_latency_s = link.latency_s;
    out.gpus += s.prefill_gpus;
  }
  if (s.rebalance_every >= 0) {
    if (split) throw InputError("--rebalance-every: expected a colocated run, not --disaggregated");
    const int replicas = ep ? e.placement.replicas : 0;
    if (replicas <= 0)
      throw InputError("--rebalance-every: expected placement.replicas > 0 (EPLB's redundant experts), got " +
                       std::to_string(replicas));
    if (s.drift_steps < 1 || s.draws < 1 || s.draws > 256)
      throw InputError("--drift-steps, --draws: expected at least 1 step a draw and 1 to 256 draws");
    StepRow row;
    row.ep = gpus;
    row.routing = s.routing;
    row.redundant_experts = replicas;
    const int64_t tokens = s.limits.max_num_tokens * d.ranks * s.attention_tp;
    const StepRouting timeline = route_loads(row, e, tokens, true, s.draws);
    in.eplb_over_time = true;
    EplbTimeline& t = in.eplb;
    t.loads = timeline.loads;
    t.initial_plan = timeline.plan_loads.empty() ? std::vector<int64_t>{} : timeline.plan_loads.front();
    t.steps_per_draw = s.drift_steps;
    t.rebalance_every = s.rebalance_every;
    t.estimator = e.placement.load_estimator;
    t.ema_weight = e.placement.ema_weight;
    const ModelConfig& m = in.step.model;
    t.expert_bytes = (m.gated_experts ? 3.0 : 2.0) * static_cast<double>(m.hidden) * static_cast<double>(m.ffn) *
                     bytes_per_weight(expert_format(m));
    t.moe_layers = moe_layer_count(m);
    const Link link = gpu_link(hw);
    t.link_bytes_per_s = link.bytes_per_s;
    t.link_latency_s = link.latency_s;
  }
  return out;
}

ServeTable parse_serve_csv(const std::string& text, const std::string& origin) {
  ServeTable t;
  t.origin = origin;
  t.name = fs::path(origin).stem().string();
  read_table(text, origin, kServeHeader, kMaxRows, [](const std::vector<std::string>&) {}, [&](const TableCell& w,
                                                                                              const std::string& line) {
    const std::vector<std::string> c = split_csv_line(line);
    if (static_cast<int>(c.size()) < kColumns)
      w.fail("columns", "at least " + std::to_string(kColumns) + " cells", std::to_string(c.size()));
    ServeRow r;
    r.line = w.line;
    r.system = c[0];
    if (c[1].empty()) w.fail("model", "a shipped model config name or a model .yaml file", c[1]);
    r.model = c[1];
    static const char* const kWeights[] = {"", "bf16", "fp16", "fp8", "int4", "mxfp4", "nvfp4"};
    if (std::find(std::begin(kWeights), std::end(kWeights), c[2]) == std::end(kWeights))
      w.fail("weight_dtype", "one of bf16, fp16, fp8, int4, mxfp4, nvfp4 (or empty: the model's)", c[2]);
    r.weight_dtype = c[2];
    if (c[3] != "" && c[3] != "bf16" && c[3] != "fp16" && c[3] != "fp8")
      w.fail("kv_dtype", "bf16, fp16 or fp8 (or empty: bf16)", c[3]);
    r.kv_dtype = c[3].empty() ? "bf16" : c[3];
    if (c[4].empty()) w.fail("gpu", "a hardware profile name or file", c[4]);
    r.gpu = c[4];
    r.gpus = static_cast<int>(w.integer("gpus", c[5], 1, 1024, false));
    r.tp = static_cast<int>(w.integer("tp", c[6], 1, 1024, true));
    r.attention_dp = static_cast<int>(w.integer("attention_dp", c[7], 1, 1024, true));
    if (r.attention_dp == 0) r.attention_dp = r.gpus;
    r.ep = static_cast<int>(w.integer("ep", c[8], 1, 1024, true));
    if (r.ep == 0) r.ep = r.gpus;
    r.mtp_draft = static_cast<int>(w.integer("mtp_draft", c[9], 0, 16, true));
    r.mtp_accept = w.real("mtp_accept", c[10], 0, 1, true);
    r.max_batch_size = w.integer("max_batch_size", c[11], 1, 1 << 16, true);
    if (r.max_batch_size == 0) r.max_batch_size = kServeDefaultMaxBatch;
    r.max_num_tokens = w.integer("max_num_tokens", c[12], 1, 1 << 20, true);
    if (r.max_num_tokens == 0) r.max_num_tokens = kServeDefaultMaxNumTokens;
    r.concurrency = w.integer("concurrency", c[13], 1, kMaxStreamRequests, true);
    r.requests = w.integer("requests", c[14], 1, kMaxStreamRequests, true);
    r.isl = w.integer("isl", c[15], 1, kMaxRequestLength, false);
    r.osl = w.integer("osl", c[16], 1, kMaxRequestLength, false);
    if (c[17] == "kv_balanced") r.scheduler = RequestBalance::kv_tokens;
    else if (c[17] == "round_robin" || c[17].empty()) r.scheduler = RequestBalance::round_robin;
    else w.fail("scheduler", "round_robin or kv_balanced (or empty: round_robin)", c[17]);
    if (c[18] != "yes" && c[18] != "no" && !c[18].empty()) w.fail("disaggregated", "yes or no (or empty: no)", c[18]);
    r.disaggregated = c[18] == "yes";
    r.prefill_gpus = static_cast<int>(w.integer("prefill_gpus", c[19], 1, 4096, !r.disaggregated));
    r.decode_gpus = static_cast<int>(w.integer("decode_gpus", c[20], 1, 4096, !r.disaggregated));
    r.quantity = table_choice(w, "quantity", c[21], kQuantities);
    r.measured = w.real("measured", c[22], 1e-9, 1e12, false);
    r.unit = c[23];
    if (r.unit != unit_of(r.quantity))
      w.fail("unit", std::string("'") + unit_of(r.quantity) + "' for " + to_string(r.quantity), r.unit);
    r.source = c[24];
    r.notes = c[25];
    if (r.gpus % r.attention_dp != 0) w.fail("attention_dp", "a divisor of gpus (" + std::to_string(r.gpus) + ")", c[7]);
    if (r.ep != r.gpus) w.fail("ep", "gpus (" + std::to_string(r.gpus) + "): every GPU an expert-parallel rank", c[8]);
    if (r.max_num_tokens < r.max_batch_size)
      w.fail("max_num_tokens", "at least max_batch_size (" + std::to_string(r.max_batch_size) + ")", c[12]);
    if (r.concurrency == 0 && r.requests == 0)
      w.fail("concurrency", "the clients of a closed loop, or requests (all at the start)", c[13]);
    if (r.requests == 0) r.requests = kServeRequestsPerClient * r.concurrency;
    r.table = r.source;
    t.rows.push_back(std::move(r));
  });
  return t;
}

std::vector<ServeTable> load_serve_tables(const std::string& spec) {
  std::vector<ServeTable> tables;
  if (spec == "all") {
    for (const auto& [path, text] : embedded_files())
      if (path.rfind(kServeDir, 0) == 0 && fs::path(path).extension() == ".csv" && is_serve_table(text))
        tables.push_back(parse_serve_csv(text, path));
  } else {
    for (const PublishedFile& f : published_files(spec))
      if (is_serve_table(f.text)) tables.push_back(parse_serve_csv(f.text, f.origin));
  }
  std::sort(tables.begin(), tables.end(), [](const ServeTable& a, const ServeTable& b) { return a.name < b.name; });
  return tables;
}

namespace {

double serve_quantity(const ServeMetrics& m, ServeQuantity q, int gpus) {
  switch (q) {
    case ServeQuantity::output_tokens_per_s_per_gpu: return m.output_tokens_per_s_per_gpu;
    case ServeQuantity::total_tokens_per_s_per_gpu: return m.total_tokens_per_s_per_gpu;
    case ServeQuantity::tokens_per_s_per_user: return m.tokens_per_s_per_user;
    case ServeQuantity::output_tokens_per_s: return m.output_tokens_per_s_per_gpu * gpus;
    case ServeQuantity::ttft_ms: return m.ttft_s.mean * 1e3;
    case ServeQuantity::tpot_ms: return m.tpot_s.mean * 1e3;
  }
  return 0;
}

// One configuration's run: the rows that share every column before quantity.
std::string config_key(const ServeRow& r) {
  std::ostringstream k;
  k << r.system << '|' << r.model << '|' << r.weight_dtype << '|' << r.kv_dtype << '|' << r.gpu << '|' << r.gpus << '|'
    << r.tp << '|' << r.attention_dp << '|' << r.ep << '|' << r.mtp_draft << '|' << r.mtp_accept << '|'
    << r.max_batch_size << '|' << r.max_num_tokens << '|' << r.concurrency << '|' << r.requests << '|' << r.isl << '|'
    << r.osl << '|' << static_cast<int>(r.scheduler) << '|' << r.disaggregated;
  return k.str();
}

ServeModelInput row_input(const ServeRow& r, const std::string& origin) {
  const TableCell w{origin, r.line};
  Experiment e = table_model(w, r.model, kServeDir);
  std::string ref;
  const HardwareProfile hw = published_table_profile(origin, r.line, r.gpu, ref);
  e.placement.kind = r.ep > 1 ? PlacementKind::expert_parallel : PlacementKind::single;
  e.placement.devices = r.ep;
  ServeSetup s;
  s.attention_tp = r.gpus / r.attention_dp;
  s.attention_tp_from = "gpus / attention_dp";
  if (r.disaggregated) {
    s.prefill_gpus = r.prefill_gpus;
    s.decode_gpus = r.decode_gpus;
  }
  s.mtp_draft = r.mtp_draft;
  s.mtp_accept = r.mtp_accept;
  s.weight_dtype = r.weight_dtype;
  s.kv_bytes = r.kv_dtype == "fp8" ? 1 : 2;
  s.limits.max_batch = r.max_batch_size;
  s.limits.max_num_tokens = r.max_num_tokens;
  s.limits.balance = r.scheduler;
  // A closed loop of fixed lengths repeats every `concurrency` requests: kServeWaves of them stand for the rest.
  int64_t count = r.requests;
  if (r.concurrency > 0) {
    s.limits.concurrency = r.concurrency;
    count = std::min(count, kServeWaves * r.concurrency);
  }
  SyntheticStream st;
  st.requests = count;
  st.prompt_tokens = r.isl;
  st.output_tokens = r.osl;
  st.seed = static_cast<uint64_t>(e.workload.seed);
  try {
    return serve_input_for(e, hw, s, synthetic_requests(st));
  } catch (const ConfigError& x) {
    throw InputError(origin + ":" + std::to_string(r.line) + ": " + x.what());
  } catch (const InputError& x) {
    throw InputError(origin + ":" + std::to_string(r.line) + ": " + x.what());
  }
}

}  // namespace

ServeValidation validate_serving(const std::vector<ServeTable>& tables) {
  ServeValidation v;
  std::vector<std::pair<std::string, std::vector<size_t>>> configs;
  std::vector<std::string> origins;
  for (const ServeTable& t : tables)
    for (const ServeRow& r : t.rows) {
      const std::string key = t.origin + "#" + config_key(r);
      auto it = std::find_if(configs.begin(), configs.end(), [&](const auto& c) { return c.first == key; });
      if (it == configs.end()) {
        configs.push_back({key, {}});
        origins.push_back(t.origin);
        it = configs.end() - 1;
      }
      it->second.push_back(v.rows.size());
      ServeResultRow res;
      res.row = r;
      if (r.weight_dtype == "nvfp4") res.approximation = "nvfp4 GEMMs costed in fp8";
      if (r.disaggregated && r.concurrency > 0)
        res.not_modeled = "a closed loop over disaggregated prefill and decode is not modeled";
      v.rows.push_back(res);
      if (std::find(v.tables.begin(), v.tables.end(), r.table) == v.tables.end()) v.tables.push_back(r.table);
    }
  std::vector<double> errors;
  for (size_t c = 0; c < configs.size(); ++c) {
    const ServeRow& first = v.rows[configs[c].second.front()].row;
    if (!v.rows[configs[c].second.front()].not_modeled.empty()) continue;
    ServeModelInput in = row_input(first, origins[c]);
    in.input.counterfactuals = false;
    ServeMetrics m;
    try {
      m = run_serve(in.input).metrics;
    } catch (const ConfigError& x) {
      throw InputError(origins[c] + ":" + std::to_string(first.line) + ": " + x.what());
    }
    for (size_t i : configs[c].second) {
      v.rows[i].model = serve_quantity(m, v.rows[i].row.quantity, in.gpus);
      errors.push_back(v.rows[i].error());
    }
  }
  v.model = summarize_errors(errors);
  return v;
}

}  // namespace moesim
