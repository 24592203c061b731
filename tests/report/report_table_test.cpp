// Tests the meas_eff column of the run table, CSV and Markdown (src/report/report_table.cpp): "-" with a
// legend line naming the strategy and the reason when the measured times are noisy, the ratio otherwise.
// Noise is forced deterministically (execute.repeats 1 is noisy by rule) or cleared through the results,
// which are plain data. Host only.
#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

#include "src/config/load_config.hpp"
#include "src/pipeline/run_experiment.hpp"
#include "src/report/report.hpp"
#include "src/report/text_format.hpp"

namespace moesim {
namespace {

RunResult one_repeat_run() {
  const Experiment e =
      default_experiment({"workload.batch=64", "execute.hidden=16", "execute.ffn=32", "execute.repeats=1"});
  return run_experiment(e, own_variant(e), RunOptions{});
}

// The cell of `column` in the first data row under the header that names it: an aligned table's cells
// split on spaces, CSV on commas, Markdown on '|' (cells trimmed).
std::string first_row_cell(const std::string& text, const std::string& column, ReportFormat format) {
  auto split = [&](const std::string& l) {
    std::vector<std::string> cells;
    std::istringstream in(l);
    std::string c;
    if (format == ReportFormat::table) {
      while (in >> c) cells.push_back(c);
      return cells;
    }
    while (std::getline(in, c, format == ReportFormat::csv ? ',' : '|')) {
      const size_t b = c.find_first_not_of(' '), e = c.find_last_not_of(' ');
      cells.push_back(b == std::string::npos ? "" : c.substr(b, e - b + 1));
    }
    return cells;
  };
  std::istringstream lines(text);
  std::vector<std::string> header;
  for (std::string line; std::getline(lines, line);) {
    const std::vector<std::string> cells = split(line);
    if (header.empty()) {
      for (const std::string& c : cells)
        if (c == column) header = cells;
      continue;
    }
    if (format == ReportFormat::markdown && line.find("---") != std::string::npos) continue;  // the rule row
    for (size_t i = 0; i < header.size() && i < cells.size(); ++i)
      if (header[i] == column) return cells[i];
    break;
  }
  return "(no " + column + " cell)";
}

TEST(ReportTable, NoisyMeasEffIsADashWithTheReason) {
  const RunResult r = one_repeat_run();
  ASSERT_TRUE(r.variants.front().measured_noise.noisy);
  const std::string table = format_run(r, ReportFormat::table);
  EXPECT_EQ(first_row_cell(table, "meas_eff", ReportFormat::table), "-") << table;
  EXPECT_NE(table.find("meas_eff -: token_choice: execute.repeats 1 < 3: a median of 1 has no spread"),
            std::string::npos)
      << table;
  EXPECT_NE(table.find("rerun on an idle machine with execute.repeats >= 3"), std::string::npos) << table;
  EXPECT_NE(first_row_cell(table, "measured_ms", ReportFormat::table), "-") << table;  // the time itself is still shown

  const std::string csv = format_run(r, ReportFormat::csv);
  EXPECT_EQ(first_row_cell(csv, "meas_eff", ReportFormat::csv), "-") << csv;
  const std::string md = format_run(r, ReportFormat::markdown);
  EXPECT_NE(md.find("- meas_eff -: token_choice: execute.repeats 1 < 3"), std::string::npos) << md;
  EXPECT_EQ(first_row_cell(md, "meas_eff", ReportFormat::markdown), "-") << md;
}

TEST(ReportTable, QuietMeasEffIsTheRatio) {
  RunResult r = one_repeat_run();
  VariantResult& v = r.variants.front();
  v.measured_noise = MeasuredNoise{};  // as a quiet run records it
  const std::string want = text::fixed(v.measured_balanced_layer_s / v.measured.layer_s, 2);
  const std::string table = format_run(r, ReportFormat::table);
  EXPECT_EQ(first_row_cell(table, "meas_eff", ReportFormat::table), want) << table;
  EXPECT_EQ(table.find("meas_eff -:"), std::string::npos) << table;
  EXPECT_EQ(first_row_cell(format_run(r, ReportFormat::csv), "meas_eff", ReportFormat::csv), want);
  EXPECT_EQ(first_row_cell(format_run(r, ReportFormat::markdown), "meas_eff", ReportFormat::markdown), want);
}

}  // namespace
}  // namespace moesim
