// Batches of router logits for the synthetic and logits workloads (see logits_batches.hpp).
#include "src/workload/logits_batches.hpp"

#include "src/common/error.hpp"
#include "src/workload/logits_file.hpp"
#include "src/workload/synthetic_logits.hpp"

namespace moesim {

std::vector<LogitsBatch> make_logits_batches(const Experiment& e, const std::string& logits_path) {
  std::vector<LogitsBatch> batches;
  const int E = e.model.experts;
  if (e.workload.source == WorkloadSource::synthetic) {
    const std::vector<float> bias = expert_popularity_bias(E, e.workload.skew, e.workload.seed);
    for (int b = 0; b < e.workload.batches; ++b) {
      LogitsBatch batch;
      batch.num_tokens = e.workload.batch;
      batch.logits = synthetic_logits(batch.num_tokens, E, 0.0, e.workload.seed + 1000003ull * (b + 1));
      for (int64_t t = 0; t < batch.num_tokens; ++t)
        for (int x = 0; x < E; ++x) batch.logits[t * E + x] += bias[x];
      batch.token_ids = synthetic_token_ids(batch.num_tokens, e.model.vocab, e.workload.seed + b);
      batches.push_back(std::move(batch));
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
