// The batches of router logits that the `synthetic` and `logits` workloads route: batch b of a
// synthetic workload draws fresh noise on the same expert popularity (the bias keeps the seed), so
// consecutive batches model steps of one deployment; a logits file is one batch. Token ids (for hash
// gating) come from the seed. Host only; used by the single-process pipeline and the MPI engine,
// so both route exactly the same logits. Covered by tests/workload/synthetic_logits_test.cpp.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "src/config/experiment.hpp"

namespace moesim {

struct LogitsBatch {
  int64_t num_tokens = 0;
  std::vector<float> logits;       // [num_tokens, model.experts]
  std::vector<int64_t> token_ids;  // [num_tokens]
};

// `logits_path` is the resolved workload.path for the logits source (unused for synthetic).
// Throws InputError when the file's column count is not model.experts or the source is neither.
std::vector<LogitsBatch> make_logits_batches(const Experiment& e, const std::string& logits_path);

// A synthetic workload's warm-up batches (placement.plan_from past): `count` batches drawn as the measured
// ones are, at the steps before the first (-count .. -1, which workload.drift turns the popularity through),
// from seeds no measured batch uses. Throws InputError for any other source.
std::vector<LogitsBatch> make_warmup_batches(const Experiment& e, int count);

}  // namespace moesim
