// Tests src/sweep/published_comm: the communication-table reader (every column, one-line errors naming the
// line and column), the split from the kernel tables, the fit recovering known figures, the leave-one-
// table-out column, and the shipped all-to-all figures (A2aPooledFit) being the fit over the built-in
// tables. Host only.
#include "src/sweep/published_comm.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <string>

#include "src/common/error.hpp"
#include "src/cost/placement.hpp"
#include "tests/support/run_cli.hpp"

namespace moesim {
namespace {

const std::string kHeader = kCommHeader;

std::string table(const std::string& rows) { return kHeader + "\n" + rows; }

TEST(PublishedComm, ReadsEveryColumn) {
  const CommTable t = parse_comm_csv(
      table("dispatch,h800,normal,64,4096,7168,8,256,fp8,uniform_random,2370.5,deepseek-ai/DeepEP,\"a, quoted note\",4,\n"
            "combine,h800,normal,8,128,7168,8,256,bf16,balanced,31,src,,,1\n"),
      "t-a2a.csv");
  EXPECT_EQ(t.name, "t-a2a");
  EXPECT_EQ(t.hardware.name, "h800");
  ASSERT_EQ(t.points.size(), 2u);
  const CommPoint& p = t.points[0];
  EXPECT_EQ(p.phase, CommPhase::dispatch);
  EXPECT_EQ(p.kernel, A2aKernel::normal);
  EXPECT_EQ(p.ep, 64);
  EXPECT_EQ(p.tokens_per_rank, 4096);
  EXPECT_EQ(p.hidden, 7168);
  EXPECT_EQ(p.top_k, 8);
  EXPECT_EQ(p.experts, 256);
  EXPECT_EQ(p.dtype, A2aDtype::fp8);
  EXPECT_EQ(p.fanout, A2aFanout::random);
  EXPECT_DOUBLE_EQ(p.measured_s, 2370.5e-6);
  EXPECT_EQ(p.notes, "a, quoted note");
  EXPECT_EQ(p.node_limit, 4);
  EXPECT_EQ(p.devices_per_node, 0);
  EXPECT_EQ(t.points[1].phase, CommPhase::combine);
  EXPECT_EQ(t.points[1].fanout, A2aFanout::spread);
  EXPECT_EQ(t.points[1].devices_per_node, 1);
  // The model input: every rank holds tokens x top_k assignments, the point's devices_per_node.
  const CommModelInput in = comm_model_input(t.points[1], t.hardware);
  EXPECT_EQ(in.hardware.devices_per_node, 1);
  EXPECT_EQ(in.traffic.device_assignments, std::vector<int64_t>(8, 128 * 8));
  EXPECT_DOUBLE_EQ(in.traffic.dispatch_bytes, 14336);
}

TEST(PublishedComm, BadCellsNameTheLineAndColumn) {
  const std::string good = "dispatch,h800,normal,8,128,7168,8,256,fp8,uniform_random,31,src,,,";
  struct Case {
    std::string text, needle;
  };
  const Case cases[] = {
      {"phase,gpu\n" + good + "\n", "t.csv:1: header"},
      {table("gather" + good.substr(8) + "\n"), "t.csv:2: phase"},
      {table("dispatch,nosuchgpu,normal,8,128,7168,8,256,fp8,uniform_random,31,src,,,\n"), "t.csv:2: gpu"},
      {table("dispatch,h800,fast,8,128,7168,8,256,fp8,uniform_random,31,src,,,\n"), "t.csv:2: kernel"},
      {table("dispatch,h800,normal,1,128,7168,8,256,fp8,uniform_random,31,src,,,\n"), "t.csv:2: ep"},
      {table("dispatch,h800,normal,8,0,7168,8,256,fp8,uniform_random,31,src,,,\n"), "t.csv:2: tokens_per_rank"},
      {table("dispatch,h800,normal,8,128,7168,300,256,fp8,uniform_random,31,src,,,\n"), "t.csv:2: top_k"},
      {table("dispatch,h800,normal,8,128,7168,8,256,int4,uniform_random,31,src,,,\n"), "t.csv:2: dtype"},
      {table("dispatch,h800,normal,8,128,7168,8,256,fp8,zipf,31,src,,,\n"), "t.csv:2: routing"},
      {table("dispatch,h800,normal,8,128,7168,8,256,fp8,uniform_random,-1,src,,,\n"), "t.csv:2: measured_us"},
      {table("dispatch,h800,normal,8,128,7168,8,256,fp8,uniform_random,31,,,,\n"), "t.csv:2: source"},
      {table("dispatch,h800,normal,8,128,7168,8,256,fp8,uniform_random,31,src,,0,\n"), "t.csv:2: node_limit"},
      {table("dispatch,h800,normal,8,128,7168,8,256,fp8,uniform_random,31,src\n"), "t.csv:2: row"},
      {table(good + "\ncombine,h100-sxm,normal,8,128,7168,8,256,bf16,uniform_random,31,src,,,\n"), "t.csv:3: gpu"},
      {table(good + "\ncombine,h800,low_latency,8,128,7168,8,256,bf16,uniform_random,31,src,,,\n"), "t.csv:3: kernel"},
  };
  for (const Case& c : cases) {
    try {
      parse_comm_csv(c.text, "t.csv");
      ADD_FAILURE() << "expected InputError for " << c.needle;
    } catch (const InputError& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find(c.needle), std::string::npos) << m;
      EXPECT_EQ(m.find('\n'), std::string::npos) << m;
    }
  }
  EXPECT_THROW(parse_comm_csv("", "t.csv"), InputError);
  EXPECT_THROW(parse_comm_csv(kHeader + "\n", "t.csv"), InputError);
}

TEST(PublishedComm, KernelAndCommunicationTablesAreReadApart) {
  EXPECT_TRUE(is_comm_table(kHeader + "\n"));
  EXPECT_FALSE(is_comm_table(std::string(kPublishedHeader) + "\n"));
  const std::vector<CommTable> comm = load_published_comm("all");
  ASSERT_GE(comm.size(), 6u);
  for (const CommTable& t : comm) EXPECT_NE(t.name.find("-a2a"), std::string::npos) << t.name;
  for (const PublishedTable& t : load_published("all")) EXPECT_EQ(t.name.find("-a2a"), std::string::npos) << t.name;
}

TEST(PublishedComm, FitRecoversKnownFigures) {
  // Points made by the model itself with known figures on two profiles and both kernels' link mixes: the
  // fit finds them again.
  const A2aFigures truth{25e-6, 40e-6, 0.6, 0.8};
  std::vector<CommSample> samples;
  for (const char* gpu : {"h800", "h100-sxm"}) {
    HardwareRef ref;
    ref.name = gpu;
    const HardwareProfile hw = load_hardware_profile(ref, "");
    for (int ep : {8, 16, 32}) {
      for (int64_t tokens : {4, 64, 1024}) {
        for (CommPhase phase : {CommPhase::dispatch, CommPhase::combine}) {
          CommPoint p;
          p.phase = phase;
          p.kernel = A2aKernel::low_latency;
          p.ep = ep;
          p.tokens_per_rank = tokens;
          p.hidden = 7168;
          p.top_k = 8;
          p.experts = 256;
          p.dtype = A2aDtype::bf16;
          CommSample s{p, comm_model_input(p, hw), 1.0};
          s.point.measured_s = comm_time_s(p, s.input, truth);
          samples.push_back(s);
        }
      }
    }
  }
  const CommFit fit = fit_comm(samples);
  EXPECT_EQ(fit.points, static_cast<int>(samples.size()));
  // The floor prior pulls a little (its weight is small against 36 exact points).
  EXPECT_NEAR(fit.figures.dispatch_floor_s, truth.dispatch_floor_s, 1.5e-6);
  EXPECT_NEAR(fit.figures.combine_floor_s, truth.combine_floor_s, 1.5e-6);
  EXPECT_NEAR(fit.figures.scale_up_efficiency, truth.scale_up_efficiency, 0.02);
  EXPECT_NEAR(fit.figures.scale_out_efficiency, truth.scale_out_efficiency, 0.02);
}

TEST(PublishedComm, ShippedFiguresAreTheFitOverTheBuiltInTables) {
  // A2aPooledFit carries each family's fit over every built-in table; a change of table or model must
  // refit it (docs/cost-model.md "The all-to-all").
  const CommValidation v = validate_comm(load_published_comm("all"));
  ASSERT_EQ(v.families.size(), 2u);
  for (const CommFamily& f : v.families) {
    HardwareProfile hw;  // the defaults: A2aPooledFit
    const A2aFigures shipped = a2a_figures(hw, f.kernel);
    SCOPED_TRACE(to_string(f.kernel));
    EXPECT_NEAR(f.fit.figures.dispatch_floor_s / shipped.dispatch_floor_s, 1.0, 1e-3);
    EXPECT_NEAR(f.fit.figures.combine_floor_s / shipped.combine_floor_s, 1.0, 1e-3);
    EXPECT_NEAR(f.fit.figures.scale_up_efficiency / shipped.scale_up_efficiency, 1.0, 1e-3);
    EXPECT_NEAR(f.fit.figures.scale_out_efficiency / shipped.scale_out_efficiency, 1.0, 1e-3);
  }
  // Every table's held-out column comes from its family's other tables.
  for (const CommTableResult& t : v.tables) EXPECT_EQ(t.held_out_basis, "the family's other tables") << t.table.name;
  // A table alone has nothing to hold it out against: the shipped figures.
  const CommValidation one = validate_comm({load_published_comm("all").front()});
  EXPECT_EQ(one.tables.front().held_out_basis, "none");
  for (const CommRow& r : one.rows) EXPECT_EQ(r.held_out_s, r.model_s);
}

}  // namespace
}  // namespace moesim

namespace moesim {
namespace {

// The model column is the all-to-all `run` prints: an expert-parallel layer over the row's GPUs with every
// expert's load even (the benchmark's tokens x top-k spread over the experts, round-robin placement) costs
// the same dispatch and combine through model_moe_layer.
TEST(PublishedComm, ModelColumnIsTheAllToAllRunPrints) {
  const CommValidation v = validate_comm(load_published_comm("all"));
  int compared = 0;
  for (const CommRow& r : v.rows) {
    const CommPoint& p = r.point;
    if (p.fanout != A2aFanout::random || p.node_limit > 0 || p.devices_per_node > 0) continue;
    if (p.experts % p.ep != 0 || (p.tokens_per_rank * p.ep * p.top_k) % p.experts != 0) continue;
    LayerCostInput in;
    in.hidden = p.hidden;
    in.ffn = 256;
    in.num_experts = p.experts;
    in.top_k = p.top_k;
    in.format = Dtype::bf16;
    in.num_tokens = p.tokens_per_rank * p.ep;
    in.load.assign(p.experts, in.num_tokens * p.top_k / p.experts);
    in.placement.kind = PlacementKind::expert_parallel;
    in.placement.policy = PlacementPolicy::round_robin;
    in.placement.devices = p.ep;
    in.placement.a2a_kernel = p.kernel;
    in.placement.dispatch_dtype = in.placement.combine_dtype = p.dtype;
    const LayerCost c = model_moe_layer(v.tables[static_cast<std::size_t>(r.table)].table.hardware, in);
    const double run_s = p.phase == CommPhase::dispatch ? c.a2a.dispatch.time_s : c.a2a.combine.time_s;
    EXPECT_NEAR(run_s / r.model_s, 1.0, 1e-12) << v.tables[static_cast<std::size_t>(r.table)].table.name << " line "
                                               << p.line;
    ++compared;
  }
  EXPECT_GE(compared, 10);
}

}  // namespace
}  // namespace moesim

namespace moesim {
namespace {

// docs/cost-model.md "The all-to-all" quotes the communication tables' error summary as `validate
// --published all` prints it.
TEST(PublishedCommCli, CostModelDocQuotesTheCurrentSummary) {
  const std::string doc = testing::read_text(std::string(MOESIM_SOURCE_DIR) + "/docs/cost-model.md");
  const std::string marker = "dispatch/combine tables, `validate --published all` (held by tests/sweep/published_comm_test.cpp against this page):";
  const auto at = doc.find(marker);
  ASSERT_NE(at, std::string::npos) << "the doc lost its marker";
  const auto open = doc.find("```\n", at);
  const auto close = doc.find("```", open + 4);
  ASSERT_NE(close, std::string::npos);
  const std::string quoted = doc.substr(open + 4, close - open - 4);
  const auto r = testing::run_cli("validate --published all");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto section = r.out.find("published expert-parallel dispatch/combine times");
  ASSERT_NE(section, std::string::npos);
  const auto from = r.out.find("error per table", section);
  ASSERT_NE(from, std::string::npos);
  EXPECT_EQ(quoted, r.out.substr(from)) << "regenerate the block: moesim validate --published all";
}

// The gate holds the communication tables on their own, and a communication table validates alone.
TEST(PublishedCommCli, GateHoldsTheCommunicationTables) {
  const std::string table = std::string(MOESIM_SOURCE_DIR) + "/data/validation/nccl-ep-low-latency-h100-a2a.csv";
  const auto pass = testing::run_cli("validate --published " + table + " --column model --max-median-error 50%");
  EXPECT_EQ(pass.exit_code, 0) << pass.err;
  EXPECT_NE(pass.out.find("nccl-ep-low-latency-h100-a2a"), std::string::npos) << pass.out;
  const auto fail = testing::run_cli("validate --published " + table + " --column model --max-median-error 0.1%");
  EXPECT_EQ(fail.exit_code, 1) << fail.err;
  EXPECT_NE(fail.err.find("communication tables' model column"), std::string::npos) << fail.err;
  const auto ideal = testing::run_cli("validate --published " + table + " --column ideal --max-median-error 50%");
  EXPECT_EQ(ideal.exit_code, 2) << ideal.err;
  const auto json = testing::run_cli("validate --published " + table + " --format json");
  ASSERT_EQ(json.exit_code, 0) << json.err;
  EXPECT_NE(json.out.find("\"communication\""), std::string::npos);
}

}  // namespace
}  // namespace moesim

namespace moesim {
namespace {

// docs/cost-model.md "A published-scale case": the table's rows as the four runs print them.
TEST(PublishedCommCli, PublishedScaleCaseAsDocumented) {
  const std::string doc = testing::read_text(std::string(MOESIM_SOURCE_DIR) + "/docs/cost-model.md");
  const std::string cmd = "run " + std::string(MOESIM_SOURCE_DIR) +
                          "/configs/experiments/deepseek-v3-h800-ep32-decode.yaml --no-execute --format json";
  struct Case {
    double disp, comb, experts, exposed, layer, step;
  };
  std::vector<Case> cases;
  for (const char* extra : {"", " --set placement.overlap=two_batch", " --set router.gating=balanced",
                            " --set router.gating=balanced --set placement.overlap=two_batch"}) {
    const auto r = testing::run_cli(cmd + extra);
    ASSERT_EQ(r.exit_code, 0) << extra << ": " << r.err;
    const nlohmann::json j = nlohmann::json::parse(r.out);
    const nlohmann::json& s = j["strategies"][0];
    const nlohmann::json& m = s["modeled"]["expert_parallel"];
    const nlohmann::json& a = m["all_to_all"];
    const double exposed = a["exposed_s"].get<double>();
    cases.push_back({a["dispatch_s"].get<double>() * 1e6, a["combine_s"].get<double>() * 1e6,
                     (m["time_s"].get<double>() - exposed) * 1e6, exposed * 1e6, m["time_s"].get<double>() * 1e6,
                     s["phases"]["decode"]["modeled_step_s"].get<double>() * 1e3});
  }
  const auto row = [&](const std::string& head, double Case::*field, int precision) {
    std::string out = "| " + head + " |";
    for (const Case& c : cases) {
      char cell[32];
      std::snprintf(cell, sizeof cell, " %.*f |", precision, c.*field);
      out += cell;
    }
    return out;
  };
  for (const std::string& line :
       {row("dispatch (whole batch), us", &Case::disp, 1), row("combine (whole batch), us", &Case::comb, 1),
        row("experts as run, us", &Case::experts, 1), row("all-to-all exposed, us", &Case::exposed, 1),
        row("MoE layer (`ep_us`), us", &Case::layer, 1), row("step of 61 layers (TPOT), ms", &Case::step, 3)})
    EXPECT_NE(doc.find(line), std::string::npos) << "docs/cost-model.md lacks the row\n" << line;
}

}  // namespace
}  // namespace moesim
