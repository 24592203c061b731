// Warnings that are true and rare: every `moesim run|compare|sweep|check` command README.md and docs/*.md
// print, and every shipped experiment under run, compare and sweep (check for the gates), names no key as
// having no effect, unless the command exists to show one (README's router.sinkhorn_iterations example);
// and every line such a command prints is true: the run's results are the same with the named key left
// out. The commands run in this process through the CLI's own handlers, stopped right after the key check
// (cli::inert_keys_observer), so nothing is routed or costed but for the few lines checked for truth,
// which run the binary with --no-execute. Host only.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "src/cli/cli_common.hpp"
#include "src/cli/commands.hpp"
#include "src/common/error.hpp"
#include "tests/support/run_cli.hpp"

namespace moesim {
namespace {

namespace fs = std::filesystem;
const fs::path kRoot = MOESIM_SOURCE_DIR;

struct Command {
  std::string where;              // "README.md:123" or "configs/x.yaml"
  std::vector<std::string> args;  // the subcommand, then its arguments
};

std::string joined(const std::vector<std::string>& args) {
  std::string s;
  for (const std::string& a : args) s += (s.empty() ? "" : " ") + a;
  return s;
}

// The commands of the code blocks of `file`: lines `moesim ...`, `build/moesim ...` or `$ moesim ...`
// (continuations joined, comments cut) whose subcommand is run, compare, sweep or check. Commands under
// mpirun are the expert-parallel engine's and are left out.
std::vector<Command> documented_commands(const fs::path& file) {
  std::vector<Command> out;
  std::ifstream in(file);
  bool code = false;
  std::string pending;
  int line_no = 0, start = 0;
  for (std::string line; std::getline(in, line);) {
    ++line_no;
    if (line.rfind("```", 0) == 0) {
      code = !code;
      continue;
    }
    const bool indented = line.rfind("    ", 0) == 0;
    if (!code && !indented && pending.empty()) continue;
    if (pending.empty()) start = line_no;
    std::string text = line;
    if (const size_t hash = text.find("  #"); hash != std::string::npos) text = text.substr(0, hash);
    const bool continues = !text.empty() && text.back() == '\\';
    if (continues) text.pop_back();
    pending += " " + text;
    if (continues) continue;
    std::string cmd = std::regex_replace(pending, std::regex(R"(^\s*(\$ )?)"), "");
    pending.clear();
    // One command: a pipe or a following command is the shell's; a synopsis ([FILE], KEY=VALUES) or a shell
    // variable ($t) is no command to run.
    for (const char* sep : {" | ", " && ", "; "})
      if (const size_t at = cmd.find(sep); at != std::string::npos) cmd = cmd.substr(0, at);
    if (cmd.find_first_of("[]$<>") != std::string::npos || cmd.find("VALUES") != std::string::npos) continue;
    std::smatch m;
    if (!std::regex_search(cmd, m, std::regex(R"(^(build/)?moesim (run|compare|sweep|check)( .*)?$)"))) continue;
    std::istringstream words(cmd.substr(cmd.find("moesim ") + 7));
    Command c{fs::relative(file, kRoot).generic_string() + ":" + std::to_string(start), {}};
    for (std::string w; words >> w;) c.args.push_back(w);
    out.push_back(c);
  }
  return out;
}

// The keys the command would name, from its own handler stopped after the key check; `error` when it
// stops before (a file the docs name that is not in the tree, such as my_logits.npy).
struct Outcome {
  bool checked = false;
  std::vector<InertKey> keys;
  std::string error;
};
Outcome keys_of(const std::vector<std::string>& args) {
  Outcome o;
  const cli::Command* c = cli::find_command(args.at(0));
  if (!c) {
    o.error = "no such command";
    return o;
  }
  std::vector<std::string> storage = args;
  std::vector<char*> argv;
  for (std::string& a : storage) argv.push_back(a.data());
  argv.push_back(nullptr);
  cli::inert_keys_observer = [&](const std::vector<InertKey>& k) { o.keys = k; };
  try {
    c->handler(static_cast<int>(storage.size()), argv.data());
    o.error = "returned without a key check";
  } catch (const cli::KeysChecked&) {
    o.checked = true;
  } catch (const Error& e) {
    o.error = e.what();
  }
  cli::inert_keys_observer = nullptr;
  return o;
}

// Runs from the repository root, where the docs' relative paths (configs/..., tests/data/...) resolve.
class KeyEffectsCli : public ::testing::Test {
 protected:
  void SetUp() override {
    before_ = fs::current_path();
    fs::current_path(kRoot);
  }
  void TearDown() override { fs::current_path(before_); }
  fs::path before_;
};

// The commands that exist to show a warning, and the keys they name.
bool shows_a_warning(const Command& c) {
  const std::string s = joined(c.args);
  return s.find("router.sinkhorn_iterations=5") != std::string::npos;
}

TEST_F(KeyEffectsCli, DocumentedCommandsWarnOnlyWhereTheyShowAWarning) {
  std::vector<Command> all;
  for (const fs::path& f : {kRoot / "README.md"}) {
    const auto c = documented_commands(f);
    all.insert(all.end(), c.begin(), c.end());
  }
  for (const auto& e : fs::directory_iterator(kRoot / "docs")) {
    if (e.path().extension() != ".md") continue;
    const auto c = documented_commands(e.path());
    all.insert(all.end(), c.begin(), c.end());
  }
  size_t checked = 0;
  std::vector<Command> warned;
  for (const Command& c : all) {
    const Outcome o = keys_of(c.args);
    if (!o.checked) {
      // Only a file the docs name as the user's own may be missing (my_logits.npy, DIR/..., a dump).
      const bool missing_file = o.error.find("cannot open") != std::string::npos ||
                                o.error.find("no such file") != std::string::npos ||
                                o.error.find("not found") != std::string::npos ||
                                o.error.find("expected a readable") != std::string::npos ||
                                o.error.find("does not exist") != std::string::npos;
      // And the CUDA backend, on a build without it (exit 3, the README's GPU section).
      const bool no_cuda = o.error.find("built without the CUDA backend") != std::string::npos ||
                           o.error.find("no usable CUDA device") != std::string::npos;
      EXPECT_TRUE(missing_file || no_cuda) << c.where << ": moesim " << joined(c.args) << ": " << o.error;
      continue;
    }
    ++checked;
    if (shows_a_warning(c)) {
      EXPECT_FALSE(o.keys.empty()) << c.where << ": moesim " << joined(c.args) << " shows a warning";
      warned.push_back(c);
      continue;
    }
    for (const InertKey& k : o.keys)
      ADD_FAILURE() << c.where << ": moesim " << joined(c.args) << ": " << inert_key_message(k);
  }
  // The walk sees the commands it is meant to: README's and the docs' run, compare, sweep and check lines.
  EXPECT_GE(checked, 30u);
  ASSERT_FALSE(warned.empty());
  // Each line printed is true: without the named key's --set, the results are the same.
  for (const Command& c : warned) {
    const Outcome o = keys_of(c.args);
    for (const InertKey& k : o.keys) {
      std::vector<std::string> with, without;
      for (size_t i = 0; i < c.args.size(); ++i) {
        if (c.args[i] == "--strict") continue;  // --strict makes the line an error; the results are the question
        with.push_back(c.args[i]);
        if (c.args[i] == "--set" && i + 1 < c.args.size() && c.args[i + 1].rfind(k.key + "=", 0) == 0) {
          with.push_back(c.args[++i]);
          continue;
        }
        without.push_back(c.args[i]);
      }
      const std::string small = " --no-execute --format json --set workload.batch=512 --set workload.batches=2";
      const auto a = testing::run_cli(joined(with) + small);
      const auto b = testing::run_cli(joined(without) + small);
      ASSERT_EQ(a.exit_code, 0) << a.err;
      ASSERT_EQ(b.exit_code, 0) << b.err;
      EXPECT_EQ(nlohmann::json::parse(a.out)["strategies"], nlohmann::json::parse(b.out)["strategies"])
          << c.where << ": " << inert_key_message(k) << ", yet the results move with it";
    }
  }
}

// The experiments shipped under configs/ and docs/examples/ (hardware profiles are not experiments).
std::vector<std::string> shipped_configs() {
  std::vector<std::string> out;
  for (const fs::path dir : {kRoot / "configs", kRoot / "configs/experiments", kRoot / "configs/regression",
                             kRoot / "docs/examples"})
    for (const auto& e : fs::directory_iterator(dir))
      if (e.path().extension() == ".yaml") out.push_back(fs::relative(e.path(), kRoot).generic_string());
  std::sort(out.begin(), out.end());
  return out;
}

TEST_F(KeyEffectsCli, ShippedConfigsCarryOnlyKeysThatAct) {
  const std::vector<std::string> configs = shipped_configs();
  ASSERT_GE(configs.size(), 20u);
  size_t checked = 0;
  for (const std::string& cfg : configs) {
    const std::string text = testing::read_text((kRoot / cfg).string());
    const bool trace = text.find("source: trace") != std::string::npos;
    // Recorded or drawn loads: no router runs, so comparing strategies on them is refused by a true line.
    const bool loads = text.find("source: load_profile") != std::string::npos ||
                       text.find("source: load_distribution") != std::string::npos;
    const bool gate = cfg.rfind("configs/regression/", 0) == 0 || cfg.rfind("docs/examples/", 0) == 0;
    std::vector<std::vector<std::string>> commands;
    if (cfg == "configs/experiments/validate-cpu.yaml") {
      // An experiment of moesim validate (the CPU's own profile): it runs there only.
      commands = {{"validate", cfg, "--batches", "16,32"}};
    } else {
      commands = {{"run", cfg},
                  {"run", cfg, "--no-execute"},
                  {"compare", cfg, "--no-execute"},
                  {"sweep", cfg, "--vary", trace ? "router.capacity_factor=0,1.25" : "workload.batch=64,128"}};
      if (!trace && !loads) commands.push_back({"compare", cfg, "--gating", "all", "--no-execute"});
      if (gate) commands.push_back({"check", cfg});
    }
    for (const auto& args : commands) {
      const Outcome o = keys_of(args);
      ASSERT_TRUE(o.checked) << "moesim " << joined(args) << ": " << o.error;
      ++checked;
      for (const InertKey& k : o.keys) ADD_FAILURE() << "moesim " << joined(args) << ": " << inert_key_message(k);
    }
  }
  EXPECT_GE(checked, 4 * configs.size() - 4);
}

// A result's numbers, those a run's keys can move: the strategies' JSON without wall-clock times and the noise
// judged from them (the executed layer's output digest stays: it is the executed layer's number).
nlohmann::json numbers_of(nlohmann::json j) {
  if (j.is_object()) {
    nlohmann::json out = nlohmann::json::object();
    for (auto it = j.begin(); it != j.end(); ++it) {
      const std::string& k = it.key();
      if (k == "measured") {
        if (it.value().is_object() && it.value().contains("output_digest")) out[k] = it.value()["output_digest"];
        continue;
      }
      if (k.rfind("measured_", 0) == 0) continue;  // measured_layer_s, measured_batching_efficiency: wall clock
      if (k == "noisy" || k == "noise_reason" || k == "provenance") continue;
      out[k] = numbers_of(it.value());
    }
    return out;
  }
  if (j.is_array())
    for (auto& x : j) x = numbers_of(x);
  return j;
}

// The command without `--set KEY=...` (and without --strict): the same run with the key left out.
std::vector<std::string> without_key(const std::vector<std::string>& args, const std::string& key) {
  std::vector<std::string> out;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--strict") continue;
    if (args[i] == "--set" && i + 1 < args.size() && args[i + 1].rfind(key + "=", 0) == 0) {
      ++i;
      continue;
    }
    out.push_back(args[i]);
  }
  return out;
}

// Whether the command's numbers move when `key` is left out: its JSON (route: also its dumped routing, written
// to a file of its own each time), small and with the executed layer as the command has it.
bool key_changes_numbers(const std::vector<std::string>& args, const std::string& key, const std::string& dir) {
  std::vector<std::string> with;
  for (const std::string& a : args)
    if (a != "--strict") with.push_back(a);
  const std::vector<std::string> without = without_key(args, key);
  const bool route = args.at(0) == "route";
  auto result = [&](std::vector<std::string> cmd, const std::string& tag) {
    std::string dump;
    for (size_t i = 0; i + 1 < cmd.size(); ++i)
      if (cmd[i] == "--dump-routing") cmd[i + 1] = dump = dir + "/dump-" + tag + ".jsonl";
    const std::string small =
        route ? " --format json" : " --format json --set workload.batch=512 --set workload.batches=2 --set execute.hidden=64 --set execute.ffn=64";
    const auto r = testing::run_cli(joined(cmd) + small);
    EXPECT_EQ(r.exit_code, 0) << joined(cmd) << ": " << r.err;
    nlohmann::json j = nlohmann::json::parse(r.out, nullptr, false);
    nlohmann::json n = route ? nlohmann::json(j.is_object() && j.contains("metrics") ? j["metrics"] : j)
                             : numbers_of(j.is_object() && j.contains("strategies") ? j["strategies"] : j);
    if (!dump.empty()) n["dumped"] = testing::read_text(dump);
    return n;
  };
  return result(with, "with") != result(without, "without");
}

// Every router.semantics preset and every Hugging Face import of tests/data/hf on the built-in experiment, under
// run, compare --gating all and route (with and without a dumped routing), with --strict: a key named as having
// no effect must change no number (the command is run again without it, and its results compared). An import
// changes the model, so it is never named; the issue's two false lines are held to their truth by name.
TEST_F(KeyEffectsCli, PresetsAndImportsAreNamedOnlyWhereTheyChangeNothing) {
  const std::string dir = testing::make_temp_dir();
  std::string csv;
  for (int t = 0; t < 64; ++t) {
    for (int e = 0; e < 8; ++e) csv += (e ? "," : "") + std::to_string(((t * 7 + e * 13) % 11) * 0.37 - 1.5);
    csv += "\n";
  }
  testing::write_text(dir + "/logits.csv", csv);
  std::vector<std::vector<std::string>> commands;
  for (const auto& entry : fs::directory_iterator(kRoot / "tests/data/hf")) {
    if (!fs::exists(entry.path() / "config.json")) continue;
    const std::string set = "model.hf_config=" + (entry.path() / "config.json").string();
    commands.push_back({"run", "--set", set, "--strict"});
    commands.push_back({"compare", "--gating", "all", "--set", set, "--strict"});
  }
  const size_t imports = commands.size();
  ASSERT_GE(imports, 2 * 10u);
  for (const char* preset : {"megatron", "huggingface", "deepseek", "exact"}) {
    const std::string set = std::string("router.semantics=") + preset;
    for (const std::vector<std::string>& extra :
         std::vector<std::vector<std::string>>{{}, {"--set", "router.pre_softmax=true"}, {"--set", "router.score=sigmoid"}}) {
      std::vector<std::vector<std::string>> base = {
          {"run", "--set", set},
          {"run", "--no-execute", "--set", set},
          {"compare", "--gating", "all", "--set", set},
          {"route", "--logits", dir + "/logits.csv", "--set", set},
          {"route", "--logits", dir + "/logits.csv", "--set", set, "--dump-routing", dir + "/d.jsonl"}};
      for (auto& c : base) {
        c.insert(c.end(), extra.begin(), extra.end());
        c.push_back("--strict");
        commands.push_back(c);
      }
    }
  }
  size_t checked = 0, named = 0;
  for (size_t i = 0; i < commands.size(); ++i) {
    const std::vector<std::string>& c = commands[i];
    const Outcome o = keys_of(c);
    ASSERT_TRUE(o.checked) << "moesim " << joined(c) << ": " << o.error;
    ++checked;
    if (i < imports)
      for (const InertKey& k : o.keys) ADD_FAILURE() << "moesim " << joined(c) << ": " << inert_key_message(k);
    for (const InertKey& k : o.keys) {
      ++named;
      EXPECT_FALSE(key_changes_numbers(c, k.key, dir))
          << "moesim " << joined(c) << ": " << inert_key_message(k) << ", yet the results move with it";
    }
  }
  EXPECT_EQ(checked, commands.size());
  // The issue's cases by name: an import that makes the built-in run dropless acts; megatron's renormalize false
  // changes the dumped weights of pre-softmax routing.
  EXPECT_TRUE(keys_of({"run", "--set", "model.hf_config=" + (kRoot / "tests/data/hf/mixtral-8x7b/config.json").string()})
                  .keys.empty());
  EXPECT_TRUE(keys_of({"route", "--logits", dir + "/logits.csv", "--set", "router.semantics=megatron", "--set",
                       "router.pre_softmax=true", "--dump-routing", dir + "/d.jsonl"})
                  .keys.empty());
  EXPECT_TRUE(key_changes_numbers({"route", "--logits", dir + "/logits.csv", "--set", "router.semantics=megatron", "--set",
                                   "router.pre_softmax=true", "--dump-routing", dir + "/d.jsonl"},
                                  "router.semantics", dir));
  std::cout << checked << " commands, " << named << " keys named, each checked against its results\n";
}

TEST_F(KeyEffectsCli, TheSeamSeesWhatTheBinaryPrints) {
  // The same command through the binary and through the seam names the same key: the check is the CLI's.
  const Outcome o = keys_of({"run", "--set", "router.sinkhorn_iterations=5"});
  ASSERT_TRUE(o.checked) << o.error;
  ASSERT_EQ(o.keys.size(), 1u);
  EXPECT_EQ(o.keys[0].key, "router.sinkhorn_iterations");
  const auto r = testing::run_cli("run --set router.sinkhorn_iterations=5 --no-execute --format json "
                                  "--set workload.batch=256 --set workload.batches=1");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_NE(r.err.find(inert_key_message(o.keys[0])), std::string::npos) << r.err;
  // A file's model description keys are not named; the same key set on the command line is.
  const std::string dir = testing::make_temp_dir();
  testing::write_text(dir + "/m.yaml", "name: m\nmodel: {heads: 16, vocab: 1000}\n");
  EXPECT_TRUE(keys_of({"run", dir + "/m.yaml", "--no-execute"}).keys.empty());
  const Outcome set = keys_of({"run", dir + "/m.yaml", "--no-execute", "--set", "model.heads=8"});
  ASSERT_EQ(set.keys.size(), 1u);
  EXPECT_EQ(set.keys[0].key, "model.heads");
}

}  // namespace
}  // namespace moesim
