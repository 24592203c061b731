// Table, CSV and Markdown reports of a run (see report.hpp): one row per router variant with units in
// the headers, and for step-structured runs (decoder, trace, load profile) a section of phase totals.
// Deterministic apart from measured columns. Host only. Covered by tests/cli/cli_test.cpp,
// tests/decoder/decoder_test.cpp (printed tables), tests/report/report_test.cpp (CSV) and
// tests/cli/reports_agree_test.cpp (the table against JSON and check).
#include "src/report/report.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <sstream>

#include "src/common/error.hpp"
#include "src/cost/hardware_profile.hpp"
#include "src/report/report_internal.hpp"
#include "src/report/text_format.hpp"
#include "src/report/verdict.hpp"

namespace moesim {
namespace {

using namespace report_detail;

std::string fmt(double v, int precision = 3) { return text::fixed(v, precision); }

struct Column {
  std::string header;  // with its unit; the same name in the table, Markdown and CSV, whatever the run's values
  // The cell's text: "" where the value does not apply to the run (a column empty in every row is left out of
  // the table and Markdown), "-" where it applies but has no value to show (noisy measured times); CSV leaves
  // both empty.
  std::function<std::string(size_t)> cell;
  // Which columns the terminal table keeps within kTerminalWidth (text::fit_columns): 0 always, then the
  // smaller numbers first; --wide, Markdown and CSV show every column.
  int priority = 0;
};

// Every column of a run's table, CSV and Markdown, in order: the same set for every run (a column that does
// not apply, such as ep_us on one device, has empty cells), so that scripts read the same names.
std::vector<Column> columns(const RunResult& run) {
  const std::vector<int> ranks = rank_variants(run);
  std::vector<Column> cols;
  const auto& vs = run.variants;
  auto metric = [&](const std::string& name, int precision) {
    // The headline value, as JSON `metrics` and check have it (an aggregate over a run's batches or records).
    return [&, name, precision](size_t i) {
      const std::optional<double> v = metric_value(run, vs[i], name, "value");
      return v ? fmt(*v, precision) : std::string();
    };
  };
  const bool ep = run.experiment.placement.kind == PlacementKind::expert_parallel;
  const bool comm = ep || run.experiment.placement.tensor_parallel > 1;
  auto us = [](double s) { return fmt(s * 1e6, 1); };
  // Copied into the cells (they outlive this function); each holds a reference to the run's variants.
  auto single = [&vs](size_t i) -> const LayerCost& { return find_placement(vs[i], "single")->cost; };
  auto primary = [&vs](size_t i) -> const Erosion& { return primary_placement(vs[i]).cost.erosion; };
  auto ep_cost = [&vs](size_t i) { return find_placement(vs[i], "expert_parallel"); };
  cols.push_back({"strategy", [&](size_t i) { return vs[i].variant.label; }, 0});
  cols.push_back({"imbalance", metric("imbalance", 3), 0});
  cols.push_back({"max_vio", metric("max_vio", 3), 4});
  cols.push_back({"entropy_norm", metric("entropy_norm", 3), 7});
  cols.push_back({"drop_rate", metric("drop_rate", 4), 0});
  cols.push_back({"unrouted", metric("tokens_unrouted", 0), 6});
  cols.push_back({"aux_loss", metric("aux_loss", 3), 8});
  cols.push_back({"model_us", [single, us](size_t i) { return us(single(i).actual.quantized_s); }, ep ? 3 : 0});
  const int devices = run.experiment.placement.devices;
  // Each row's own devices (compare --vary placement.devices runs a placement a group of rows).
  cols.push_back({"devices", [ep, devices, ep_cost](size_t i) {
                    if (!ep) return std::string();
                    return std::to_string(ep_cost(i) ? ep_cost(i)->devices : devices);
                  }, run.varied ? 0 : 9});
  cols.push_back({"ep_us", [ep_cost, us](size_t i) { return ep_cost(i) ? us(ep_cost(i)->cost.actual.quantized_s) : ""; },
                  ep ? 0 : 10});
  cols.push_back({"rank_imb", [ep_cost](size_t i) { return ep_cost(i) ? fmt(ep_cost(i)->cost.rank_imbalance, 3) : ""; },
                  ep ? 5 : 10});
  // The primary placement's time, split: ref + save + imb + imb_tile + phase + tile + pad (+ mb + comm + comm_imb) =
  // model_us (ep_us).
  cols.push_back({"ref_us", [primary, us](size_t i) { return us(primary(i).reference_s); }, 0});
  // What skew saves is a headline part where some strategy saves; phase_us, the exact batch's step beyond the
  // tile phase's mean, the first to go.
  const bool saves = std::any_of(vs.begin(), vs.end(), [](const VariantResult& v) {
    return primary_placement(v).cost.erosion.idle_saving_s != 0.0;
  });
  cols.push_back({"save_us", [primary, us](size_t i) { return us(primary(i).idle_saving_s); }, saves ? 0 : 4});
  cols.push_back({"imb_us", [primary, us](size_t i) { return us(primary(i).imbalance_s); }, 0});
  cols.push_back({"imb_tile_us", [primary, us](size_t i) { return us(primary(i).imbalance_tiles_s); }, 0});
  cols.push_back({"phase_us", [primary, us](size_t i) { return us(primary(i).tile_phase_s); }, 2});
  cols.push_back({"tile_us", [primary, us](size_t i) { return us(primary(i).quantization_s); }, 0});
  // Padding is 0 unless a capacity or block layout pays it: then it is a headline part, else the first to go.
  const bool padded = std::any_of(vs.begin(), vs.end(), [](const VariantResult& v) {
    return primary_placement(v).cost.erosion.padding_s != 0.0;
  });
  cols.push_back({"pad_us", [primary, us](size_t i) { return us(primary(i).padding_s); }, padded ? 0 : 3});
  const bool split = ep && run.experiment.placement.overlap == A2aOverlap::two_batch;
  cols.push_back({"mb_us", [primary, us, split](size_t i) { return split ? us(primary(i).micro_batch_s) : ""; },
                  split ? 0 : 10});
  cols.push_back({"comm_us", [primary, us, comm](size_t i) { return comm ? us(primary(i).communication_s) : ""; },
                  comm ? 0 : 10});
  cols.push_back({"comm_imb_us",
                  [primary, us, comm](size_t i) { return comm ? us(primary(i).communication_imbalance_s) : ""; },
                  comm ? 0 : 10});
  cols.push_back({"drop_us", [primary, us](size_t i) { return us(primary(i).dropped_work_s); }, 2});
  auto percent = [](double f) { return fmt(100.0 * f, 1) + "%"; };
  cols.push_back({"imb_cost", [primary, percent](size_t i) { return percent(imbalance_cost_fraction(primary(i))); }, 0});
  cols.push_back({"idle_save", [primary, percent](size_t i) { return percent(idle_saving_fraction(primary(i))); },
                  saves ? 1 : 6});
  cols.push_back({"batch_eff", [&](size_t i) { return fmt(primary_placement(vs[i]).cost.batching_efficiency, 3); }, 8});
  cols.push_back({"measured_ms", [&](size_t i) { return vs[i].executed ? fmt(vs[i].measured.layer_s * 1e3, 2) : ""; },
                  1});
  // Noisy measured times show no efficiency; noise_legend says why (the JSON keeps the number).
  cols.push_back({"meas_eff", [&](size_t i) {
                    if (!vs[i].executed) return std::string();
                    return vs[i].measured.layer_s > 0 && !vs[i].measured_noise.noisy
                               ? fmt(vs[i].measured_balanced_layer_s / vs[i].measured.layer_s, 2)
                               : std::string("-");
                  }, 1});
  cols.push_back({"rank", [ranks](size_t i) { return std::to_string(ranks[i]); }, 0});
  return cols;
}

// What the columns mean, and what the split compares; one line per subject (wrapped by the caller).
std::string erosion_legend(const RunResult& run) {
  const bool ep = run.experiment.placement.kind == PlacementKind::expert_parallel;
  const int tp = run.experiment.placement.tensor_parallel;
  const bool comm = ep || tp > 1;
  const std::string total = ep ? "ep_us" : "model_us";
  const bool split = ep && run.experiment.placement.overlap == A2aOverlap::two_batch;
  std::ostringstream os;
  os << "imbalance: max/mean kept assignments per expert; max_vio: (max - mean) / mean, MaxVio; drop_rate: dropped / "
        "(N k); unrouted: tokens with no expert\n";
  os << "model_us: modeled MoE layer on one device (the kernel model: row tiles in waves, the K-step floor, the "
        "profile's efficiencies and the layer's launches)"
     << (ep ? "; ep_us: on the expert-parallel placement over " + std::to_string(run.experiment.placement.devices) +
                  " devices (the devices column), all-to-all included; rank_imb: max/mean tokens per device"
            : "")
     << (tp > 1 ? "; each expert's ffn split over " + std::to_string(tp) + " GPUs (placement.tensor_parallel)" : "")
     << "\n"
     << total << " = ref_us + save_us + imb_us + imb_tile_us + phase_us + tile_us + pad_us" << (split ? " + mb_us" : "")
     << (comm ? " + comm_us + comm_imb_us" : "")
     << ": ref_us = the assignments delivered, balanced over the experts" << (ep ? " and devices" : "")
     << ", on the ideal roofline (the profile's achieved rates); save_us = what skew saves by leaving experts idle "
        "(their weights and row tiles; below 0 is a saving); imb_us = the straggler on the ideal roofline (the device "
        "with the most rows); imb_tile_us = the tiles, waves and floors the uneven loads pay beyond the same "
        "assignments over the same active experts; the three are each their mean over the batch sizes of one tile "
        "phase; phase_us = what this exact batch size pays beyond that mean; tile_us = the tiles, waves, K-step floor "
        "and launches balanced loads pay as well; pad_us = capacity or block rows"
     << (split ? "; mb_us = what running the batch as two micro-batches costs the experts (each reads the weights)" : "")
     << (ep ? std::string("; comm_us = the all-to-all the layer waits for") + (split ? " past the other micro-batch's compute" : "") +
                  " with the same assignments balanced"
            : "")
     << (tp > 1 ? std::string(ep ? " and" : "; comm_us =") + " the tensor-parallel all-reduce" : "")
     << (comm ? "; comm_imb_us = what the skew of the received tokens adds to it (imbalance too)" : "")
     << "; drop_us = the ideal time of the dropped and unrouted assignments: work not done, not in " << total << "\n"
     << "imb_cost: (imb_us + imb_tile_us" << (comm ? " + comm_imb_us" : "") << ") / " << total
     << ", what imbalance costs; idle_save: -save_us / " << total
     << ", what it saves (both the tile-phase mean, drops held out; batch_eff in --wide: the balanced "
        "counterfactual's time over this routing's, net of both); rank: by " << total << " per assignment served of the N k owed (dropped and unrouted work counts against it), "
        "then imbalance (equal in both: the same rank)\n";
  return os.str();
}

// What re-planning the placement every placement.rebalance_every steps gained a strategy (has_rebalance).
std::string rebalance_line(const RunResult& run, const VariantResult& v) {
  const PlacementConfig& pc = run.experiment.placement;
  const RebalanceRun& r = v.rebalance;
  std::ostringstream os;
  os << "rebalancing every " << pc.rebalance_every << " steps (" << to_string(pc.load_estimator)
     << " estimator): " << r.epochs.size() << " plans";
  if (r.gain_steps > 0) {
    os << "; over the " << r.gain_steps << " steps from the first re-plan, rank_imbalance "
       << fmt(r.static_rank_imbalance, 3) << " (the first plan, kept) -> " << fmt(r.rank_imbalance, 3)
       << ", modeled layer " << fmt(r.static_layer_s * 1e6, 1) << " -> " << fmt(r.layer_s * 1e6, 1) << " us ("
       << fmt(r.layer_s > 0 ? r.static_layer_s / r.layer_s : 1.0, 3) << "x, at the model's size)";
  } else {
    os << "; no step after the first re-plan (workload.batches <= placement.rebalance_every)";
  }
  return os.str();
}

// The expert-parallel plan of each strategy (slots per device when there are at most 64), its predicted
// against realised balancedness, the rebalancing gain when placement.rebalance_every re-plans, then each
// strategy's all-to-all.
std::string placement_section(const RunResult& run) {
  const PlacementConfig& pc = run.experiment.placement;
  if (pc.kind != PlacementKind::expert_parallel) return "";
  std::ostringstream os;
  // Where the plan came from, as the first strategy's was made (each strategy plans from its own loads).
  const ModeledPlacement* first = run.variants.empty() ? nullptr : find_placement(run.variants.front(), "expert_parallel");
  const bool eplb = plans_from_loads(pc);
  os << "placement: " << (first && !first->plan.empty() ? first->plan : std::string(to_string(pc.policy))) << ", "
     << pc.devices << " devices, " << pc.replicas << " replica slots"
     << (effective_policy(pc) == PlacementPolicy::hierarchical ? ", " + std::to_string(pc.nodes) + " nodes" : "")
     << (pc.spread_replicas ? ", replicas spread" : "")
     << (eplb ? " (balancedness = mean / max load per device: predicted from the plan's loads, realised by the batch)"
              : " (balancedness = mean / max load per device)")
     << "\n";
  for (const VariantResult& v : run.variants) {
    const ModeledPlacement* mp = find_placement(v, "expert_parallel");
    if (!mp || mp->cost.placement.expert.empty()) continue;
    const ExpertPlacement& p = mp->cost.placement;
    // Rows of several experiments (compare --vary placement.*) each name their own plan.
    const bool planned = run.varied ? mp->plan.rfind("EPLB", 0) == 0 : eplb;
    os << "  " << v.variant.label << ": " << (run.varied ? mp->plan + "; " : std::string());
    if (planned) os << "predicted " << fmt(mp->cost.predicted_balancedness, 3) << ", ";
    os << "realised " << fmt(mp->cost.balancedness, 3);
    if (planned) os << ", colocated replicas " << colocated_replicas(p);
    if (planned && p.expert.size() <= 64) {
      os << "; experts per device:";
      for (int d = 0; d < p.num_devices; ++d) {
        os << (d ? " |" : "") << " " << d << ":";
        for (size_t i = 0; i < p.expert.size(); ++i)
          if (p.device[i] == d) os << " " << p.expert[i];
      }
    }
    os << "\n";
    if (v.has_rebalance) os << "    " << rebalance_line(run, v) << "\n";
  }
  for (const VariantResult& v : run.variants) {
    const ModeledPlacement* mp = find_placement(v, "expert_parallel");
    if (!mp) continue;
    const A2aCost& a = mp->cost.a2a;
    if (&v == &run.variants.front()) {
      os << "all-to-all: " << to_string(a.kernel) << " kernel, " << a.nodes << (a.nodes == 1 ? " node" : " nodes")
         << " of " << a.devices_per_node << ", dispatch " << to_string(pc.dispatch_dtype) << ", combine "
         << to_string(pc.combine_dtype) << ", overlap " << to_string(pc.overlap)
         << " (dispatch and combine of the whole batch; the busiest device's bytes; exposed: what the layer waits for)\n";
    }
    os << "  " << v.variant.label << ": dispatch " << fmt(a.dispatch.time_s * 1e6, 1) << " us, combine "
       << fmt(a.combine.time_s * 1e6, 1) << " us, busiest device " << a.dispatch.busiest_device << " receives "
       << fmt(a.dispatch.bytes_received / 1e6, 2) << " MB, exposed " << fmt(mp->cost.exposed_communication_s * 1e6, 1)
       << " us\n";
  }
  return os.str();
}

// Why each strategy's row differs from the others: what it does, with the settings it used.
std::string strategy_notes(const RunResult& run, const std::string& bullet) {
  const Experiment& e = run.experiment;
  std::ostringstream os;
  for (const VariantResult& v : run.variants) {
    const RouterConfig& r = v.variant.router;
    const int k = e.model.top_k;
    std::ostringstream n;
    const std::string cap = r.capacity_factor > 0 ? "capacity factor " + text::real(r.capacity_factor) + " drops the overflow ("
                                                        + to_string(r.drop_policy) + " order)"
                                                  : "dropless";
    switch (r.gating) {
      case Gating::token_choice: n << "top-" << k << " of the scores per token; " << cap; break;
      case Gating::noisy_top_k: n << "token choice on logits plus Gaussian noise (std " << text::real(r.noise_std) << "); " << cap; break;
      case Gating::expert_choice:
        n << "each expert takes its top C tokens: equal loads by construction, tokens no expert chose go unrouted";
        break;
      case Gating::sinkhorn:
        n << "top-" << k << " of Sinkhorn-balanced scores (" << r.sinkhorn_iterations << " iterations at most); " << cap;
        break;
      case Gating::hash: n << k << " experts from a hash of the token id: balanced on average, blind to the logits"; break;
      case Gating::random: n << k << " uniformly random experts per token: the binomial spread of chance"; break;
      case Gating::balanced: n << "the balanced counterfactual: floor/ceil(N k / E) per expert"; break;
      case Gating::group_limited:
        if (r.groups <= 1)
          n << "router.groups 1: one group, so it routes as token choice (set router.groups, router.topk_groups)";
        else
          n << "top-" << k << " within the best " << r.topk_groups << " of " << r.groups << " expert groups; " << cap;
        break;
      case Gating::aux_free_bias: {
        n << "token choice plus a per-expert bias that moves " << text::real(r.bias_update_rate) << " per batch toward balance";
        if (v.final_bias.empty() || e.workload.batches <= 1) {
          n << "; one batch: the bias has not moved yet, so it routes as token choice (set workload.batches)";
        } else {
          const auto [lo, hi] = std::minmax_element(v.final_bias.begin(), v.final_bias.end());
          n << "; after " << e.workload.batches << " batches it spans [" << text::fixed(*lo, 3) << ", " << text::fixed(*hi, 3) << "]";
        }
        break;
      }
    }
    os << bullet << v.variant.label << ": " << n.str() << "\n";
  }
  return os.str();
}

// Why some strategies show meas_eff "-". The rules that fired for every noisy strategy (the machine's
// load, most often) are said once; then one line per distinct remainder, naming its strategies. Empty
// when no strategy's measured times are noisy.
std::string noise_legend(const RunResult& run, const std::string& bullet) {
  auto rules_of = [](const std::string& reason) {
    std::vector<std::string> rules;
    size_t from = 0;
    for (size_t at; (at = reason.find("; ", from)) != std::string::npos; from = at + 2) rules.push_back(reason.substr(from, at - from));
    rules.push_back(reason.substr(from));
    return rules;
  };
  std::vector<const VariantResult*> noisy;
  for (const VariantResult& v : run.variants)
    if (v.executed && v.measured_noise.noisy) noisy.push_back(&v);
  if (noisy.empty()) return "";
  if (noisy.size() == 1)
    return bullet + "meas_eff -: " + noisy.front()->variant.label + ": " + noisy.front()->measured_noise.reason +
           " (noise); rerun on an idle machine with execute.repeats >= 3\n";
  std::vector<std::string> common = rules_of(noisy.front()->measured_noise.reason);
  for (const VariantResult* v : noisy) {
    const std::vector<std::string> mine = rules_of(v->measured_noise.reason);
    common.erase(std::remove_if(common.begin(), common.end(),
                                [&](const std::string& r) { return std::find(mine.begin(), mine.end(), r) == mine.end(); }),
                 common.end());
  }
  std::vector<std::pair<std::string, std::string>> groups;  // the remaining rules, strategies
  for (const VariantResult* v : noisy) {
    std::string rest;
    for (const std::string& r : rules_of(v->measured_noise.reason))
      if (std::find(common.begin(), common.end(), r) == common.end()) rest += (rest.empty() ? "" : "; ") + r;
    auto g = std::find_if(groups.begin(), groups.end(), [&](const auto& x) { return x.first == rest; });
    if (g == groups.end())
      groups.push_back({rest, v->variant.label});
    else
      g->second += ", " + v->variant.label;
  }
  std::string out = bullet + "meas_eff -: noisy measured times (rerun on an idle machine with execute.repeats >= 3)";
  if (!common.empty()) {
    out += noisy.size() == run.variants.size() ? ", for every strategy: " : ", for " + std::to_string(noisy.size()) + " strategies: ";
    for (size_t i = 0; i < common.size(); ++i) out += (i ? "; " : "") + common[i];
  }
  out += "\n";
  for (const auto& [rest, labels] : groups)
    if (!rest.empty()) out += bullet + "meas_eff -: " + labels + ": " + rest + "\n";
  return out;
}

std::string phase_title(const RunResult& run) {
  const Experiment& e = run.experiment;
  std::ostringstream t;
  t << e.name << ": ";
  if (run.has_decoder) {
    const DecoderShape& s = run.decoder_shape;
    const auto [lo, hi] = std::minmax_element(run.prompt_len.begin(), run.prompt_len.end());
    t << "decoder, " << e.workload.batch << " sequences, prompts " << *lo;
    if (*hi != *lo) t << ".." << *hi;
    t << " tokens, " << e.workload.decode_steps << " decode steps, E=" << e.model.experts << ", k=" << e.model.top_k
      << ", topics " << e.workload.topics << ", skew " << e.workload.skew << "; executed " << s.layers << " of "
      << e.model.layers << " layers at hidden " << s.hidden << ", ffn " << s.ffn << ", " << s.heads << " heads / "
      << s.kv_heads << " kv heads x " << s.head_dim;
  } else if (e.workload.source == WorkloadSource::trace) {
    t << "trace " << run.workload_path << " (" << (run.trace_replayed ? "recorded decisions replayed" : "re-routed from its logits")
      << "), E=" << e.model.experts << ", k=" << e.model.top_k;
  } else if (e.workload.source == WorkloadSource::load_distribution) {
    t << to_string(e.workload.distribution) << " loads";
    if (e.workload.distribution == LoadDistribution::power_law) t << " (alpha " << e.workload.power_law_alpha << ")";
    t << " as aiconfigurator draws them, " << e.workload.batches << " draws of " << e.workload.batch
      << " tokens, E=" << e.model.experts << ", k=" << e.model.top_k;
  } else {
    t << "load profile " << run.profile_key << " of " << run.workload_path << " (" << run.profile_format
      << (run.profile_format_forced ? ", workload.format" : ", recognised by content") << ")";
    if (!e.workload.expert_map.empty()) t << ", " << e.workload.expert_map.size() << " physical slots folded";
    t << ", E=" << e.model.experts
      << ", k=" << e.model.top_k << ", cost modeled for batches of " << run.num_tokens << " tokens";
  }
  t << "; modeled on " << run.hardware.name << " (" << format_label(expert_format(e.model)) << ", hidden " << e.model.hidden
    << ", ffn " << e.model.ffn << ", critical batch " << fmt(critical_batch(run.hardware, expert_format(e.model)), 0) << ")";
  return t.str();
}

// One row per (strategy, phase): the prefill/decode split of a step-structured run.
std::vector<std::vector<std::string>> phase_rows(const RunResult& run) {
  std::vector<std::vector<std::string>> rows;
  const bool ep = run.experiment.placement.kind == PlacementKind::expert_parallel;
  rows.push_back({"strategy", "phase", "steps", "tokens", "imb_p50", "imb_p95", "imb_max", "unrouted", "attn_us",
                  "moe_us", "batch_eff", "model_tok/s", "meas_tok/s", "kv_cache_MiB"});
  if (ep) {
    for (const char* h : {"disp_us", "comb_us", "exposed_us", "step_ms"}) rows[0].push_back(h);
  }
  for (const VariantResult& v : run.variants) {
    for (const PhaseSummary& p : v.phases) {
      const std::vector<size_t> idx = phase_indices(v, p.phase);
      std::vector<double> imb, eff;
      for (size_t i : idx) {
        imb.push_back(v.per_batch[i].imbalance);
        eff.push_back(v.records[i].batching_efficiency);
      }
      const Aggregate a = aggregate(imb);
      const double per_layer = p.steps > 0 ? 1e6 / (p.steps * static_cast<double>(run.experiment.model.layers)) : 0;
      const double per_moe_layer =
          p.steps > 0 ? 1e6 / (p.steps * static_cast<double>(moe_layer_count(run.experiment.model))) : 0;
      rows.push_back({v.variant.label, p.phase, std::to_string(p.steps), std::to_string(p.tokens), fmt(a.p50, 3),
                      fmt(a.p95, 3), fmt(a.max, 3), std::to_string(p.tokens_unrouted),
                      run.has_decoder ? fmt(p.modeled_attention_s * per_layer, 1) : "-", fmt(p.modeled_moe_s * per_moe_layer, 1),
                      fmt(aggregate(eff).mean, 3), fmt(p.modeled_tokens_per_s, 0),
                      run.has_decoder && v.executed ? fmt(p.measured_tokens_per_s, 0) : "-",
                      run.has_decoder ? fmt(p.kv_cache_bytes / (1024.0 * 1024.0), 1) : "-"});
      if (ep) {
        std::vector<std::string>& row = rows.back();
        row.push_back(fmt(p.modeled_dispatch_s * per_moe_layer, 1));
        row.push_back(fmt(p.modeled_combine_s * per_moe_layer, 1));
        row.push_back(fmt(p.modeled_exposed_s * per_moe_layer, 1));
        row.push_back(fmt(p.steps > 0 ? p.modeled_s / p.steps * 1e3 : 0.0, 3));
      }
    }
  }
  return rows;
}

std::string phase_section(const RunResult& run, ReportFormat format, bool wide = false, bool explain = true) {
  const std::vector<std::vector<std::string>> rows = phase_rows(run);
  std::ostringstream os;
  if (format == ReportFormat::markdown) {
    os << "\n|";
    for (const std::string& h : rows[0]) os << " " << h << " |";
    os << "\n|";
    for (size_t c = 0; c < rows[0].size(); ++c) os << (c < 2 ? " :--- |" : " ---: |");
    os << "\n";
    for (size_t r = 1; r < rows.size(); ++r) {
      os << "|";
      for (const std::string& cell : rows[r]) os << " " << cell << " |";
      os << "\n";
    }
  } else {
    std::vector<size_t> width(rows[0].size(), 0);
    for (const auto& row : rows)
      for (size_t c = 0; c < row.size(); ++c) width[c] = std::max(width[c], row[c].size());
    // strategy, phase, steps, tokens, imb_p50, imb_p95, imb_max, unrouted, attn_us, moe_us, batch_eff,
    // model_tok/s, meas_tok/s, kv_cache_MiB[, disp_us, comb_us, exposed_us, step_ms]: the columns the table
    // keeps first within the width.
    std::vector<int> priority = {0, 0, 3, 2, 0, 0, 1, 4, 0, 0, 0, 0, 2, 3};
    if (rows[0].size() > priority.size()) priority.insert(priority.end(), {3, 3, 1, 2});
    const std::vector<size_t> fit = text::fit_columns(width, priority, wide ? 0 : text::kTerminalWidth);
    os << "\nper phase:\n";
    for (const auto& row : rows) {
      for (size_t j = 0; j < fit.size(); ++j) {
        const size_t c = fit[j];
        const std::string pad(width[c] - row[c].size(), ' ');
        os << (j ? "  " : "") << (c < 2 ? row[c] + pad : pad + row[c]);
      }
      os << "\n";
    }
    if (fit.size() < rows[0].size()) {
      std::string left;
      for (size_t c = 0; c < rows[0].size(); ++c)
        if (std::find(fit.begin(), fit.end(), c) == fit.end()) left += (left.empty() ? "" : ", ") + rows[0][c];
      os << "(--wide adds " << left << ")\n";
    }
  }
  const bool decoder = run.has_decoder;
  if (!explain) {
    // The per-layer loads and every column's definition come with --explain.
    os << "imb_*: max/mean per " << (decoder ? "step and layer" : "record") << "; moe_us per MoE layer"
       << (decoder ? ", attn_us per layer," : "") << " at the model's size; --explain: per-layer loads and every column\n";
    return format == ReportFormat::markdown ? os.str() : text::wrap(os.str());
  }
  os << "\n"
     << (run.experiment.workload.source == WorkloadSource::load_profile        ? "recorded loads per layer"
         : run.experiment.workload.source == WorkloadSource::load_distribution ? "drawn loads per draw"
                                                                                : "loads summed over the run, per layer")
     << " (max/mean, cv, entropy_norm):\n";
  for (const VariantResult& v : run.variants) {
    std::ostringstream layers;
    layers << (format == ReportFormat::markdown ? "- " : "  ") << v.variant.label << ":";
    for (const auto& [layer, m] : per_layer_totals(run, v))
      layers << "  L" << layer << " " << fmt(m.imbalance, 3) << " / " << fmt(m.cv, 3) << " / " << fmt(m.entropy_norm, 3);
    // Many layers (32, 61) fill many lines: each one within the width, indented under its strategy.
    os << (format == ReportFormat::markdown ? layers.str() : text::wrap(layers.str(), text::kTerminalWidth, "    ")) << "\n";
  }
  const char* unit = decoder ? "per step and layer"
                     : run.experiment.workload.source == WorkloadSource::load_profile      ? "per recorded layer"
                     : run.experiment.workload.source == WorkloadSource::load_distribution ? "per draw"
                                                                                           : "per recorded step and layer";
  os << "\nimb_*: max/mean " << unit << "; unrouted: tokens with no expert, summed; batch_eff: mean over the "
        "records, of the expert-parallel placement when the experiment uses one; "
     << (decoder ? "attn_us: modeled per layer and step, moe_us per MoE layer and step, at the model's real size; "
               : "moe_us: modeled per MoE layer; ")
     << (run.experiment.placement.kind == PlacementKind::expert_parallel
             ? "disp_us, comb_us: the all-to-all's dispatch and combine per MoE layer and step, as run; exposed_us: the "
               "part of them the layer waits for (all of it without placement.overlap); moe_us = the experts + "
               "exposed_us; step_ms: the modeled step of the whole model (decode: the time per output token); "
             : "")
     << (decoder ? "model_tok/s: tokens / modeled time of all " + std::to_string(run.experiment.model.layers) +
                       " layers (" + std::to_string(moe_layer_count(run.experiment.model)) + " MoE layers)"
                 : "model_tok/s: tokens / modeled time of the " + std::to_string(moe_layer_count(run.experiment.model)) +
                       " MoE layers only (no attention: this workload records no context to cost it)")
     << (decoder ? " (attention data-parallel over the placement's devices); meas_tok/s: executed decoder (" +
                       std::to_string(run.decoder_shape.layers) + " layers, CPU); kv_cache_MiB: whole model's KV cache "
                       "at the phase's end (model dtype)"
                 : "")
     << "\n";
  return format == ReportFormat::markdown ? os.str() : text::wrap(os.str());
}

}  // namespace

namespace {

// The rows of every column; `shown`: the columns with at least one cell (a column that applies to no row, such
// as ep_us on one device, is left out of the table and Markdown; CSV keeps every column).
struct Cells {
  std::vector<std::vector<std::string>> rows;
  std::vector<size_t> shown;
};
Cells fill(const RunResult& run, const std::vector<Column>& cols) {
  Cells c;
  c.rows.resize(run.variants.size());
  for (size_t i = 0; i < run.variants.size(); ++i)
    for (const Column& col : cols) c.rows[i].push_back(col.cell(i));
  for (size_t k = 0; k < cols.size(); ++k)
    if (std::any_of(c.rows.begin(), c.rows.end(), [&](const auto& r) { return !r[k].empty(); })) c.shown.push_back(k);
  return c;
}

// What the report says under its table, one subject a line: the strategies, the columns, the placement, the
// noise, and how a run of many batches or records makes each number.
std::string legends(const RunResult& run, const std::string& bullet, bool meas_eff_shown) {
  const Experiment& e = run.experiment;
  std::ostringstream os;
  if (run.variants.size() > 1) os << bullet << "strategies:\n" << strategy_notes(run, bullet.empty() ? "  " : "  " + bullet);
  std::istringstream erosion(erosion_legend(run));
  for (std::string line; std::getline(erosion, line);) os << bullet << line << "\n";
  os << bullet << "measured_ms: executed layer, median of " << e.execute.repeats
     << "; meas_eff: measured balanced / actual (the executed layer under `balanced` routing of the same tokens)\n";
  std::istringstream placement(placement_section(run));
  for (std::string line; std::getline(placement, line);)
    os << (line.rfind("  ", 0) == 0 && !bullet.empty() ? "  " + bullet + line.substr(2) : bullet + line) << "\n";
  if (meas_eff_shown) os << noise_legend(run, bullet);
  const bool stepped = !run.variants.empty() && !run.variants.front().records.empty();
  const bool batches = !stepped && !run.variants.empty() && run.variants.front().per_batch.size() > 1;
  if (stepped) {
    const std::vector<StepRecord>& recs = run.variants.front().records;
    const bool decode = std::any_of(recs.begin(), recs.end(), [](const StepRecord& r) { return r.phase == "decode"; });
    os << bullet << "step-structured run: imbalance .. aux_loss are means over every step and layer weighted by the tokens "
          "each routed, unrouted a sum; the modeled columns the mean "
       << (decode ? "decode-step MoE layer" : "MoE layer of the records")
       << (run.has_decoder ? "; measured_ms: the last step's last MoE layer re-timed on its hidden states" : "")
       << " (docs/design.md, \"One number per metric\"; check --aggregate last reads the last record)\n";
  } else if (batches) {
    os << bullet << e.workload.batches << " batches: imbalance .. aux_loss are means over the batches, unrouted a sum; "
       << "the modeled columns the mean of the batches' MoE layers; measured_ms: the last batch executed (docs/design.md, "
          "\"One number per metric\"; check --aggregate last reads the last batch)\n";
  }
  return os.str();
}

}  // namespace

namespace {

// The paragraph under the table: how the shown time columns add up, what batch_eff and rank are, the drop mark,
// what a run of many batches or records shows, and where the rest is. Names only the columns in `shown`.
std::string short_legend(const RunResult& run, const std::vector<std::string>& shown,
                         const std::vector<std::string>& hidden, bool any_drops, bool explain) {
  const Experiment& e = run.experiment;
  auto has = [&](const std::string& h) { return std::find(shown.begin(), shown.end(), h) != shown.end(); };
  auto listed = [](const std::vector<std::string>& v) {
    std::string out;
    for (size_t i = 0; i < v.size(); ++i) out += (i == 0 ? "" : i + 1 == v.size() ? " and " : ", ") + v[i];
    return out;
  };
  const bool ep = e.placement.kind == PlacementKind::expert_parallel;
  const std::string total = ep ? "ep_us" : "model_us";
  std::ostringstream os;
  std::vector<std::string> parts, imbalance, balanced;
  // Whether an erosion part is non-zero in any row (the primary placement's headline).
  const auto nonzero = [&](const std::string& h) {
    return std::any_of(run.variants.begin(), run.variants.end(), [&](const VariantResult& v) {
      const Erosion& x = primary_placement(v).cost.erosion;
      const double value = h == "save_us" ? x.idle_saving_s : h == "phase_us" ? x.tile_phase_s
                           : h == "pad_us" ? x.padding_s : h == "mb_us" ? x.micro_batch_s : 1.0;
      return value != 0.0;
    });
  };
  for (const char* h : {"ref_us", "save_us", "imb_us", "imb_tile_us", "phase_us", "tile_us", "pad_us", "mb_us", "comm_us",
                        "comm_imb_us"}) {
    // A part the terminal had no room for is named in the sum where it is not 0, so that the sum stays true.
    if (!has(h)) {
      if (std::find(hidden.begin(), hidden.end(), h) != hidden.end() && nonzero(h))
        parts.push_back(std::string(h) + " (--wide)");
      continue;
    }
    parts.push_back(h);
    const std::string name = h;
    if (name == "imb_us" || name == "imb_tile_us" || name == "comm_imb_us") imbalance.push_back(name);
    else if (name != "ref_us" && name != "save_us" && name != "phase_us") balanced.push_back(name);
  }
  if (has(total) && !parts.empty()) {
    os << total << " = ";
    for (size_t i = 0; i < parts.size(); ++i) os << (i ? " + " : "") << parts[i];
    os << ": ref_us the assignments balanced on the ideal roofline";
    if (has("save_us")) os << "; save_us what skew saves by leaving experts idle";
    if (!imbalance.empty()) os << "; " << listed(imbalance) << " what imbalance costs";
    if (has("phase_us")) os << " (each a mean over nearby batch sizes; phase_us this exact batch's tile steps beyond it)";
    if (!balanced.empty()) os << "; " << listed(balanced) << " what balanced loads pay too";
    os << ". ";
  }
  std::vector<std::string> terms;
  if (has("imb_cost"))
    terms.push_back("imb_cost is what imbalance costs over " + total +
                    (has("idle_save") ? ", idle_save what skew saves" : std::string()));
  if (has("batch_eff")) terms.push_back("batch_eff = 1 - (imbalance - saving) / " + total);
  if (has("rank")) terms.push_back("rank by time per assignment served");
  if (any_drops) terms.push_back("* drops assignments (charged in the rank)");
  for (size_t i = 0; i < terms.size(); ++i) os << (i ? "; " : "") << terms[i] << (i + 1 == terms.size() ? ". " : "");
  const bool stepped = !run.variants.empty() && !run.variants.front().records.empty();
  if (stepped) os << "Means over the records, by tokens. ";
  else if (!run.variants.empty() && run.variants.front().per_batch.size() > 1)
    os << "Means over the " << run.variants.front().per_batch.size() << " batches. ";
  if (!explain) os << "--explain defines every column";
  if (!hidden.empty()) os << (explain ? "" : "; ") << "--wide adds " << hidden.size() << " more";
  std::string text = os.str();
  while (!text.empty() && text.back() == ' ') text.pop_back();
  return text + "\n";
}

}  // namespace

std::string format_run(const RunResult& run, ReportFormat format, bool wide, bool explain) {
  if (format == ReportFormat::json) return run_to_json(run).dump(2) + "\n";
  const std::vector<Column> cols = columns(run);
  const Cells cells = fill(run, cols);
  std::ostringstream os;
  if (format == ReportFormat::csv) {
    // Every column, whatever applies: the names and their order are the same for every run.
    for (size_t c = 0; c < cols.size(); ++c) os << (c ? "," : "") << cols[c].header;
    os << "\n";
    for (const auto& row : cells.rows) {
      for (size_t c = 0; c < row.size(); ++c) os << (c ? "," : "") << (row[c] == "-" ? "" : text::csv_cell(row[c]));
      os << "\n";
    }
    return os.str();
  }
  const Experiment& e = run.experiment;
  std::ostringstream title;
  const size_t batches = run.variants.empty() ? 1 : run.variants.front().per_batch.size();
  const bool ep_title = e.placement.kind == PlacementKind::expert_parallel;
  title << e.name << ": " << run.num_tokens << " tokens x " << batches << (batches == 1 ? " batch" : " batches")
        << ", E=" << e.model.experts << ", k=" << e.model.top_k << " on "
        << (ep_title ? std::to_string(e.placement.devices) + " x " : std::string()) << run.hardware.name << " ("
        << format_label(expert_format(e.model)) << ", hidden " << e.model.hidden << ", ffn " << e.model.ffn
        << ", critical batch " << fmt(critical_batch(run.hardware, expert_format(e.model)), 0) << ")";
  const bool executed = std::any_of(run.variants.begin(), run.variants.end(), [](const VariantResult& v) { return v.executed; });
  if (executed)
    title << "; executed at hidden " << e.execute.hidden << ", ffn " << e.execute.ffn << " on "
          << (run.backend == ExecBackend::cuda ? run.device : "the CPU");
  const bool stepped = !run.variants.empty() && !run.variants.front().records.empty();
  if (stepped) {
    title.str("");
    title << phase_title(run);
  }
  // Rows that drop assignments or leave tokens unrouted are marked: their time is for less work.
  std::vector<bool> drops;
  for (const VariantResult& v : run.variants) {
    const std::optional<double> d = metric_value(run, v, "drop_rate", "value");
    const std::optional<double> u = metric_value(run, v, "tokens_unrouted", "value");
    drops.push_back((d && *d > 0) || (u && *u > 0));
  }
  const bool any_drops = std::find(drops.begin(), drops.end(), true) != drops.end();
  auto cell = [&](size_t row, size_t c) {
    if (c == 0) return cells.rows[row][c] + (drops[row] ? "*" : "");
    return cells.rows[row][c].empty() ? std::string("-") : cells.rows[row][c];
  };
  if (format == ReportFormat::markdown) {
    // The answer first: what imbalance costs each strategy.
    for (const VariantResult& v : run.variants)
      if (const std::string line = verdict_line(run, v); !line.empty()) os << "- " << line << "\n";
    for (const std::string& gain : replica_gain_lines(run)) os << "- " << gain << "\n";
    os << "\n**" << title.str() << "**\n\n|";
    std::vector<std::string> shown;
    for (size_t c : cells.shown) {
      os << " " << cols[c].header << " |";
      shown.push_back(cols[c].header);
    }
    os << "\n|";
    for (size_t c : cells.shown) os << (c == 0 ? " :--- |" : " ---: |");
    os << "\n";
    for (size_t r = 0; r < cells.rows.size(); ++r) {
      os << "|";
      for (size_t c : cells.shown) os << " " << cell(r, c) << " |";
      os << "\n";
    }
    os << "\n" << short_legend(run, shown, {}, any_drops, explain);
    if (!explain)
      for (const VariantResult& v : run.variants)
        if (v.has_rebalance) os << "\n- " << v.variant.label << ": " << rebalance_line(run, v) << "\n";
    if (explain) os << "\n" << legends(run, "- ", true);
    if (stepped) os << phase_section(run, format, false, explain);
    return os.str();
  }
  // The table: within kTerminalWidth unless --wide; the columns left out are named under it.
  std::vector<size_t> width;
  std::vector<int> prio;
  for (size_t c : cells.shown) {
    size_t w = cols[c].header.size();
    for (size_t r = 0; r < cells.rows.size(); ++r) w = std::max(w, cell(r, c).size());
    width.push_back(w);
    prio.push_back(cols[c].priority);
  }
  const std::vector<size_t> fit = text::fit_columns(width, prio, wide ? 0 : text::kTerminalWidth);
  // The answer first: what imbalance costs each strategy, one line each.
  for (const VariantResult& v : run.variants)
    if (const std::string line = verdict_line(run, v); !line.empty()) os << text::wrap(line) << "\n";
  for (const std::string& gain : replica_gain_lines(run)) os << text::wrap(gain) << "\n";
  os << text::wrap(title.str()) << "\n";
  auto line = [&](const std::vector<std::string>& row) {
    for (size_t j = 0; j < fit.size(); ++j) {
      const size_t k = fit[j];
      const std::string pad(width[k] - row[k].size(), ' ');
      os << (j ? "  " : "") << (k == 0 ? row[k] + pad : pad + row[k]);
    }
    os << "\n";
  };
  std::vector<std::string> header;
  for (size_t c : cells.shown) header.push_back(cols[c].header);
  line(header);
  for (size_t r = 0; r < cells.rows.size(); ++r) {
    std::vector<std::string> row;
    for (size_t c : cells.shown) row.push_back(cell(r, c));
    line(row);
  }
  std::vector<std::string> shown, hidden;
  for (size_t k = 0; k < cells.shown.size(); ++k)
    (std::find(fit.begin(), fit.end(), k) == fit.end() ? hidden : shown).push_back(header[k]);
  os << text::wrap(short_legend(run, shown, hidden, any_drops, explain));
  // Re-planning's gain is an answer of its own: its line stays without --explain.
  if (!explain)
    for (const VariantResult& v : run.variants)
      if (v.has_rebalance) os << text::wrap(v.variant.label + ": " + rebalance_line(run, v)) << "\n";
  if (explain)
    os << text::wrap(legends(run, "", std::find(shown.begin(), shown.end(), "meas_eff") != shown.end()));
  if (stepped) os << phase_section(run, format, wide, explain);
  return os.str();
}

}  // namespace moesim
