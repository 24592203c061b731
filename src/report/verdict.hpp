// The answer a run's report opens with: per strategy, one line saying what imbalance costs the modeled MoE
// layer, in percent and microseconds, and what skew saves where it saves (idle experts whose weights are not
// read), read from the primary placement's erosion (src/cost/placement.hpp Erosion, imbalance_total_s).
// The one place its wording and arithmetic live: `run` and `compare` tables and Markdown open with it.
// Host only. Covered by tests/report/verdict_test.cpp.
#pragma once

#include <string>
#include <vector>

#include "src/pipeline/results.hpp"

namespace moesim {

// What imbalance does to one modeled layer, in seconds: costs_s - saves_s = imbalance_total_s(erosion), each the
// headline's tile-phase mean (src/cost/placement.hpp Erosion).
struct ImbalanceVerdict {
  double costs_s = 0;  // what the uneven loads add: imbalance_cost_s (straggler, tiles, communication), and
                       // idle_saving_s where leaving experts idle costs instead of saving
  double saves_s = 0;  // what skew saves, >= 0: -idle_saving_s (experts left idle whose weights and row tiles
                       // balanced routing pays)
  double layer_s = 0;  // the modeled layer it is a share of (the erosion's actual_s)
};

// The verdict of one placement's headline erosion.
ImbalanceVerdict imbalance_verdict(const Erosion& erosion);

// "token_choice: imbalance costs 22 % of the layer (222 of 1025 us)" ("balanced: imbalance costs nothing (0 of
// 803 us)" where it costs and saves nothing), with ", saves 5 % (51 us: idle experts'
// weights not read)" where skew saves, and "; drops 0.12 %" (of its assignments) / "; leaves N tokens unrouted"
// where the routing does, and "; top expert 16 % (1.25x mean)" where its loads are uneven (the
// skew the figures rest on), and in the decode regime (in_decode_regime) "; decode regime: the kernel model's
// held-out error there is 10 % median (-4.6 % mean) on 184 published points" (DecodeRegimeError). Of the
// variant's headline (the primary placement, a mean over a run's batches or
// records); "" when nothing is modeled.
std::string verdict_line(const RunResult& run, const VariantResult& v);

// Whether a modeled placement answers in validate --published's decode regime with wide expert parallelism
// (src/sweep/published.hpp): expert parallel over at least kWideEp devices, at most kDecodeMaxTokens tokens
// routed a batch, on a GPU profile.
bool in_decode_regime(const RunResult& run, const ModeledPlacement& p);

// What redundant experts buy, one line per row with replicas against the row of the same label without them
// (compare --vary placement.replicas=0,32, or any EPLB plan against the static contiguous split):
// "token_choice: 32 redundant experts: MoE layer 2462 -> 679 us, 3.63x; balancedness 0.55 -> 0.81". Rows of the
// expert-parallel placement only; empty when no row pairs.
std::vector<std::string> replica_gain_lines(const RunResult& run);

}  // namespace moesim
