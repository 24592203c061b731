// The table of when each config key acts (see key_effects.hpp). Each rule reads the experiment of one
// row and what the command does; a rule claims "no effect" only where the code path that reads the key
// is not taken (the router, the cost model, the executed pipeline: the file named in each comment).
// Deterministic, host only. Covered by tests/config/key_effects_test.cpp.
#include "src/config/key_effects.hpp"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <initializer_list>
#include <optional>
#include <sstream>

#include "src/config/load_config_internal.hpp"

namespace moesim {
namespace {

using R = std::string;
const R kActs;  // the rule's answer where the key acts

bool gating_in(const Experiment& e, std::initializer_list<Gating> gs) {
  return std::find(gs.begin(), gs.end(), e.router.gating) != gs.end();
}
R with_gating(const Experiment& e) { return std::string("with router.gating=") + to_string(e.router.gating); }
R with_source(const Experiment& e) { return std::string("with workload.source=") + to_string(e.workload.source); }
bool source_in(const Experiment& e, std::initializer_list<WorkloadSource> ss) {
  return std::find(ss.begin(), ss.end(), e.workload.source) != ss.end();
}
bool routing_only(const EffectContext& c) { return c.command == "route"; }
const char* kRouteOnly = "in moesim route (routing only: no cost model, no executed layer)";
// validate models what executes: the execute: size in fp32 on one device of the host profile
// (src/sweep/validate.cpp), at the batches of --batches.
bool validating(const EffectContext& c) { return c.command == "validate"; }
const char* kValidate = "in moesim validate (it models the execute: size in fp32 on one host device)";

// Where no router runs: recorded loads are costed as they are (src/pipeline/run_steps.cpp run_load_profile),
// and a trace without logits replays its recorded routing (src/workload/trace_replay.hpp); "" elsewhere.
R loads_given(const Experiment& e) {
  if (e.workload.source == WorkloadSource::load_profile) return with_source(e) + " (recorded loads: nothing is routed)";
  if (e.workload.source == WorkloadSource::load_distribution)
    return with_source(e) + " (drawn loads: nothing is routed)";
  return kActs;
}
R no_router(const Experiment& e, const EffectContext& c) {
  if (const R r = loads_given(e); !r.empty()) return r;
  if (c.replays_recorded) return with_source(e) + " without logits (its recorded routing is replayed)";
  return kActs;
}
// The capacity step runs on routed batches and on a replayed trace's recorded assignments alike.
R no_capacity_step(const Experiment& e) { return loads_given(e); }

// Token choice with a capacity: the drop step of router/capacity.hpp runs.
bool token_choice_drops(const Experiment& e) {
  return e.router.gating != Gating::expert_choice && e.router.capacity_factor > 0;
}
R no_drops(const Experiment& e) {
  if (e.router.gating == Gating::expert_choice) return "with router.gating=expert_choice (it drops nothing)";
  return "with router.capacity_factor=0 (dropless)";
}

// Where the routing weights (not only the chosen experts) reach a result: the executed layer's combine, the
// decoder's next hidden states, the dumped routing, or a drop order by weight (apply_capacity, score).
bool weights_matter(const Experiment& e, const EffectContext& c) {
  if (c.dumps_routing) return true;
  if (e.workload.source == WorkloadSource::decoder) return true;
  const bool executed = c.executes && e.execute.enabled && !routing_only(c) &&
                        source_in(e, {WorkloadSource::synthetic, WorkloadSource::logits});
  return executed || (token_choice_drops(e) && e.router.drop_policy == DropPolicy::score);
}
R weights_unused(const Experiment& e, const EffectContext& c) {
  if (routing_only(c)) return "in moesim route (it reports counts, not weights)";
  return "on this run's results (the routing weights reach only the executed layer, the decoder, a dumped routing "
         "or drop_policy score; here: " +
         std::string(c.executes && e.execute.enabled ? "" : "not executed, ") + "workload.source=" +
         to_string(e.workload.source) + ")";
}

// The weight rule of gating_common.hpp (gate_weight_rule) is read by token_choice and sinkhorn; noisy_top_k
// writes softmax weights of its own; group_limited and aux_free_bias read group_limited_params.
bool reads_weight_rule(const Experiment& e) { return gating_in(e, {Gating::token_choice, Gating::sinkhorn}); }
bool group_routing(const Experiment& e) { return gating_in(e, {Gating::group_limited, Gating::aux_free_bias}); }
bool scores_from_logits(const Experiment& e) {
  return !gating_in(e, {Gating::hash, Gating::random, Gating::balanced});
}

bool expert_parallel(const Experiment& e) { return e.placement.kind == PlacementKind::expert_parallel; }
R single_placement() { return "with placement.kind=single"; }
R not_executed(const Experiment& e, const EffectContext& c) {
  if (routing_only(c)) return kRouteOnly;
  if (!source_in(e, {WorkloadSource::synthetic, WorkloadSource::logits, WorkloadSource::decoder}))
    return with_source(e) + " (nothing is executed)";
  if (!c.executes) return "without the executed layer (--no-execute, or a command that only models)";
  if (!e.execute.enabled) return "with execute.enabled=false";
  return kActs;
}

// ---- the rules, one per key ----------------------------------------------------------------------
R always(const Experiment&, const EffectContext&) { return kActs; }
R cost_model(const Experiment&, const EffectContext& c) { return routing_only(c) ? kRouteOnly : kActs; }
R model_size(const Experiment& e, const EffectContext& c) { return validating(c) ? kValidate : cost_model(e, c); }

R model_vocab(const Experiment& e, const EffectContext& c) {
  // The decoder's embeddings; hash gating's synthetic token ids (src/workload/logits_batches.cpp).
  if (e.workload.source == WorkloadSource::decoder) return kActs;
  if (e.router.gating == Gating::hash && source_in(e, {WorkloadSource::synthetic, WorkloadSource::logits}) &&
      !routing_only(c))
    return kActs;
  return std::string("with workload.source=") + to_string(e.workload.source) + " and " +
         with_gating(e).substr(5) + " (token ids come from the decoder, or feed hash gating)";
}
R model_attention(const Experiment& e, const EffectContext& c) {
  // Attention and the KV cache are costed per decode step (src/pipeline/run_steps.cpp).
  if (routing_only(c)) return kRouteOnly;
  if (e.workload.source == WorkloadSource::decoder) return kActs;
  return with_source(e) + " (attention is modeled for the decoder only)";
}

// Step runs (decoder, trace, load profile) total their phases over model.layers (run_steps.cpp), and sweep
// rows scale a layer to the model (run_sweep.cpp); a batch run reports one MoE layer.
R model_layers(const Experiment& e, const EffectContext& c) {
  if (routing_only(c)) return kRouteOnly;
  if (c.command == "sweep" || !source_in(e, {WorkloadSource::synthetic, WorkloadSource::logits})) return kActs;
  return with_source(e) + " (one MoE layer is reported; whole-model times come from decoder, trace and "
                          "load_profile runs, and from moesim sweep)";
}

R router_gating(const Experiment& e, const EffectContext& c) { return no_router(e, c); }
R router_capacity_factor(const Experiment& e, const EffectContext&) { return no_capacity_step(e); }
R router_score(const Experiment& e, const EffectContext& c) {
  if (const R r = no_router(e, c); !r.empty()) return r;
  if (!scores_from_logits(e) || e.router.gating == Gating::noisy_top_k) return with_gating(e);
  if (reads_weight_rule(e) && !weights_matter(e, c)) return weights_unused(e, c);
  return kActs;
}
R router_renormalize(const Experiment& e, const EffectContext& c) {
  if (const R r = no_router(e, c); !r.empty()) return r;
  if (!reads_weight_rule(e) && !group_routing(e)) return with_gating(e);
  if (reads_weight_rule(e) && e.router.score == ScoreFunction::softmax && !e.router.pre_softmax)
    return "with router.pre_softmax=false (the softmax over the k chosen already sums to 1)";
  if (!weights_matter(e, c)) return weights_unused(e, c);
  return kActs;
}
R router_pre_softmax(const Experiment& e, const EffectContext& c) {
  if (const R r = no_router(e, c); !r.empty()) return r;
  if (!reads_weight_rule(e)) return with_gating(e);
  if (e.router.score == ScoreFunction::sigmoid) return "with router.score=sigmoid (elementwise)";
  if (!weights_matter(e, c)) return weights_unused(e, c);
  return kActs;
}
R router_routed_scaling(const Experiment& e, const EffectContext& c) {
  if (const R r = no_router(e, c); !r.empty()) return r;
  if (!weights_matter(e, c)) return weights_unused(e, c);
  return kActs;
}
R router_min_capacity(const Experiment& e, const EffectContext&) {
  if (const R r = no_capacity_step(e); !r.empty()) return r;
  if (e.router.gating != Gating::expert_choice && e.router.capacity_factor <= 0) return no_drops(e);
  return kActs;
}
R router_drops(const Experiment& e, const EffectContext&) {
  if (const R r = no_capacity_step(e); !r.empty()) return r;
  if (!token_choice_drops(e)) return no_drops(e);
  return kActs;
}
R router_renormalize_after_drop(const Experiment& e, const EffectContext& c) {
  const R r = router_drops(e, c);
  if (!r.empty()) return r;
  if (!weights_matter(e, c)) return weights_unused(e, c);
  return kActs;
}
R router_capacity_scope(const Experiment& e, const EffectContext&) {
  if (const R r = no_capacity_step(e); !r.empty()) return r;
  if (e.router.gating != Gating::expert_choice && e.router.capacity_factor <= 0) return no_drops(e);
  if (e.workload.source != WorkloadSource::decoder) return with_source(e) + " (its batches have no sequences)";
  return kActs;
}
R router_block_size(const Experiment& e, const EffectContext&) {
  if (e.router.layout != Layout::block) return std::string("with router.layout=") + to_string(e.router.layout);
  return kActs;
}
R router_noise_std(const Experiment& e, const EffectContext& c) {
  if (const R r = no_router(e, c); !r.empty()) return r;
  return e.router.gating == Gating::noisy_top_k ? kActs : with_gating(e);
}
R router_sinkhorn(const Experiment& e, const EffectContext& c) {
  if (const R r = no_router(e, c); !r.empty()) return r;
  return e.router.gating == Gating::sinkhorn ? kActs : with_gating(e);
}
R router_groups(const Experiment& e, const EffectContext& c) {
  // router.groups also shapes the hierarchical placement when placement.groups is 0.
  if (expert_parallel(e) && e.placement.policy == PlacementPolicy::hierarchical && e.placement.groups == 0 &&
      !routing_only(c))
    return kActs;
  if (const R r = no_router(e, c); !r.empty()) return r;
  return group_routing(e) ? kActs : with_gating(e);
}
R router_topk_groups(const Experiment& e, const EffectContext& c) {
  if (const R r = no_router(e, c); !r.empty()) return r;
  return group_routing(e) ? kActs : with_gating(e);
}
// The fill of masked groups' scores (group_limited.hpp) competes with the kept groups' scores, which are
// softmax or sigmoid values >= 0 under group_limited: a masked 0 never beats them. Only aux_free_bias's
// bias can push a kept score below 0.
R router_group_mask_fill(const Experiment& e, const EffectContext& c) {
  if (const R r = no_router(e, c); !r.empty()) return r;
  if (e.router.gating == Gating::group_limited)
    return "with router.gating=group_limited (scores are >= 0: a masked group never wins, filled with 0 or -inf)";
  if (!group_routing(e)) return with_gating(e);
  if (e.router.topk_groups >= e.router.groups) return "with router.topk_groups = router.groups (no group is masked)";
  return kActs;
}
R router_bias(const Experiment& e, const EffectContext& c) {
  if (const R r = no_router(e, c); !r.empty()) return r;
  return e.router.gating == Gating::aux_free_bias ? kActs : with_gating(e);
}
R router_bias_counts(const Experiment& e, const EffectContext& c) {
  const R r = router_bias(e, c);
  if (!r.empty()) return r;
  if (e.router.capacity_factor <= 0) return "with router.capacity_factor=0 (nothing is dropped: kept = demand)";
  return kActs;
}

R workload_batch(const Experiment& e, const EffectContext& c) {
  if (routing_only(c)) return "in moesim route (the logits file sets the tokens)";
  if (validating(c)) return "in moesim validate (--batches sets them)";
  if (source_in(e, {WorkloadSource::logits, WorkloadSource::trace}))
    return with_source(e) + " (the file sets the tokens)";
  return kActs;
}
R workload_batches(const Experiment& e, const EffectContext& c) {
  if (routing_only(c)) return kRouteOnly;
  return source_in(e, {WorkloadSource::synthetic, WorkloadSource::load_distribution})
             ? kActs
             : with_source(e) + " (synthetic batches and drawn loads only)";
}
R decoder_only(const Experiment& e, const EffectContext& c) {
  if (routing_only(c)) return kRouteOnly;
  return e.workload.source == WorkloadSource::decoder ? kActs : with_source(e) + " (the decoder's key)";
}
R workload_seed(const Experiment& e, const EffectContext& c) {
  if (e.workload.source == WorkloadSource::load_profile && !routing_only(c))
    return with_source(e) + " (recorded loads, nothing drawn)";
  if (e.workload.source == WorkloadSource::load_distribution && e.workload.distribution == LoadDistribution::balanced &&
      !routing_only(c))
    return with_source(e) + " and workload.distribution=balanced (its round-robin draws nothing)";
  return kActs;
}
R workload_distribution(const Experiment& e, const EffectContext& c) {
  if (routing_only(c)) return kRouteOnly;
  return e.workload.source == WorkloadSource::load_distribution ? kActs : with_source(e) + " (no loads are drawn)";
}
R workload_power_law_alpha(const Experiment& e, const EffectContext& c) {
  if (const R r = workload_distribution(e, c); !r.empty()) return r;
  return e.workload.distribution == LoadDistribution::power_law
             ? kActs
             : std::string("with workload.distribution=") + to_string(e.workload.distribution);
}
R workload_skew(const Experiment& e, const EffectContext& c) {
  if (routing_only(c)) return "in moesim route (the logits file is routed as it is)";
  return source_in(e, {WorkloadSource::synthetic, WorkloadSource::decoder})
             ? kActs
             : with_source(e) + " (it shapes synthetic and decoder logits only)";
}
R workload_group_skew(const Experiment& e, const EffectContext& c) {
  const R r = workload_skew(e, c);
  if (!r.empty()) return r;
  return e.router.groups > 1 && e.model.experts % e.router.groups == 0
             ? kActs
             : "with router.groups=" + std::to_string(e.router.groups) + " (one group: a shared bias moves no expert)";
}
R workload_drift(const Experiment& e, const EffectContext& c) {
  if (routing_only(c)) return "in moesim route (the logits file is routed as it is)";
  return source_in(e, {WorkloadSource::synthetic}) ? kActs
                                                    : with_source(e) + " (it turns synthetic batches' popularity only)";
}
R workload_path(const Experiment& e, const EffectContext& c) {
  if (routing_only(c)) return "in moesim route (--logits names the file)";
  return source_in(e, {WorkloadSource::trace, WorkloadSource::load_profile, WorkloadSource::logits})
             ? kActs
             : with_source(e) + " (no file is read)";
}
R workload_profile_key(const Experiment& e, const EffectContext& c) {
  if (routing_only(c)) return kRouteOnly;
  if (e.workload.source == WorkloadSource::load_profile &&
      (e.workload.format == LoadFormat::megatron_npz || e.workload.format == LoadFormat::megatron_router_trace))
    return std::string("with workload.format=") + to_string(e.workload.format) + " (a Megatron file holds one profile)";
  return e.workload.source == WorkloadSource::load_profile ? kActs : with_source(e);
}

R workload_format(const Experiment& e, const EffectContext& c) {
  if (routing_only(c)) return kRouteOnly;
  return e.workload.source == WorkloadSource::load_profile ? kActs : with_source(e) + " (no load profile is read)";
}

R placement_ep(const Experiment& e, const EffectContext& c) {
  if (routing_only(c)) return kRouteOnly;
  if (validating(c)) return kValidate;
  return expert_parallel(e) ? kActs : single_placement();
}
R placement_request_balance(const Experiment& e, const EffectContext& c) {
  const R r = placement_ep(e, c);
  if (!r.empty()) return r;
  return e.workload.source == WorkloadSource::decoder ? kActs
                                                      : with_source(e) + " (the decoder's sequences spread over the devices)";
}
R placement_hierarchical(const Experiment& e, const EffectContext& c) {
  const R r = placement_ep(e, c);
  if (!r.empty()) return r;
  return e.placement.policy == PlacementPolicy::hierarchical ? kActs
                                                               : std::string("with placement.policy=") +
                                                                     to_string(e.placement.policy);
}
R placement_spread(const Experiment& e, const EffectContext& c) {
  const R r = placement_ep(e, c);
  if (!r.empty()) return r;
  return e.placement.replicas > 0 ? kActs : "with placement.replicas=0 (one slot per expert)";
}
R placement_eplb(const Experiment& e, const EffectContext& c) {
  const R r = placement_ep(e, c);
  if (!r.empty()) return r;
  return plans_from_loads(e.placement) ? kActs
                                       : std::string("with placement.policy=") + to_string(e.placement.policy) +
                                             " and no replicas (a static plan: no loads are read)";
}
R placement_warmup(const Experiment& e, const EffectContext& c) {
  const R r = placement_eplb(e, c);
  if (!r.empty()) return r;
  if (e.placement.plan_from != PlanFrom::past)
    return std::string("with placement.plan_from=") + to_string(e.placement.plan_from);
  return source_in(e, {WorkloadSource::synthetic, WorkloadSource::load_distribution})
             ? kActs
             : with_source(e) + " (only synthetic and load_distribution workloads draw warm-up batches)";
}
R placement_estimator(const Experiment& e, const EffectContext& c) {
  const R r = placement_eplb(e, c);
  if (!r.empty()) return r;
  return e.placement.rebalance_every > 0 ? kActs : "with placement.rebalance_every=0 (planned once)";
}
R placement_ema(const Experiment& e, const EffectContext& c) {
  const R r = placement_estimator(e, c);
  if (!r.empty()) return r;
  return e.placement.load_estimator == LoadEstimator::ema ? kActs : "with placement.load_estimator=window";
}

R execute_enabled(const Experiment& e, const EffectContext& c) {
  if (routing_only(c)) return kRouteOnly;
  if (!source_in(e, {WorkloadSource::synthetic, WorkloadSource::logits, WorkloadSource::decoder}))
    return with_source(e) + " (nothing is executed)";
  if (!c.executes) return "without the executed layer (--no-execute, or a command that only models)";
  return kActs;
}
// The CPU experts compute in fp32 whatever execute.dtype says (run_layer.cpp time_layer); the CUDA ones
// run their GEMMs in it.
R execute_dtype(const Experiment& e, const EffectContext& c) {
  const R r = not_executed(e, c);
  if (!r.empty()) return r;
  return c.cuda ? kActs : "on the CPU backend (its experts compute in fp32; --backend cuda uses it)";
}
// The decoder always runs, at the execute: size, because its hidden states make the routing
// (src/pipeline/run_steps.cpp run_decoder): --no-execute and execute.enabled false only leave its measured
// times out. So its shape keys act in every decoder run but moesim route.
R executed_shape(const Experiment& e, const EffectContext& c) {
  if (e.workload.source == WorkloadSource::decoder && !routing_only(c)) return kActs;
  return not_executed(e, c);
}
// The decoder runs execute.layers layers (src/decoder/decoder.cpp); a batch workload executes one MoE layer.
R execute_layers(const Experiment& e, const EffectContext& c) {
  const R r = executed_shape(e, c);
  if (!r.empty()) return r;
  return e.workload.source == WorkloadSource::decoder ? kActs : with_source(e) + " (one MoE layer is executed)";
}

R expect_rule(const Experiment&, const EffectContext& c) {
  return c.command == "check" ? kActs : "in moesim " + c.command + " (moesim check evaluates it)";
}

}  // namespace

std::string router_semantics(const Experiment& e, const EffectContext& ctx);
std::string model_hf_config(const Experiment& e, const EffectContext& ctx);
// The training step's keys (train_key_effects.cpp).
std::string train_only(const Experiment& e, const EffectContext& ctx);
std::string train_mla(const Experiment& e, const EffectContext& ctx);
std::string train_dense_ffn(const Experiment& e, const EffectContext& ctx);
std::string train_ep_keys(const Experiment& e, const EffectContext& ctx);
std::string train_tp_overlap(const Experiment& e, const EffectContext& ctx);
std::string train_dp_overlap(const Experiment& e, const EffectContext& ctx);

const std::vector<KeyEffect>& key_effects() {
  static const std::vector<KeyEffect> table = {
      {"name", "always (the experiment's label in every report)", always},
      {"model.name", "always (the model's label in reports)", always},
      {"model.hidden", "always, but in moesim route and validate (the cost model's layer size)", model_size},
      {"model.ffn", "always, but in moesim route and validate (the cost model's layer size)", model_size},
      {"model.experts", "always", always},
      {"model.top_k", "always", always},
      {"model.shared_experts", "always, but in moesim route (cost model, executed layer)", cost_model},
      {"model.layers", "whole-model times: sources decoder, trace, load_profile, load_distribution; moesim sweep",
       model_layers},
      {"model.moe_layers", "whole-model times: sources decoder, trace, load_profile, load_distribution; moesim sweep",
       model_layers},
      {"model.heads", "workload.source decoder (attention cost)", model_attention},
      {"model.kv_heads", "workload.source decoder (attention and KV-cache cost)", model_attention},
      {"model.head_dim", "workload.source decoder (attention and KV-cache cost)", model_attention},
      {"model.vocab", "workload.source decoder; hash gating on synthetic or logits batches (token ids)", model_vocab},
      {"model.dtype", "always, but in moesim route and validate (bytes per weight in the cost model)", model_size},
      {"model.weight_dtype", "always, but in moesim route and validate (bytes per weight, the weight-only kernel's rates)",
       model_size},
      {"model.gated_experts", "always, but in moesim route and validate (the experts' matrices in the cost model)",
       model_size},
      {"model.dense_ffn", "moesim train and moesim step, with dense layers (model.moe_layers < model.layers)", train_dense_ffn},
      {"model.mtp_layers", "moesim train (multi-token-prediction layers on the last stage)", train_only},
      {"model.attention", "moesim train and moesim step (the attention's projections and FLOPs)", train_only},
      {"model.q_lora_rank", "moesim train and moesim step, attention mla", train_mla},
      {"model.kv_lora_rank", "moesim train and moesim step, attention mla", train_mla},
      {"model.qk_rope_head_dim", "moesim train and moesim step, attention mla", train_mla},
      {"model.v_head_dim", "moesim train and moesim step, attention mla", train_mla},
      {"model.hf_config", "when a key it changes (one not given in the file or by --set) acts", model_hf_config},
      {"router.gating", "whenever a router runs (not load_profile or load_distribution, not a trace without logits)",
       router_gating},
      {"router.semantics", "when a key it presets, left to it, changes and acts", router_semantics},
      {"router.score",
       "group_limited, aux_free_bias, expert_choice, sinkhorn (selection); token_choice where weights matter "
       "(executed layer, decoder, dumped routing, drop_policy score)",
       router_score},
      {"router.renormalize",
       "token_choice, sinkhorn, group_limited, aux_free_bias where weights matter; not with pre_softmax false",
       router_renormalize},
      {"router.pre_softmax", "token_choice and sinkhorn with score softmax, where weights matter", router_pre_softmax},
      {"router.capacity_factor", "whenever a router runs or a trace replays (expert_choice: the tokens each expert takes)",
       router_capacity_factor},
      {"router.min_capacity", "capacity_factor > 0, or expert_choice", router_min_capacity},
      {"router.drop_policy", "capacity_factor > 0, not expert_choice", router_drops},
      {"router.priority", "capacity_factor > 0, not expert_choice", router_drops},
      {"router.capacity_scope", "capacity_factor > 0 (or expert_choice) on the decoder workload", router_capacity_scope},
      {"router.renormalize_after_drop", "capacity_factor > 0, not expert_choice, where weights matter",
       router_renormalize_after_drop},
      {"router.layout", "always (padding in the metrics, the cost model and the executed layer)", always},
      {"router.block_size", "layout block", router_block_size},
      {"router.noise_std", "gating noisy_top_k", router_noise_std},
      {"router.sinkhorn_iterations", "gating sinkhorn", router_sinkhorn},
      {"router.sinkhorn_tolerance", "gating sinkhorn", router_sinkhorn},
      {"router.groups", "gating group_limited or aux_free_bias; placement.policy hierarchical with placement.groups 0",
       router_groups},
      {"router.topk_groups", "gating group_limited or aux_free_bias", router_topk_groups},
      {"router.group_mask_fill", "gating aux_free_bias with topk_groups < groups (its bias can make a kept score < 0)",
       router_group_mask_fill},
      {"router.bias_update_rate", "gating aux_free_bias", router_bias},
      {"router.bias_update_counts", "gating aux_free_bias with capacity_factor > 0", router_bias_counts},
      {"router.bias_update_arithmetic", "gating aux_free_bias", router_bias},
      {"router.capacity_rounding", "capacity_factor > 0, or expert_choice", router_min_capacity},
      {"router.routed_scaling_factor", "where weights matter (executed layer, decoder, dumped routing, drop_policy score)",
       router_routed_scaling},
      {"workload.source", "always", always},
      {"workload.batch",
       "sources synthetic, decoder (sequences), load_profile (the batch costed), load_distribution (tokens a draw)",
       workload_batch},
      {"workload.batches", "sources synthetic, load_distribution (the draws)", workload_batches},
      {"workload.prompt_len", "source decoder", decoder_only},
      {"workload.prompt_len_range", "source decoder", decoder_only},
      {"workload.decode_steps", "source decoder", decoder_only},
      {"workload.seed", "always, but with source load_profile or a balanced load_distribution", workload_seed},
      {"workload.skew", "sources synthetic and decoder", workload_skew},
      {"workload.popularity", "sources synthetic and decoder", workload_skew},
      {"workload.group_skew", "sources synthetic and decoder, router.groups > 1", workload_group_skew},
      {"workload.drift", "source synthetic", workload_drift},
      {"workload.batch_variation", "source synthetic", workload_drift},
      {"workload.topics", "source decoder", decoder_only},
      {"workload.path", "sources trace, load_profile and logits", workload_path},
      {"workload.profile_key", "source load_profile", workload_profile_key},
      {"workload.format", "source load_profile (the report names the format and how it was chosen)", workload_format},
      {"workload.expert_map", "source load_profile (folds physical expert counts into logical experts)",
       workload_format},
      {"workload.distribution", "source load_distribution", workload_distribution},
      {"workload.power_law_alpha", "source load_distribution, distribution power_law", workload_power_law_alpha},
      {"hardware", "always, but in moesim route", cost_model},
      {"placement.kind", "always, but in moesim route and validate", model_size},
      {"placement.policy", "kind expert_parallel (not in moesim validate)", placement_ep},
      {"placement.devices", "kind expert_parallel", placement_ep},
      {"placement.tensor_parallel", "always, but in moesim route and validate", model_size},
      {"placement.replicas", "kind expert_parallel", placement_ep},
      {"placement.nodes", "kind expert_parallel (the node of each device in the plan; hierarchical packing)",
       placement_ep},
      {"placement.groups", "kind expert_parallel, policy hierarchical", placement_hierarchical},
      {"placement.map", "kind expert_parallel, policy map", placement_ep},
      {"placement.spread_replicas", "kind expert_parallel with replicas > 0", placement_spread},
      {"placement.plan_from", "kind expert_parallel with an EPLB policy (global, hierarchical; auto with replicas)",
       placement_eplb},
      {"placement.plan_profile", "kind expert_parallel, an EPLB policy, plan_from profile", placement_eplb},
      {"placement.warmup_batches", "an EPLB policy, plan_from past, sources synthetic and load_distribution",
       placement_warmup},
      {"placement.rebalance_every", "kind expert_parallel with an EPLB policy", placement_eplb},
      {"placement.load_estimator", "kind expert_parallel with rebalance_every > 0", placement_estimator},
      {"placement.ema_weight", "kind expert_parallel, rebalance_every > 0, load_estimator ema", placement_ema},
      {"placement.a2a_kernel", "kind expert_parallel (the all-to-all's copies and fitted figures)", placement_ep},
      {"placement.dispatch_dtype", "kind expert_parallel (the bytes of a dispatched copy)", placement_ep},
      {"placement.combine_dtype", "kind expert_parallel (the bytes of a combined copy)", placement_ep},
      {"placement.overlap", "kind expert_parallel (two micro-batches, the all-to-all under the compute)", placement_ep},
      {"placement.request_balance", "kind expert_parallel, source decoder (its sequences over the devices' attention)",
       placement_request_balance},
      {"placement.attention_tp", "kind expert_parallel, source decoder (the attention ranks' GPUs); moesim step and serve",
       placement_request_balance},
      {"execute.enabled", "sources synthetic, logits, decoder, unless --no-execute", execute_enabled},
      {"execute.hidden", "the executed layer runs (sources synthetic, logits); the decoder, always (its width)",
       executed_shape},
      {"execute.ffn", "the executed layer runs (sources synthetic, logits); the decoder, always (its experts' width)",
       executed_shape},
      {"execute.layers", "the decoder runs (its executed layers), with or without --no-execute", execute_layers},
      {"execute.repeats", "the executed layer runs (sources synthetic, logits, decoder)", not_executed},
      {"execute.dtype", "the executed layer runs on CUDA (--backend cuda or auto with a device)", execute_dtype},
      {"train.gpus", "moesim train", train_only},
      {"train.tp", "moesim train", train_only},
      {"train.pp", "moesim train", train_only},
      {"train.vpp", "moesim train (interleaved 1F1B; more than 1 needs pp > 1)", train_only},
      {"train.ep", "moesim train", train_only},
      {"train.etp", "moesim train", train_only},
      {"train.cp", "moesim train", train_only},
      {"train.seq_len", "moesim train", train_only},
      {"train.global_batch", "moesim train", train_only},
      {"train.micro_batch", "moesim train", train_only},
      {"train.precision", "moesim train", train_only},
      {"train.recompute", "moesim train", train_only},
      {"train.dispatcher", "moesim train, ep > 1", train_ep_keys},
      {"train.routing", "moesim train", train_only},
      {"train.ep_overlap", "moesim train, ep > 1", train_ep_keys},
      {"train.tp_comm_overlap", "moesim train, tp > 1", train_tp_overlap},
      {"train.dp_overlap", "moesim train, gpus > tp x pp x cp", train_dp_overlap},
      {"train.routed_micro_batches", "moesim train (the routing's and the forced-balance reference's micro-batches)",
       train_only},
      {"expect", "moesim check", expect_rule},
  };
  return table;
}

std::vector<std::string> schema_key_paths() {
  std::vector<std::string> out = {"name"};
  for (const config_detail::Section& s : config_detail::sections()) {
    for (const config_detail::Field& f : s.fields) out.push_back(s.key + "." + f.key);
    if (s.key == "workload") out.push_back("hardware");
  }
  out.push_back("expect");
  return out;
}

namespace {

// The value of one key as `moesim config` writes it.
std::string emitted_value(const Experiment& e, const std::string& path) {
  YAML::Emitter out;
  if (path == "name") {
    out << e.name;
  } else if (path == "hardware") {
    out << e.hardware.name << e.hardware.inline_yaml;
  } else if (path == "expect") {
    out << e.expect.size();
  } else if (path == "workload.prompt_len_range") {
    out << (e.workload.prompt_len_range ? "true" : "false");
  } else {
    const size_t dot = path.find('.');
    const config_detail::Section* s = config_detail::find_section(path.substr(0, dot));
    const config_detail::Field* f = s ? s->find(path.substr(dot + 1)) : nullptr;
    if (f && f->emit) f->emit(out, e);
  }
  return out.c_str();
}

// A key's rule under the command at hand: `moesim train` reads keys its own way (train_key_effects.cpp).
std::string rule_of(const KeyEffect& k, const Experiment& e, const EffectContext& ctx) {
  return ctx.command == "train" ? train_key_inert(k, e, ctx) : k.inert(e, ctx);
}

const KeyEffect* find_effect(const std::string& key) {
  for (const KeyEffect& k : key_effects())
    if (key == k.key) return &k;
  return nullptr;
}

// The keys a compound key (model.hf_config, router.semantics) changed in e: every key whose value differs from
// the same experiment loaded without it (Experiment::without_key), but the key itself and the labels; empty
// optional when that load is not known (the key is not given, or the experiment needs it to load).
std::optional<std::vector<std::string>> changed_by(const Experiment& e, const std::string& key) {
  const auto it = e.without_key.find(key);
  if (it == e.without_key.end() || !it->second) return std::nullopt;
  const std::vector<std::string> paths = schema_key_paths();
  const std::vector<std::string> now = experiment_key_values(e), without = experiment_key_values(*it->second);
  std::vector<std::string> changed;
  for (size_t i = 0; i < paths.size(); ++i)
    if (now[i] != without[i] && paths[i] != key && paths[i] != "name" && paths[i] != "model.name")
      changed.push_back(paths[i]);
  return changed;
}

// A compound key acts where one of the keys it changed acts. Where the load without it is not known, it is
// taken to act: a line that says "no effect" must be true.
R compound(const Experiment& e, const EffectContext& ctx, const std::string& key, const char* verb) {
  const std::optional<std::vector<std::string>> changed = changed_by(e, key);
  if (!changed) return kActs;
  for (const std::string& k : *changed) {
    const KeyEffect* ke = find_effect(k);
    if (!ke || rule_of(*ke, e, ctx).empty()) return kActs;
  }
  if (changed->empty())
    return std::string("(every key it ") + verb + " has the value it has without it: given by the file or a --set, or the same)";
  return std::string("(the keys it ") + verb + ", " + config_detail::join(*changed, ", ") + ", have none here)";
}

}  // namespace

// model.hf_config acts through the keys it changed (changed_by: the load with and without it), one acting is enough.
R model_hf_config(const Experiment& e, const EffectContext& ctx) { return compound(e, ctx, "model.hf_config", "fills"); }

// router.semantics acts through the keys it presets to another value than they have without it.
R router_semantics(const Experiment& e, const EffectContext& ctx) {
  return compound(e, ctx, "router.semantics", "presets");
}

std::vector<std::string> experiment_key_values(const Experiment& e) {
  std::vector<std::string> out;
  for (const std::string& k : schema_key_paths()) out.push_back(emitted_value(e, k));
  return out;
}

std::vector<std::string> user_set_keys(const Experiment& e) {
  // A --set or --vary sets a key on purpose. A file's key counts where it differs from the default under
  // e's own semantics preset (what `moesim config` prints for an untouched key); router.semantics itself
  // against exact.
  const Experiment plain;
  Experiment d;
  d.router.semantics = e.router.semantics;
  apply_semantics_preset(d.router, e.model.top_k, {});
  std::vector<std::string> out;
  for (const std::string& k : e.given_keys) {
    const bool by_set = std::find(e.set_keys.begin(), e.set_keys.end(), k) != e.set_keys.end();
    if (by_set || emitted_value(e, k) != emitted_value(k == "router.semantics" ? plain : d, k)) out.push_back(k);
  }
  return out;
}

bool is_model_description_key(const std::string& key) {
  static const char* const kDescription[] = {"model.layers",      "model.moe_layers",   "model.heads",
                                             "model.kv_heads",    "model.head_dim",     "model.vocab",
                                             "model.dense_ffn",   "model.mtp_layers",   "model.attention",
                                             "model.q_lora_rank", "model.kv_lora_rank", "model.qk_rope_head_dim",
                                             "model.v_head_dim"};
  return std::any_of(std::begin(kDescription), std::end(kDescription), [&](const char* k) { return key == k; });
}

namespace {

// Whether `key` acts in some row under `ctx`; the first row's reason otherwise.
std::string inert_in_rows(const std::string& key, const std::vector<Experiment>& rows, const EffectContext& ctx) {
  const KeyEffect* ke = find_effect(key);
  if (!ke) return kActs;
  std::string first;
  for (size_t i = 0; i < rows.size(); ++i) {
    const std::string why = rule_of(*ke, rows[i], ctx);
    if (why.empty()) return kActs;
    if (i == 0) first = why;
  }
  return first;
}

// The rows with every gating in turn: a file's router parameters of one strategy (noise_std, sinkhorn_*,
// groups, bias_update_*, ...) are its settings for that strategy whenever it runs (compare --gating all).
std::vector<Experiment> every_gating(const std::vector<Experiment>& rows) {
  std::vector<Experiment> out;
  for (const Experiment& row : rows) {
    for (Gating g : all_gatings()) {
      out.push_back(row);
      out.back().router.gating = g;
    }
  }
  return out;
}

}  // namespace

std::vector<InertKey> inert_user_keys(const std::vector<Experiment>& rows, const EffectContext& ctx) {
  std::vector<InertKey> out;
  if (rows.empty()) return out;
  std::vector<std::string> keys;
  std::vector<bool> by_set;
  for (const Experiment& row : rows) {
    for (const std::string& k : user_set_keys(row)) {
      const bool set = std::find(row.set_keys.begin(), row.set_keys.end(), k) != row.set_keys.end();
      const auto at = std::find(keys.begin(), keys.end(), k);
      if (at == keys.end()) {
        keys.push_back(k);
        by_set.push_back(set);
      } else if (set) {
        by_set[static_cast<size_t>(at - keys.begin())] = true;
      }
    }
  }
  // A key an experiment file gives (no --set or --vary) is one of the file's settings, which many runs
  // share: it is named only when no run of that file could use it. So it is judged as if the run executed
  // and were `moesim run` (a --no-execute, a modeling-only command or `route` is the command's choice, not
  // the file's mistake), a router key under every gating, and the file's model description and expect:
  // block not at all. A --set or --vary key is judged by this run as it is.
  // The file's own runs: the file as written (a --set that moves another key, such as workload.source, does
  // not make the file's keys wrong), under `moesim run` with the executed layer.
  const Experiment& own = rows.front().as_written ? *rows.front().as_written : rows.front();
  const std::vector<Experiment> own_rows = {own};
  EffectContext file_ctx = ctx;
  file_ctx.command = "run";
  file_ctx.executes = true;
  file_ctx.cuda = true;
  file_ctx.dumps_routing = false;
  if (own.workload.source != rows.front().workload.source) file_ctx.replays_recorded = false;
  std::vector<Experiment> all_gatings_rows;
  for (size_t i = 0; i < keys.size(); ++i) {
    const std::string& key = keys[i];
    if (by_set[i]) {
      const std::string why = inert_in_rows(key, rows, ctx);
      if (!why.empty()) out.push_back({key, why});
      continue;
    }
    // A file's train: section is its settings for `moesim train`, which any run of the file may be.
    if (is_model_description_key(key) || key == "expect" || key.rfind("train.", 0) == 0) continue;
    std::string why = inert_in_rows(key, own_rows, file_ctx);
    if (!why.empty() && key.rfind("router.", 0) == 0 && key != "router.gating") {
      if (all_gatings_rows.empty()) all_gatings_rows = every_gating(own_rows);
      if (inert_in_rows(key, all_gatings_rows, file_ctx).empty()) why.clear();
    }
    if (!why.empty()) out.push_back({key, why});
  }
  return out;
}

std::string inert_key_message(const InertKey& k) { return "moesim: " + k.key + " has no effect " + k.reason; }

std::string explain_key_effects(bool markdown) {
  std::ostringstream os;
  if (markdown) {
    os << "| key | acts when |\n| :--- | :--- |\n";
    for (const KeyEffect& k : key_effects()) os << "| `" << k.key << "` | " << k.acts_when << " |\n";
    return os.str();
  }
  size_t width = 0;
  for (const KeyEffect& k : key_effects()) width = std::max(width, std::string(k.key).size());
  os << "key" << std::string(width - 1, ' ') << "acts when\n";
  for (const KeyEffect& k : key_effects())
    os << k.key << std::string(width + 2 - std::string(k.key).size(), ' ') << k.acts_when << "\n";
  return os.str();
}

}  // namespace moesim
