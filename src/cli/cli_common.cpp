// Options and helpers shared by the subcommands (see cli_common.hpp).
#include "src/cli/cli_common.hpp"

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include "src/common/embedded.hpp"
#include "src/common/error.hpp"
#include "src/cost/hardware_profile.hpp"
#include "src/config/load_config.hpp"
#include "src/report/atomic_write.hpp"
#include "src/workload/trace_replay.hpp"

#if defined(MOESIM_HAS_CUDA)
#include "kernels/cuda_backend.hpp"
#endif

#if defined(MOESIM_HAS_OPENMP)
#include <omp.h>
#endif
#include <cblas.h>

extern "C" void openblas_set_num_threads(int);

namespace moesim::cli {

void add_common_options(po::options_description& desc, CommonOptions& opts, bool with_execute,
                        bool executes_by_default) {
  desc.add_options()
      ("set", po::value(&opts.overrides)->composing(), "override a config key: --set model.top_k=4 (repeatable)")
      ("format", po::value(&opts.format)->default_value("table"), "table | json | csv | markdown")
      ("out", po::value(&opts.out), "write the report to FILE (atomically) instead of stdout")
      ("threads", po::value(&opts.threads)->default_value(0), "OpenMP/BLAS threads (0: all cores)")
      ("strict", po::bool_switch(&opts.strict),
       "a config key set to a value that has no effect in this run is an error (exit 2), not a warning");
  if (with_execute) {
    desc.add_options()
        ("memory-limit", po::value(&opts.memory_limit), "refuse runs whose memory estimate exceeds this (e.g. 4GiB)")
        ("verify", po::bool_switch(&opts.verify),
         "run the executed layer and the serial references beside it, and compare (runs the executed pipeline)")
        ("records", po::bool_switch(&opts.records),
         "step runs (decoder, trace, load_profile, load_distribution): list every (step, layer) record with its modeled cost in the "
         "json report (default: aggregates, phases and headline only); spooled through a temporary file (TMPDIR), "
         "so it costs disk, not memory")
        ("measure", po::bool_switch(&opts.measure),
         executes_by_default ? "run the executed CPU pipeline too (the default here; measured columns)"
                             : "also run the executed CPU pipeline (measured columns); by default this command models only")
        ("no-execute", po::bool_switch(&opts.no_execute),
         executes_by_default ? "model only: skip the executed CPU pipeline"
                             : "model only (the default here): skip the executed CPU pipeline")
        ("wide", po::bool_switch(&opts.wide),
         "table: every column (by default the table keeps to 120 characters and names the columns it leaves out)")
        ("explain", po::bool_switch(&opts.explain),
         "table and markdown: after the table, define every column and show the strategies, placement and notes")
        ("backend", po::value(&opts.backend)->default_value("auto"),
         "executed layer on: auto (cuda when a device is present) | cpu | cuda")
        ("repeats", po::value(&opts.repeats)->default_value(0),
         "timed repeats of the executed layer after one warm-up, medians reported (0: execute.repeats)");
  }
}

bool executes(const CommonOptions& opts, bool executes_by_default) {
  if (opts.measure && opts.no_execute)
    throw InputError("--measure, --no-execute: expected one of them (--measure runs the executed pipeline, "
                     "--no-execute models only), got both");
  // --verify checks the executed layer against the references: it runs it, and cannot with --no-execute.
  if (opts.verify && opts.no_execute)
    throw InputError("--verify: expected a run of the executed layer (it checks it against the serial references), "
                     "got --no-execute");
  return opts.measure || opts.verify || (executes_by_default && !opts.no_execute);
}

void check_records_option(const CommonOptions& opts, const Experiment& e, ReportFormat format) {
  if (opts.wide && format != ReportFormat::table)
    throw InputError("--wide: expected together with --format table (csv, json and markdown have every column), got "
                     "--format " + opts.format);
  if (opts.explain && format != ReportFormat::table && format != ReportFormat::markdown)
    throw InputError("--explain: expected together with --format table or markdown (docs/json-schema.md defines the " +
                     opts.format + " fields), got --format " + opts.format);
  if (!opts.records) return;
  if (format != ReportFormat::json) {
    throw InputError("--records: expected together with --format json (the " + opts.format +
                     " report lists no records), got --format " + opts.format);
  }
  if (e.workload.source != WorkloadSource::decoder && e.workload.source != WorkloadSource::trace &&
      e.workload.source != WorkloadSource::load_profile && e.workload.source != WorkloadSource::load_distribution) {
    throw InputError(std::string("--records: expected a step-structured workload (workload.source decoder, trace, "
                                 "load_profile or load_distribution), got ") + to_string(e.workload.source) + ", which has no step records");
  }
}

void parse_command_line(int argc, char** argv, const po::options_description& desc, const char* positional,
                        int max_positional) {
  po::positional_options_description pos;
  if (positional) pos.add(positional, max_positional);
  po::variables_map vm;
  try {
    po::store(po::command_line_parser(argc, argv).options(desc).positional(pos).run(), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    throw InputError(std::string("command line: ") + e.what());
  }
}

const InlineExperiment* inline_experiment = nullptr;

Experiment load_experiment_for(const CommonOptions& opts, size_t file_index) {
  if (opts.repeats < 0) {
    throw InputError("command line: --repeats: expected an integer >= 1 (0: the experiment's execute.repeats), got " +
                     std::to_string(opts.repeats));
  }
  std::vector<std::string> overrides = opts.overrides;
  if (opts.repeats > 0) overrides.push_back("execute.repeats=" + std::to_string(opts.repeats));
  Experiment e = opts.files.size() > file_index ? load_experiment_file(opts.files[file_index], overrides)
                 : inline_experiment != nullptr
                     ? load_experiment_text(inline_experiment->yaml_text, inline_experiment->source_name, overrides)
                     : default_experiment(overrides);
  for (const std::string& note : e.load_notes) std::cerr << "moesim: " << note << "\n";
  e.load_notes.clear();
  return e;
}

std::string base_profile_text(const std::string& base) {
  std::error_code ec;
  if (std::filesystem::is_regular_file(base, ec)) {
    std::ifstream in(base);
    std::ostringstream ss;
    ss << in.rdbuf();
    if (!in.good() && !in.eof()) throw InputError("--base: cannot read '" + base + "'");
    parse_hardware_profile(ss.str(), base);  // a bad base fails here, naming the file and key
    return ss.str();
  }
  const auto& files = embedded_files();
  const auto it = files.find("configs/hardware/" + base + ".yaml");
  if (it == files.end()) {
    throw InputError("--base: expected a hardware profile file or a built-in profile name (moesim hardware), got '" +
                     base + "'");
  }
  return it->second;
}

Experiment load_with_flags(const std::vector<std::string>& overrides,
                           const std::vector<std::pair<std::string, std::string>>& flags) {
  try {
    return default_experiment(overrides);
  } catch (const ConfigError& ex) {
    std::string message = ex.what();
    for (const auto& [set, flag] : flags) {
      const std::string made = "--set " + set;
      for (size_t at = message.find(made); at != std::string::npos;) {
        // Only the whole override: "--set placement.devices=3" but not "... =32".
        const size_t end = at + made.size();
        if (end < message.size() && message[end] != ':' && message[end] != ' ' && message[end] != ')' &&
            message[end] != ',' && message[end] != ';') {
          at = message.find(made, at + 1);
          continue;
        }
        message.replace(at, made.size(), flag);
        at = message.find(made, at + flag.size());
      }
    }
    ConfigError named(message);
    named.missing_file = ex.missing_file;
    throw named;
  }
}

std::function<void(const std::vector<InertKey>&)> inert_keys_observer;

void warn_inert_keys(const std::vector<Experiment>& rows, const EffectContext& ctx, bool strict) {
  const std::vector<InertKey> inert = inert_user_keys(rows, ctx);
  if (inert_keys_observer) {
    inert_keys_observer(inert);
    throw KeysChecked{};
  }
  if (inert.empty()) return;
  if (strict) {
    std::string all;
    for (const InertKey& k : inert) all += (all.empty() ? "" : "; ") + k.key + " has no effect " + k.reason;
    throw ConfigError(all + " (--strict)");
  }
  for (const InertKey& k : inert) std::cerr << inert_key_message(k) + "\n";
}

EffectContext effect_context(const CommonOptions& opts, const char* command, const Experiment& e) {
  EffectContext c;
  c.command = command;
  c.executes = !opts.no_execute;
  c.cuda = c.executes && resolve_backend(opts.backend) == ExecBackend::cuda;
  c.replays_recorded = e.workload.source == WorkloadSource::trace && !trace_file_has_logits(resolve_workload_path(e));
  return c;
}

std::vector<Experiment> variant_experiments(const Experiment& e, const std::vector<RouterVariant>& variants) {
  std::vector<Experiment> rows;
  for (const RouterVariant& v : variants) {
    rows.push_back(e);
    rows.back().router = v.router;
  }
  return rows;
}

int emit_run(const CommonOptions& opts, const RunResult& run, ReportFormat format, const char* command,
             const RecordSpool* spool) {
  if (spool && format == ReportFormat::json) {
    // Piece by piece: the records' text is never whole in memory.
    if (opts.out.empty()) {
      write_run_json(run, *spool, [](const std::string& piece) { std::cout << piece; });
      std::cout << std::flush;
    } else {
      AtomicFileWriter file(opts.out);
      write_run_json(run, *spool, [&file](const std::string& piece) { file.append(piece); });
      file.commit();
    }
  } else {
    emit(opts, format_run(run, format, opts.wide, opts.explain));
  }
  for (const VariantResult& v : run.variants) {
    if (!v.verify_message.empty() && v.verify_message != "ok") {
      std::cerr << "moesim " << command << ": --verify: " << v.variant.label << ": " << v.verify_message << "\n";
      return kExitCheckFailed;
    }
  }
  return kExitOk;
}

double parse_memory_limit(const std::string& text) {
  if (text.empty()) {
    const double pages = static_cast<double>(sysconf(_SC_PHYS_PAGES));
    const double page = static_cast<double>(sysconf(_SC_PAGESIZE));
    return pages > 0 && page > 0 ? 0.75 * pages * page : 0.0;
  }
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  const std::string unit = end ? std::string(end) : "";
  double scale = 0;
  if (unit.empty() || unit == "B") scale = 1;
  else if (unit == "KiB" || unit == "K") scale = 1024.0;
  else if (unit == "MiB" || unit == "M") scale = 1024.0 * 1024;
  else if (unit == "GiB" || unit == "G") scale = 1024.0 * 1024 * 1024;
  else if (unit == "TiB" || unit == "T") scale = 1024.0 * 1024 * 1024 * 1024;
  if (end == text.c_str() || scale == 0 || !std::isfinite(v) || v <= 0)
    throw InputError("--memory-limit: expected a positive size like 4GiB or 512MiB, got '" + text + "'");
  return v * scale;
}

RunOptions run_options(const CommonOptions& opts, const std::string& progress_label,
                       std::unique_ptr<RecordSpool>* spool) {
  RunOptions r;
  r.progress = progress_bar(progress_label);
  r.execute = !opts.no_execute;
  r.verify = opts.verify;
  r.memory_limit_bytes = parse_memory_limit(opts.memory_limit);
  r.records = opts.records;
  if (opts.records && spool) {
    *spool = std::make_unique<RecordSpool>();
    RecordSpool* s = spool->get();
    r.records = false;  // spooled, not kept: the estimate and the run leave them out of memory
    r.record_sink = [s](size_t variant, const StepRecord& rec, const BalanceMetrics& m, const DecoderStepFigures* d) {
      s->add(variant, record_to_json(rec, m, d));
    };
  }
  r.backend = resolve_backend(opts.backend);
  return r;
}

// ---- --backend ----
ExecBackend resolve_backend(const std::string& name) {
  if (name == "cpu") return ExecBackend::cpu;
  if (name != "auto" && name != "cuda") {
    throw InputError("--backend: expected auto, cpu or cuda, got '" + name + "'");
  }
#if defined(MOESIM_HAS_CUDA)
  std::string why;
  if (cuda_device_available(&why)) return ExecBackend::cuda;
  if (name == "cuda") throw ResourceError("--backend cuda: no usable CUDA device: " + why);
#else
  if (name == "cuda") {
    throw ResourceError("--backend cuda: this moesim was built without the CUDA backend (configure with -DMOESIM_CUDA=ON)");
  }
#endif
  return ExecBackend::cpu;
}

bool parse_or_help(int argc, char** argv, const po::options_description& desc, const char* positional,
                   int max_positional, const bool& help) {
  parse_command_line(argc, argv, desc, positional, max_positional);
  if (help) std::cout << desc << "\n";
  return help;
}

void apply_threads(int threads) {
  if (threads < 0) throw InputError("--threads: expected 0 or a positive count, got " + std::to_string(threads));
  if (threads == 0) return;
#if defined(MOESIM_HAS_OPENMP)
  omp_set_num_threads(threads);
#endif
  openblas_set_num_threads(threads);
}

std::function<void(size_t, size_t)> progress_bar(const std::string& label) {
  if (!isatty(STDERR_FILENO)) return {};
  return [label](size_t done, size_t total) {
    constexpr int kWidth = 30;
    const int filled = total ? static_cast<int>(kWidth * done / total) : kWidth;
    const std::string bar = std::string(filled, '#') + std::string(kWidth - filled, '.');
    std::fprintf(stderr, "\r%s [%s] %zu/%zu", label.c_str(), bar.c_str(), done, total);
    if (done == total) std::fprintf(stderr, "\r%*s\r", static_cast<int>(label.size()) + kWidth + 40, "");
    std::fflush(stderr);
  };
}

void emit(const CommonOptions& opts, const std::string& text) {
  if (opts.out.empty()) {
    std::cout << text << std::flush;
  } else {
    write_file_atomic(opts.out, text);
  }
}

RoutingDump::RoutingDump(bool given, const std::string& path, bool with_logits, bool require_top_k)
    : with_logits_(with_logits), require_top_k_(require_top_k) {
  if (with_logits && !given) throw InputError("--dump-logits: expected together with --dump-routing FILE");
  if (!given) return;
  if (path.empty()) throw InputError("--dump-routing: expected a file path, got an empty string");
  out_ = std::make_unique<AtomicFileWriter>(path);
}

void RoutingDump::write(const RoutedBatch& b) {
  if (!out_) return;
  const Routing& r = *b.routing;
  if (require_top_k_ && !with_logits_) {
    std::vector<int> count(r.num_tokens, 0);
    for (int64_t a = 0; a < r.num_assignments(); ++a) ++count[r.token[a]];
    for (int64_t t = 0; t < r.num_tokens; ++t) {
      if (count[t] != r.top_k) {
        throw InputError("--dump-routing: token " + std::to_string(t) + " of step " + std::to_string(b.step) +
                         ", layer " + std::to_string(b.layer) + " has " + std::to_string(count[t]) +
                         " experts, expected model.top_k = " + std::to_string(r.top_k) +
                         " (a trace without logits replays top_k experts per token): add --dump-logits");
      }
    }
  }
  out_->append(format_trace_lines(r, with_logits_ ? b.logits : nullptr, b.step, b.layer, b.phase, b.token_ids));
}

void RoutingDump::commit() {
  if (out_) out_->commit();
}

void add_dump_options(po::options_description& desc, std::string& path, bool& given, bool& with_logits,
                      const char* what) {
  desc.add_options()(
      "dump-routing", po::value(&path)->value_name("FILE")->notifier([&given](const std::string&) { given = true; }),
      what)("dump-logits", po::bool_switch(&with_logits),
            "with --dump-routing: also write each token's router logits (model.experts numbers a line; a trace "
            "with logits is re-routed on replay, not replayed as recorded)");
}

void check_route_once_key(const std::string& key, const std::string& command) {
  // The loads an EPLB plan is made from are routed once too, by the first point's plan source.
  if (key == "placement.plan_from" || key == "placement.plan_profile" || key == "placement.warmup_batches")
    throw InputError("--vary " + key + ": expected a key that leaves the routed loads and the loads EPLB plans from as "
                     "they are (moesim " + command + " routes both once); run once per value");
  if (key.rfind("placement.", 0) == 0 || key == "hardware" || key.rfind("hardware.", 0) == 0) return;
  throw InputError("--vary " + key + ": expected a placement.* or hardware key (keys that leave the routing as it is: "
                   "moesim " + command + " routes once and costs every point); run once per value of a routing key");
}

std::vector<std::string> header_lines(const std::string& table) {
  std::vector<std::string> lines;
  std::istringstream in(table.substr(0, table.find("\n\n")));
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  return lines;
}

}  // namespace moesim::cli
