// The subcommand table (see commands.hpp). Host only. Covered by tests/cli/cli_test.cpp.
#include "src/cli/commands.hpp"

#include <algorithm>
#include <cstdio>
#include <string>

#include "src/cli/cli_common.hpp"
#include "src/cli/cmd_mpi.hpp"

namespace moesim::cli {

const std::vector<Command>& commands() {
  static const std::vector<Command> table = {
      {"run", "[FILE]", "route, execute and cost one experiment (default: the built-in quickstart)", cmd_run},
      {"compare", "[FILE]", "model every gating strategy (--gating all) or a list side by side (--measure: executed too)",
       cmd_compare},
      {"route", "--logits F", "route a user's logits (.npy or .csv) and print the balance metrics", cmd_route},
      {"config", "[FILE]", "print the effective experiment as YAML (--explain: when each key acts)", cmd_config},
      {"hardware", "[NAME]", "list hardware profiles, or show one with its critical batch per dtype", cmd_hardware},
      {"check", "FILE...", "exit 1 when a metric breaks its expect: bound or regresses from --baseline", cmd_check},
      {"sweep", "[FILE]",
       "the experiment over --vary KEY=v1,v2|1..1024*2 axes: modeled (--measure: executed) cost, each batch curve's knee",
       cmd_sweep},
      {"train", "[FILE]",
       "one optimizer step of Megatron-style MoE training, and what the routing costs against forced balance",
       cmd_train},
      {"step", "[FILE]",
       "one serving step over the expert-parallel GPUs: per-layer breakdown, TPOT, tokens/s per GPU, erosion by cause",
       cmd_step},
      {"serve", "[FILE]",
       "a request stream served over time: TTFT, TPOT, tokens/s per GPU and per user, what imbalance costs in tokens/s",
       cmd_serve},
      {"calibrate", "", "measure this machine (or fit published GPU tables) and write a hardware profile (--out FILE)",
       cmd_calibrate},
      {"calibrate-link", "", "under mpirun: measure the MPI link and write it into a profile (--out FILE)",
       cmd_calibrate_link},
      {"validate", "[FILE]",
       "the executed CPU pipeline (--published: published GPU kernel times) against the cost model, with the error",
       cmd_validate},
      {"report", "F --html O", "a self-contained HTML page (inline SVG) of a run/compare JSON", cmd_report},
      {"import", "FILE... --out O",
       "convert an engine's recorded expert loads (Megatron-Core .npz dumps) into a load-profile JSON", cmd_import},
      {"plan", "LOADS --devices D",
       "an expert-parallel placement (EPLB) of recorded loads, as the file vLLM, SGLang or TensorRT-LLM loads",
       cmd_plan},
  };
  return table;
}

const Command* find_command(const std::string& name) {
  for (const Command& c : commands())
    if (name == c.name) return &c;
  return nullptr;
}

std::string usage_text() {
  // The summaries start in one column, after the longest command with its arguments, and wrap under it.
  size_t width = 0;
  for (const Command& c : commands())
    width = std::max(width, std::string(c.name).size() + (*c.args ? 1 + std::string(c.args).size() : 0));
  std::string out = "usage: moesim <command> [options]\n\ncommands:\n";
  for (const Command& c : commands()) {
    const std::string head = std::string(c.name) + (*c.args ? std::string(" ") + c.args : std::string());
    const std::string indent(2 + width + 2, ' ');
    std::string line = "  " + head + std::string(width + 2 - head.size(), ' ');
    std::string summary = c.summary;
    // Wrap at 120 columns, continuing under the summary's first word.
    while (line.size() + summary.size() > 120) {
      size_t cut = summary.rfind(' ', 120 - line.size());
      if (cut == std::string::npos || cut == 0) break;
      out += line + summary.substr(0, cut) + "\n";
      summary = summary.substr(cut + 1);
      line = indent;
    }
    out += line + summary + "\n";
  }
  out += "\ncommon options: --set KEY=VALUE (repeatable), --format table|json|csv|markdown, --out FILE\n"
         "route as a framework does: --set router.semantics=exact|megatron|huggingface|deepseek\n"
         "  (docs/routing-semantics.md; `moesim config` prints the keys it sets)\n"
         "a key you set that has no effect in the run is named on stderr; --strict makes that exit 2\n"
         "run `moesim <command> --help` for a command's options\n";
  return out;
}

std::string command_names() {
  const std::vector<Command>& all = commands();
  std::string out;
  for (size_t i = 0; i < all.size(); ++i) {
    if (i > 0) out += i + 1 == all.size() ? " or " : ", ";
    out += all[i].name;
  }
  return out;
}

}  // namespace moesim::cli
