// The typed, validated experiment: what a YAML file plus --set overrides mean (docs/design.md "Configuration").
// Produced by load_config.cpp; read by every later stage. Plain data, host only.
// Every field here (but RouterConfig::given_preset_keys, ModelConfig::hf_config_keys, Experiment::given_keys
// and set_keys) has a YAML key of the same name under its section;
// defaults are the built-in ones.
// Covered by tests/config/load_config_test.cpp.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <memory>
#include <string>
#include <vector>

#include "src/common/request_lengths.hpp"

namespace moesim {

enum class Dtype { fp32, tf32, bf16, fp16, fp8, int8 };
// How expert weights are stored when below the compute dtype (weight-only quantization; docs/cost-model.md
// "Quantized weights"): same = in model.dtype; int4 = W4A16 as GPTQ/AWQ checkpoints and vLLM's Marlin MoE
// kernel hold them, 4 bits a weight plus one 16-bit scale per group of 128; mxfp4 = OCP Microscaling FP4
// (gpt-oss), 4 bits a weight plus one 8-bit E8M0 scale per block of 32. Both compute in model.dtype.
enum class WeightDtype { same, int4, mxfp4 };

enum class Gating {
  token_choice,   // softmax (or sigmoid) then top-k: Switch, GShard, Mixtral
  noisy_top_k,    // Gaussian noise on the logits before selection (Shazeer et al. 2017)
  expert_choice,  // each expert takes its top-C tokens (Zhou et al. 2022)
  sinkhorn,       // Sinkhorn-normalised scores then top-k (S-BASE, Megatron)
  hash,           // expert from a fixed hash of the token id (Hash Layers, Roller et al. 2021)
  random,         // uniform random experts
  balanced,       // forced round-robin: every expert gets floor/ceil(N*k/E)
  group_limited,  // DeepSeek-V3 group-limited top-k
  aux_free_bias,  // DeepSeek-V3 auxiliary-loss-free bias balancing
};

enum class ScoreFunction { softmax, sigmoid };
enum class DropPolicy { position, score, random };
enum class Priority { k_major, token_major };
enum class CapacityScope { batch, sequence };
enum class Layout { dropless, block, capacity };
enum class GroupMaskFill { neg_inf, zero };  // YAML: "-inf" | "0"
// router.semantics: a preset of the conventions where frameworks differ (docs/routing-semantics.md).
enum class RoutingSemantics { exact, megatron, huggingface, deepseek };
// Capacity ceiling: of the exact decimal product (decimal), or of Megatron's float64 product (float).
enum class CapacityRounding { decimal, float64 };  // YAML: "decimal" | "float"
// The counts an aux_free_bias update reads: assignments before capacity drops, or those kept.
enum class BiasUpdateCounts { demand, kept };
// The arithmetic of b + rate * sign: double rounded to float once (float64), or float32 throughout.
enum class BiasArithmetic { float64, float32 };
enum class WorkloadSource { synthetic, decoder, trace, load_profile, logits, load_distribution };
// load_distribution: per-expert loads drawn as aiconfigurator's MoE collector draws them
// (src/workload/load_distribution.hpp): its power law, or its balanced round-robin.
enum class LoadDistribution { power_law, balanced };
// How the synthetic workload draws expert popularity (workload.popularity): `zipf`, bias -skew ln(rank + 1) over a
// seeded permutation of the experts; `lognormal`, bias skew x N(0, 1) per expert (a log-normal spread of
// popularity, its many warm experts as recorded loads show them).
enum class Popularity { zipf, lognormal };
// load_profile: how workload.path is read (src/workload/load_profile.hpp); `detect` is spelled "auto".
enum class LoadFormat { detect, moesim_json, megatron_npz, megatron_router_trace };
enum class PlacementKind { single, expert_parallel };
// How an expert-parallel placement puts experts on devices (docs/cost-model.md "Expert placement"): `auto`
// (the default) is what an engine runs: contiguous without replicas, EPLB's global policy with them;
// `contiguous` the static split engines use without EPLB (device d holds experts [d E / D, (d + 1) E / D));
// DeepSeek EPLB's global or hierarchical rebalance_experts; e % D; or an explicit map.
enum class PlacementPolicy { automatic, contiguous, global, hierarchical, round_robin, map };
// Where an EPLB plan's loads come from (placement.plan_from): `past`, the loads of the batches routed before
// the one it is charged for (warm-up batches of the workload first, where it can draw them); `profile`, a
// recorded load profile (placement.plan_profile), as SGLang's --init-expert-location loads one; `oracle`, the
// very batch it is charged for (an upper bound no engine reaches).
enum class PlanFrom { past, profile, oracle };
// The loads a re-plan starts from: the sum of the last rebalance_every steps, or an exponential moving
// average over every step seen.
enum class LoadEstimator { window, ema };
// The expert-parallel all-to-all kernels (docs/cost-model.md "The all-to-all"): `simple` one copy per
// (token, expert) over one link at its full bandwidth; `normal` the high-throughput kernels (DeepEP normal,
// TensorRT-LLM's one-sided NVLink all-to-all): one copy per destination node over the scale-out NIC and one
// per destination GPU over the scale-up link; `low_latency` one message per (token, selected expert) (DeepEP
// low-latency, NCCL EP): the scale-up link within a node, the NIC across nodes.
enum class A2aKernel { simple, normal, low_latency };
// The bytes of one copy of a token in dispatch or combine: the model's activation dtype (`model`), fp8 with
// per-128 scales (hidden + hidden / 128 x 4 + 16 B, as DeepEP's tests count it), or 2 / 4 B a value.
enum class A2aDtype { model, fp8, bf16, fp16, fp32 };
// Two-batch overlap (DeepSeek's and SGLang's serving): two micro-batches, one's all-to-all under the other's
// compute.
enum class A2aOverlap { none, two_batch };
// How a step's sequences spread over the attention's data-parallel ranks (src/step/attention_ranks.hpp):
// round robin (SGLang's DP attention default) or to the rank with the fewest KV tokens (the engines' balancers).
enum class RequestBalance { round_robin, kv_tokens };
// The attention of a layer as the training step costs it (src/train): grouped-query (or multi-head) attention
// of heads x head_dim queries and kv_heads x head_dim keys and values, or DeepSeek's multi-head latent
// attention (low-rank query and key-value projections, model.q_lora_rank and model.kv_lora_rank).
enum class AttentionKind { gqa, mla };
// The precision of a training step's GEMMs (`moesim train`, docs/training.md "Precision"): bf16; fp8 with
// one scale per tensor (Transformer Engine's delayed or current scaling on Hopper); fp8 with one scale per
// 128-wide block of activations and 128 x 128 block of weights (DeepSeek-V3's recipe); MXFP8, one E8M0 scale
// per 32 values, which only GPUs with microscaling tensor cores run (hardware.mxfp8).
enum class TrainPrecision { bf16, fp8, fp8_blockwise, mxfp8 };
// Activation recomputation (Megatron-LM --recompute-granularity and --recompute-modules): none; selective, the
// core attention recomputed in the backward pass (core_attn); moe, each MoE layer's forward recomputed: router,
// all-to-all and experts (the `moe` module); full, the whole layer's forward recomputed.
enum class Recompute { none, selective, moe, full };
// Megatron-Core's MoE token dispatchers: alltoall (NCCL all-to-all, one copy per token and chosen expert),
// deepep (the flex dispatcher on DeepEP's normal kernels), hybridep (the flex dispatcher on HybridEP).
enum class Dispatcher { alltoall, deepep, hybridep };
// Where a training step's routing comes from (train.routing):
//  model          - the experiment's router on its workload (router.*, workload.*), each micro-batch routed;
//  forced_balance - Megatron-LM's --moe-router-force-load-balancing: the logits replaced by N(0, 1) draws, so
//                   every token takes k distinct experts uniformly at random (the `random` gating);
//  power_law      - aiconfigurator's power-law loads with exponent `value` (src/workload/load_distribution.hpp);
//  rank_overload  - a measured rank overload: the busiest expert-parallel rank takes `value` x the mean
//                   tokens per rank (max / mean, as Megatron-LM and Marin log it), the others the rest evenly.
enum class TrainRoutingKind { model, forced_balance, power_law, rank_overload };
struct TrainRouting {
  TrainRoutingKind kind = TrainRoutingKind::model;
  double value = 0;  // power_law: ALPHA; rank_overload: X
};
// "model", "forced_balance", "power_law:1.2", "rank_overload:1.3".
std::string to_string(const TrainRouting& r);
// Parses a train.routing text; nullopt when it is none of the forms (power_law:ALPHA with ALPHA in (0, 10], not
// 1; rank_overload:X with X >= 1, finite).
std::optional<TrainRouting> parse_train_routing(const std::string& text);

struct ModelConfig {
  std::string name = "quickstart";
  int64_t hidden = 4096;
  int64_t ffn = 14336;
  int experts = 8;
  int top_k = 2;
  int shared_experts = 0;
  int layers = 32;
  // Layers whose FFN is an MoE layer (the rest are dense, e.g. DeepSeek-V3's first_k_dense_replace);
  // 0: every layer. The modeled MoE time of the whole model counts these, attention and the KV cache
  // count all `layers`. Read it through moe_layer_count().
  int moe_layers = 0;
  int heads = 32;
  int kv_heads = 8;
  int head_dim = 128;
  int vocab = 32000;
  Dtype dtype = Dtype::bf16;
  WeightDtype weight_dtype = WeightDtype::same;
  // SwiGLU experts (gate, up and down projections); false: two matrices (up, then relu^2 or GELU, then down),
  // as in Switch, GShard and Nemotron-H.
  bool gated_experts = true;
  // What the training step (`moesim train`, src/train) reads beyond the MoE layer: the MLP width of the dense
  // layers (0: ffn; DeepSeek-V3's first three layers are 18432 wide), the multi-token-prediction layers
  // (DeepSeek-V3: 1), and the attention's form, with multi-head latent attention's ranks (head_dim is then
  // the non-rotary query and key width, qk_nope_head_dim).
  int64_t dense_ffn = 0;
  int mtp_layers = 0;
  AttentionKind attention = AttentionKind::gqa;
  int q_lora_rank = 0;        // mla: the query's low rank (0: a full-rank query projection)
  int kv_lora_rank = 0;       // mla: the compressed key-value width
  int qk_rope_head_dim = 0;   // mla: the rotary part of each query and key head
  int v_head_dim = 0;         // mla: each value head's width (0: head_dim)
  // A Hugging Face config.json that filled the keys the file and the --set did not give
  // (src/config/hf_config.hpp); stored resolved (absolute), empty when none.
  std::string hf_config;
  // The key paths ("model.experts", "router.score", ...) that hf_config filled, so that a re-emission for
  // apply_override leaves them out and the config.json fills them again. Not a YAML key.
  std::vector<std::string> hf_config_keys;
};

// One expert as the cost model sees it: its compute dtype (activations too), how its weights are stored, and
// whether it is gated. A plain dtype is a gated expert with its weights in that dtype.
struct ExpertFormat {
  Dtype dtype = Dtype::bf16;
  WeightDtype weights = WeightDtype::same;
  bool gated = true;
  ExpertFormat() = default;
  ExpertFormat(Dtype d) : dtype(d) {}  // NOLINT(google-explicit-constructor): every dtype is a format
  ExpertFormat(Dtype d, WeightDtype w, bool g) : dtype(d), weights(w), gated(g) {}
};
// Bytes a weight takes in memory, its scales included: dtype_bytes for `same`, 0.5 + 2/128 for int4,
// 0.5 + 1/32 for mxfp4.
double bytes_per_weight(const ExpertFormat& f);
// As reports name it: the dtype, then "int4 weights" or "mxfp4 weights", then "non-gated" where they apply.
std::string format_label(const ExpertFormat& f);

// The number of MoE layers of `m`: model.moe_layers, or model.layers when it is 0.
inline int moe_layer_count(const ModelConfig& m) { return m.moe_layers > 0 ? m.moe_layers : m.layers; }
inline ExpertFormat expert_format(const ModelConfig& m) { return {m.dtype, m.weight_dtype, m.gated_experts}; }

struct RouterConfig {
  // The preset of framework conventions; it sets every key of semantics_preset_keys() that the file or
  // a --set did not give (load_config.cpp). exact leaves every key as it is.
  RoutingSemantics semantics = RoutingSemantics::exact;
  Gating gating = Gating::token_choice;
  ScoreFunction score = ScoreFunction::softmax;
  bool renormalize = false;             // renormalise the k weights to sum to 1
  bool pre_softmax = true;              // false: top-k on logits, then softmax over the k
  double capacity_factor = 0.0;         // 0: dropless
  int64_t min_capacity = 0;
  DropPolicy drop_policy = DropPolicy::position;
  Priority priority = Priority::k_major;
  CapacityScope capacity_scope = CapacityScope::batch;
  bool renormalize_after_drop = false;
  Layout layout = Layout::dropless;
  int block_size = 64;                  // rows per block in the block layout
  double noise_std = 1.0;               // noisy_top_k
  int sinkhorn_iterations = 50;
  double sinkhorn_tolerance = 1e-4;
  int groups = 1;                       // group_limited: number of expert groups
  int topk_groups = 1;                  // group_limited: groups kept per token
  GroupMaskFill group_mask_fill = GroupMaskFill::neg_inf;
  double bias_update_rate = 1e-3;       // aux_free_bias
  BiasUpdateCounts bias_update_counts = BiasUpdateCounts::demand;      // aux_free_bias
  BiasArithmetic bias_update_arithmetic = BiasArithmetic::float64;    // aux_free_bias
  CapacityRounding capacity_rounding = CapacityRounding::decimal;
  double routed_scaling_factor = 1.0;
  // The keys of semantics_preset_keys() that the file or a --set gave (names without "router."), so that
  // a later change of semantics (apply_override) re-applies the preset to the others only. Not a YAML key.
  std::vector<std::string> given_preset_keys;
};

struct WorkloadConfig {
  WorkloadSource source = WorkloadSource::synthetic;
  int64_t batch = 1024;                 // synthetic: tokens per batch; decoder: sequences
  int batches = 1;                      // synthetic: consecutive batches routed (aux_free_bias evolves)
  std::vector<int> prompt_len = {128};  // decoder: one length, or one per sequence
  bool prompt_len_range = false;        // prompt_len = {lo, hi}: lengths drawn per sequence from the seed
  // decoder: prompt_len written lognormal:MEDIAN:SIGMA or file:PATH: each sequence's length drawn from it (kind
  // fixed: prompt_len holds the lengths). A file's spec holds its absolute path (prompt_len_file).
  RequestLengths prompt_dist;
  int decode_steps = 16;
  uint64_t seed = 7;
  double skew = 1.0;                    // per-expert popularity bias strength (0 = none)
  Popularity popularity = Popularity::zipf;  // synthetic, decoder: how the bias is drawn
  // synthetic, decoder: a bias of group_skew x N(0, 1) shared by the experts of each of router.groups contiguous
  // groups, beside each expert's own: group-limited routers (DeepSeek-V3) make whole groups hot or cold.
  double group_skew = 0.0;
  // synthetic: radians a step the popularity turns from its draw toward a second, independent one (0: fixed);
  // bias(t) = cos(drift t) u + sin(drift t) v, so batches a step apart correlate as cos(drift).
  double drift = 0.0;
  // synthetic: the share of the popularity's variance drawn afresh for every batch (0: none; 1: every batch its
  // own hot experts), as the content of a batch moves real routers' hot experts: bias(t) = sqrt(1 - s) x the
  // persistent popularity + sqrt(s) x a draw of its own.
  double batch_variation = 0.0;
  int topics = 8;                       // decoder: embedding clusters (temporal locality)
  std::string path;                     // trace / load_profile / logits file
  std::string profile_key;              // load_profile: key inside the file, e.g. "mistral/expert_counts/arxiv"
  LoadFormat format = LoadFormat::detect;  // load_profile: the file's format; auto: from its first bytes
  std::vector<int> expert_map;          // load_profile: [physical experts] the logical expert of each slot
  LoadDistribution distribution = LoadDistribution::power_law;  // load_distribution: the generator
  double power_law_alpha = 1.2;         // load_distribution power_law: the exponent (> 0, not 1)
};

// The absolute path of a file:PATH workload.prompt_len; "" for any other form.
inline std::string prompt_len_file(const WorkloadConfig& w) {
  return w.prompt_dist.kind == LengthKind::file ? w.prompt_dist.spec.substr(5) : std::string();
}

// A hardware profile is referenced by name (configs/hardware/NAME.yaml), by file, or written inline.
// The config stage keeps it as text; src/cost parses and validates it (errors name "hardware.KEY").
struct HardwareRef {
  std::string name = "h100-sxm";        // name or path; empty when inline
  std::string inline_yaml;              // the inline table, re-emitted as YAML
  // Where the name was given, as its errors name it: "FILE:LINE: hardware", "--set hardware=VALUE: hardware",
  // a command's option or argument ("--hardware", "NAME"); empty: "EXPERIMENT_FILE: hardware". Not written
  // back by experiment_to_yaml.
  std::string origin;
};

struct PlacementConfig {
  PlacementKind kind = PlacementKind::single;
  PlacementPolicy policy = PlacementPolicy::automatic;
  int devices = 1;
  // GPUs each expert's ffn is sharded over (tensor parallelism): each computes ffn / T of every expert
  // it holds, and the layer adds the all-reduce of their partial outputs. Combines with expert_parallel
  // (each of its devices is then a group of T GPUs). Modeled only: the executed pipeline runs whole experts.
  int tensor_parallel = 1;
  int replicas = 0;                     // extra replica slots (EPLB: num_replicas = experts + replicas)
  int nodes = 1;                        // hierarchical: server nodes; devices split evenly over them
  int groups = 0;                       // hierarchical: expert groups; 0 = router.groups
  std::vector<int> map;                 // policy map: expert -> device
  // policy map from an engine's placement file (placement.map: "FILE" or "FILE#LAYER", as written): the logical
  // expert of each physical slot, slot s on device s / (S / devices) as every engine puts it; replicas follow.
  std::string map_file;
  std::vector<int32_t> slot_expert;
  bool spread_replicas = false;         // no two replicas of one expert on one device
  PlanFrom plan_from = PlanFrom::past;  // the loads an EPLB plan is made from
  std::string plan_profile;             // plan_from profile: a load-profile file (any format workload.path reads)
  // plan_from past: batches of the workload routed before the first measured one, whose loads make the first
  // plan (synthetic and load_distribution workloads; others start from equal loads: no statistics yet).
  int warmup_batches = 8;
  int rebalance_every = 0;              // re-plan every N steps from past loads (0: plan once)
  LoadEstimator load_estimator = LoadEstimator::window;
  double ema_weight = 0.5;              // load_estimator ema: the newest step's weight, in (0, 1]
  A2aKernel a2a_kernel = A2aKernel::normal;   // the all-to-all kernel (expert_parallel)
  A2aDtype dispatch_dtype = A2aDtype::model;  // bytes of a dispatched copy
  A2aDtype combine_dtype = A2aDtype::model;   // bytes of a combined copy
  A2aOverlap overlap = A2aOverlap::none;
  // Decoder workloads with kind expert_parallel: how the step's sequences spread over the devices' attention.
  RequestBalance request_balance = RequestBalance::round_robin;
  // Attention tensor parallel (kind expert_parallel): each attention rank is `attention_tp` GPUs splitting the
  // heads, so attention data parallel = devices / attention_tp ranks (moesim step and serve: --tp).
  int attention_tp = 1;
};

// One optimizer step of Megatron-style training (`moesim train`; docs/training.md): the parallel layout, the
// batch, the precision and the options that set what overlaps. The layout's checks (divisors, the GPUs) are
// made where a step is modeled (src/train/train_input.hpp), naming these keys.
struct TrainConfig {
  int gpus = 8;               // GPUs of the run: tp x pp x cp x dp
  int tp = 1;                 // tensor parallel (with sequence parallelism)
  int pp = 1;                 // pipeline stages
  int vpp = 1;                // virtual stages per pipeline stage (interleaved 1F1B when > 1)
  int ep = 8;                 // expert parallel ranks
  int etp = 1;                // expert tensor parallel
  int cp = 1;                 // context parallel
  int64_t seq_len = 4096;
  int64_t global_batch = 64;  // sequences per optimizer step
  int64_t micro_batch = 1;    // sequences per micro-batch
  TrainPrecision precision = TrainPrecision::bf16;
  Recompute recompute = Recompute::none;
  Dispatcher dispatcher = Dispatcher::alltoall;
  TrainRouting routing;
  // Megatron-LM --overlap-moe-expert-parallel-comm: one micro-batch's all-to-all under another's compute.
  bool ep_overlap = false;
  bool tp_comm_overlap = true;  // Transformer Engine's tensor-parallel communication overlap
  bool dp_overlap = true;       // --overlap-grad-reduce and --overlap-param-gather
  int routed_micro_batches = 4; // micro-batches routed per layer kind; every MoE layer of every micro-batch draws one
};

struct ExecuteConfig {
  bool enabled = true;                  // run the real pipeline (false: model only)
  int64_t hidden = 256;
  int64_t ffn = 512;
  int layers = 1;
  int repeats = 3;                      // timed repeats after one warm-up; medians reported
  Dtype dtype = Dtype::fp32;
};

// One bound of an expect: block. metric is a JSON key of the report (e.g. "imbalance"); aggregate is
// "value" (the headline value the reports show: a batch run's last batch, a step run's token-weighted
// aggregate over its records), "last" (the last batch or record), or "mean", "p50", "p95", "max" over
// the batches/records (src/report/report.hpp, metric_value).
struct Expectation {
  std::string metric;
  std::string aggregate = "value";
  std::string strategy;                 // empty: every strategy in the run
  std::optional<double> min;
  std::optional<double> max;
};

struct Experiment {
  std::string name = "quickstart";
  std::string source_file;              // where it came from ("<built-in>" for the default)
  ModelConfig model;
  RouterConfig router;
  WorkloadConfig workload;
  HardwareRef hardware;
  PlacementConfig placement;
  ExecuteConfig execute;
  TrainConfig train;
  std::vector<Expectation> expect;
  // The key paths ("router.noise_std", "hardware", "expect") the experiment file or a --set gave, in schema
  // order; the built-in default's own keys are not listed. src/config/key_effects.hpp reads it to name the
  // keys a user set that act nowhere in a run. Not a YAML key.
  std::vector<std::string> given_keys;
  // The subset of given_keys that a --set or --vary gave: set on purpose, even to a default value.
  std::vector<std::string> set_keys;
  // What the load decided that a user should be told, one line each, printed by the CLI once on stderr
  // ("model.hf_config ... on the built-in experiment: ... kept"). Not a YAML key.
  std::vector<std::string> load_notes;
  // The experiment file as written, before the command line's --set: the runs the file's own keys are judged
  // by (key_effects.hpp inert_user_keys). Null without a --set, for the built-in experiment, or when the file
  // alone does not load. Not a YAML key.
  std::shared_ptr<const Experiment> as_written;
  // What a key that fills other keys (model.hf_config, router.semantics: compound_keys()) changed, traced from
  // the loader itself: the same experiment loaded without that key, by key. A key of this map changed the
  // keys whose values differ between the two (key_effects.cpp judges it by them). Carried through
  // apply_override (each row of compare and sweep has its own). Absent where the key is not given, or the
  // experiment does not load without it. Not a YAML key.
  std::map<std::string, std::shared_ptr<const Experiment>> without_key;
};

// The keys that fill other keys, and so act through them: model.hf_config (the model and router from a
// config.json) and router.semantics (a framework's router conventions).
const std::vector<std::string>& compound_keys();

// Name tables: the YAML spelling of each enum value. parse_* throw ConfigError (caller adds the key).
const char* to_string(Dtype v);
const char* to_string(Gating v);
const char* to_string(ScoreFunction v);
const char* to_string(DropPolicy v);
const char* to_string(Priority v);
const char* to_string(CapacityScope v);
const char* to_string(Layout v);
const char* to_string(GroupMaskFill v);
const char* to_string(RoutingSemantics v);
const char* to_string(CapacityRounding v);
const char* to_string(BiasUpdateCounts v);
const char* to_string(BiasArithmetic v);
const char* to_string(WorkloadSource v);
const char* to_string(LoadFormat v);
const char* to_string(LoadDistribution v);
const char* to_string(WeightDtype v);
const char* to_string(PlacementKind v);
const char* to_string(PlacementPolicy v);
const char* to_string(PlanFrom v);
const char* to_string(Popularity v);
// The policy `auto` stands for: contiguous without replicas, global (EPLB) with them; any other as it is.
PlacementPolicy effective_policy(const PlacementConfig& p);
// Whether the effective policy plans from loads (EPLB: global or hierarchical).
bool plans_from_loads(const PlacementConfig& p);
const char* to_string(LoadEstimator v);
const char* to_string(A2aKernel v);
const char* to_string(A2aDtype v);
const char* to_string(A2aOverlap v);
const char* to_string(RequestBalance v);
const char* to_string(AttentionKind v);
const char* to_string(TrainPrecision v);
const char* to_string(Recompute v);
const char* to_string(Dispatcher v);
// Bytes of one copy of a `hidden`-wide token in `dtype` (A2aDtype::model: `model_dtype`'s width): fp8 counts
// its per-128 scales and a 16-byte header, hidden + ceil(hidden / 128) x 4 + 16 (DeepEP tests/test_low_latency.py).
double a2a_copy_bytes(A2aDtype dtype, Dtype model_dtype, int64_t hidden);

// The router keys (names under router.) a semantics preset sets, in the order it resolves them.
const std::vector<std::string>& semantics_preset_keys();

// Sets every key of semantics_preset_keys() not listed in `given` to the value `r.semantics` prescribes
// (the table of docs/routing-semantics.md; renormalize follows the resolved score, and top_k for megatron).
// exact changes nothing.
void apply_semantics_preset(RouterConfig& r, int top_k, const std::vector<std::string>& given);

// Bytes per element of a dtype (fp32/tf32: 4, bf16/fp16: 2, fp8/int8: 1).
int dtype_bytes(Dtype v);

// Every gating strategy, in the order `--gating all` runs them.
const std::vector<Gating>& all_gatings();
std::optional<Gating> parse_gating(const std::string& s);

}  // namespace moesim
