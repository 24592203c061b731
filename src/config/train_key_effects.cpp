// When each config key acts in `moesim train` (src/train, docs/training.md), and the rules of the keys only the
// training step reads (the train: section; model.dense_ffn, model.mtp_layers and the attention's form). The
// training step reads the model, the router when train.routing is model, the workload's routing sources, the
// hardware and the train: section; it never reads the placement: or execute: sections, the serving dtype keys or
// the workload's batch keys (train.* sets the tokens). Deterministic, host only.
// Covered by tests/config/key_effects_test.cpp (every key's effect on `moesim train`'s results).
#include <algorithm>
#include <string>

#include "src/config/key_effects.hpp"

namespace moesim {
namespace {

using R = std::string;
const R kActs;

bool training(const EffectContext& c) { return c.command == "train"; }
const char* kTrainOnly = "outside moesim train (only the training step reads it)";

bool key_in(const std::string& key, std::initializer_list<const char*> keys) {
  return std::any_of(keys.begin(), keys.end(), [&](const char* k) { return key == k; });
}
bool starts_with(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }
R with_routing(const Experiment& e) { return "with train.routing=" + to_string(e.train.routing); }

// The sources `moesim train` takes its loads from (src/train/train_routing.hpp): synthetic logits routed by the
// router, recorded load profiles, drawn load distributions. Others are refused there.
bool routes_logits(const Experiment& e) {
  return e.train.routing.kind == TrainRoutingKind::model && e.workload.source == WorkloadSource::synthetic;
}

}  // namespace

R train_only(const Experiment&, const EffectContext& c) { return training(c) ? kActs : kTrainOnly; }

R train_mla(const Experiment& e, const EffectContext& c) {
  if (!training(c)) return kTrainOnly;
  return e.model.attention == AttentionKind::mla ? kActs : "with model.attention=gqa";
}

R train_dense_ffn(const Experiment& e, const EffectContext& c) {
  if (!training(c)) return kTrainOnly;
  const int moe = e.model.moe_layers > 0 ? e.model.moe_layers : e.model.layers;
  return moe < e.model.layers ? kActs : "with every layer an MoE layer (model.moe_layers 0 or model.layers)";
}

R train_ep_keys(const Experiment& e, const EffectContext& c) {
  if (!training(c)) return kTrainOnly;
  return e.train.ep > 1 ? kActs : "with train.ep=1 (no all-to-all)";
}

R train_tp_overlap(const Experiment& e, const EffectContext& c) {
  if (!training(c)) return kTrainOnly;
  return e.train.tp > 1 ? kActs : "with train.tp=1 (no tensor-parallel communication)";
}

R train_dp_overlap(const Experiment& e, const EffectContext& c) {
  if (!training(c)) return kTrainOnly;
  const int64_t model_parallel = int64_t{e.train.tp} * e.train.pp * e.train.cp;
  return e.train.gpus > model_parallel ? kActs : "with train.gpus = tp x pp x cp (no data parallelism)";
}

std::string train_key_inert(const KeyEffect& k, const Experiment& e, const EffectContext& ctx) {
  const std::string key = k.key;
  if (starts_with(key, "train.") || key_in(key, {"model.dense_ffn", "model.mtp_layers", "model.attention",
                                                 "model.q_lora_rank", "model.kv_lora_rank", "model.qk_rope_head_dim",
                                                 "model.v_head_dim"}))
    return k.inert(e, ctx);
  if (key_in(key, {"name", "model.name", "model.hidden", "model.ffn", "model.experts", "model.top_k",
                   "model.shared_experts", "model.layers", "model.moe_layers", "model.heads", "model.kv_heads",
                   "model.head_dim", "model.vocab", "model.gated_experts", "hardware", "workload.source"}))
    return kActs;
  if (key_in(key, {"model.dtype", "model.weight_dtype"}))
    return "in moesim train (train.precision sets the format of its GEMMs)";
  if (key == "model.hf_config" || key == "router.semantics") return k.inert(e, ctx);  // through the keys they fill
  if (starts_with(key, "placement."))
    return "in moesim train (train.ep, train.tp and train.dispatcher set its layout and all-to-all)";
  if (starts_with(key, "execute.")) return "in moesim train (it models the step; nothing is executed)";
  if (key == "expect") return "in moesim train (moesim check evaluates it)";
  if (key_in(key, {"workload.batch", "workload.batches"}))
    return "in moesim train (train.seq_len and train.micro_batch set a micro-batch's tokens, "
           "train.routed_micro_batches the micro-batches routed)";
  // The capacity step: every routing of the step is capped by router.capacity_factor per source rank, and
  // laid out by router.layout; which assignments a full expert keeps never changes how many it keeps.
  if (key == "router.capacity_factor" && ctx.compares_capacity)
    return "in moesim train --compare (its rows set the capacity factor: --capacity-factors)";
  if (key_in(key, {"router.capacity_factor", "router.layout"})) return kActs;
  if (key_in(key, {"router.min_capacity", "router.capacity_rounding"}))
    return e.router.capacity_factor > 0 ? kActs : "with router.capacity_factor=0 (dropless)";
  if (key == "router.block_size")
    return e.router.layout == Layout::block ? kActs : std::string("with router.layout=") + to_string(e.router.layout);
  if (key_in(key, {"router.drop_policy", "router.priority", "router.renormalize_after_drop",
                   "router.routed_scaling_factor", "router.renormalize", "router.pre_softmax"}))
    return "in moesim train (it sets which assignments are kept or their weights, not how many each expert takes)";
  if (key == "router.capacity_scope")
    return "in moesim train (capacity is per source rank's tokens, as Megatron-Core drops them)";
  if (starts_with(key, "router.")) {
    if (!routes_logits(e)) {
      if (e.train.routing.kind != TrainRoutingKind::model)
        return with_routing(e) + " (no router runs on the model's logits)";
      return "with workload.source=" + std::string(to_string(e.workload.source)) + " (recorded or drawn loads)";
    }
    EffectContext run = ctx;  // the router's own rules, as a modeling run (no executed layer, no dump) reads them
    run.command = "run";
    run.executes = false;
    run.dumps_routing = false;
    run.replays_recorded = false;
    return k.inert(e, run);
  }
  if (key == "workload.seed") {
    if (e.train.routing.kind == TrainRoutingKind::rank_overload) return with_routing(e) + " (nothing is drawn)";
    if (e.train.routing.kind == TrainRoutingKind::model && e.workload.source == WorkloadSource::load_profile)
      return "with workload.source=load_profile (recorded loads, nothing drawn)";
    return kActs;
  }
  if (key == "workload.skew")
    return routes_logits(e) ? kActs : (e.train.routing.kind != TrainRoutingKind::model
                                           ? with_routing(e)
                                           : "with workload.source=" + std::string(to_string(e.workload.source)));
  if (key_in(key, {"workload.path", "workload.profile_key", "workload.format", "workload.expert_map",
                   "workload.distribution", "workload.power_law_alpha"})) {
    if (e.train.routing.kind != TrainRoutingKind::model) return with_routing(e) + " (the workload's loads are not read)";
    EffectContext run = ctx;
    run.command = "run";
    return k.inert(e, run);
  }
  // The decoder's keys: moesim train refuses the decoder workload.
  if (starts_with(key, "workload.")) return "in moesim train (a decoder workload's key)";
  return k.inert(e, ctx);
}

}  // namespace moesim
