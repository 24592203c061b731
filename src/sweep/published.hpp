// Published fused-MoE kernel measurements against the cost model (`moesim validate --published`,
// `moesim calibrate --from-published`): reads data/validation/*.csv (its README.md has the columns), models
// every row with the kernel model (roofline.hpp kernel_time_s, the one `run` uses) on its GPU's profile
// under the benchmark's own routing (uniform random or balanced top-k), fits the model's four figures to
// a set of tables, and predicts each table from a fit that never saw it (leave one table out).
// Deterministic: the routing draws come from counter_rng with fixed seeds. Host only.
// Covered by tests/sweep/published_test.cpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "src/config/experiment.hpp"
#include "src/cost/hardware_profile.hpp"
#include "src/cost/roofline.hpp"

namespace moesim {

// Bounds that keep a validation fast whatever a file says: a row's batch and top_k (the routing draws cost
// batch x top_k each), and the tables and points of one `--published` (each leave-one-out fit costs about
// 1e5 x the points it fits).
constexpr int64_t kPublishedMaxBatch = 65536;
constexpr int kPublishedMaxTopK = 64;
constexpr std::size_t kPublishedMaxTables = 64, kPublishedMaxPoints = 2048;

// The columns of a validation CSV, in order; a table may add `ep` as a 17th column (kPublishedHeaderEp).
extern const char* const kPublishedHeader;
extern const char* const kPublishedHeaderEp;
// ... and then `gated` as an 18th (1: SwiGLU experts, 0: non-gated ones; 1 when absent).
extern const char* const kPublishedHeaderGated;
// ... and then `fitted` as a 19th (1: the fits may see the row; 0: validation only, as for a kernel `run`
// does not model, such as a training framework's own; 1 when absent).
extern const char* const kPublishedHeaderFitted;
// A format as the dtype cell spells it: the dtype, or int4 / mxfp4 for 4-bit weights.
std::string dtype_cell(const ExpertFormat& f);

// How the benchmark routed its tokens (the CSV's routing column):
//  uniform  - each token's top-k a uniformly random set of k distinct experts (torch.randn gating logits,
//             as benchmark_moe.py and SGLang's tuning script draw them): the mean over kPublishedDraws draws;
//  balanced - token t takes experts (t + j ceil(E / k)) mod E, j < k (aiconfigurator's balanced_logits):
//             every expert gets batch x top_k / E rows, +-1; one deterministic routing;
//  power_law - aiconfigurator's power-law loads with exponent ALPHA (src/workload/load_distribution.hpp),
//             the heaviest EP group on the timed GPU: the mean over kPowerLawDraws seeded draws;
//  concentrated - every token on the same top_k experts (experts 0 .. top_k - 1, batch rows each), as
//             VeOmni's fused-MoE benchmark routes its `concentrated` case; one deterministic routing.
// A cell that reads `balanced` is balanced, `power_law:ALPHA` the power law, `concentrated` concentrated;
// any other text (the sources' own words, "random logits ...") is the uniform draw.
enum class PublishedRouting { uniform, balanced, power_law, concentrated };
const char* to_string(PublishedRouting r);
// The skewed routings (power_law, concentrated): never fitted, each row paired with its table's balanced
// row at the same batch (SkewPair).
bool skewed(PublishedRouting r);

struct PublishedPoint {
  std::string gpu;             // the gpu cell: a built-in profile name or a profile YAML (relative to the CSV)
  // The dtype cell (bf16, fp8, ...; int4 and mxfp4: 4-bit weights computing in bf16) and the gated cell.
  ExpertFormat format = Dtype::bf16;
  int experts = 0, top_k = 0, tp = 1;
  int ep = 1;                  // expert parallelism: the timed GPU holds experts [0, experts / ep)
  int64_t n = 0, k = 0;        // per-GPU intermediate size (the kernel's N) and hidden size (K)
  int64_t batch = 0;           // tokens (M)
  double measured_s = 0;
  std::string source, tool;
  KernelScope scope = KernelScope::layer;
  PublishedRouting routing = PublishedRouting::uniform;
  double alpha = 0;            // the power law's exponent (routing power_law)
  bool fitted = true;          // the fitted cell: whether a fit may see the row (skewed rows never are)
  int line = 0;                // line in its file, for messages
};

struct PublishedTable {
  std::string name;            // the file name without .csv
  std::string origin;          // where it was read: data/validation/NAME.csv (built in) or the path given
  HardwareProfile hardware;    // the profile the gpu cell names (one per table)
  std::string profile_ref;     // that profile as load_hardware_profile found it: a built-in name or a path
  std::vector<PublishedPoint> points;
};

// One CSV line split into fields: commas inside double quotes do not split, "" is a literal quote.
std::vector<std::string> split_csv_line(const std::string& line);

// Parses one CSV (the exact header, one point per line). The gpu cell names a built-in profile or, for a
// file read from disk, a profile YAML relative to the CSV's folder; every row names the same one. Errors:
// InputError "ORIGIN:LINE: COLUMN: expected WHAT, got 'VALUE'".
PublishedTable parse_published_csv(const std::string& text, const std::string& origin);

// The validation CSVs of a spec: "all", the files compiled into the binary (data/validation/*.csv); a
// directory: its *.csv files (sorted); else one CSV file. Errors: InputError naming the path.
struct PublishedFile {
  std::string origin, text;
};
std::vector<PublishedFile> published_files(const std::string& spec);
// Whether a CSV is a communication table (its header starts with `phase,`: src/sweep/published_comm.hpp).
bool is_comm_table(const std::string& text);
// Whether a CSV is a training table (its header starts with `model,`: src/sweep/published_train.hpp).
bool is_training_table(const std::string& text);
// The profile a table's gpu cell names: a built-in profile, or (for a table read from disk) a profile YAML
// relative to the table's folder. Errors: InputError "ORIGIN:LINE: gpu: expected ..., got '...'".
HardwareProfile published_table_profile(const std::string& origin, int line, const std::string& cell,
                                        std::string& profile_ref);
// The kernel tables of a spec (communication and training tables are left to their readers), sorted by name;
// empty when it holds none. Errors: InputError naming the path.
std::vector<PublishedTable> load_published(const std::string& spec);

// Rows per local expert [experts / ep] of one routing of a point (draw 0 .. draws - 1; balanced has one).
std::vector<int64_t> published_loads(const PublishedPoint& p, int draw);
constexpr int kPublishedDraws = 16;
// Power-law draws per point: the mean modeled time of 1024 draws moves by less than 0.5 % between seeds on
// the shipped tables' shapes (tests/sweep/published_test.cpp PowerLawMeanIsStable).
constexpr int kPowerLawDraws = 1024;
constexpr int kPublishedMaxPowerLawExperts = 4096;  // keeps a power-law row's draws fast
int published_draws(const PublishedPoint& p);

// The kernel model's terms for one point on a profile: one KernelTerms per routing draw (GroupedCost on
// the local experts' rows, the point's scope).
struct PublishedTerms {
  std::vector<KernelTerms> draws;
  double active_experts = 0;   // mean local experts with at least one token
  int kernels = 0;             // scope_kernels
};
PublishedTerms published_terms(const PublishedPoint& p, const HardwareProfile& hw);

// The kernel model (roofline.hpp kernel_time_s) on every draw with the given figures, the mean.
double published_time_s(const PublishedTerms& t, const KernelFigures& f);
// The ideal column at peak: max(memory, ideal compute), no launches, the mean over draws.
double published_ideal_s(const PublishedTerms& t);

struct PublishedSample {
  PublishedTerms terms;
  double measured_s = 0;
  double overlap = 1;          // the profile's memory_compute_overlap (held, never fitted)
  // Whether the fits see it: power-law rows test what skew costs, so the figures are fitted on the
  // balanced and uniform rows and the skewed ones are predicted, never fitted.
  bool fitted = true;
  // A weight-only 4-bit row: never in the four figures' fits (its kernel is another), its balanced and
  // uniform rows fit the WeightOnlyFit shares instead.
  bool weight_only = false;
};
// The kernel model's four fitted figures (efficiency_bw, efficiency_flops, launch, K step).
struct PublishedFit {
  KernelFigures figures;
  int points = 0;              // points fitted
};
// Least squares in log time over efficiencies in [0.02, 1], launch in [0, 50] us and the K step in
// [0, 4] us: a coarse grid, then rounds of a finer grid around the best point. With a prior, each
// figure's distance from it is added to the loss (kPriorWeight (log ratio)^2 for the efficiencies,
// kPriorWeight (difference / scale)^2 for launch and K step), so a GPU with few tables stays near the
// pooled fit where its own points do not pin a figure. The K step's scale (1 us, twice the pooled K step)
// lets a GPU whose small-expert rows bind it set it (Hopper's 0.14-0.18 us against A100's 0.55 us); at 0.1 us
// the prior held every GPU at the pooled figure. Deterministic. Throws PreconditionError when `samples` is
// empty.
constexpr double kPriorWeight = 1.0, kPriorLaunchScale_s = 2e-6, kPriorKStepScale_s = 1e-6;
PublishedFit fit_published(const std::vector<PublishedSample>& samples, const KernelFigures* prior = nullptr);

// The weight-only shares (KernelFigures::weight_only_bw_share, _flops_share, _reread_share;
// hardware_profile.hpp WeightOnlyFit) that fit a set of weight-only rows, each with its table's shipped
// figures: least squares in log time over shares in [0.02, 1], a coarse grid then 10 rounds of a finer one.
// points = 0 (and shares 1) when there is none.
struct WeightOnlyShares {
  double bw_share = 1, flops_share = 1, reread_share = 1, k_step_share = 1;
  int points = 0;
};
// The shares fitted on every table's weight-only fitted rows but `skip`'s (skip < 0: none held out).
WeightOnlyShares fit_weight_only(const std::vector<PublishedTable>& tables, int skip);

// How moesim ships fitted figures (docs/cost-model.md "Fitted profiles"): the pooled fit over every table
// but `skip`, then, for `gpu`, a fit to that GPU's tables but `skip` with the pooled fit as its prior (the
// pooled fit itself when the GPU has no other table). skip < 0 holds nothing out.
struct ShippedFit {
  PublishedFit pooled, gpu;
  std::vector<std::string> gpu_tables;  // the GPU's tables fitted (names)
};
ShippedFit shipped_fit(const std::vector<PublishedTable>& tables, const std::string& gpu, int skip);

// One point with every column and its relative error (modeled - measured) / measured.
struct PublishedRow {
  int table = 0;               // index into PublishedValidation::tables
  PublishedPoint point;
  PublishedTerms terms;
  // ideal: the roofline at peak; model: the kernel model with the table's profile, the number `run` and
  // `sweep` print; held_out: the same model with figures fitted as shipped, never on this table.
  double ideal_s = 0, model_s = 0, held_out_s = 0;
};
enum class PublishedColumn { ideal, model, held_out };
constexpr int kPublishedColumnCount = 3;
constexpr PublishedColumn kPublishedColumns[] = {PublishedColumn::ideal, PublishedColumn::model,
                                                 PublishedColumn::held_out};
const char* to_string(PublishedColumn c);
double column_s(const PublishedRow& r, PublishedColumn c);
double column_error(const PublishedRow& r, PublishedColumn c);

// The whole of a table cell as a number, or NaN (the published readers' numeric cells).
double whole_number(const std::string& s);

struct ErrorSummary {
  double median_abs = 0, worst = 0;  // worst: the signed error of largest magnitude
  double mean = 0;                   // the mean signed error: a bias, where the median hides its side
  int points = 0;
};
ErrorSummary summarize_errors(const std::vector<double>& errors);

// The regimes validate --published reports its error in, each a set of the kernel tables' rows: the
// routing the fits see (balanced and uniform); decode, at most kDecodeMaxTokens tokens routed a batch (the
// table's batch column: the tokens the timed rank's kernel routes) with wide expert parallelism (ep >=
// kWideEp) and on one GPU (ep 1); prefill and large batches (more tokens); ep 1 and ep >= kWideEp at any
// batch; every row. An answer in a regime (run, compare: src/report/verdict.cpp) quotes its error.
constexpr int64_t kDecodeMaxTokens = 64;
constexpr int kWideEp = 8;
enum class PublishedRegime { fitted_routing, decode_wide_ep, decode_ep1, large_batch, ep1, wide_ep, every };
constexpr PublishedRegime kPublishedRegimes[] = {
    PublishedRegime::fitted_routing, PublishedRegime::decode_wide_ep, PublishedRegime::decode_ep1,
    PublishedRegime::large_batch,    PublishedRegime::ep1,            PublishedRegime::wide_ep,
    PublishedRegime::every};
const char* to_string(PublishedRegime r);
bool in_regime(const PublishedPoint& p, PublishedRegime r);
struct RegimeSummary {
  PublishedRegime regime = PublishedRegime::every;
  ErrorSummary model, held_out;  // held_out: the rows of tables some fit can leave out
};
struct PublishedValidation;
std::vector<RegimeSummary> summarize_regimes(const PublishedValidation& v);

struct PublishedTableResult {
  PublishedTable table;        // points moved to rows
  std::string gpu, profile_digest;
  // The held-out column: the shipped fit without this table ("every other table"; "none" when there is
  // no other table).
  std::string held_out_basis;
  std::vector<std::string> fitted_on;
  PublishedFit fit;            // the held-out figures
  ErrorSummary errors[kPublishedColumnCount];  // per PublishedColumn
};

struct PublishedGpuSummary {
  std::string gpu;
  ErrorSummary errors[kPublishedColumnCount];
  // The figures shipped_fit gives this GPU from every table (what its profile should carry) and the
  // GPU's own tables it fitted.
  PublishedFit fit;
  std::vector<std::string> fitted_tables;
};

// A balanced row and a power-law row of one table at the same batch: what skew costs, modeled (the model
// column's ratio) and measured.
struct SkewPair {
  int table = 0;
  int64_t batch = 0;
  int ep = 1;
  double alpha = 0;                                // the power law's exponent; 0 for concentrated
  PublishedRouting routing = PublishedRouting::power_law;  // the skewed row's routing
  double predicted_ratio = 0, measured_ratio = 0;  // skewed / balanced
  bool weight_only = false;                        // a weight-only 4-bit kernel's table (Marlin W4A16)
  bool modeled = true;                             // a kernel run models (the rows' fitted cell is 1)
  double error() const { return predicted_ratio / measured_ratio - 1.0; }
};
// Over the pairs whose measured ratio moved more than `moved` either way: the median and 90th percentile
// of |error|, and the share whose predicted ratio is on the same side of 1 as the measured one.
struct SkewSummary {
  int pairs = 0;
  double median_abs = 0, p90_abs = 0, direction_right = 0;
};
// kernels: every pair; the pairs of the kernels run models (vLLM's), or of one family of them (the Triton
// fused MoE in bf16/fp8, or the weight-only 4-bit kernels), which skew meets differently; or the pairs of
// the validation-only kernels (fitted 0: a kernel run does not model).
enum class SkewKernels { all, modeled, fused, weight_only, validation_only };
SkewSummary summarize_skew(const std::vector<SkewPair>& pairs, double moved, bool ep_one_only,
                           SkewKernels kernels = SkewKernels::all);
constexpr double kSkewMoved = 0.05;  // the pairs the summary counts: skew moved the measured time > 5 %

struct PublishedValidation {
  std::vector<PublishedTableResult> tables;
  std::vector<PublishedRow> rows;
  std::vector<SkewPair> skew_pairs;              // every table's balanced / power-law pairs
  std::vector<PublishedGpuSummary> gpus;         // per GPU, sorted by name
  PublishedFit pooled;                           // the pooled fit over every table (PooledFit's figures)
  WeightOnlyShares weight_only;                  // fit_weight_only over every table (WeightOnlyFit's shares)
  ErrorSummary overall[kPublishedColumnCount];
};
PublishedValidation validate_published(const std::vector<PublishedTable>& tables);

// `base_yaml` (the tables' GPU profile text) with the shipped fit's four figures written in (calibrated:
// true, sources naming the tables), as YAML text: shipped_fit over `tables` for their GPU (every table
// must be of one GPU, else InputError).
std::string published_profile_yaml(const std::vector<PublishedTable>& tables, const std::string& base_yaml,
                                   const std::string& name);

}  // namespace moesim
