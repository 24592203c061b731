// The router.semantics presets: for megatron, huggingface and deepseek, the value of every router key
// where the frameworks differ (score, pre_softmax, renormalize, renormalize_after_drop, drop_policy,
// priority, group_mask_fill, capacity_rounding, bias_update_counts, bias_update_arithmetic), each from
// the framework source docs/routing-semantics.md cites; keys the experiment gives keep their values;
// exact changes nothing. Pure function, host only. Covered by tests/config/semantics_test.cpp and
// tests/router/semantics_test.cpp.
#include <algorithm>
#include <string>
#include <vector>

#include "src/config/experiment.hpp"

namespace moesim {

const std::vector<std::string>& semantics_preset_keys() {
  // score before renormalize: the presets renormalise according to the resolved score function.
  static const std::vector<std::string> keys = {
      "score",       "pre_softmax",     "renormalize",       "renormalize_after_drop", "drop_policy",
      "priority",    "group_mask_fill", "capacity_rounding", "bias_update_counts",     "bias_update_arithmetic"};
  return keys;
}

void apply_semantics_preset(RouterConfig& r, int top_k, const std::vector<std::string>& given) {
  if (r.semantics == RoutingSemantics::exact) return;
  auto free = [&](const char* key) { return std::find(given.begin(), given.end(), key) == given.end(); };
  const bool group_routing = r.gating == Gating::group_limited || r.gating == Gating::aux_free_bias;
  switch (r.semantics) {
    case RoutingSemantics::exact:
      return;
    case RoutingSemantics::megatron: {
      // megatron/core/transformer/transformer_config.py defaults: moe_router_score_function softmax,
      // moe_router_pre_softmax false, moe_token_drop_policy probs; it refuses top-1 softmax without
      // pre-softmax (the one weight would be 1) and the expert bias with any score but sigmoid.
      // moe_utils.py topk_routing_with_score_function: softmax without pre-softmax takes the top k of the
      // logits (of the kept groups) and a softmax over those k, which is the renormalised full softmax;
      // with pre-softmax the full softmax's values, not renormalised; sigmoid scores renormalised when
      // topk > 1. router.py sinkhorn_load_balancing: the experts are the top k of sinkhorn(logits), the
      // weights the full softmax (sigmoid when topk is 1), never renormalised. No rescaling after drops;
      // the position policy keeps the first tokens in token order; group masks -inf; get_capacity ceils
      // the float product; router.py counts the kept routing map, fp32 bias.
      const bool sinkhorn = r.gating == Gating::sinkhorn;
      if (free("score")) {
        r.score = r.gating == Gating::aux_free_bias || (sinkhorn && top_k == 1) ? ScoreFunction::sigmoid
                                                                                : ScoreFunction::softmax;
      }
      if (free("pre_softmax")) r.pre_softmax = sinkhorn || top_k == 1;
      if (free("renormalize")) {
        // The group gatings read no pre_softmax: their softmax over the k chosen is the renormalised full
        // softmax. For token choice without pre-softmax renormalising changes nothing (the k already sum to 1).
        r.renormalize = !sinkhorn && (r.score == ScoreFunction::sigmoid ? top_k > 1 : group_routing && !r.pre_softmax);
      }
      if (free("renormalize_after_drop")) r.renormalize_after_drop = false;
      if (free("drop_policy")) r.drop_policy = DropPolicy::score;
      if (free("priority")) r.priority = Priority::token_major;
      if (free("group_mask_fill")) r.group_mask_fill = GroupMaskFill::neg_inf;
      if (free("capacity_rounding")) r.capacity_rounding = CapacityRounding::float64;
      if (free("bias_update_counts")) r.bias_update_counts = BiasUpdateCounts::kept;
      if (free("bias_update_arithmetic")) r.bias_update_arithmetic = BiasArithmetic::float32;
      return;
    }
    case RoutingSemantics::huggingface:
      // modeling_mixtral.py: softmax over all experts, top-k, renormalised; modeling_deepseek_v3.py:
      // sigmoid, norm_topk_prob, masked groups filled with 0.0; modeling_switch_transformers.py: capacity
      // priority by a cumulative sum over tokens, expert_capacity an integer. No bias update in HF.
      if (free("score")) r.score = group_routing ? ScoreFunction::sigmoid : ScoreFunction::softmax;
      if (free("pre_softmax")) r.pre_softmax = true;
      if (free("renormalize")) r.renormalize = true;
      if (free("renormalize_after_drop")) r.renormalize_after_drop = false;
      if (free("drop_policy")) r.drop_policy = DropPolicy::position;
      if (free("priority")) r.priority = Priority::token_major;
      if (free("group_mask_fill")) r.group_mask_fill = GroupMaskFill::zero;
      if (free("capacity_rounding")) r.capacity_rounding = CapacityRounding::decimal;
      if (free("bias_update_counts")) r.bias_update_counts = BiasUpdateCounts::demand;
      if (free("bias_update_arithmetic")) r.bias_update_arithmetic = BiasArithmetic::float64;
      return;
    case RoutingSemantics::deepseek:
      // DeepSeek-V3 inference/model.py Gate with configs/config_671B.json: sigmoid scores, weights
      // renormalised for sigmoid only, masked groups -inf, a float32 bias; dropless (no capacity in the
      // released code), so capacity and priority keep exact's conventions.
      if (free("score")) r.score = ScoreFunction::sigmoid;
      if (free("pre_softmax")) r.pre_softmax = true;
      if (free("renormalize")) r.renormalize = r.score == ScoreFunction::sigmoid;
      if (free("renormalize_after_drop")) r.renormalize_after_drop = false;
      if (free("drop_policy")) r.drop_policy = DropPolicy::position;
      if (free("priority")) r.priority = Priority::k_major;
      if (free("group_mask_fill")) r.group_mask_fill = GroupMaskFill::neg_inf;
      if (free("capacity_rounding")) r.capacity_rounding = CapacityRounding::decimal;
      if (free("bias_update_counts")) r.bias_update_counts = BiasUpdateCounts::demand;
      if (free("bias_update_arithmetic")) r.bias_update_arithmetic = BiasArithmetic::float32;
      return;
  }
}

}  // namespace moesim
