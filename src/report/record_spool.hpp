// `--records` without holding the records: every step record's JSON goes to a temporary file as the run makes
// it (RunOptions::record_sink), and write_run_json writes the json report with those lists in their place,
// piece by piece, so that neither the records nor the report's text are ever whole in memory (issue 18).
// Host only. Covered by tests/workload/trace_records_test.cpp.
#pragma once

#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "src/pipeline/results.hpp"

namespace moesim {

// The record lists of a run's variants, in a temporary file in TMPDIR (else /tmp), unlinked as soon as it is
// made, so that it is gone when the spool is destroyed or the process ends. Records come variant by variant, each variant's in record order.
class RecordSpool {
 public:
  RecordSpool();  // ResourceError when no temporary file can be made
  ~RecordSpool();
  RecordSpool(const RecordSpool&) = delete;
  RecordSpool& operator=(const RecordSpool&) = delete;

  // Appends one record (record_to_json) of variant `variant` (>= every variant added before).
  void add(size_t variant, const nlohmann::json& record);

  // Writes variant's records as the elements of a JSON array whose `[` sits on a line indented by `indent`
  // spaces, as nlohmann's dump(2) would lay them out there ("[]" when it has none).
  void write_array(size_t variant, size_t indent, const std::function<void(const std::string&)>& out) const;

 private:
  std::FILE* file_ = nullptr;
  int64_t size_ = 0;
  struct Range {
    int64_t begin = 0;
    std::vector<uint32_t> bytes;  // each record's text length
  };
  std::vector<Range> variants_;
};

// The json report, byte for byte format_run(run, json) of the same run with its records kept
// (run_to_json(run).dump(2) + "\n"), with every step variant's strategies[].records read from `spool`; written
// to `out` in pieces of about a megabyte.
void write_run_json(const RunResult& run, const RecordSpool& spool, const std::function<void(const std::string&)>& out);

}  // namespace moesim
