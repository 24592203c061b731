// Tests src/sweep/published_train: the training tables parse (the shipped ones, and bad input named by line and
// column), the shipped training figures (TrainFit) are the fit of the fitted tables, the validation meets the
// numbers docs/training.md states (forced-balance rows, per table, the forced-balance / real-router pairs), and
// Megatron-LM's FLOP count is the sources' own (TFLOP/s over tokens/s). Host only.
#include "src/sweep/published_train.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>

#include "src/common/error.hpp"
#include "src/common/median.hpp"
#include "src/config/load_config.hpp"
#include "src/train/train_fit.hpp"
#include "src/train/train_flops.hpp"

namespace moesim {
namespace {

const TrainingValidation& shipped() {
  static const TrainingValidation v = validate_training(load_training_tables("all"));
  return v;
}

const std::string kHead = std::string(kTrainingHeader) + "\n";
const std::string kRow =
    "mixtral-8x7b,h100-sxm,16,8,1,2,,8,1,1,2048,32,1,bf16,,alltoall,forced_balance,dropless,step_s,1.5,s,own,small";

TEST(PublishedTrain, TheShippedTablesParse) {
  const std::vector<TrainingTable> tables = load_training_tables("all");
  std::map<std::string, size_t> rows;
  for (const TrainingTable& t : tables) rows[t.name] = t.points.size();
  EXPECT_EQ(rows["megatron-bridge-performance-summary"], 14u);
  EXPECT_EQ(rows["megatron-moe-modelzoo-qwen3-235b"], 10u);
  EXPECT_EQ(rows["megatron-bridge-moe-comm-overlap-qwen3-30b"], 2u);
  EXPECT_EQ(rows["megatron-lm-moe-readme-mixtral"], 1u);
  EXPECT_EQ(rows["megatron-moe-modelzoo-qwen3-235b-long-context"], 8u);
  EXPECT_TRUE(is_training_table(kHead + kRow));
  EXPECT_FALSE(is_training_table("gpu,dtype\n"));
}

TEST(PublishedTrain, ARowReadsEveryColumn) {
  const TrainingTable t = parse_training_csv(
      std::string(kTrainingHeader) + ",ep_overlap,fitted,extra\n" +
          "qwen3-30b-a3b,h100-sxm,32,8,2,1,,16,1,2,4096,32,1,fp8,moe,hybridep,rank_overload:1.3,1.25,mfu,25,%,own,n,1,0,x\n",
      "t.csv");
  ASSERT_EQ(t.points.size(), 1u);
  const TrainingPoint& p = t.points[0];
  EXPECT_EQ(p.train.gpus, 32);
  EXPECT_EQ(p.devices_per_node, 8);
  EXPECT_EQ(p.train.tp, 2);
  EXPECT_EQ(p.train.vpp, 1);  // empty: 1
  EXPECT_EQ(p.train.cp, 2);
  EXPECT_EQ(p.train.precision, TrainPrecision::fp8);
  EXPECT_EQ(p.train.recompute, Recompute::moe);
  EXPECT_EQ(p.train.dispatcher, Dispatcher::hybridep);
  EXPECT_EQ(p.train.routing.kind, TrainRoutingKind::rank_overload);
  EXPECT_DOUBLE_EQ(p.train.routing.value, 1.3);
  EXPECT_DOUBLE_EQ(p.capacity_factor, 1.25);
  EXPECT_EQ(p.quantity, TrainQuantity::mfu);
  EXPECT_TRUE(p.train.ep_overlap);
  EXPECT_FALSE(p.fitted);
}

TEST(PublishedTrain, BadInputNamesTheLineAndTheColumn) {
  const auto error_of = [](const std::string& text) -> std::string {
    try {
      const TrainingTable t = parse_training_csv(text, "t.csv");
      validate_training({t});
    } catch (const InputError& e) {
      return e.what();
    }
    return "";
  };
  auto row = [](const std::string& column_value, int index) {
    std::vector<std::string> f;
    std::string cell;
    for (char c : kRow + ",") {
      if (c == ',') {
        f.push_back(cell);
        cell.clear();
      } else {
        cell += c;
      }
    }
    f[static_cast<size_t>(index)] = column_value;
    std::string out;
    for (size_t i = 0; i < f.size(); ++i) out += (i ? "," : "") + f[i];
    return kHead + out + "\n";
  };
  EXPECT_NE(error_of("model,gpu\n").find("t.csv:1: header: expected the columns model,gpu,gpus"), std::string::npos);
  EXPECT_NE(error_of(kHead).find("t.csv: expected at least one measurement row"), std::string::npos);
  EXPECT_NE(error_of("").find("expected the header line"), std::string::npos);
  EXPECT_NE(error_of(row("nosuch", 0)).find("t.csv:2: model: expected a shipped model config"), std::string::npos);
  EXPECT_NE(error_of(row("nosuch", 1)).find("t.csv:2: gpu:"), std::string::npos);
  EXPECT_NE(error_of(row("0", 2)).find("t.csv:2: gpus: expected an integer"), std::string::npos);
  EXPECT_NE(error_of(row("fp4", 13)).find("t.csv:2: precision: expected one of bf16"), std::string::npos);
  EXPECT_NE(error_of(row("nccl", 15)).find("t.csv:2: dispatcher:"), std::string::npos);
  EXPECT_NE(error_of(row("power_law:1", 16)).find("t.csv:2: routing:"), std::string::npos);
  EXPECT_NE(error_of(row("0", 17)).find("t.csv:2: capacity_factor: expected a number in (0, 1000] or dropless"),
            std::string::npos);
  EXPECT_NE(error_of(row("steps", 18)).find("t.csv:2: quantity:"), std::string::npos);
  EXPECT_NE(error_of(row("-1", 19)).find("t.csv:2: measured: expected a positive number"), std::string::npos);
  EXPECT_NE(error_of(row("ms", 20)).find("t.csv:2: unit: expected s for quantity step_s"), std::string::npos);
  EXPECT_NE(error_of(row("", 21)).find("t.csv:2: source:"), std::string::npos);
  EXPECT_NE(error_of(kHead + kRow + ",extra\n").find("t.csv:2: row: expected 23 fields"), std::string::npos);
  // The layout's checks name the column: 15 GPUs are no multiple of PP 2; 24 leave 12 a stage, which EP 8 cannot
  // divide.
  EXPECT_NE(error_of(row("15", 2)).find("t.csv:2: gpus: expected a multiple of"), std::string::npos);
  EXPECT_NE(error_of(row("24", 2)).find("t.csv:2: ep: expected ep x etp dividing"), std::string::npos);
  EXPECT_NE(error_of(row("mxfp8", 13)).find("t.csv:2: precision: expected bf16, fp8 or fp8_blockwise on h100-sxm"),
            std::string::npos);
}

TEST(PublishedTrain, TheShippedFiguresAreTheFit) {
  // TrainFit (src/train/train_fit.hpp) ships the fit of every fitted table, rounded to 4 digits.
  const TrainFigures& f = shipped().fit;
  EXPECT_NEAR(f.gemm_efficiency_bf16, TrainFit::gemm_efficiency_bf16, 1e-3 * TrainFit::gemm_efficiency_bf16);
  EXPECT_NEAR(f.gemm_efficiency_fp8, TrainFit::gemm_efficiency_fp8, 1e-3 * TrainFit::gemm_efficiency_fp8);
  EXPECT_NEAR(f.gemm_efficiency_mxfp8, TrainFit::gemm_efficiency_mxfp8, 1e-3 * TrainFit::gemm_efficiency_mxfp8);
  EXPECT_NEAR(f.layer_overhead_s * 1e6, TrainFit::layer_overhead_us, 1e-3 * TrainFit::layer_overhead_us);
  EXPECT_NEAR(f.ep_overlap_fraction, TrainFit::ep_overlap_fraction, 1e-3);
  EXPECT_DOUBLE_EQ(f.attention_efficiency, TrainFit::attention_efficiency);  // cited, not fitted
}

TEST(PublishedTrain, TheValidationMeetsItsStatedNumbers) {
  const TrainingValidation& v = shipped();
  // docs/training.md: the forced-balance rows within 15 % median, no table's forced-balance rows worse than 25 %.
  EXPECT_LE(v.forced_model.median_abs, 0.15);
  for (size_t t = 0; t < v.tables.size(); ++t) {
    std::vector<double> errors;
    for (const TrainingRow& r : v.rows)
      if (r.table == static_cast<int>(t) && r.point.train.routing.kind == TrainRoutingKind::forced_balance)
        errors.push_back(std::fabs(r.error(false)));
    if (!errors.empty()) EXPECT_LE(median(errors), 0.25) << v.tables[t].name;
  }
  // The four forced-balance / real-router pairs of the long-context table: the predicted time ratio within 0.08 of
  // the measured one, median over the pairs.
  std::vector<double> pair_errors;
  for (const RouterPair& p : v.pairs) pair_errors.push_back(std::fabs(p.error()));
  ASSERT_EQ(pair_errors.size(), 4u);
  EXPECT_LE(median(pair_errors), 0.08);
  // A held-out table's held-out column is the shipped fit's; a fitted one's is another fit.
  for (const TrainingTableResult& t : v.tables) {
    if (t.fitted) {
      EXPECT_NE(t.held_out_fit.gemm_efficiency_bf16, v.fit.gemm_efficiency_bf16) << t.name;
    } else {
      EXPECT_EQ(t.held_out.median_abs, t.model.median_abs) << t.name;
    }
  }
}

TEST(PublishedTrain, MegatronFlopCountIsTheSourcesOwn) {
  // Megatron-Bridge prints tokens/s and TFLOP/s for each row: their ratio is its FLOPs per token, which moesim's
  // count (train_flops.hpp, Megatron-LM's num_floating_point_operations) must equal. gpt-oss-120b is left out:
  // Bridge counts it with a formula of its own (sliding-window layers, head width hidden / heads).
  const TrainingValidation& v = shipped();
  int checked = 0;
  for (const TrainingRow& a : v.rows) {
    if (a.point.quantity != TrainQuantity::tokens_per_s_per_gpu || a.point.model == "gpt-oss-120b") continue;
    for (const TrainingRow& b : v.rows) {
      if (b.point.quantity != TrainQuantity::tflops_per_gpu || b.point.model != a.point.model ||
          b.point.gpu != a.point.gpu || b.table != a.table)
        continue;
      const double source = b.point.measured * 1e12 / a.point.measured;
      EXPECT_NEAR(a.step.model_flops_per_token / source, 1.0, 0.01) << a.point.model << " on " << a.point.gpu;
      ++checked;
    }
  }
  EXPECT_EQ(checked, 6);
}

}  // namespace
}  // namespace moesim
