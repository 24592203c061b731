// The texts a user copies from: every subcommand's --help runs and its --set example is accepted, the
// config sketch in docs/design.md loads, `moesim config` output runs again from another folder (a
// relative workload.path included), and the unknown-command message names every command of the table.
// docs/gate-your-ci.md runs as written: every `$ moesim ...` line of its console blocks, its printed
// output and exit code. Runs the built binary. Host only.
#include <gtest/gtest.h>

#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "src/cli/commands.hpp"
#include "tests/support/console_steps.hpp"
#include "tests/support/run_cli.hpp"

namespace moesim {
namespace {

using testing::run_cli;

const std::string kRoot = MOESIM_SOURCE_DIR;

TEST(DocsExamples, EveryHelpRunsAndItsSetExampleIsAccepted) {
  int examples = 0;
  for (const cli::Command& c : cli::commands()) {
    const auto help = run_cli(std::string(c.name) + " --help");
    ASSERT_EQ(help.exit_code, 0) << c.name << ": " << help.err;
    EXPECT_NE(help.out.find(std::string("moesim ") + c.name), std::string::npos) << help.out;
    std::smatch m;
    if (!std::regex_search(help.out, m, std::regex("--set ([a-z_]+\\.[a-z_]+=[^ )\\n]+)"))) continue;
    ++examples;
    const auto r = run_cli("config --set " + m[1].str());
    EXPECT_EQ(r.exit_code, 0) << c.name << " --help suggests --set " << m[1] << ": " << r.err;
  }
  EXPECT_GT(examples, 0);
}

TEST(DocsExamples, DesignConfigSketchLoads) {
  const std::string doc = testing::read_text(kRoot + "/docs/design.md");
  const size_t at = doc.find("## Configuration");
  ASSERT_NE(at, std::string::npos);
  const size_t begin = doc.find("```yaml\n", at);
  ASSERT_NE(begin, std::string::npos);
  const size_t end = doc.find("```", begin + 8);
  const std::string dir = testing::make_temp_dir();
  testing::write_text(dir + "/sketch.yaml", doc.substr(begin + 8, end - begin - 8));
  const auto r = run_cli("config " + dir + "/sketch.yaml");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("skew: 1"), std::string::npos) << r.out;
}

TEST(DocsExamples, ConfigOutputRunsAgainWithARelativeWorkloadPath) {
  // configs/mixtral-profile.yaml names its load profile relative to its own folder.
  const std::string cfg = kRoot + "/configs/mixtral-profile.yaml";
  const std::string dir = testing::make_temp_dir();
  const auto printed = run_cli("config " + cfg + " --out " + dir + "/printed.yaml");
  ASSERT_EQ(printed.exit_code, 0) << printed.err;
  const auto a = run_cli("run " + cfg + " --no-execute --format json");
  const auto b = run_cli("run " + dir + "/printed.yaml --no-execute --format json");
  ASSERT_EQ(a.exit_code, 0) << a.err;
  ASSERT_EQ(b.exit_code, 0) << b.err;
  EXPECT_EQ(nlohmann::json::parse(a.out)["strategies"], nlohmann::json::parse(b.out)["strategies"]);
}

using testing::console_steps;
using testing::ConsoleStep;

// A scratch folder where the page's relative paths (docs/examples/..., and the config.json
// docs/examples/gate-hf.yaml names under tests/data) resolve.
std::string scratch_checkout() {
  const std::string dir = testing::make_temp_dir();
  std::filesystem::create_directory_symlink(kRoot + "/docs", dir + "/docs");
  std::filesystem::create_directory_symlink(kRoot + "/tests", dir + "/tests");
  return dir;
}

TEST(DocsExamples, GateYourCiRunsAsWritten) {
  const std::vector<ConsoleStep> steps = console_steps(testing::read_text(kRoot + "/docs/gate-your-ci.md"));
  ASSERT_GE(steps.size(), 9u);
  const std::string first = scratch_checkout();
  std::vector<std::string> baselines;
  for (const ConsoleStep& step : steps) {
    testing::run_console_step(first, step, "first folder");
    std::smatch m;
    if (step.args.find("--update-baseline") != std::string::npos &&
        std::regex_search(step.args, m, std::regex("--baseline ([^ ]+)")))
      baselines.push_back(m[1].str());
  }
  ASSERT_EQ(baselines.size(), 3u);
  // The baselines alone, moved to a checkout in another folder: every line that reads them prints the same.
  const std::string second = scratch_checkout();
  for (const std::string& b : baselines) std::filesystem::copy_file(first + "/" + b, second + "/" + b);
  const std::string recorded = testing::read_text(first + "/" + baselines.back());
  EXPECT_EQ(recorded.find("\"path\": \"" + first), std::string::npos) << "the baseline's inputs hold the first folder";
  size_t rerun = 0;
  for (const ConsoleStep& step : steps) {
    if (step.args.find("--update-baseline") != std::string::npos) continue;
    testing::run_console_step(second, step, "second folder");
    ++rerun;
  }
  EXPECT_GE(rerun, 7u);
}

TEST(DocsExamples, ABaselineRefusesAnEditedHfConfig) {
  // The contents, not the path, identify the model: the same folder with an edited config.json exits 2.
  const std::string dir = testing::make_temp_dir();
  std::filesystem::create_directories(dir + "/hf");
  std::filesystem::copy_file(kRoot + "/tests/data/hf/mixtral-8x7b/config.json", dir + "/hf/config.json");
  testing::write_text(dir + "/e.yaml", "name: e\nmodel: {hf_config: hf/config.json}\nworkload: {batch: 256}\n");
  const auto w = run_cli("check " + dir + "/e.yaml --baseline " + dir + "/b.json --update-baseline");
  ASSERT_EQ(w.exit_code, 0) << w.out << w.err;
  const nlohmann::json b = nlohmann::json::parse(testing::read_text(dir + "/b.json"));
  ASSERT_EQ(b["inputs"].size(), 1u);
  EXPECT_EQ(b["inputs"][0]["key"], "model.hf_config");
  EXPECT_EQ(b["inputs"][0]["path"], "hf/config.json");
  std::string text = testing::read_text(dir + "/hf/config.json");
  const size_t at = text.find("\"vocab_size\": 32000");
  ASSERT_NE(at, std::string::npos);
  text.replace(at, 19, "\"vocab_size\": 32001");
  testing::write_text(dir + "/hf/config.json", text);
  const auto c = run_cli("check " + dir + "/e.yaml --baseline " + dir + "/b.json --allow-change model.vocab");
  EXPECT_EQ(c.exit_code, 2) << c.out << c.err;
  EXPECT_NE(c.err.find("model.hf_config (the file's contents) is \"fnv1a64:"), std::string::npos) << c.err;
}

// The markdown rows of `text` whose first cell is a strategy: header cells -> row cells, per strategy.
std::map<std::string, std::map<std::string, std::string>> markdown_rows(const std::string& text) {
  std::map<std::string, std::map<std::string, std::string>> rows;
  std::vector<std::string> header;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("| ", 0) != 0) {
      header.clear();
      continue;
    }
    std::vector<std::string> cells;
    std::istringstream cs(line.substr(1));
    for (std::string c; std::getline(cs, c, '|');) {
      while (!c.empty() && c.front() == ' ') c.erase(c.begin());
      while (!c.empty() && c.back() == ' ') c.pop_back();
      cells.push_back(c);
    }
    if (!cells.empty() && cells.back().empty()) cells.pop_back();
    if (header.empty()) {
      header = cells;
    } else if (cells.size() == header.size() && cells[0].find("---") == std::string::npos) {
      for (size_t i = 1; i < cells.size(); ++i) rows[cells[0]][header[i]] = cells[i];
    }
  }
  return rows;
}

TEST(DocsExamples, ReadmeErosionTableIsTheDefaultCompare) {
  // README "What imbalance costs": every cell of its table is the built-in default's own, as printed.
  const std::string readme = testing::read_text(kRoot + "/README.md");
  const size_t at = readme.find("### What imbalance costs");
  ASSERT_NE(at, std::string::npos);
  const std::string section = readme.substr(at, readme.find("\n### ", at + 4) - at);
  const auto shown = markdown_rows(section);
  const auto r = run_cli("compare --gating all --format markdown");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // The answer lines it quotes are lines of the output.
  size_t answers = 0;
  std::istringstream lines(section);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("- ", 0) != 0 || line.find(": imbalance costs ") == std::string::npos) continue;
    ++answers;
    EXPECT_NE(("\n" + r.out).find("\n" + line + "\n"), std::string::npos) << "README: " << line << "\nthe binary:\n" << r.out;
  }
  EXPECT_GE(answers, 3u);
  const auto actual = markdown_rows(r.out);
  ASSERT_EQ(shown.size(), 9u);
  for (const auto& [strategy, cells] : shown) {
    ASSERT_TRUE(actual.count(strategy)) << strategy;
    for (const auto& [column, value] : cells) EXPECT_EQ(actual.at(strategy).at(column), value) << strategy << " " << column;
  }
}

// Runs of whitespace as one space: README's lines wrap where the binary's do not.
std::string one_line(const std::string& text) { return std::regex_replace(text, std::regex("\\s+"), " "); }

TEST(DocsExamples, ReadmeEplbAnswerIsTheCompares) {
  // README's EPLB question: `moesim compare ARGS`) answers: "LINE", a line of the command's output.
  const std::string readme = one_line(testing::read_text(kRoot + "/README.md"));
  std::smatch m;
  ASSERT_TRUE(std::regex_search(readme, m, std::regex("\\(`moesim compare ([^`]*)`\\) answers: \"([^\"]*)\"")))
      << "README.md: the EPLB answer is not where this test reads it";
  const auto r = run_cli("compare " + std::regex_replace(m[1].str(), std::regex("configs/"), kRoot + "/configs/"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(one_line(r.out).find(m[2].str()), std::string::npos) << m[2].str() << "\nthe binary:\n" << r.out;
}

TEST(DocsExamples, ReadmeKneeQuoteIsTheSweeps) {
  // README quotes the knee line of the command beside it: `moesim sweep ARGS` finds the knee: "QUOTE".
  const std::string readme = one_line(testing::read_text(kRoot + "/README.md"));
  std::smatch m;
  ASSERT_TRUE(std::regex_search(readme, m, std::regex("\\(`moesim sweep ([^`]*)`\\) finds the knee: \"([^\"]*)\"")))
      << "README.md: the knee quote is not where this test reads it";
  const auto r = run_cli("sweep " + m[1].str());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(one_line(r.out).find(m[2].str()), std::string::npos) << "README quotes: " << m[2] << "\nthe binary:\n" << r.out;
}

TEST(DocsExamples, UnknownCommandNamesEveryCommand) {
  const auto r = run_cli("nosuch");
  EXPECT_EQ(r.exit_code, 2);
  for (const cli::Command& c : cli::commands())
    EXPECT_NE(r.err.find(c.name), std::string::npos) << c.name << " missing from: " << r.err;
  EXPECT_NE(r.err.find("calibrate-link"), std::string::npos) << r.err;
}

TEST(DocsExamples, UsageListsTheTable) {
  const auto r = run_cli("--help");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.out, cli::usage_text());
  for (const cli::Command& c : cli::commands())
    EXPECT_NE(r.out.find(std::string("  ") + c.name), std::string::npos) << c.name;
}

}  // namespace
}  // namespace moesim
