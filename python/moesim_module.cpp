// moesim._core: the Python extension over moesim's C++ library (pybind11). python/moesim/__init__.py is the
// public face; this file only moves arrays and text across. Every call runs the library code the CLI runs:
// route() the code of `moesim route` (src/cli/route_logits.hpp), cost() the cost every run models for a
// batch's loads (pipeline/run_experiment.hpp model_loads), command() a subcommand's own handler, as main()
// dispatches it. The GIL is released while the library works; one lock serialises the calls, because the
// commands write to std::cout and std::cerr, which each call captures. moesim errors become Python
// exceptions carrying the CLI's one line: ValueError (bad input: exit 2), FileNotFoundError (a file that does
// not exist), ResourceError (exit 3) and RuntimeError (anything else). Tests: tests/python/test_moesim.py.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cerrno>
#include <iostream>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "src/cli/cli_common.hpp"
#include "src/cli/commands.hpp"
#include "src/cli/route_logits.hpp"
#include "src/common/error.hpp"
#include "src/config/load_config.hpp"
#include "src/pipeline/run_experiment.hpp"
#include "src/report/provenance.hpp"
#include "src/report/report.hpp"
#include "src/workload/logits_file.hpp"
#include "router/balance_metrics.hpp"

namespace py = pybind11;

namespace moesim::python {
namespace {

// A moesim error on its way to Python: the CLI's line ("moesim COMMAND: MESSAGE") and its kind.
struct Raised {
  enum class Kind { bad_input, missing_file, resource, internal } kind;
  std::string message;
  std::string path;  // missing_file: the file
};

PyObject* g_resource_error = nullptr;  // moesim.ResourceError (a RuntimeError); lives as long as the process

std::mutex& call_lock() {
  static std::mutex m;
  return m;
}

// std::cout and std::cerr into strings for the life of the object.
class Capture {
 public:
  Capture() : out_old_(std::cout.rdbuf(out_.rdbuf())), err_old_(std::cerr.rdbuf(err_.rdbuf())) {}
  ~Capture() {
    std::cout.rdbuf(out_old_);
    std::cerr.rdbuf(err_old_);
  }
  Capture(const Capture&) = delete;
  Capture& operator=(const Capture&) = delete;
  std::string out() const { return out_.str(); }
  std::string err() const { return err_.str(); }

 private:
  std::ostringstream out_, err_;
  std::streambuf* out_old_;
  std::streambuf* err_old_;
};

// Runs `work` with the GIL released, under the lock, with the output captured; a moesim error becomes a
// Raised with the CLI's line for `command`. Returns what was written to stdout and stderr.
template <class Work>
std::pair<std::string, std::string> guarded(const std::string& command, Work&& work) {
  std::optional<Raised> raised;
  std::string out, err;
  {
    py::gil_scoped_release release;
    std::lock_guard<std::mutex> lock(call_lock());
    Capture capture;
    set_result_command(command);
    try {
      work();
    } catch (const ResourceError& e) {
      raised = Raised{Raised::Kind::resource, "moesim " + command + ": " + e.what(), ""};
    } catch (const Error& e) {
      const auto kind = e.missing_file.empty() ? Raised::Kind::bad_input : Raised::Kind::missing_file;
      raised = Raised{kind, "moesim " + command + ": " + e.what(), e.missing_file};
    } catch (const std::bad_alloc&) {
      raised = Raised{Raised::Kind::resource, "moesim " + command + ": out of memory; lower the sizes", ""};
    } catch (const std::exception& e) {
      raised = Raised{Raised::Kind::internal, "moesim " + command + ": internal error: " + e.what(), ""};
    }
    out = capture.out();
    err = capture.err();
  }
  if (raised) {
    switch (raised->kind) {
      case Raised::Kind::bad_input:
        PyErr_SetString(PyExc_ValueError, raised->message.c_str());
        break;
      case Raised::Kind::missing_file: {
        // FileNotFoundError(errno, strerror, filename): str() gives "[Errno 2] MESSAGE: 'PATH'".
        py::object exc = py::reinterpret_borrow<py::object>(PyExc_FileNotFoundError)(ENOENT, raised->message,
                                                                                     raised->path);
        PyErr_SetObject(PyExc_FileNotFoundError, exc.ptr());
        break;
      }
      case Raised::Kind::resource:
        PyErr_SetString(g_resource_error, raised->message.c_str());
        break;
      case Raised::Kind::internal:
        PyErr_SetString(PyExc_RuntimeError, raised->message.c_str());
        break;
    }
    // The lines written before the error (warnings) go with it, as the CLI prints them before its own.
    if (!err.empty()) py::module_::import("sys").attr("stderr").attr("write")(err);
    throw py::error_already_set();
  }
  return {out, err};
}

// The experiment a dict gave, for one call: cli::inline_experiment while the scope lives (under the lock).
class InlineScope {
 public:
  InlineScope(const std::optional<std::string>& yaml, const std::string& source_name) {
    if (yaml) {
      experiment_ = {*yaml, source_name};
      cli::inline_experiment = &experiment_;
    }
  }
  ~InlineScope() { cli::inline_experiment = nullptr; }
  InlineScope(const InlineScope&) = delete;
  InlineScope& operator=(const InlineScope&) = delete;

 private:
  cli::InlineExperiment experiment_;
};

// A vector's storage handed to NumPy without a copy: the array owns the vector through a capsule.
template <class T>
py::array_t<T> to_numpy(std::vector<T>&& v, std::vector<py::ssize_t> shape) {
  auto* owned = new std::vector<T>(std::move(v));
  py::capsule free_when_done(owned, [](void* p) { delete static_cast<std::vector<T>*>(p); });
  return py::array_t<T>(shape, owned->data(), free_when_done);
}

// route(logits [N, E] float32 C-contiguous, settings...) -> (experts, weights, kept, loads, report_json, stderr).
py::tuple route(py::array_t<float, py::array::c_style> logits, const std::string& gating, int top_k,
                const std::string& capacity_factor, std::optional<bool> renormalize,
                const std::vector<std::string>& overrides) {
  if (logits.ndim() != 2) {
    throw py::value_error("moesim route: logits: expected a 2-D array [tokens, experts], got " +
                          std::to_string(logits.ndim()) + " dimensions");
  }
  const int64_t n = logits.shape(0);
  const int64_t num_e = logits.shape(1);
  cli::RouteSettings s;
  s.gating = gating;
  s.top_k = top_k;
  s.capacity_factor = capacity_factor;
  s.renormalize = renormalize.has_value() && *renormalize;
  s.no_renormalize = renormalize.has_value() && !*renormalize;
  s.overrides = overrides;
  const float* data = logits.data();
  cli::RoutedLogits routed;
  Experiment e;
  std::string report;
  auto [out, err] = guarded("route", [&] {
    if (n < 1 || num_e < 1)
      throw InputError("logits: expected at least one token and one expert, got a " + std::to_string(n) + " x " +
                       std::to_string(num_e) + " array");
    if (num_e > (int64_t{1} << 24))
      throw InputError("logits: expected at most 16777216 experts (columns), got " + std::to_string(num_e));
    check_finite_logits(data, n, static_cast<int>(num_e), "<array>");
    e = cli::route_experiment(s, static_cast<int>(num_e));
    EffectContext ctx;
    ctx.command = "route";
    ctx.executes = false;
    cli::warn_inert_keys({e}, ctx, false);
    routed = cli::route_logits(e, data, n, static_cast<int>(num_e));
    report = format_route(cli::route_report("<array>", e, routed, n, static_cast<int>(num_e), 0, 0), ReportFormat::json);
  });
  (void)out;
  const int k = routed.routing.top_k;
  const std::vector<py::ssize_t> nk = {static_cast<py::ssize_t>(n), static_cast<py::ssize_t>(k)};
  std::vector<uint8_t> kept_bytes = std::move(routed.routing.kept);
  py::array kept = to_numpy(std::move(kept_bytes), nk).attr("view")("bool");
  return py::make_tuple(to_numpy(std::move(routed.routing.expert), nk), to_numpy(std::move(routed.routing.weight), nk),
                        kept, to_numpy(std::move(routed.metrics.load), {static_cast<py::ssize_t>(num_e)}), report,
                        err);
}

// cost(loads [layers, E] int64 C-contiguous, tokens, overrides) -> (json text of a list, stderr): per layer its
// metrics and its modeled placements, as a run's json report writes them.
py::tuple cost(py::array_t<int64_t, py::array::c_style> loads, int64_t tokens, const std::vector<std::string>& overrides) {
  if (loads.ndim() != 2) throw py::value_error("moesim cost: loads: expected a 1-D or 2-D array");
  const int64_t layers = loads.shape(0), num_e = loads.shape(1);
  const int64_t* data = loads.data();
  std::string text;
  auto [out, err] = guarded("cost", [&] {
    if (layers < 1 || num_e < 1) throw InputError("loads: expected at least one layer and one expert");
    std::vector<std::string> sets = {"model.experts=" + std::to_string(num_e)};
    sets.insert(sets.end(), overrides.begin(), overrides.end());
    const Experiment e = default_experiment(sets);
    if (e.model.experts != num_e)
      throw InputError("loads: expected " + std::to_string(e.model.experts) + " experts (model.experts), got " +
                       std::to_string(num_e) + " columns");
    nlohmann::json list = nlohmann::json::array();
    for (int64_t l = 0; l < layers; ++l) {
      std::vector<int64_t> load(data + l * num_e, data + (l + 1) * num_e);
      int64_t total = 0;
      for (int64_t x : load) total += x;
      const int64_t n = tokens > 0 ? tokens : (total + e.model.top_k - 1) / e.model.top_k;
      const std::vector<ModeledPlacement> placements = model_loads(e, load, std::max<int64_t>(n, 1));
      list.push_back({{"layer", l},
                      {"tokens", std::max<int64_t>(n, 1)},
                      {"metrics", metrics_to_json(metrics_from_loads(load, std::max<int64_t>(n, 1), e.model.top_k))},
                      {"modeled", modeled_json(placements)}});
    }
    nlohmann::json doc = {{"experiment", experiment_json(e, "")}, {"layers", list}};
    text = doc.dump();
  });
  (void)out;
  return py::make_tuple(text, err);
}

// command(args, inline_yaml, source_name) -> (exit code, stdout, stderr): one subcommand, as main() runs it.
py::tuple command(const std::vector<std::string>& args, std::optional<std::string> inline_yaml,
                  const std::string& source_name) {
  if (args.empty()) throw py::value_error("moesim: expected a command");
  const cli::Command* c = cli::find_command(args.front());
  if (c == nullptr) throw py::value_error("moesim: unknown command '" + args.front() + "'");
  int code = 0;
  auto [out, err] = guarded(args.front(), [&] {
    std::vector<std::string> owned = args;
    std::vector<char*> argv;
    for (std::string& a : owned) argv.push_back(a.data());
    argv.push_back(nullptr);
    const InlineScope scope(inline_yaml, source_name);
    code = c->handler(static_cast<int>(owned.size()), argv.data());
  });
  return py::make_tuple(code, out, err);
}

// config(path or None, inline_yaml, source_name, overrides) -> (json text of the effective experiment, stderr).
py::tuple config(std::optional<std::string> path, std::optional<std::string> inline_yaml,
                 const std::string& source_name, const std::vector<std::string>& overrides) {
  std::string text;
  auto [out, err] = guarded("config", [&] {
    cli::CommonOptions opts;
    if (path) opts.files.push_back(*path);
    opts.overrides = overrides;
    const InlineScope scope(inline_yaml, source_name);
    text = experiment_to_json(cli::load_experiment_for(opts)).dump();
  });
  (void)out;
  return py::make_tuple(text, err);
}

}  // namespace
}  // namespace moesim::python

PYBIND11_MODULE(_core, m) {
  using namespace moesim::python;
  m.doc() = "moesim's C++ library (the public API is the moesim package)";
  m.attr("__version__") = MOESIM_VERSION;
  g_resource_error = PyErr_NewExceptionWithDoc(
      "moesim.ResourceError", "a resource limit: the memory estimate over the limit, or no CUDA device (exit 3)",
      PyExc_RuntimeError, nullptr);
  m.attr("ResourceError") = py::reinterpret_borrow<py::object>(g_resource_error);
  m.def("route", &route, py::arg("logits"), py::arg("gating"), py::arg("top_k"), py::arg("capacity_factor"),
        py::arg("renormalize"), py::arg("overrides"));
  m.def("cost", &cost, py::arg("loads"), py::arg("tokens"), py::arg("overrides"));
  m.def("command", &command, py::arg("args"), py::arg("inline_yaml"), py::arg("source_name"));
  m.def("config", &config, py::arg("path"), py::arg("inline_yaml"), py::arg("source_name"), py::arg("overrides"));
}
