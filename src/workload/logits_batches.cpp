// Batches of router logits for the synthetic and logits workloads (see logits_batches.hpp).
#include "src/workload/logits_batches.hpp"

#include "src/common/error.hpp"
#include "src/workload/logits_file.hpp"
#include "src/workload/synthetic_logits.hpp"

namespace moesim {

namespace {

// Seeds of the warm-up batches' noise and token ids: a stream apart from the measured batches' seed + 1000003 (b + 1)
// and seed + b.
constexpr uint64_t kWarmupSeedOffset = 0x9e3779b97f4a7c15ull;

// Batch `step` of the synthetic workload: fresh noise from `noise_seed` on the popularity at that step.
LogitsBatch synthetic_batch(const Experiment& e, int64_t step, uint64_t noise_seed, uint64_t ids_seed) {
  const int E = e.model.experts;
  const std::vector<float> bias = popularity_at(e.workload, E, e.router.groups, e.workload.seed, step);
  LogitsBatch batch;
  batch.num_tokens = e.workload.batch;
  batch.logits = synthetic_logits(batch.num_tokens, E, 0.0, noise_seed);
  for (int64_t t = 0; t < batch.num_tokens; ++t)
    for (int x = 0; x < E; ++x) batch.logits[t * E + x] += bias[x];
  batch.token_ids = synthetic_token_ids(batch.num_tokens, e.model.vocab, ids_seed);
  return batch;
}

}  // namespace

std::vector<LogitsBatch> make_warmup_batches(const Experiment& e, int count) {
  if (e.workload.source != WorkloadSource::synthetic) {
    throw InputError(e.source_file + ": workload.source: '" + to_string(e.workload.source) +
                     "' draws no warm-up batches; expected synthetic");
  }
  std::vector<LogitsBatch> batches;
  for (int j = 0; j < count; ++j) {
    const uint64_t seed = e.workload.seed + kWarmupSeedOffset * static_cast<uint64_t>(j + 1);
    batches.push_back(synthetic_batch(e, j - count, seed, seed + 1));
  }
  return batches;
}

std::vector<LogitsBatch> make_logits_batches(const Experiment& e, const std::string& logits_path) {
  std::vector<LogitsBatch> batches;
  const int E = e.model.experts;
  if (e.workload.source == WorkloadSource::synthetic) {
    for (int b = 0; b < e.workload.batches; ++b) {
      batches.push_back(synthetic_batch(e, b, e.workload.seed + 1000003ull * (b + 1), e.workload.seed + b));
    }
    return batches;
  }
  if (e.workload.source != WorkloadSource::logits) {
    throw InputError(e.source_file + ": workload.source: '" + to_string(e.workload.source) +
                     "' is not a batch workload; expected synthetic or logits");
  }
  LogitsMatrix m = read_logits_file(logits_path);
  if (m.num_experts != E) {
    throw InputError(logits_path + ": expected " + std::to_string(E) + " columns (model.experts), got " +
                     std::to_string(m.num_experts));
  }
  LogitsBatch batch;
  batch.num_tokens = m.num_tokens;
  batch.logits = std::move(m.values);
  batch.token_ids = synthetic_token_ids(batch.num_tokens, e.model.vocab, e.workload.seed);
  batches.push_back(std::move(batch));
  return batches;
}

}  // namespace moesim
