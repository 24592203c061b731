// `moesim serve --format html` (docs/serve.md): a self-contained page of a serving run, with the headline numbers
// (tokens/s per GPU and per user, TTFT, TPOT and end-to-end latency, balance, steps, preemptions; the two
// counterfactuals beside the run), the run over time (batch and prefill tokens, KV use, step time, balance ratio,
// each downsampled to at most 1000 points a line) and the TTFT and TPOT distributions over requests, as inline SVG:
// no scripts, nothing fetched. Host only. Covered by tests/report/serve_report_test.cpp.
#pragma once

#include <string>
#include <vector>

#include "src/serve/serve_run.hpp"
#include "src/serve/serve_search.hpp"

namespace moesim {

// `title` heads the page; `header_lines` (the setting, as the table prints it) are shown as they are, in a <pre>.
// `counterfactuals`: the balanced-routing and balanced-attention columns beside the actual one.
std::string format_serve_html(const std::string& title, const std::vector<std::string>& header_lines,
                              const ServeResult& r, bool counterfactuals);

// `moesim serve --search --format html`: the best layouts under the targets (a table, balanced routing beside
// actual) and the fronts of output tokens/s a GPU against tokens/s a user, actual and balanced routing, as one
// chart. `best`, `front` and `balanced_front` are [layout, point] pairs as serve_search.hpp gives them.
std::string format_search_html(const std::string& title, const std::vector<std::string>& header_lines,
                               const std::vector<SearchLayout>& layouts,
                               const std::vector<std::pair<size_t, size_t>>& best,
                               const std::vector<std::pair<size_t, size_t>>& front,
                               const std::vector<std::pair<size_t, size_t>>& balanced_front);

}  // namespace moesim
