// Name tables of the experiment enums (their YAML spellings), dtype sizes and the gating list.
// Inputs: enum values or YAML spellings; outputs: spellings, byte counts, the `--gating all` order.
// Pure functions over constant tables. Host only.
// Covered by tests/config/load_config_test.cpp.
#include "src/config/experiment.hpp"

#include <cmath>
#include <cstdlib>
#include <sstream>

namespace moesim {

const char* to_string(Dtype v) {
  switch (v) {
    case Dtype::fp32: return "fp32";
    case Dtype::tf32: return "tf32";
    case Dtype::bf16: return "bf16";
    case Dtype::fp16: return "fp16";
    case Dtype::fp8: return "fp8";
    case Dtype::int8: return "int8";
  }
  return "?";
}

const char* to_string(Gating v) {
  switch (v) {
    case Gating::token_choice: return "token_choice";
    case Gating::noisy_top_k: return "noisy_top_k";
    case Gating::expert_choice: return "expert_choice";
    case Gating::sinkhorn: return "sinkhorn";
    case Gating::hash: return "hash";
    case Gating::random: return "random";
    case Gating::balanced: return "balanced";
    case Gating::group_limited: return "group_limited";
    case Gating::aux_free_bias: return "aux_free_bias";
  }
  return "?";
}

const char* to_string(ScoreFunction v) {
  switch (v) {
    case ScoreFunction::softmax: return "softmax";
    case ScoreFunction::sigmoid: return "sigmoid";
  }
  return "?";
}

const char* to_string(DropPolicy v) {
  switch (v) {
    case DropPolicy::position: return "position";
    case DropPolicy::score: return "score";
    case DropPolicy::random: return "random";
  }
  return "?";
}

const char* to_string(Priority v) {
  switch (v) {
    case Priority::k_major: return "k_major";
    case Priority::token_major: return "token_major";
  }
  return "?";
}

const char* to_string(CapacityScope v) {
  switch (v) {
    case CapacityScope::batch: return "batch";
    case CapacityScope::sequence: return "sequence";
  }
  return "?";
}

const char* to_string(Layout v) {
  switch (v) {
    case Layout::dropless: return "dropless";
    case Layout::block: return "block";
    case Layout::capacity: return "capacity";
  }
  return "?";
}

// The fill written into masked-out groups: -inf (vLLM, Megatron) or 0.0 (HF transformers).
const char* to_string(GroupMaskFill v) {
  switch (v) {
    case GroupMaskFill::neg_inf: return "-inf";
    case GroupMaskFill::zero: return "0";
  }
  return "?";
}

const char* to_string(RoutingSemantics v) {
  switch (v) {
    case RoutingSemantics::exact: return "exact";
    case RoutingSemantics::megatron: return "megatron";
    case RoutingSemantics::huggingface: return "huggingface";
    case RoutingSemantics::deepseek: return "deepseek";
  }
  return "?";
}

const char* to_string(CapacityRounding v) {
  switch (v) {
    case CapacityRounding::decimal: return "decimal";
    case CapacityRounding::float64: return "float";
  }
  return "?";
}

const char* to_string(BiasUpdateCounts v) {
  switch (v) {
    case BiasUpdateCounts::demand: return "demand";
    case BiasUpdateCounts::kept: return "kept";
  }
  return "?";
}

const char* to_string(BiasArithmetic v) {
  switch (v) {
    case BiasArithmetic::float64: return "float64";
    case BiasArithmetic::float32: return "float32";
  }
  return "?";
}

const char* to_string(LoadFormat v) {
  switch (v) {
    case LoadFormat::detect: return "auto";
    case LoadFormat::moesim_json: return "moesim_json";
    case LoadFormat::megatron_npz: return "megatron_npz";
    case LoadFormat::megatron_router_trace: return "megatron_router_trace";
  }
  return "?";
}

const char* to_string(WorkloadSource v) {
  switch (v) {
    case WorkloadSource::synthetic: return "synthetic";
    case WorkloadSource::decoder: return "decoder";
    case WorkloadSource::trace: return "trace";
    case WorkloadSource::load_profile: return "load_profile";
    case WorkloadSource::logits: return "logits";
    case WorkloadSource::load_distribution: return "load_distribution";
  }
  return "?";
}

const char* to_string(WeightDtype v) {
  switch (v) {
    case WeightDtype::same: return "same";
    case WeightDtype::int4: return "int4";
    case WeightDtype::mxfp4: return "mxfp4";
  }
  return "?";
}

double bytes_per_weight(const ExpertFormat& f) {
  switch (f.weights) {
    case WeightDtype::same: return dtype_bytes(f.dtype);
    // GPTQ/AWQ group_size 128 with an fp16 scale (AWQ's zero points are packed 4-bit, 1/256 B a weight, left
    // out); the Marlin kernel reads these as stored.
    case WeightDtype::int4: return 0.5 + 2.0 / 128.0;
    // OCP Microscaling Formats v1.0: FP4 (E2M1) elements in blocks of 32 sharing one E8M0 scale byte.
    case WeightDtype::mxfp4: return 0.5 + 1.0 / 32.0;
  }
  return dtype_bytes(f.dtype);
}

std::string format_label(const ExpertFormat& f) {
  std::string s = to_string(f.dtype);
  if (f.weights != WeightDtype::same) s += std::string(", ") + to_string(f.weights) + " weights";
  if (!f.gated) s += ", non-gated";
  return s;
}

const char* to_string(LoadDistribution v) {
  switch (v) {
    case LoadDistribution::power_law: return "power_law";
    case LoadDistribution::balanced: return "balanced";
  }
  return "?";
}

const char* to_string(PlacementKind v) {
  switch (v) {
    case PlacementKind::single: return "single";
    case PlacementKind::expert_parallel: return "expert_parallel";
  }
  return "?";
}

const char* to_string(PlacementPolicy v) {
  switch (v) {
    case PlacementPolicy::automatic: return "auto";
    case PlacementPolicy::contiguous: return "contiguous";
    case PlacementPolicy::global: return "global";
    case PlacementPolicy::hierarchical: return "hierarchical";
    case PlacementPolicy::round_robin: return "round_robin";
    case PlacementPolicy::map: return "map";
  }
  return "?";
}

const char* to_string(Popularity v) {
  switch (v) {
    case Popularity::zipf: return "zipf";
    case Popularity::lognormal: return "lognormal";
  }
  return "?";
}

const char* to_string(PlanFrom v) {
  switch (v) {
    case PlanFrom::past: return "past";
    case PlanFrom::profile: return "profile";
    case PlanFrom::oracle: return "oracle";
  }
  return "?";
}

PlacementPolicy effective_policy(const PlacementConfig& p) {
  if (p.policy != PlacementPolicy::automatic) return p.policy;
  return p.replicas > 0 ? PlacementPolicy::global : PlacementPolicy::contiguous;
}

bool plans_from_loads(const PlacementConfig& p) {
  const PlacementPolicy policy = effective_policy(p);
  return policy == PlacementPolicy::global || policy == PlacementPolicy::hierarchical;
}

const char* to_string(LoadEstimator v) {
  switch (v) {
    case LoadEstimator::window: return "window";
    case LoadEstimator::ema: return "ema";
  }
  return "?";
}

const char* to_string(A2aKernel v) {
  switch (v) {
    case A2aKernel::simple: return "simple";
    case A2aKernel::normal: return "normal";
    case A2aKernel::low_latency: return "low_latency";
  }
  return "?";
}

const char* to_string(A2aDtype v) {
  switch (v) {
    case A2aDtype::model: return "model";
    case A2aDtype::fp8: return "fp8";
    case A2aDtype::bf16: return "bf16";
    case A2aDtype::fp16: return "fp16";
    case A2aDtype::fp32: return "fp32";
  }
  return "?";
}

const char* to_string(RequestBalance v) {
  switch (v) {
    case RequestBalance::round_robin: return "round_robin";
    case RequestBalance::kv_tokens: return "kv_tokens";
  }
  return "?";
}

const char* to_string(A2aOverlap v) {
  switch (v) {
    case A2aOverlap::none: return "none";
    case A2aOverlap::two_batch: return "two_batch";
  }
  return "?";
}

const char* to_string(AttentionKind v) {
  switch (v) {
    case AttentionKind::gqa: return "gqa";
    case AttentionKind::mla: return "mla";
  }
  return "?";
}

const char* to_string(TrainPrecision v) {
  switch (v) {
    case TrainPrecision::bf16: return "bf16";
    case TrainPrecision::fp8: return "fp8";
    case TrainPrecision::fp8_blockwise: return "fp8_blockwise";
    case TrainPrecision::mxfp8: return "mxfp8";
  }
  return "?";
}

const char* to_string(Recompute v) {
  switch (v) {
    case Recompute::none: return "none";
    case Recompute::selective: return "selective";
    case Recompute::moe: return "moe";
    case Recompute::full: return "full";
  }
  return "?";
}

const char* to_string(Dispatcher v) {
  switch (v) {
    case Dispatcher::alltoall: return "alltoall";
    case Dispatcher::deepep: return "deepep";
    case Dispatcher::hybridep: return "hybridep";
  }
  return "?";
}

std::string to_string(const TrainRouting& r) {
  switch (r.kind) {
    case TrainRoutingKind::model: return "model";
    case TrainRoutingKind::forced_balance: return "forced_balance";
    case TrainRoutingKind::power_law:
    case TrainRoutingKind::rank_overload: {
      std::ostringstream os;
      os.precision(17);
      os << (r.kind == TrainRoutingKind::power_law ? "power_law:" : "rank_overload:") << r.value;
      return os.str();
    }
  }
  return "?";
}

std::optional<TrainRouting> parse_train_routing(const std::string& text) {
  if (text == "model") return TrainRouting{TrainRoutingKind::model, 0};
  if (text == "forced_balance") return TrainRouting{TrainRoutingKind::forced_balance, 0};
  for (const auto& [prefix, kind] : {std::pair<std::string, TrainRoutingKind>{"power_law:", TrainRoutingKind::power_law},
                                     {"rank_overload:", TrainRoutingKind::rank_overload}}) {
    if (text.rfind(prefix, 0) != 0) continue;
    const std::string num = text.substr(prefix.size());
    char* end = nullptr;
    const double v = num.empty() ? NAN : std::strtod(num.c_str(), &end);
    if (num.empty() || *end != '\0' || !std::isfinite(v)) return std::nullopt;
    if (kind == TrainRoutingKind::power_law && (!(v > 0 && v <= 10) || std::fabs(v - 1.0) < 1e-9)) return std::nullopt;
    if (kind == TrainRoutingKind::rank_overload && !(v >= 1 && v <= 1e6)) return std::nullopt;
    return TrainRouting{kind, v};
  }
  return std::nullopt;
}

double a2a_copy_bytes(A2aDtype dtype, Dtype model_dtype, int64_t hidden) {
  const double h = static_cast<double>(hidden);
  switch (dtype) {
    case A2aDtype::model: return h * dtype_bytes(model_dtype);
    case A2aDtype::fp8: return h + static_cast<double>((hidden + 127) / 128) * 4.0 + 16.0;
    case A2aDtype::bf16:
    case A2aDtype::fp16: return 2.0 * h;
    case A2aDtype::fp32: return 4.0 * h;
  }
  return h * dtype_bytes(model_dtype);
}

int dtype_bytes(Dtype v) {
  switch (v) {
    case Dtype::fp32:
    case Dtype::tf32: return 4;  // tf32 is an fp32 storage format; only the tensor-core math is reduced
    case Dtype::bf16:
    case Dtype::fp16: return 2;
    case Dtype::fp8:
    case Dtype::int8: return 1;
  }
  return 4;
}

const std::vector<Gating>& all_gatings() {
  static const std::vector<Gating> gatings = {
      Gating::token_choice, Gating::noisy_top_k, Gating::expert_choice,
      Gating::sinkhorn,     Gating::hash,        Gating::random,
      Gating::balanced,     Gating::group_limited, Gating::aux_free_bias,
  };
  return gatings;
}

std::optional<Gating> parse_gating(const std::string& s) {
  for (Gating g : all_gatings()) {
    if (s == to_string(g)) return g;
  }
  return std::nullopt;
}

}  // namespace moesim
