// `moesim route --logits FILE [--gating G] [--top-k K] [--capacity-factor CF] [--[no-]renormalize]`: routes a
// user's own logits (.npy or .csv) with any strategy and prints the balance metrics. The router is the
// built-in experiment's with capacity_factor 0 (dropless), then these options, then --set; model.experts
// is the file's column count. Before allocating, the bytes needed are estimated (estimate_route_bytes; a
// .npy's shape comes from its header), printed, and checked against --memory-limit (exit 3). aux_free_bias
// reports the expert bias after its one update. --dump-routing FILE writes the routing as a trace (step 0,
// layer 0; --dump-logits adds the logits), atomically.
// Covered by tests/cli/cli_test.cpp, bad_input_test.cpp and large_input_test.cpp (peak RSS vs estimate).
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <sstream>

#include "src/cli/cli_common.hpp"
#include "src/cli/route_logits.hpp"
#include "src/common/error.hpp"
#include "src/config/load_config.hpp"
#include "src/cost/hardware_profile.hpp"
#include "src/report/route_report.hpp"
#include "src/report/text_format.hpp"
#include "router/balance_metrics.hpp"
#include "router/expert_choice.hpp"
#include "router/route.hpp"
#include "src/workload/logits_file.hpp"

namespace moesim::cli {
namespace {

// The process before any data: the binary, its libraries, OpenMP thread stacks. Measured peak RSS of
// `moesim route` on a 1 x 1 file is about 10 MiB; the allowance leaves headroom for more cores (each
// OpenMP thread touches its own stack pages).
constexpr double kRuntimeBytes = 48.0 * (1 << 20);
// Heap the allocator keeps after frees: glibc raises its mmap threshold up to 32 MiB after large frees,
// so the sorts' temporary buffers come back from (and stay in) the heap arenas. Measured: expert_choice
// on 1M x 256 peaks 1% above its data bytes.
constexpr double kAllocatorSlack = 0.03;

// Bytes `moesim route` allocates for n tokens x E experts at top_k k under `cfg`, following
// router/route_driver.hpp: the float32 logits, the .csv text while it is parsed, the Routing (13 bytes
// per assignment), the strategy's scratch, the temporary buffer of Thrust's OpenMP merge sort (one copy
// of the sorted keys), and the metrics' per-token flags; plus kAllocatorSlack of that and kRuntimeBytes.
double estimate_route_bytes(const RouterConfig& cfg, int64_t n, int E, int k, double csv_text_bytes) {
  const double N = static_cast<double>(n), NE = N * E, m = N * k;
  double scratch = 0, assignments = m;
  switch (cfg.gating) {
    case Gating::token_choice:
    case Gating::noisy_top_k: scratch = 8 * m; break;
    case Gating::sinkhorn: scratch = 8 * NE + 8 * N + 16.0 * E + 8 * m; break;
    case Gating::group_limited: scratch = 16 * NE + 8 * N * cfg.groups + 8 * m; break;
    case Gating::aux_free_bias: scratch = 16 * NE + 8 * N * cfg.groups + 8 * m + (4 + 4) * m; break;
    case Gating::expert_choice: {
      const int64_t c = expert_choice_capacity(cfg, n, k, E);
      assignments = static_cast<double>(expert_choice_assignments(n, E, c, 0));
      scratch = 16 * NE + 8 * NE;  // scores, permutation, the sort's copy of the permutation
      break;
    }
    case Gating::hash:
    case Gating::random:
    case Gating::balanced: break;
  }
  if (cfg.gating != Gating::expert_choice && expert_capacity(cfg, n, k, E) > 0) scratch += 24 * m + 8 * m;
  const double logits = 4 * NE;
  const double reading = csv_text_bytes;  // freed once parsed, before routing
  return kRuntimeBytes + (1 + kAllocatorSlack) * (logits + std::max(reading, 13 * assignments + scratch + N));
}

void check_memory(double need, double limit, const std::string& path, const std::string& what) {
  if (limit > 0 && need > limit) {
    throw ResourceError(path + ": routing " + what + " needs about " + text::mib(need) + ", over the memory limit of " +
                        text::mib(limit) + " (--memory-limit)");
  }
}

}  // namespace

int cmd_route(int argc, char** argv) {
  CommonOptions opts;
  RouteSettings settings;
  bool help = false;
  std::string logits_path;
  std::string dump_path;
  bool dump_given = false, dump_logits = false;
  po::options_description desc("moesim route --logits FILE [options]");
  desc.add_options()("help,h", po::bool_switch(&help), "show this help")(
      "logits", po::value(&logits_path), "router logits [tokens, experts]: .npy (float32/float64) or .csv")(
      "gating", po::value(&settings.gating), "gating strategy (default token_choice)")(
      "top-k", po::value<int>()->notifier([&settings](int k) {
        // Given, it is the user's: 0 or less is refused, not read as "not given" (the default, min(2, E)).
        if (k < 1) throw InputError("--top-k: expected an integer >= 1 (at most the file's expert count), got " +
                                    std::to_string(k));
        settings.top_k = k;
      }), "experts per token (default 2, at most the column count)")(
      "capacity-factor", po::value(&settings.capacity_factor), "capacity factor (default 0: dropless)")(
      "renormalize", po::bool_switch(&settings.renormalize),
      "renormalise each token's k weights to sum to 1 (router.renormalize=true; the built-in experiment's)")(
      "no-renormalize", po::bool_switch(&settings.no_renormalize),
      "keep the score function's weights as they are (router.renormalize=false)")(
      "memory-limit", po::value(&opts.memory_limit),
      "refuse inputs whose memory estimate exceeds this (e.g. 4GiB; default 75% of physical memory)");
  add_dump_options(desc, dump_path, dump_given, dump_logits,
                   "write each token's experts, weights and kept flags as a trace (JSON Lines, step 0, layer 0; "
                   "docs/workloads.md \"Trace format\"), written atomically");
  add_common_options(desc, opts, false);
  if (parse_or_help(argc, argv, desc, nullptr, 0, help)) return kExitOk;
  if (logits_path.empty()) throw InputError("--logits: expected a .npy or .csv file of router logits");
  if (settings.renormalize && settings.no_renormalize)
    throw InputError("--renormalize, --no-renormalize: expected one of them, got both");
  settings.overrides = opts.overrides;
  apply_threads(opts.threads);
  const ReportFormat format = parse_report_format(opts.format);
  const double limit = parse_memory_limit(opts.memory_limit);

  // Check the estimate before reading: a .npy's shape is in its header; a .csv must at least fit as text.
  RoutingDump dump(dump_given, dump_path, dump_logits, false);
  const LogitsFileInfo info = inspect_logits_file(logits_path);
  const double csv_bytes = info.is_npy ? 0.0 : static_cast<double>(info.file_bytes);
  if (info.is_npy) {
    const Experiment e = route_experiment(settings, info.num_experts);
    check_memory(estimate_route_bytes(e.router, info.num_tokens, info.num_experts, e.model.top_k, 0), limit,
                 logits_path, std::to_string(info.num_tokens) + " tokens x " + std::to_string(info.num_experts) +
                                  " experts (" + to_string(e.router.gating) + ")");
  } else {
    check_memory(kRuntimeBytes + csv_bytes, limit, logits_path, "reading the .csv text");
  }
  const LogitsMatrix m = read_logits_file(logits_path);
  const Experiment e = route_experiment(settings, m.num_experts);
  const double need = estimate_route_bytes(e.router, m.num_tokens, m.num_experts, e.model.top_k, csv_bytes);
  check_memory(need, limit, logits_path,
               std::to_string(m.num_tokens) + " tokens x " + std::to_string(m.num_experts) + " experts (" +
                   to_string(e.router.gating) + ")");

  EffectContext ctx;
  ctx.command = "route";
  ctx.executes = false;
  ctx.dumps_routing = dump_given;
  warn_inert_keys({e}, ctx, opts.strict);
  const RoutedLogits routed = route_logits(e, m.values.data(), m.num_tokens, m.num_experts);
  if (dump.on()) {
    dump.write(RoutedBatch{0, 0, "", &routed.routing, m.values.data(), nullptr});
    dump.commit();
  }
  emit(opts, format_route(route_report(logits_path, e, routed, m.num_tokens, m.num_experts, need, limit), format));
  return kExitOk;
}

}  // namespace moesim::cli
