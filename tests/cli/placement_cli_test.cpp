// End-to-end tests of the expert-parallel placement in the moesim binary: the plan in the JSON of a
// single-process run, of compare and of sweep rows, placement.rebalance_every acting without mpirun (epochs, predicted
// against realised balancedness, the gain), the new keys in `moesim config`, and one-line exit-2 errors
// for EPLB's preconditions. Host only.
#include <gtest/gtest.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <numeric>

#include "tests/support/run_cli.hpp"

namespace moesim {
namespace {

using testing::run_cli;

// Model only (no executed layer): 8 experts top-2, 512 tokens, skewed, on 4 devices with 4 replicas.
const std::string kEp =
    " --no-execute --set workload.batch=512 --set workload.skew=1.5 --set model.experts=8 --set model.top_k=2"
    " --set placement.kind=expert_parallel --set placement.devices=4 --set placement.replicas=4";

void expect_plan(const nlohmann::json& plan, int slots, int devices) {
  ASSERT_TRUE(plan.is_object());
  EXPECT_EQ(plan["expert"].size(), static_cast<size_t>(slots));
  EXPECT_EQ(plan["device"].size(), static_cast<size_t>(slots));
  EXPECT_EQ(plan["node"].size(), static_cast<size_t>(slots));
  const auto replicas = plan["replicas"].get<std::vector<int>>();
  EXPECT_EQ(std::accumulate(replicas.begin(), replicas.end(), 0), slots);
  EXPECT_EQ(plan["device_load"].size(), static_cast<size_t>(devices));
  for (const char* k : {"predicted_balancedness", "realised_balancedness"}) {
    EXPECT_GT(plan[k].get<double>(), 0.0) << k;
    EXPECT_LE(plan[k].get<double>(), 1.0) << k;
  }
  EXPECT_GE(plan["colocated_replicas"].get<int>(), 0);
}

TEST(PlacementCli, RunJsonCarriesThePlan) {
  const auto r = run_cli("run --format json" + kEp);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  const auto& ep = j["strategies"][0]["modeled"]["expert_parallel"];
  expect_plan(ep["plan"], 12, 4);
  // Replicas make the default policy EPLB's global one, planned from the loads of 8 warm-up batches routed
  // before the measured one (none of them it).
  EXPECT_EQ(ep["plan_source"], "EPLB global, planned from the loads of 8 warm-up batches");
  EXPECT_FALSE(j["strategies"][0].contains("rebalance"));
  // The oracle plans from the batch it is charged for: the planner's device loads sum to its kept assignments
  // (the plan shown is the last batch's).
  const auto o = run_cli("run --format json" + kEp + " --set placement.plan_from=oracle");
  ASSERT_EQ(o.exit_code, 0) << o.err;
  const auto jo = nlohmann::json::parse(o.out);
  const auto& oep = jo["strategies"][0]["modeled"]["expert_parallel"];
  EXPECT_EQ(oep["plan_source"], "EPLB global, oracle: planned from the very batch it is charged for");
  const auto load = jo["strategies"][0]["last_record_metrics"]["load"].get<std::vector<int64_t>>();
  const auto dl = oep["plan"]["device_load"].get<std::vector<double>>();
  EXPECT_DOUBLE_EQ(std::accumulate(dl.begin(), dl.end(), 0.0),
                   static_cast<double>(std::accumulate(load.begin(), load.end(), int64_t{0})));
  // Without replicas the default is the static contiguous split, which reads no loads.
  const auto s = run_cli("run --format json --no-execute --set placement.kind=expert_parallel --set placement.devices=4");
  ASSERT_EQ(s.exit_code, 0) << s.err;
  EXPECT_EQ(nlohmann::json::parse(s.out)["strategies"][0]["modeled"]["expert_parallel"]["plan_source"],
            "contiguous: static, no EPLB");
}

TEST(PlacementCli, CompareJsonCarriesThePlanPerStrategy) {
  const auto r = run_cli("compare --gating token_choice,hash --format json" + kEp);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["strategies"].size(), 2u);
  for (const auto& s : j["strategies"]) expect_plan(s["modeled"]["expert_parallel"]["plan"], 12, 4);
}

TEST(PlacementCli, SweepRowsCarryThePlan) {
  const auto r = run_cli("sweep --vary placement.replicas=0,4 --format json --set workload.batch=512"
                         " --set placement.kind=expert_parallel --set placement.devices=4");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["rows"].size(), 2u);
  expect_plan(j["rows"][0]["plan"], 8, 4);
  expect_plan(j["rows"][1]["plan"], 12, 4);
}

TEST(PlacementCli, HierarchicalPlanHasNodes) {
  const auto r = run_cli("run --format json" + kEp + " --set placement.policy=hierarchical --set placement.groups=4"
                         " --set placement.nodes=2");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto plan = nlohmann::json::parse(r.out)["strategies"][0]["modeled"]["expert_parallel"]["plan"];
  expect_plan(plan, 12, 4);
  EXPECT_EQ(plan["nodes"], 2);
  EXPECT_EQ(plan["node"].get<std::vector<int>>(), (std::vector<int>{0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1}));
}

TEST(PlacementCli, RebalanceEveryActsWithoutMpirun) {
  const auto r = run_cli("run --format json" + kEp + " --set workload.batches=6 --set placement.rebalance_every=2");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  const auto& rb = j["strategies"][0]["rebalance"];
  ASSERT_TRUE(rb.is_object());
  ASSERT_EQ(rb["epochs"].size(), 3u);  // planned at steps 0, 2, 4
  EXPECT_EQ(rb["epochs"][1]["first_step"], 2);
  ASSERT_EQ(rb["steps"].size(), 6u);
  EXPECT_TRUE(rb["steps"][4]["rebalanced"].get<bool>());
  EXPECT_EQ(rb["gain"]["steps"], 4);
  for (const auto& s : rb["steps"]) {
    EXPECT_GT(s["predicted_balancedness"].get<double>(), 0.0);
    EXPECT_GT(s["realised_balancedness"].get<double>(), 0.0);
  }
  // The headline expert-parallel cost is the mean of the batches, each on its epoch's plan (planned from past
  // loads); the last batch's own is the aggregate last.
  double mean = 0;
  for (const auto& st : rb["steps"]) mean += st["layer_s"].get<double>() / 6;
  EXPECT_NEAR(j["strategies"][0]["modeled"]["expert_parallel"]["time_s"].get<double>(), mean, 1e-12 * mean);
  EXPECT_DOUBLE_EQ(j["strategies"][0]["last_record_metrics"]["modeled_time_s"].get<double>(),
                   rb["steps"][5]["layer_s"].get<double>());
  const auto table = run_cli("run" + kEp + " --set workload.batches=6 --set placement.rebalance_every=2");
  ASSERT_EQ(table.exit_code, 0) << table.err;
  EXPECT_NE(table.out.find("rebalancing"), std::string::npos) << table.out;
}

TEST(PlacementCli, ConfigPrintsThePlacementKeys) {
  const auto r = run_cli("config");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* key : {"policy: auto", "plan_from: past", "warmup_batches: 8", "nodes: 1", "groups: 0",
                          "spread_replicas: false", "load_estimator: window", "ema_weight: 0.5"})
    EXPECT_NE(r.out.find(key), std::string::npos) << key;
}

TEST(PlacementCli, EplbPreconditionsExitTwoWithOneLine) {
  for (const std::string& args :
       {std::string(" --set placement.devices=5"), std::string(" --set placement.replicas=2"),
        std::string(" --set placement.policy=hierarchical --set router.groups=4 --set placement.nodes=3"),
        std::string(" --set placement.policy=round_robin")}) {
    SCOPED_TRACE(args);
    const auto r = run_cli("run" + kEp + args);
    EXPECT_EQ(r.exit_code, 2);
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_NE(r.err.find("placement."), std::string::npos) << r.err;
  }
}

// Every shipped GPU profile knows its scale-up domain: past it, a profile without a scale-out NIC figure (the
// PCIe cards) refuses the placement instead of costing it as one domain; within it, the run goes on.
TEST(PlacementCli, PastTheDomainWithoutANicExitsTwoNamingTheKey) {
  const std::string run = "run --no-execute --set model.experts=16 --set model.top_k=2 --set router.groups=1"
                          " --set router.topk_groups=1 --set placement.kind=expert_parallel --set hardware=";
  for (const std::string gpu : {"t4", "l4", "a10", "a100-40gb-pcie"}) {
    const auto past = run_cli(run + gpu + " --set model.dtype=fp16 --set placement.devices=16");
    EXPECT_EQ(past.exit_code, 2) << gpu << ": " << past.err;
    EXPECT_NE(past.err.find(gpu + ": hardware.inter_node_bandwidth_gbs"), std::string::npos) << past.err;
    const auto within = run_cli(run + gpu + " --set model.dtype=fp16 --set placement.devices=8");
    EXPECT_EQ(within.exit_code, 0) << gpu << ": " << within.err;
  }
}

}  // namespace
}  // namespace moesim

namespace moesim {
namespace {

TEST(PlacementCli, EplbQuestionInOneCommand) {
  // "What do 32 redundant experts buy at EP 32?": compare rows per placement.replicas, each costed on its own plan
  // (contiguous without replicas, EPLB from warm-up batches with them), and the gain line that answers it.
  const std::string ds = std::string(" ") + MOESIM_SOURCE_DIR + "/configs/deepseek-v3.yaml";
  const std::string setup = " --set placement.devices=32 --set workload.batch=8192 --set workload.batches=2";
  const auto c = run_cli("compare" + ds + " --vary placement.replicas=0,32" + setup);
  ASSERT_EQ(c.exit_code, 0) << c.err;
  EXPECT_NE(c.out.find("group_limited: 32 redundant experts: MoE layer "), std::string::npos) << c.out;
  const auto j = nlohmann::json::parse(run_cli("compare" + ds + " --vary placement.replicas=0,32" + setup +
                                               " --format json").out);
  ASSERT_EQ(j["strategies"].size(), 2u);
  const auto& without = j["strategies"][0]["modeled"]["expert_parallel"];
  const auto& with = j["strategies"][1]["modeled"]["expert_parallel"];
  EXPECT_EQ(without["plan_source"], "contiguous: static, no EPLB");
  EXPECT_EQ(with["plan_source"], "EPLB global, planned from the loads of 8 warm-up batches");
  EXPECT_GT(with["balancedness"].get<double>(), without["balancedness"].get<double>());
  EXPECT_LT(with["time_s"].get<double>(), without["time_s"].get<double>());
  // sweep validates each combined point whole, in either order of the axes, and says what replicas buy.
  for (const std::string& axes : {std::string(" --vary placement.devices=8,32 --vary placement.replicas=0,32"),
                                  std::string(" --vary placement.replicas=0,32 --vary placement.devices=8,32")}) {
    const auto s = run_cli("sweep" + ds + axes + " --set workload.batch=4096");
    ASSERT_EQ(s.exit_code, 0) << axes << "\n" << s.err;
    EXPECT_NE(s.out.find("placement.devices=32: 32 redundant experts: MoE layers "), std::string::npos) << s.out;
  }
  // An invalid combination is named once, in the user's spelling (5 devices split 256 experts contiguously, but
  // EPLB's packing of 288 slots needs a divisor).
  const auto bad = run_cli("sweep" + ds + " --vary placement.replicas=0,32 --vary placement.devices=5");
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("--vary placement.devices=5: placement.devices: expected a divisor of model.experts + "
                         "placement.replicas (288)"),
            std::string::npos)
      << bad.err;
  EXPECT_EQ(std::count(bad.err.begin(), bad.err.end(), '\n'), 1) << bad.err;
}

}  // namespace
}  // namespace moesim
