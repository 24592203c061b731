// The fuzzed entry points of moesim's readers, one function per target, shared by the libFuzzer executables
// (tests/fuzz/<target>_fuzz.cpp) and the FuzzRegression replay (tests/cli/bad_input_test.cpp) of every file in
// tests/fuzz/corpus/<target>/ and regressions/<target>/ (open/<target>/ holds findings not yet fixed, not replayed).
// Contract per input: a valid result, or a ConfigError/InputError whose message is one line naming the input
// (or its --set). Anything else (another exception, a broken invariant, a crash, a sanitizer report) aborts.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "src/common/error.hpp"
#include "src/config/hf_config.hpp"
#include "src/config/load_config.hpp"
#include "src/cost/hardware_profile.hpp"
#include "src/pipeline/run_experiment.hpp"
#include "src/report/check.hpp"
#include "src/report/report.hpp"
#include "src/sweep/published.hpp"
#include "src/sweep/published_train.hpp"
#include "src/sweep/published_comm.hpp"
#include "src/sweep/published_step.hpp"
#include "src/serve/request_stream.hpp"
#include "src/sweep/published_serve.hpp"
#include "src/common/request_lengths.hpp"
#include "router/balance_metrics.hpp"
#include "router/route.hpp"
#include "src/workload/load_profile.hpp"
#include "src/workload/logits_file.hpp"
#include "src/workload/megatron_loads.hpp"
#include "src/workload/trace_replay.hpp"

namespace moesim::fuzz {

// The fuzz targets, by the folder name of their corpus.
inline const std::vector<std::string>& target_names() {
  static const std::vector<std::string> names = {"config", "npy",       "csv",      "baseline",
                                                 "trace",  "load_profile", "published", "hf_config",
                                                 "megatron_npz", "megatron_router_trace", "published_comm",
                                                 "training", "serving_step", "request_lengths",
                                                 "request_stream", "serving_table"};
  return names;
}

// The file being replayed (FuzzRegression), named in a finding's message; empty under libFuzzer.
inline std::string& current_input() {
  static std::string path;
  return path;
}

[[noreturn]] inline void finding(const std::string& what) {
  if (!current_input().empty()) std::fprintf(stderr, "moesim fuzz input: %s\n", current_input().c_str());
  std::fprintf(stderr, "moesim fuzz finding: %s\n", what.c_str());
  std::fflush(stderr);
  std::abort();
}

// A reader's error must be ConfigError or InputError, one line, naming `name` (or the --set it came from).
inline void check_error(const std::exception& e, const std::string& name) {
  const bool expected_type = dynamic_cast<const ConfigError*>(&e) || dynamic_cast<const InputError*>(&e);
  const std::string m = e.what();
  if (!expected_type) finding(std::string("unexpected exception type: ") + m);
  if (m.find('\n') != std::string::npos || m.find('\r') != std::string::npos) finding("multi-line message: " + m);
  if (m.find(name) == std::string::npos && m.rfind("--set ", 0) != 0) finding("message does not name " + name + ": " + m);
}

// Runs `body`; a thrown std::exception is checked with check_error (non-standard exceptions escape and abort).
template <class F>
void guarded(const std::string& name, F&& body) {
  try {
    body();
  } catch (const std::exception& e) {
    check_error(e, name);
  }
}

// ---- config: YAML experiment plus --set overrides ----------------------------------------------------
// The input is YAML, then optionally a line "#--set" followed by one KEY=VALUE override per line
// (at most 16). A loaded experiment must round-trip: its YAML loads back to the same YAML.
inline void fuzz_config(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  std::string yaml = text;
  std::vector<std::string> overrides;
  const std::string marker = "#--set\n";
  size_t at = text.rfind(marker, 0) == 0 ? 0 : text.find("\n" + marker);
  if (at != std::string::npos && at > 0) ++at;  // the marker line starts after the newline
  if (at != std::string::npos) {
    yaml = text.substr(0, at);
    size_t pos = at + marker.size();
    while (pos < text.size() && overrides.size() < 16) {
      size_t end = text.find('\n', pos);
      if (end == std::string::npos) end = text.size();
      if (end > pos) overrides.push_back(text.substr(pos, end - pos));
      pos = end + 1;
    }
  }
  const std::string name = "fuzz.yaml";
  guarded(name, [&] {
    const Experiment e = load_experiment_text(yaml, name, overrides);
    const std::string y1 = experiment_to_yaml(e);
    std::string y2;
    try {
      y2 = experiment_to_yaml(load_experiment_text(y1, name, {}));
    } catch (const std::exception& ex) {
      finding(std::string("the effective YAML does not load back: ") + ex.what() + "\n" + y1);
    }
    if (y1 != y2) finding("the effective YAML changes on reload:\n" + y1 + "\n---\n" + y2);
    if (!e.hardware.inline_yaml.empty()) parse_hardware_profile(e.hardware.inline_yaml, name);
    const double bytes = estimate_run_bytes(e);
    if (!(bytes >= 0)) finding("negative or NaN memory estimate for:\n" + y1);
  });
}

// ---- hf_config: a Hugging Face config.json for model.hf_config ----------------------------------------
// The input is the config.json. It is parsed directly, and loaded as the model.hf_config of an experiment
// (a file of this process); a loaded experiment must have 1 <= MoE layers <= layers, and its YAML must load
// back to the same YAML.
inline std::string scratch_path(const char* ext);
inline void fuzz_hf_config(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  guarded("config.json", [&] { parse_hf_config(text, "config.json"); });
  const std::string path = scratch_path(".json");
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
  }
  guarded(path, [&] {
    const Experiment e = load_experiment_text("name: hf\n", "fuzz.yaml", {"model.hf_config=" + path});
    const int moe = moe_layer_count(e.model);
    if (moe < 1 || moe > e.model.layers) finding("MoE layers outside [1, layers]: " + std::to_string(moe));
    const std::string y1 = experiment_to_yaml(e);
    std::string y2;
    try {
      y2 = experiment_to_yaml(load_experiment_text(y1, "fuzz.yaml", {}));
    } catch (const std::exception& ex) {
      finding(std::string("the effective YAML does not load back: ") + ex.what() + "\n" + y1);
    }
    if (y1 != y2) finding("the effective YAML changes on reload:\n" + y1 + "\n---\n" + y2);
  });
  std::remove(path.c_str());
}

// ---- logits: .npy and .csv -----------------------------------------------------------------------
inline void check_matrix(const LogitsMatrix& m, const std::string& name) {
  if (m.num_tokens < 0 || m.num_experts < 1 || m.num_experts > 65536)
    finding(name + ": bad shape " + std::to_string(m.num_tokens) + " x " + std::to_string(m.num_experts));
  if (m.values.size() != static_cast<size_t>(m.num_tokens) * static_cast<size_t>(m.num_experts))
    finding(name + ": values do not match the shape");
  for (float v : m.values) {
    if (!std::isfinite(v)) finding(name + ": a non-finite value passed");
  }
}

// A file of this process for the readers that take a path.
inline std::string scratch_path(const char* ext) {
  return "/tmp/moesim_fuzz_" + std::to_string(getpid()) + ext;
}

// The in-memory parser, the file reader and the header-only inspection must agree on every input.
inline void fuzz_npy(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  const std::string path = scratch_path(".npy");
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }
  std::string shape;  // "ROWSxCOLS" when the file reads
  auto outcome = [&](auto&& read) -> std::string {
    try {
      const LogitsMatrix m = read();
      check_matrix(m, path);
      shape = std::to_string(m.num_tokens) + "x" + std::to_string(m.num_experts);
      return "ok " + shape + " " +
             std::string(reinterpret_cast<const char*>(m.values.data()), m.values.size() * sizeof(float));
    } catch (const std::exception& e) {
      check_error(e, path);
      return std::string("error ") + e.what();
    }
  };
  const std::string a = outcome([&] { return parse_npy(bytes, path); });
  const std::string b = outcome([&] { return read_logits_file(path); });
  if (a != b) finding("parse_npy and read_logits_file disagree: '" + a.substr(0, 200) + "' vs '" + b.substr(0, 200) + "'");
  try {
    const LogitsFileInfo info = inspect_logits_file(path);
    const std::string seen = std::to_string(info.num_tokens) + "x" + std::to_string(info.num_experts);
    // Inspection reads no data, so it may accept a file whose values the reader rejects (NaN).
    if (a.rfind("ok ", 0) == 0 && seen != shape) finding("inspect_logits_file says " + seen + ", the reader " + shape);
  } catch (const std::exception& e) {
    check_error(e, path);
    if (a.rfind("ok ", 0) == 0) finding(std::string("inspect_logits_file rejects a readable file: ") + e.what());
  }
  std::remove(path.c_str());
}

inline void fuzz_csv(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  const std::string name = "fuzz.csv";
  guarded(name, [&] { check_matrix(parse_csv(text, name), name); });
}

// ---- published communication tables: moesim validate --published (data/validation/*-a2a.csv) -----------
// A table parses or names its line; up to 8 of its points with at most 256 devices are modeled and validated
// (the fit included), and every modeled time must be positive and finite.
inline void fuzz_published_comm(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  const std::string name = "fuzz.csv";
  guarded(name, [&] {
    CommTable table = parse_comm_csv(text, name);
    std::vector<CommPoint> small;
    for (const CommPoint& p : table.points)
      if (p.ep <= 256 && small.size() < 8) small.push_back(p);
    if (small.empty()) return;
    table.points = small;
    const CommValidation v = validate_comm({table});
    for (const CommRow& r : v.rows) {
      for (double t : {r.model_s, r.held_out_s})
        if (!(t > 0) || !std::isfinite(t)) finding("a modeled all-to-all time that is not positive and finite");
    }
  });
}

// ---- published training tables: moesim validate --published (data/training-step/*.csv) ------------------
// A table parses or names its line; up to 4 of its rows small enough to route quickly (at most 64 GPUs, 8192 tokens
// a sequence, 1024 sequences a step) are modeled and fitted, and every prediction and error must be finite, every
// step time positive, and every erosion's parts must add up to its step's difference.
inline void fuzz_training(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  const std::string name = "fuzz.csv";
  guarded(name, [&] {
    TrainingTable table = parse_training_csv(text, name);
    std::vector<TrainingPoint> small;
    for (const TrainingPoint& p : table.points)
      if (p.train.gpus <= 64 && p.train.seq_len <= 8192 && p.train.global_batch <= 1024 && small.size() < 4)
        small.push_back(p);
    if (small.empty()) return;
    table.points = small;
    const TrainingValidation v = validate_training({table});
    for (const TrainingRow& r : v.rows) {
      if (!(r.step.step_s > 0) || !std::isfinite(r.step.step_s)) finding("a step time that is not positive and finite");
      if (!std::isfinite(r.model) || !std::isfinite(r.held_out)) finding("a prediction that is not finite");
      const TrainErosion& x = r.step.erosion;
      if (std::fabs(x.sum_s() - (x.actual_s - x.reference_s)) > 1e-9 * std::max(1.0, x.actual_s))
        finding("erosion parts that do not add up to the step's difference");
    }
  });
}

// ---- serving-step tables: moesim validate --published (data/serving-step/*.csv) -------------------------
// A table parses or names its line; up to 2 rows small enough to model quickly (at most 16 GPUs, 64 requests and
// 4096 tokens a GPU, balanced or power-law routing) are modeled: every step time positive and finite, and the
// erosion's parts adding up to the step's distance from its ideal.
inline void fuzz_serving_step(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  const std::string name = "fuzz.csv";
  guarded(name, [&] {
    const StepTable table = parse_step_table(text, name);
    int modeled = 0;
    for (const StepRow& r : table.rows) {
      if (r.gpus > 16 || r.requests_per_gpu > 64 || r.tokens_per_gpu > 4096 || r.routing == "model" || modeled >= 2)
        continue;
      ++modeled;
      const ServingStep s = model_row(step_input(r, name), name, r.line);
      if (!(s.step_s > 0) || !std::isfinite(s.step_s)) finding("a step time that is not positive and finite");
      const StepErosion& x = s.erosion;
      const double sum = x.attention_imbalance_s + x.skew_compute_s + x.skew_communication_s + x.overlap_s;
      if (std::fabs(sum - (x.actual_s - x.ideal_s)) > 1e-9 * std::max(1.0, x.actual_s))
        finding("erosion parts that do not add up to the step's distance from its ideal");
    }
  });
}

// ---- request lengths files: moesim step --lengths file:PATH ------------------------------------------------
// A file parses or names its line; every length is in [1, kMaxRequestLength] and the file holds at least one.
inline void fuzz_request_lengths(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  const std::string name = "fuzz.csv";
  guarded(name, [&] {
    const std::vector<int64_t> l = parse_lengths_file(text, name);
    if (l.empty()) finding("an empty lengths file accepted");
    for (int64_t v : l)
      if (v < 1 || v > kMaxRequestLength) finding("a length out of range accepted");
  });
}

// ---- request files: a serving run's requests (src/serve/request_stream.hpp) --------------------------------------
// A file parses or names its line; the requests are at least one and at most kMaxStreamRequests, numbered 0..n-1 in
// arrival order, every arrival finite and >= 0, every length in [1, kMaxRequestLength].
inline void fuzz_request_stream(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  const std::string name = "fuzz.csv";
  guarded(name, [&] {
    const std::vector<Request> r = parse_request_file(text, name);
    if (r.empty() || static_cast<int64_t>(r.size()) > kMaxStreamRequests) finding("a request count out of range");
    for (size_t i = 0; i < r.size(); ++i) {
      if (r[i].id != static_cast<int64_t>(i)) finding("requests not numbered 0..n-1");
      if (!std::isfinite(r[i].arrival_s) || r[i].arrival_s < 0) finding("an arrival not finite or negative");
      if (i > 0 && r[i].arrival_s < r[i - 1].arrival_s) finding("requests not sorted by arrival");
      for (int64_t v : {r[i].prompt_tokens, r[i].output_tokens})
        if (v < 1 || v > kMaxRequestLength) finding("a request length out of range accepted");
    }
  });
}

// ---- serving tables: moesim validate --published (data/serving/*.csv) -----------------------------------------
// A table parses or names its line; its rows keep the reader's invariants, and one small enough to run quickly is
// run through moesim serve: every modeled figure positive and finite.
inline void fuzz_serving_table(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  const std::string name = "fuzz.csv";
  guarded(name, [&] {
    const ServeTable t = parse_serve_csv(text, name);
    for (const ServeRow& r : t.rows) {
      if (r.gpus % r.attention_dp != 0 || r.ep != r.gpus) finding("a serving row's parallel layout accepted unchecked");
      if (r.max_num_tokens < r.max_batch_size || r.requests < 1) finding("a serving row's limits accepted unchecked");
      if (!(r.measured > 0) || !std::isfinite(r.measured)) finding("a serving row's measurement not positive");
    }
    for (const ServeRow& r : t.rows) {
      if (r.gpus > 8 || r.requests > 16 || r.isl > 512 || r.osl > 64 || r.max_num_tokens > 2048 || r.disaggregated)
        continue;
      ServeTable one = t;
      one.rows = {r};
      for (const ServeResultRow& m : validate_serving({one}).rows)
        if (!(m.model > 0) || !std::isfinite(m.model)) finding("a serving figure that is not positive and finite");
      break;
    }
  });
}

// ---- published kernel tables: moesim validate --published (data/validation/*.csv) --------------------
// A table parses or names its line; up to 8 of its points small enough to draw quickly (batch x top_k <=
// 4096) are modeled, and every modeled time must be positive and finite.
inline void fuzz_published(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  const std::string name = "fuzz.csv";
  guarded(name, [&] {
    PublishedTable table = parse_published_csv(text, name);
    std::vector<PublishedPoint> small;
    for (const PublishedPoint& p : table.points)
      if (p.batch * p.top_k <= 4096 && small.size() < 8) small.push_back(p);
    if (small.empty()) return;
    table.points = small;
    const PublishedValidation v = validate_published({table});
    for (const PublishedRow& r : v.rows) {
      for (double t : {r.ideal_s, r.model_s})
        if (!(t > 0) || !std::isfinite(t)) finding("a modeled time that is not positive and finite");
    }
  });
}

// ---- baseline JSON: moesim check --baseline ---------------------------------------------------------
// What check reads from a baseline: the runs, their strategy labels rebuilt as router variants of an
// experiment, and the comparison against a run.
inline void fuzz_baseline(const uint8_t* data, size_t size) {
  static const Experiment base = default_experiment({"workload.batch=64", "execute.enabled=false"});
  static const RunResult run = [] {
    RunOptions o;
    o.execute = false;
    return run_experiment(base, own_variant(base), o);
  }();
  static const nlohmann::json run_json = run_to_json(run);
  const std::string text(reinterpret_cast<const char*>(data), size);
  const std::string name = "fuzz.json";
  guarded(name, [&] {
    for (const auto& [experiment, baseline] : parse_baselines(text, name)) {
      const std::vector<std::string> labels = baseline_labels(baseline, name);
      try {
        check_variants(base, labels);
      } catch (const Error& e) {
        // cmd_check names the baseline file in front of a bad label's message.
        throw InputError(name + ": " + e.what());
      }
      if (const auto d = experiment_difference(baseline, run_json, {})) {
        if ((d->key + d->baseline_value + d->run_value).find('\n') != std::string::npos)
          finding("multi-line experiment difference: " + d->key);
      }
      for (const CheckFailure& f : check_against_baseline(run, baseline, default_baseline_metrics(), 0.0, 1e-9)) {
        if (f.line().find('\n') != std::string::npos) finding("multi-line check failure: " + f.line());
      }
    }
  });
}

// ---- routing traces (JSON Lines) ----------------------------------------------------------------------
// The input's first byte chooses num_experts (1..64); the rest is the trace. Every batch must replay as a
// valid Routing, its balance metrics must compute, and format_trace_lines must read back to the same batch.
// A batch whose tokens all list k experts also replays under capacity factor 1 (drop policy from the
// first byte): only recorded-kept assignments may be kept, and no expert may keep more than C.
inline void fuzz_trace(const uint8_t* data, size_t size) {
  if (size == 0) return;
  const int num_experts = 1 + data[0] % 64;
  const std::string text(reinterpret_cast<const char*>(data) + 1, size - 1);
  const std::string name = "fuzz.jsonl";
  guarded(name, [&] {
    const Trace trace = parse_trace(text, name, num_experts);
    if (trace.num_experts != num_experts) finding("trace num_experts changed");
    for (const TraceBatch& b : trace.batches) {
      if (b.offsets.size() != static_cast<size_t>(b.num_tokens) + 1 || b.offsets.front() != 0 ||
          b.offsets.back() != static_cast<int64_t>(b.expert.size()) || b.weight.size() != b.expert.size() ||
          b.kept.size() != b.expert.size() || b.token.size() != static_cast<size_t>(b.num_tokens) ||
          b.token_ids.size() != static_cast<size_t>(b.num_tokens))
        finding("trace batch arrays disagree in size");
      if (trace.has_logits != !b.logits.empty() ||
          (trace.has_logits && b.logits.size() != static_cast<size_t>(b.num_tokens) * num_experts))
        finding("trace logits do not match the batch shape");
      int top_k = 1;
      for (int64_t t = 0; t < b.num_tokens; ++t) {
        if (b.offsets[t + 1] < b.offsets[t]) finding("trace offsets decrease");
        top_k = std::max<int>(top_k, static_cast<int>(b.offsets[t + 1] - b.offsets[t]));
      }
      for (int32_t x : b.expert) {
        if (x < 0 || x >= num_experts) finding("trace expert id out of range passed");
      }
      if (b.num_tokens == 0) continue;
      const Routing r = recorded_routing(b, num_experts, std::min(top_k, num_experts));
      compute_balance_metrics(r, trace.has_logits ? b.logits.data() : nullptr, Layout::dropless, 64);
      bool uniform_k = true;
      for (int64_t t = 0; t < b.num_tokens; ++t) uniform_k = uniform_k && b.offsets[t + 1] - b.offsets[t] == top_k;
      if (uniform_k && top_k <= num_experts) {
        RouterConfig cfg;
        cfg.capacity_factor = 1.0;
        cfg.drop_policy = static_cast<DropPolicy>(data[0] % 3);
        cfg.priority = data[0] & 4 ? Priority::token_major : Priority::k_major;
        const Routing c = replay_routing(b, name, num_experts, top_k, cfg, 7);
        if (c.capacity != expert_capacity(cfg, b.num_tokens, top_k, num_experts)) finding("replay capacity is not C");
        std::vector<int64_t> kept_per_expert(num_experts, 0);
        for (int64_t a = 0; a < c.num_assignments(); ++a) {
          if (c.kept[a] && !r.kept[a]) finding("replay kept an assignment recorded as dropped");
          if (c.expert[a] != r.expert[a] || c.token[a] != r.token[a]) finding("replay changed an assignment");
          kept_per_expert[c.expert[a]] += c.kept[a];
        }
        for (int64_t n : kept_per_expert)
          if (n > c.capacity) finding("replay kept more than the capacity on an expert");
      }
      const std::string lines = format_trace_lines(r, trace.has_logits ? b.logits.data() : nullptr, b.step, b.layer,
                                                   b.phase, b.token_ids.data());
      const Trace again = parse_trace(lines, name, num_experts);
      if (again.batches.size() != 1) finding("format_trace_lines does not read back as one batch:\n" + lines);
      const TraceBatch& c = again.batches[0];
      if (c.expert != b.expert || c.weight != b.weight || c.kept != b.kept || c.offsets != b.offsets ||
          c.logits != b.logits || c.token_ids != b.token_ids || c.step != b.step || c.layer != b.layer ||
          c.phase != b.phase)
        finding("format_trace_lines does not read back to the same batch:\n" + lines);
    }
  });
}

// ---- load profiles (JSON) -------------------------------------------------------------------------------
// The input's first line is "NUM_EXPERTS KEY" (NUM_EXPERTS taken modulo 1024, KEY may be empty); the rest
// is the profile JSON. Every layer must have num_experts counts, and scale_loads must hit its total.
inline void fuzz_load_profile(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  const size_t nl = text.find('\n');
  if (nl == std::string::npos) return;
  const std::string head = text.substr(0, nl);
  const size_t sp = head.find(' ');
  const int num_experts = 1 + static_cast<int>(std::strtoul(head.substr(0, sp).c_str(), nullptr, 10) % 1024);
  const std::string key = sp == std::string::npos ? "" : head.substr(sp + 1);
  const std::string name = "fuzz-profile.json";
  guarded(name, [&] {
    const LoadProfile p = parse_load_profile(text.substr(nl + 1), name, key, num_experts);
    if (p.layers.size() != p.counts.size()) finding("load profile layers and counts disagree");
    for (size_t l = 0; l < p.counts.size(); ++l) {
      if (l > 0 && p.layers[l] <= p.layers[l - 1]) finding("load profile layers are not ascending");
      if (p.counts[l].size() != static_cast<size_t>(num_experts)) finding("load profile layer of the wrong width");
      for (int64_t c : p.counts[l]) {
        if (c < 0) finding("negative count passed");
      }
      for (int64_t total : {int64_t{0}, int64_t{1}, int64_t{1000}, int64_t{1} << 40}) {
        const std::vector<int64_t> loads = scale_loads(p.counts[l], total);
        int64_t sum = 0;
        for (int64_t x : loads) {
          if (x < 0) finding("scale_loads gave a negative load");
          sum += x;
        }
        if (loads.size() != p.counts[l].size() || sum != total) finding("scale_loads does not sum to its total");
      }
    }
  });
}

// Dispatch by target name (the replay test uses it).
// ---- megatron_npz: Megatron-Core expert-load dumps (.npz of .npy members, read with libzip) -----------
// A dump read must give ascending layers, one row of num_global_physical_experts counts >= 0 per layer, and
// fold through a map that sends every physical slot to expert p % 2 (when there are two slots or more).
inline void fuzz_megatron_npz(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  const std::string name = "fuzz-dump.npz";
  guarded(name, [&] {
    const MegatronLoads m = parse_megatron_npz(bytes, name);
    if (m.layers.size() != m.counts.size() || m.layers.empty()) finding("megatron dump layers and counts disagree");
    for (size_t l = 0; l < m.counts.size(); ++l) {
      if (l > 0 && m.layers[l] <= m.layers[l - 1]) finding("megatron dump layers are not ascending");
      if (static_cast<int64_t>(m.counts[l].size()) != m.num_physical_experts) finding("megatron layer of the wrong width");
      for (int64_t c : m.counts[l]) {
        if (c < 0) finding("negative count passed");
      }
      if (m.num_physical_experts >= 2) {
        std::vector<int> map(static_cast<size_t>(m.num_physical_experts));
        for (size_t p = 0; p < map.size(); ++p) map[p] = static_cast<int>(p % 2);
        const std::vector<int64_t> folded = fold_expert_map(m.counts[l], map, 2, name);
        int64_t a = 0, b = 0;
        for (int64_t c : m.counts[l]) a += c;
        for (int64_t c : folded) b += c;
        if (a != b) finding("folding changed the total");
      }
    }
  });
}

// Megatron-LM router traces (megatron_loads.hpp parse_megatron_router_trace). First byte: num_experts - 1
// (1..64), second: the top_k to check (0: none, else 1..8); the rest is the JSON Lines text. Every count is
// checked against the trace's own token total.
inline void fuzz_megatron_router_trace(const uint8_t* data, size_t size) {
  if (size < 2) return;
  const int num_experts = 1 + data[0] % 64;
  const int top_k = data[1] % 9;
  const std::string text(reinterpret_cast<const char*>(data) + 2, size - 2);
  const std::string name = "fuzz-router-trace.jsonl";
  guarded(name, [&] {
    std::istringstream in(text);
    const MegatronLoads m = parse_megatron_router_trace(in, name, num_experts, top_k);
    if (m.layers.empty() || m.layers.size() != m.counts.size() || m.forward_counts.size() != m.layers.size())
      finding("router trace layers, counts and forward counts disagree");
    if (m.num_physical_experts != num_experts || m.top_k < 1 || (top_k > 0 && m.top_k != top_k))
      finding("router trace expert count or top_k changed");
    for (size_t l = 0; l < m.counts.size(); ++l) {
      if (l > 0 && m.layers[l] <= m.layers[l - 1]) finding("router trace layers are not ascending");
      if (m.counts[l].size() != static_cast<size_t>(num_experts)) finding("router trace layer of the wrong width");
      int64_t total = 0;
      for (int64_t c : m.counts[l]) {
        if (c < 0) finding("negative count passed");
        total += c;
      }
      if (total % m.top_k != 0) finding("router trace layer total is not tokens x top_k");
      if (m.forward_counts[l] < 1) finding("router trace layer without a line");
    }
  });
}

inline void run_target(const std::string& target, const uint8_t* data, size_t size) {
  if (target == "config") return fuzz_config(data, size);
  if (target == "npy") return fuzz_npy(data, size);
  if (target == "csv") return fuzz_csv(data, size);
  if (target == "baseline") return fuzz_baseline(data, size);
  if (target == "trace") return fuzz_trace(data, size);
  if (target == "load_profile") return fuzz_load_profile(data, size);
  if (target == "published") return fuzz_published(data, size);
  if (target == "published_comm") return fuzz_published_comm(data, size);
  if (target == "training") return fuzz_training(data, size);
  if (target == "serving_step") return fuzz_serving_step(data, size);
  if (target == "request_lengths") return fuzz_request_lengths(data, size);
  if (target == "request_stream") return fuzz_request_stream(data, size);
  if (target == "serving_table") return fuzz_serving_table(data, size);
  if (target == "hf_config") return fuzz_hf_config(data, size);
  if (target == "megatron_npz") return fuzz_megatron_npz(data, size);
  if (target == "megatron_router_trace") return fuzz_megatron_router_trace(data, size);
  finding("unknown fuzz target " + target);
}

}  // namespace moesim::fuzz
