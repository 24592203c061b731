// `moesim report FILE.json --html OUT.html`: a self-contained HTML page (inline SVG) of a run or
// compare JSON: metrics table, per-expert load bars, batching efficiency per strategy.
#include <fstream>
#include <iostream>

#include "src/cli/cli_common.hpp"
#include "src/common/error.hpp"
#include "src/common/json_error.hpp"
#include "src/report/atomic_write.hpp"
#include "src/report/report_html.hpp"

namespace moesim::cli {

int cmd_report(int argc, char** argv) {
  bool help = false;
  std::vector<std::string> files;
  std::string html, out, format = "html";
  po::options_description desc("moesim report FILE.json --html OUT.html");
  desc.add_options()("help,h", po::bool_switch(&help), "show this help")(
      "file", po::value(&files), "a run/compare JSON (moesim run --format json --out FILE)")(
      "html", po::value(&html), "write a self-contained HTML page here (atomically)")(
      "format", po::value(&format)->default_value("html"), "html (the one format of the page)")(
      "out", po::value(&out), "the same as --html FILE");
  if (parse_or_help(argc, argv, desc, "file", 1, help)) return kExitOk;
  if (files.empty()) throw InputError("report: expected a run JSON file");
  if (format != "html")
    throw InputError("--format: expected html (report draws a page; the table, json, csv and markdown of a run "
                     "come from moesim run and compare), got '" + format + "'");
  if (!html.empty() && !out.empty() && html != out)
    throw InputError("--out: expected the same file as --html, or one of the two, got '" + out + "' and '" + html + "'");
  if (html.empty()) html = out;
  if (html.empty()) throw InputError("--html: expected an output file for the HTML page (or --out FILE)");
  std::ifstream in(files.front());
  if (!in) throw open_failure<InputError>(files.front(), files.front() + ": cannot open for reading");
  nlohmann::json run;
  try {
    run = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw InputError(files.front() + ": expected a moesim run JSON, got invalid JSON: " + json_error_text(e.what()));
  }
  write_file_atomic(html, render_html_report(run, files.front()));
  std::cout << "report: wrote " << html << "\n";
  return kExitOk;
}

}  // namespace moesim::cli
