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
#include <sstream>

#include <nlohmann/json.hpp>

#include "src/cli/cli_common.hpp"
#include "src/common/error.hpp"
#include "src/cost/hardware_profile.hpp"
#include "src/report/serve_report.hpp"
#include "src/report/text_format.hpp"
#include "src/serve/serve_memory.hpp"
#include "src/serve/serve_run.hpp"
#include "src/sweep/published_serve.hpp"

namespace moesim::cli {
namespace {

using nlohmann::json;

struct ServeOptions {
  int64_t requests = 256, concurrency = 0, max_batch = 256, max_num_tokens = 8192;
  double rate = 0, mem_fraction = 0.9;
  std::string isl = "1024", osl = "256", requests_file, scheduler = "round_robin", kv_dtype = "bf16",
              routing = "model";
  int tp = 1;
  bool no_counterfactuals = false;
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

std::string table_text(const Experiment& e, const std::string& header, const KvCapacity& kv, const ServeResult& r,
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
  (void)e;
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

}  // namespace

int cmd_serve(int argc, char** argv) {
  CommonOptions opts;
  bool help = false;
  ServeOptions o;
  po::options_description desc("moesim serve [FILE] [options]");
  desc.add_options()("help,h", po::bool_switch(&help), "show this help")(
      "file", po::value(&opts.files),
      "experiment YAML: its model, router, workload, hardware and placement: section (default: the built-in quickstart)")(
      "requests", po::value(&o.requests)->default_value(256), "synthetic stream: requests")(
      "rate", po::value(&o.rate)->default_value(0.0),
      "synthetic stream: Poisson arrivals a second (0: every request at the start)")(
      "concurrency", po::value(&o.concurrency)->default_value(0),
      "a closed loop of this many clients: each finish releases the next request (0: arrivals as the stream gives)")(
      "isl", po::value(&o.isl)->default_value("1024"),
      "prompt tokens: a length, uniform:LO:HI, lognormal:MEDIAN:SIGMA or file:PATH (a CSV of one `tokens` column)")(
      "osl", po::value(&o.osl)->default_value("256"), "output tokens: as --isl")(
      "requests-file", po::value(&o.requests_file),
      "requests from a file instead: the Azure LLM inference trace's CSV (TIMESTAMP,ContextTokens,GeneratedTokens) "
      "or arrival_s,prompt_tokens,output_tokens")(
      "max-batch", po::value(&o.max_batch)->default_value(256), "requests a rank holds")(
      "max-num-tokens", po::value(&o.max_num_tokens)->default_value(8192),
      "tokens a rank runs a step: decode tokens, then prefill chunks")(
      "tp", po::value(&o.tp)->default_value(1), "attention tensor parallel (attention DP = GPUs / tp)")(
      "scheduler", po::value(&o.scheduler)->default_value("round_robin"),
      "how arriving requests are spread over the DP ranks: round_robin or kv_balanced (the fewest KV tokens)")(
      "mem-fraction", po::value(&o.mem_fraction)->default_value(0.9),
      "of the GPU's memory the engine takes for weights, activations and the KV cache")(
      "kv-dtype", po::value(&o.kv_dtype)->default_value("bf16"), "the KV cache's dtype: bf16 or fp8")(
      "routing", po::value(&o.routing)->default_value("model"),
      "model (the experiment's router and workload), balanced, or power_law:ALPHA")(
      "no-counterfactuals", po::bool_switch(&o.no_counterfactuals),
      "skip the balanced-routing and balanced-attention runs");
  desc.add_options()("set", po::value(&opts.overrides)->composing(), "override a config key: KEY=VALUE (repeatable)")(
      "format", po::value(&opts.format)->default_value("table"),
      "table|json|csv|markdown|html (a page with the batch, KV use, step time and balance over time, and the latency "
      "distributions)")(
      "out", po::value(&opts.out), "write the report to this file (atomically) instead of stdout");
  if (parse_or_help(argc, argv, desc, "file", 1, help)) return kExitOk;
  const bool html = opts.format == "html";
  const ReportFormat format = html ? ReportFormat::table : parse_report_format(opts.format);

  const Experiment e = load_experiment_for(opts);
  const HardwareProfile hw = load_hardware_profile(e.hardware, e.source_file);
  const bool ep = e.placement.kind == PlacementKind::expert_parallel;
  const int gpus = ep ? e.placement.devices : 1;
  if (o.tp < 1 || gpus % o.tp != 0)
    throw InputError("--tp: expected a divisor of placement.devices (" + std::to_string(gpus) + "), got " +
                     std::to_string(o.tp));  // before the stream is drawn
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
  setup.routing = o.routing;
  setup.kv_bytes = o.kv_dtype == "fp8" ? 1.0 : 2.0;
  setup.mem_fraction = o.mem_fraction;
  setup.limits.max_batch = o.max_batch;
  setup.limits.max_num_tokens = o.max_num_tokens;
  setup.limits.concurrency = o.concurrency;
  setup.limits.balance = o.scheduler == "kv_balanced" ? RequestBalance::kv_tokens : RequestBalance::round_robin;
  ServeModelInput model = serve_input_for(e, hw, setup, std::move(requests));
  ServeInput& in = model.input;
  const KvCapacity& kv = model.kv;
  const int redundant = ep ? e.placement.replicas : 0;
  const int dp = gpus / o.tp;
  in.counterfactuals = !o.no_counterfactuals;
  const ServeResult r = run_serve(in);

  std::ostringstream head;
  head << "moesim serve: " << e.model.name << " on " << gpus << " x " << hw.name << " (attention DP " << dp
       << (o.tp > 1 ? " x TP " + std::to_string(o.tp) : std::string()) << ", EP " << gpus
       << (redundant > 0 ? " + " + std::to_string(redundant) + " redundant" : std::string()) << ", "
       << to_string(e.placement.a2a_kernel) << " all-to-all, overlap " << to_string(e.placement.overlap) << ")\n"
       << "  " << stream << "\n  scheduler: " << o.scheduler << ", max batch " << o.max_batch << " and "
       << o.max_num_tokens << " tokens a rank, chunked prefill; routing: " << o.routing << "\n";
  if (html) {
    const std::string table = table_text(e, head.str(), kv, r, in.counterfactuals);
    std::vector<std::string> lines;
    std::istringstream is(table.substr(0, table.find("\n\n")));
    for (std::string l; std::getline(is, l);) lines.push_back(l);
    emit(opts, format_serve_html("moesim serve: " + e.model.name, lines, r, in.counterfactuals));
    return kExitOk;
  }
  std::string text;
  switch (format) {
    case ReportFormat::json: {
      json j = metrics_json(r.metrics);
      j["gpus"] = r.gpus;
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
      text = j.dump(2) + "\n";
      break;
    }
    case ReportFormat::csv:
      text = std::string(kCsvHeader) + csv_row("actual", r.metrics);
      if (in.counterfactuals)
        text += csv_row("balanced_routing", r.balanced_routing) + csv_row("balanced_attention", r.balanced_attention);
      break;
    case ReportFormat::markdown: text = "```text\n" + table_text(e, head.str(), kv, r, in.counterfactuals) + "```\n"; break;
    default: text = table_text(e, head.str(), kv, r, in.counterfactuals);
  }
  emit(opts, text);
  return kExitOk;
}

}  // namespace moesim::cli
