// Tests of the decoder workload: the same output at 1 and 2 threads, the record layout of prefill and
// decode steps, a sequence's tokens independent of its batchmates (the packed batch's masking), KV-cache
// bytes by the formula, aux_free_bias evolving across steps, expert choice limited to a step's tokens,
// the memory-limit refusal, and the pipeline's records, phases and JSON.
#include <gtest/gtest.h>

#include <cstring>
#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include "src/config/load_config.hpp"
#include "src/decoder/decoder.hpp"
#include "src/pipeline/run_experiment.hpp"
#include "src/report/report.hpp"
#include "tests/support/kernel_support.hpp"
#include "tests/support/run_cli.hpp"

namespace moesim {
namespace {

// E = 6 on the built-in 8 devices: round-robin (EPLB's policies need D to divide E + R).
Experiment tiny_decoder(const std::vector<std::string>& extra = {}) {
  std::vector<std::string> o = {"workload.source=decoder", "workload.batch=4",  "workload.prompt_len=3..9",
                                "workload.decode_steps=4", "workload.topics=3", "workload.seed=5",
                                "model.experts=6",         "model.top_k=2",     "router.capacity_factor=0",
                                "execute.hidden=48",       "execute.ffn=32",    "execute.layers=2",
                                "execute.repeats=1",       "placement.policy=round_robin"};
  o.insert(o.end(), extra.begin(), extra.end());
  return default_experiment(o);
}

bool same_float_bytes(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

TEST(Decoder, ExecutedShapeKeepsTheGqaGroup) {
  Experiment e = tiny_decoder({"execute.hidden=256"});  // quickstart model: 32 heads, 8 kv heads, head_dim 128
  DecoderShape s = executed_decoder_shape(e);
  EXPECT_EQ(s.head_dim, 16);
  EXPECT_EQ(s.heads, 16);
  EXPECT_EQ(s.kv_heads, 4);
  EXPECT_EQ(s.vocab, kDecoderVocab);
  e = tiny_decoder({"model.heads=16", "model.kv_heads=16", "model.head_dim=8", "execute.hidden=64"});
  s = executed_decoder_shape(e);
  EXPECT_EQ(s.head_dim, 8);  // model.head_dim is below the minimum: kept
  EXPECT_EQ(s.heads, 8);
  EXPECT_EQ(s.kv_heads, 8);
}

TEST(Decoder, SameOutputAtOneTwoAndThreeThreads) {
  for (const char* gating : {"token_choice", "aux_free_bias", "expert_choice"}) {
    // Large enough that the prefill takes the parallel paths (attention_layer.cpp's kSerialWork).
    const Experiment e = tiny_decoder({std::string("router.gating=") + gating, "model.shared_experts=1",
                                       "workload.batch=8", "workload.prompt_len=60..100", "execute.hidden=128"});
    const Decoder decoder(e);
    DecoderRun runs[3];
    for (int threads : {1, 2, 3}) {
      test::ScopedOmpThreads scoped(threads);
      runs[threads - 1] = decoder.run(e.router);
    }
    for (int other : {1, 2}) {
    const DecoderRun &a = runs[0], &b = runs[other];
    EXPECT_EQ(a.tokens, b.tokens) << gating << ", seed " << e.workload.seed;
    EXPECT_TRUE(same_float_bytes(a.last_logits, b.last_logits)) << gating;
    EXPECT_TRUE(same_float_bytes(a.final_hidden, b.final_hidden)) << gating;
    ASSERT_EQ(a.records.size(), b.records.size());
    for (size_t i = 0; i < a.records.size(); ++i) {
      EXPECT_EQ(a.records[i].metrics.load, b.records[i].metrics.load) << gating << ", record " << i;
      EXPECT_EQ(a.records[i].metrics.aux_loss, b.records[i].metrics.aux_loss) << gating << ", record " << i;
    }
    ASSERT_EQ(a.router_states.size(), b.router_states.size());
    for (size_t l = 0; l < a.router_states.size(); ++l)
      EXPECT_EQ(a.router_states[l].expert_bias, b.router_states[l].expert_bias) << gating;
    }
  }
}

TEST(Decoder, PrefillThenDecodeRecords) {
  const Experiment e = tiny_decoder({"workload.prompt_len=[3, 8, 1, 5]"});
  const DecoderRun run = Decoder(e).run(e.router);
  const int layers = 2, D = 4, B = 4;
  ASSERT_EQ(run.prompt_len, (std::vector<int>{3, 8, 1, 5}));
  ASSERT_EQ(run.records.size(), static_cast<size_t>((1 + D) * layers));
  ASSERT_EQ(run.step_wall_s.size(), static_cast<size_t>(1 + D));
  for (size_t i = 0; i < run.records.size(); ++i) {
    const DecoderRecord& r = run.records[i];
    const int step = static_cast<int>(i) / layers;
    EXPECT_EQ(r.step, step);
    EXPECT_EQ(r.layer, static_cast<int>(i) % layers);
    EXPECT_EQ(r.phase, step == 0 ? DecoderPhase::prefill : DecoderPhase::decode);
    EXPECT_EQ(r.num_tokens, step == 0 ? 17 : B);
    EXPECT_EQ(r.context_tokens, 17 + int64_t{B} * step);
    // Prefill: sum of L (L + 1) / 2 causal pairs; decode: each token reads its whole sequence.
    EXPECT_EQ(r.attended_positions, step == 0 ? 6 + 36 + 1 + 15 : 17 + int64_t{B} * step);
    const int64_t routed = std::accumulate(r.metrics.load.begin(), r.metrics.load.end(), int64_t{0});
    EXPECT_EQ(routed, r.num_tokens * 2) << "dropless top-2 routes every token twice";
  }
  for (int b = 0; b < B; ++b) EXPECT_EQ(run.tokens[b].size(), static_cast<size_t>(run.prompt_len[b] + D + 1));
  EXPECT_EQ(run.last_logits.size(), static_cast<size_t>(B * kDecoderVocab));
}

TEST(Decoder, KvCacheBytesGrowByTheFormula) {
  const Experiment e = tiny_decoder({"workload.prompt_len=[3, 8, 1, 5]"});
  const DecoderShape s = executed_decoder_shape(e);
  const DecoderRun run = Decoder(e).run(e.router);
  const double per_token_layer = 2.0 * s.kv_heads * s.head_dim * 4;
  EXPECT_DOUBLE_EQ(run.kv_cache_allocated_bytes, per_token_layer * s.layers * (17 + 4 * 4));
  ASSERT_EQ(run.kv_cache_bytes_per_step.size(), 5u);
  for (int step = 0; step <= 4; ++step) {
    EXPECT_DOUBLE_EQ(run.kv_cache_bytes_per_step[step], per_token_layer * s.layers * (17 + 4 * step)) << step;
    EXPECT_DOUBLE_EQ(run.records[2 * step].kv_cache_bytes, per_token_layer * (17 + 4 * step)) << step;
  }
  // The pipeline reports the same growth at the model's real size: 2 * kv_heads * head_dim * dtype bytes per
  // token and layer (quickstart model: 8 kv heads x 128, bf16).
  const RunResult r = run_experiment(e, own_variant(e), RunOptions{});
  const VariantResult& v = r.variants[0];
  ASSERT_EQ(v.decoder.size(), v.records.size());
  for (size_t i = 0; i < v.records.size(); ++i)
    EXPECT_DOUBLE_EQ(v.decoder[i].kv_cache_bytes, 2.0 * 8 * 128 * 2 * (17 + 4 * v.records[i].step)) << i;
  const PhaseSummary& decode = r.variants[0].phases.at(1);
  EXPECT_EQ(decode.phase, "decode");
  EXPECT_DOUBLE_EQ(decode.kv_cache_bytes, 32 * 2.0 * 8 * 128 * 2 * (17 + 4 * 4));
}

TEST(Decoder, SequenceIsIndependentOfItsBatchmates) {
  // Token-choice, dropless: nothing couples sequences but the packed batch itself, so sequence 0 must
  // generate the same tokens alone as beside longer and shorter prompts (attention masking per sequence).
  const Experiment batch = tiny_decoder({"workload.prompt_len=[7, 3, 12, 1]"});
  const Experiment alone = tiny_decoder({"workload.batch=1", "workload.prompt_len=7"});
  const DecoderRun a = Decoder(batch).run(batch.router);
  const DecoderRun b = Decoder(alone).run(alone.router);
  EXPECT_EQ(a.tokens[0], b.tokens[0]);
  const std::vector<float> first(a.last_logits.begin(), a.last_logits.begin() + kDecoderVocab);
  // Different GEMM row counts may round differently; the logits agree to float accuracy.
  EXPECT_TRUE(test::all_near(first, b.last_logits, 1e-4, 1e-4));
}

TEST(Decoder, AuxFreeBiasEvolvesAcrossDecodeSteps) {
  const Experiment e = tiny_decoder({"router.gating=aux_free_bias", "router.bias_update_rate=0.01", "workload.skew=2"});
  const DecoderRun run = Decoder(e).run(e.router);
  ASSERT_EQ(run.router_states.size(), 2u);
  for (const RouterState& s : run.router_states) {
    EXPECT_EQ(s.batches_seen, 1 + e.workload.decode_steps);
    ASSERT_EQ(s.expert_bias.size(), 6u);
    // One update of +-0.01 per step: after 5 steps every bias is a multiple of 0.01 with |b| <= 0.05,
    // and the skewed popularity makes some non-zero.
    double largest = 0;
    for (float b : s.expert_bias) largest = std::max(largest, std::fabs(double(b)));
    EXPECT_GT(largest, 0.0);
    EXPECT_LE(largest, 0.05 + 1e-6);
  }
}

TEST(Decoder, ExpertChoiceSeesOnlyTheStepsTokens) {
  const Experiment e = tiny_decoder({"router.gating=expert_choice", "model.top_k=2", "workload.batch=5"});
  const DecoderRun run = Decoder(e).run(e.router);
  for (const DecoderRecord& r : run.records) {
    // C = ceil(N k / E) from this step's N alone, clamped to N; every expert fills its C.
    const int64_t C = std::min<int64_t>((r.num_tokens * 2 + 5) / 6, r.num_tokens);
    EXPECT_EQ(r.metrics.capacity, C) << "step " << r.step;
    const int64_t routed = std::accumulate(r.metrics.load.begin(), r.metrics.load.end(), int64_t{0});
    EXPECT_EQ(routed, 6 * C) << "step " << r.step;
    EXPECT_GE(r.metrics.tokens_unrouted, 0);
    EXPECT_LE(r.metrics.tokens_unrouted, r.num_tokens);
  }
}

// The memory estimate sums the prompt lengths without materialising them (a fuzzed workload.batch of
// 922337615 used to allocate 3.7 GB inside the estimate): the sum equals the lengths' for each form, and a
// billion sequences cost nothing to estimate.
TEST(Decoder, PromptTokensWithoutTheLengths) {
  WorkloadConfig w;
  w.batch = 37;
  w.seed = 11;
  const auto sum_of_lengths = [](const WorkloadConfig& c) {
    const std::vector<int> lens = decoder_prompt_lengths(c);
    return std::accumulate(lens.begin(), lens.end(), 0.0);
  };
  w.prompt_len = {96};
  EXPECT_EQ(decoder_prompt_tokens(w), 37.0 * 96);
  w.prompt_len_range = true;
  w.prompt_len = {5, 300};
  EXPECT_EQ(decoder_prompt_tokens(w), sum_of_lengths(w));
  w.prompt_len_range = false;
  w.prompt_len.assign(37, 0);
  for (int i = 0; i < 37; ++i) w.prompt_len[i] = 1 + i * i;
  EXPECT_EQ(decoder_prompt_tokens(w), sum_of_lengths(w));
  w.prompt_len[3] = 0;
  EXPECT_THROW(decoder_prompt_tokens(w), PreconditionError);
  w.batch = 1000000000;
  w.prompt_len_range = true;
  w.prompt_len = {10, 30};
  EXPECT_EQ(decoder_prompt_tokens(w), 1e9 * 20);  // past kExactPromptTokens: the range's mean
  w.prompt_len_range = false;
  w.prompt_len = {7};
  EXPECT_EQ(decoder_prompt_tokens(w), 7e9);
  // A distribution: its lengths' sum up to kExactPromptTokens sequences, its mean times the batch past them.
  w.prompt_dist = parse_request_lengths("lognormal:100:0.5", "workload.prompt_len");
  EXPECT_DOUBLE_EQ(decoder_prompt_tokens(w), 1e9 * 100 * std::exp(0.125));
  w.batch = 37;
  EXPECT_EQ(decoder_prompt_tokens(w), sum_of_lengths(w));
}

TEST(Decoder, MemoryLimitIsRefusedBeforeAllocating) {
  const Experiment e = tiny_decoder({"workload.batch=64", "workload.prompt_len=4096", "workload.decode_steps=4096"});
  const double need = estimate_decoder_bytes(e);
  EXPECT_GT(need, 64.0 * 8192 * 2 * 2 * 16 * 4);  // at least the KV cache
  RunOptions opts;
  opts.memory_limit_bytes = 64.0 * 1024 * 1024;
  try {
    run_experiment(e, own_variant(e), opts);
    FAIL() << "expected a ResourceError";
  } catch (const ResourceError& err) {
    const std::string msg = err.what();
    EXPECT_NE(msg.find("memory limit of 64 MiB"), std::string::npos) << msg;
    EXPECT_NE(msg.find("needs about"), std::string::npos) << msg;
    EXPECT_NE(msg.find("workload.decode_steps"), std::string::npos) << msg;
  }
  // Through the CLI: exit 3 with the estimate and the limit.
  const testing::CliResult r = testing::run_cli(
      "run --memory-limit 64MiB --set workload.source=decoder --set workload.batch=64 --set workload.prompt_len=4096 "
      "--set workload.decode_steps=4096");
  EXPECT_EQ(r.exit_code, 3) << r.err;
  EXPECT_NE(r.err.find("MiB"), std::string::npos) << r.err;
}

TEST(DecoderPipeline, RecordsPhasesAndJson) {
  const Experiment e = tiny_decoder({"placement.kind=expert_parallel", "placement.devices=2"});
  std::vector<RouterVariant> variants = own_variant(e);
  RouterConfig ec = e.router;
  ec.gating = Gating::expert_choice;
  variants.push_back({"expert_choice", ec});
  RunOptions keep;
  keep.records = true;  // every record's modeled placements, read below
  const RunResult r = run_experiment(e, variants, keep);
  ASSERT_TRUE(r.has_decoder);
  EXPECT_EQ(r.num_tokens, 4);
  for (const VariantResult& v : r.variants) {
    ASSERT_EQ(v.per_batch.size(), v.records.size());
    ASSERT_EQ(v.records.size(), 10u);
    ASSERT_EQ(v.phases.size(), 2u);
    EXPECT_EQ(v.phases[0].phase, "prefill");
    EXPECT_EQ(v.phases[1].phase, "decode");
    EXPECT_EQ(v.phases[1].steps, 4);
    EXPECT_EQ(v.phases[1].tokens, 16);
    EXPECT_GT(v.phases[1].modeled_tokens_per_s, 0);
    EXPECT_GT(v.phases[1].measured_tokens_per_s, 0);
    int64_t unrouted = 0;
    for (size_t i = 0; i < v.records.size(); ++i) {
      const StepRecord& rec = v.records[i];
      const CostBreakdown& attention = v.decoder.at(i).modeled_attention;
      EXPECT_GT(attention.quantized_s, 0);
      EXPECT_EQ(rec.attention_s, attention.quantized_s);
      ASSERT_EQ(rec.modeled.size(), 2u);  // single and expert_parallel
      EXPECT_DOUBLE_EQ(rec.batching_efficiency, rec.modeled[1].cost.batching_efficiency);
      EXPECT_DOUBLE_EQ(rec.modeled_layer_s, attention.quantized_s + rec.modeled[1].cost.actual.quantized_s);
      if (rec.phase == "decode") unrouted += v.per_batch[i].tokens_unrouted;
    }
    EXPECT_EQ(v.phases[1].tokens_unrouted, unrouted);
    EXPECT_TRUE(v.executed);
    EXPECT_GT(v.measured.layer_s, 0);
    // The re-timed layer carries its spread; one repeat (tiny_decoder) is noisy by rule.
    EXPECT_LE(v.measured.layer_min_s, v.measured.layer_s);
    EXPECT_LE(v.measured.layer_s, v.measured.layer_max_s);
    EXPECT_LE(v.measured_balanced_layer_min_s, v.measured_balanced_layer_s);
    EXPECT_LE(v.measured_balanced_layer_s, v.measured_balanced_layer_max_s);
    EXPECT_TRUE(v.measured_noise.noisy);
  }
  const nlohmann::json j = run_to_json(r);
  const nlohmann::json& s = j["strategies"][0];
  EXPECT_EQ(s["records"].size(), 10u);
  EXPECT_EQ(s["records"][2]["phase"], "decode");
  EXPECT_TRUE(s["records"][2].contains("kv_cache_bytes"));
  EXPECT_TRUE(s["records"][2]["measured"].contains("attention_s"));
  EXPECT_TRUE(s["records"][2]["modeled"].contains("attention"));
  EXPECT_TRUE(s["phases"]["decode"].contains("modeled_tokens_per_s"));
  EXPECT_TRUE(s["phases"]["prefill"]["aggregates"].contains("imbalance"));
  EXPECT_EQ(s["per_layer"].size(), 2u);
  EXPECT_EQ(j["workload"]["prompt_len"].size(), 4u);
  const std::string table = format_run(r, ReportFormat::table);
  EXPECT_NE(table.find("per phase:"), std::string::npos) << table;
  EXPECT_NE(table.find("prefill"), std::string::npos) << table;
  EXPECT_EQ(metric_value(r, r.variants[0], "imbalance", "p95").has_value(), true);
}

TEST(DecoderPipeline, VerifyAndNoExecute) {
  const Experiment e = tiny_decoder({"router.gating=sinkhorn"});
  RunOptions opts;
  opts.verify = true;
  const RunResult r = run_experiment(e, own_variant(e), opts);
  EXPECT_EQ(r.variants[0].verify_message, "ok");
  opts.verify = false;
  opts.execute = false;
  const RunResult m = run_experiment(e, own_variant(e), opts);
  EXPECT_FALSE(m.variants[0].executed);
  EXPECT_EQ(m.variants[0].records.size(), 10u);  // the decoder still runs: it is the workload
  ASSERT_EQ(m.variants[0].decoder.size(), 10u);
  for (const DecoderStepFigures& d : m.variants[0].decoder) EXPECT_FALSE(d.has_measured);
  EXPECT_EQ(m.variants[0].phases[1].measured_s, 0.0);
  EXPECT_FALSE(run_to_json(m)["strategies"][0]["phases"]["decode"].contains("measured_s"));
}

}  // namespace
}  // namespace moesim
