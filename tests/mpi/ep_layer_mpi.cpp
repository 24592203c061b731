// EpMoeLayer under mpirun (moesim_mpi_tests; CTest: -np 2, -np 3): the gathered output equals the
// single-process moe_forward_omp within kEpAbsTol + kEpRelTol |y|; loads and rows per (source rank, slot)
// equal the serial exchange reference exactly; rows are conserved; a rank without experts, uneven maps, EPLB
// replicas, padded layouts, shared experts, 0 and 1 tokens; repeats give the same bytes.
// `--fail-on-rank=R` feeds rank R a bad routing: the job must end with exit 2 naming the rank, not hang.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "src/common/error.hpp"
#include "src/distributed/ep_layer.hpp"
#include "src/distributed/ep_run.hpp"
#include "kernels/moe_layer.hpp"
#include "router/route.hpp"
#include "tests/support/router_support.hpp"
#include "src/workload/synthetic_logits.hpp"

namespace moesim {
namespace {

// True on every rank when `ok` holds on every rank.
bool all_ranks(bool ok) {
  const std::vector<double> all = ep_allgather({ok ? 1.0 : 0.0});
  for (double v : all)
    if (v == 0.0) return false;
  return true;
}

struct Case {
  std::string name;
  uint64_t seed = 1;
  int64_t num_tokens = 96;
  int num_experts = 8;
  int top_k = 2;
  int64_t hidden = 32, ffn = 48;
  int hot = 2;            // experts favoured by the logits
  double boost = 1.5;     // how much
  RouterConfig router;
  PlacementConfig placement;  // devices is set to the job's size
  int shared_experts = 0;
};

// The driver tests the exchange, not the planner: round-robin without replicas, the case's map, and
// EPLB's global packing with the replicas rounded up so that the job's ranks divide E + R.
PlacementConfig job_placement(PlacementConfig pc, int num_experts, int ranks) {
  pc.kind = PlacementKind::expert_parallel;
  pc.devices = ranks;
  if (!pc.map.empty()) {
    pc.policy = PlacementPolicy::map;
  } else if (pc.replicas > 0) {
    pc.policy = PlacementPolicy::global;
    pc.replicas += (ranks - (num_experts + pc.replicas) % ranks) % ranks;
  } else {
    pc.policy = PlacementPolicy::round_robin;
  }
  return pc;
}

// Runs one case on every rank; returns this rank's first failure ("" when none).
std::string run_case(const Case& c) {
  const int ranks = ep_num_ranks(), me = ep_rank();
  std::ostringstream fail;
  fail << c.name << " (seed " << c.seed << ", rank " << me << " of " << ranks << "): ";
  const std::vector<float> logits = test::skewed_logits(c.num_tokens, c.num_experts, c.seed, c.hot, c.boost);
  const RouteRequest req = test::make_request(logits, c.num_tokens, c.num_experts, c.top_k, c.seed);
  const Routing global = route_omp(c.router, req, nullptr);
  std::vector<int64_t> load(c.num_experts, 0);
  int64_t kept = 0;
  for (int64_t a = 0; a < global.num_assignments(); ++a) {
    load[global.expert[a]] += global.kept[a];
    kept += global.kept[a];
  }
  const PlacementConfig pc = job_placement(c.placement, c.num_experts, ranks);
  ExpertPlacement p = place_experts(load, pc);
  const ExpertWeights w = make_expert_weights(c.num_experts, c.hidden, c.ffn, c.seed);
  const ExpertWeights shared = make_expert_weights(c.shared_experts, c.hidden, c.ffn, c.seed + 17);
  const ExpertWeights* shared_ptr = c.shared_experts > 0 ? &shared : nullptr;
  const std::vector<float> x = synthetic_hidden(c.num_tokens, c.hidden, c.seed);

  const EpTokenShare share = ep_token_share(c.num_tokens, me, ranks);
  const Routing local = ep_local_routing(global, share);
  const std::vector<float> x_local(x.begin() + share.begin * c.hidden, x.begin() + share.end * c.hidden);
  std::vector<float> y_local(x_local.size(), -1.0f), y_again(x_local.size(), -2.0f);
  EpMoeLayer layer(w, shared_ptr, p, c.router.layout, c.router.block_size);
  EpRankStats st;
  std::vector<int64_t> gload, recv_counts;
  layer.forward(local, x_local.data(), y_local.data(), &st, &gload, &recv_counts);
  layer.forward(local, x_local.data(), y_again.data(), nullptr);
  const std::vector<float> y_all = ep_allgatherv(y_local);
  const std::vector<double> rows = ep_allgather({static_cast<double>(st.rows_received),
                                                 static_cast<double>(st.assignments_sent)});

  // The single-process layer on the whole batch.
  const DispatchPlan plan = plan_dispatch_omp(global, c.router.layout, c.router.block_size);
  std::vector<float> y_single(x.size());
  moe_forward_omp(w, shared_ptr, x.data(), global, plan, y_single.data(), nullptr);

  if (gload != load) return fail.str() + "global load differs from the routing's";
  // Each local slot's rows per source rank: exactly the serial exchange reference.
  const std::vector<int64_t> ref = ep_exchange_counts_ref(global, p, ranks);
  const std::vector<int32_t> slots = ep_rank_slots(p, me);
  const size_t num_slots = p.expert.size();
  if (st.local_slots != static_cast<int>(slots.size())) return fail.str() + "local slot count";
  for (int s = 0; s < ranks; ++s) {
    for (size_t m = 0; m < slots.size(); ++m) {
      if (recv_counts[s * slots.size() + m] != ref[s * num_slots + slots[m]]) {
        fail << "slot " << slots[m] << " got " << recv_counts[s * slots.size() + m] << " rows from rank " << s
             << ", reference " << ref[s * num_slots + slots[m]];
        return fail.str();
      }
    }
  }
  // Conservation: the rows the ranks send and receive both sum to the kept assignments; each rank
  // receives what the cost model's split gives its slots.
  assign_load(p, load);
  int64_t mine_expected = 0;
  for (int32_t i : slots) mine_expected += p.load[i];
  if (st.rows_received != mine_expected) {
    fail << "received " << st.rows_received << " rows, the placement's split gives " << mine_expected;
    return fail.str();
  }
  double received = 0, sent = 0;
  for (int r = 0; r < ranks; ++r) {
    received += rows[2 * r];
    sent += rows[2 * r + 1];
  }
  if (received != static_cast<double>(kept) || sent != static_cast<double>(kept)) {
    fail << "rows received " << received << ", sent " << sent << ", kept assignments " << kept;
    return fail.str();
  }
  if (st.local_tokens != share.size()) return fail.str() + "local token count";
  if (y_all.size() != y_single.size()) return fail.str() + "gathered output has the wrong size";
  for (size_t i = 0; i < y_all.size(); ++i) {
    if (!(std::fabs(y_all[i] - y_single[i]) <= kEpAbsTol + kEpRelTol * std::fabs(y_single[i]))) {
      fail << "output [token " << i / c.hidden << ", column " << i % c.hidden << "] " << y_all[i]
           << " vs single-process " << y_single[i];
      return fail.str();
    }
  }
  // (memcmp of zero bytes still needs valid pointers: a rank with no tokens has empty vectors.)
  if (!y_local.empty() && std::memcmp(y_local.data(), y_again.data(), sizeof(float) * y_local.size()) != 0)
    return fail.str() + "a second forward gave different bytes";
  return "";
}

void expect_case(const Case& c) {
  const std::string failure = run_case(c);
  EXPECT_TRUE(all_ranks(failure.empty())) << (failure.empty() ? "another rank failed (see its lines)" : failure);
}

TEST(EpLayerMpi, RoundRobinMatchesSingleProcess) {
  Case c;
  c.name = "round-robin";
  c.seed = 8101;
  c.num_tokens = 257;
  expect_case(c);
}

TEST(EpLayerMpi, RankHoldingNoExpertsWorks) {
  Case c;
  c.name = "last rank holds nothing";
  c.seed = 8102;
  const int ranks = ep_num_ranks();
  c.placement.map.resize(c.num_experts);
  for (int e = 0; e < c.num_experts; ++e) c.placement.map[e] = ranks > 1 ? e % (ranks - 1) : 0;
  expect_case(c);
  if (ranks > 1) {
    // And the empty rank really holds no slot.
    const PlacementConfig pc = job_placement(c.placement, c.num_experts, ranks);
    EXPECT_TRUE(ep_rank_slots(place_experts(std::vector<int64_t>(c.num_experts, 1), pc), ranks - 1).empty());
  }
}

TEST(EpLayerMpi, UnevenExpertCountsPerRankWork) {
  Case c;
  c.name = "uneven map, E = 7";
  c.seed = 8103;
  c.num_experts = 7;
  c.top_k = 3;
  const int ranks = ep_num_ranks();
  c.placement.map = {0, 0, 0, 0, 0, ranks - 1, ranks > 2 ? 1 : 0};
  expect_case(c);
}

TEST(EpLayerMpi, EplbReplicasSplitHotExperts) {
  Case c;
  c.name = "EPLB replicas";
  c.seed = 8104;
  c.num_tokens = 200;
  c.hot = 1;
  c.boost = 4.0;  // nearly every token picks expert 0
  c.placement.replicas = 3;
  expect_case(c);
}

TEST(EpLayerMpi, EveryTokenOnOneExpertAndTopKEqualsE) {
  Case c;
  c.name = "top_k == E";
  c.seed = 8105;
  c.num_experts = 5;
  c.top_k = 5;
  expect_case(c);
  Case one;
  one.name = "one hot expert";
  one.seed = 8106;
  one.top_k = 1;
  one.hot = 1;
  one.boost = 50.0;
  expect_case(one);
}

TEST(EpLayerMpi, ZeroAndOneToken) {
  for (int64_t n : {0, 1}) {
    Case c;
    c.name = std::to_string(n) + " tokens";
    c.seed = 8107 + static_cast<uint64_t>(n);
    c.num_tokens = n;
    expect_case(c);
  }
}

TEST(EpLayerMpi, PaddedLayoutsAndCapacityDrops) {
  Case block;
  block.name = "block layout";
  block.seed = 8110;
  block.router.layout = Layout::block;
  block.router.block_size = 16;
  block.placement.replicas = 2;
  expect_case(block);
  Case cap;
  cap.name = "capacity layout with drops";
  cap.seed = 8111;
  cap.router.capacity_factor = 1.0;
  cap.router.layout = Layout::capacity;
  expect_case(cap);
  Case ec;
  ec.name = "expert choice";
  ec.seed = 8112;
  ec.router.gating = Gating::expert_choice;
  expect_case(ec);
}

TEST(EpLayerMpi, SharedExpertsRunOnLocalTokens) {
  Case c;
  c.name = "shared experts";
  c.seed = 8113;
  c.shared_experts = 2;
  expect_case(c);
}

TEST(EpLayerMpi, RebalancedPlacementGivesTheSameOutput) {
  Case c;
  c.seed = 8114;
  const int ranks = ep_num_ranks(), me = ep_rank();
  const std::vector<float> logits = test::skewed_logits(c.num_tokens, c.num_experts, c.seed, 1, 3.0);
  const Routing global = route_omp(c.router, test::make_request(logits, c.num_tokens, c.num_experts, c.top_k), nullptr);
  const ExpertWeights w = make_expert_weights(c.num_experts, c.hidden, c.ffn, c.seed);
  const std::vector<float> x = synthetic_hidden(c.num_tokens, c.hidden, c.seed);
  const EpTokenShare share = ep_token_share(c.num_tokens, me, ranks);
  const Routing local = ep_local_routing(global, share);
  const std::vector<float> x_local(x.begin() + share.begin * c.hidden, x.begin() + share.end * c.hidden);
  PlacementConfig two;
  two.replicas = 2;
  const PlacementConfig pc = job_placement(two, c.num_experts, ranks);
  EpMoeLayer layer(w, nullptr, place_experts(std::vector<int64_t>(c.num_experts, 1), pc), Layout::dropless, 1);
  std::vector<float> before(x_local.size()), after(x_local.size());
  std::vector<int64_t> load;
  layer.forward(local, x_local.data(), before.data(), nullptr, &load);
  layer.set_placement(place_experts(load, pc));
  layer.forward(local, x_local.data(), after.data(), nullptr);
  bool ok = true;
  for (size_t i = 0; i < before.size(); ++i)
    ok = ok && std::fabs(before[i] - after[i]) <= kEpAbsTol + kEpRelTol * std::fabs(before[i]);
  EXPECT_TRUE(all_ranks(ok)) << "seed " << c.seed << " rank " << me;
}

// Prints only failures, prefixed with the rank (ranks other than 0 drop gtest's own printer).
class RankFailurePrinter : public ::testing::EmptyTestEventListener {
  void OnTestPartResult(const ::testing::TestPartResult& r) override {
    if (r.failed())
      std::fprintf(stderr, "[rank %d] %s:%d: %s\n", ep_rank(), r.file_name() ? r.file_name() : "?", r.line_number(),
                   r.summary());
  }
};

// Rank `bad` gets a routing with a token outside its share; the others go on into the exchange.
int fail_on_rank(int bad) {
  try {
    Case c;
    const int ranks = ep_num_ranks(), me = ep_rank();
    const std::vector<float> logits = test::random_logits(c.num_tokens, c.num_experts, c.seed);
    const Routing global =
        route_omp(c.router, test::make_request(logits, c.num_tokens, c.num_experts, c.top_k), nullptr);
    const ExpertWeights w = make_expert_weights(c.num_experts, c.hidden, c.ffn, c.seed);
    const PlacementConfig pc = job_placement(PlacementConfig{}, c.num_experts, ranks);
    EpMoeLayer layer(w, nullptr, place_experts(std::vector<int64_t>(c.num_experts, 1), pc), Layout::dropless, 1);
    const EpTokenShare share = ep_token_share(c.num_tokens, me, ranks);
    Routing local = ep_local_routing(global, share);
    if (me == bad && local.num_assignments() > 0) local.token[0] = static_cast<int32_t>(local.num_tokens + 5);
    std::vector<float> x(static_cast<size_t>(share.size() * c.hidden), 0.5f), y(x.size());
    layer.forward(local, x.data(), y.data(), nullptr);
  } catch (const Error& err) {
    ep_abort(err.exit_code(), "moesim_mpi_tests", err.what());
  }
  std::fprintf(stderr, "moesim_mpi_tests: rank %d finished although rank %d had bad input\n", ep_rank(), bad);
  return 0;
}

}  // namespace
}  // namespace moesim

int main(int argc, char** argv) {
  using namespace moesim;
  ep_mpi_init();
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--fail-on-rank=", 15) == 0) return fail_on_rank(std::atoi(argv[i] + 15));
  }
  ::testing::InitGoogleTest(&argc, argv);
  if (ep_rank() != 0) {
    ::testing::TestEventListeners& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new RankFailurePrinter);
  }
  int rc = RUN_ALL_TESTS();
  std::vector<double> all = ep_allgather({static_cast<double>(rc)});
  for (double v : all) rc = std::max(rc, static_cast<int>(v));
  return rc;
}
