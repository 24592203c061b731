// Published fused-MoE kernel measurements against the cost model (`moesim validate --published`,
// `moesim calibrate --from-published`): reads data/validation/*.csv (its README.md has the columns), models
// every row on its GPU's built-in profile under the benchmark's own routing (uniform random top-k, as
// torch.randn gating logits give), fits the three physical efficiencies of a profile to a set of tables,
// and predicts each table from a fit that never saw it (leave one table out).
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
constexpr std::size_t kPublishedMaxTables = 32, kPublishedMaxPoints = 512;

// The columns of a validation CSV, in order.
extern const char* const kPublishedHeader;

// What a benchmark times: the whole fused-MoE layer (`layer`: routing, alignment, both GEMMs, the
// activation and the top-k sum: 6 kernels), or one GEMM launch (`up_gemm`, `down_gemm`: 1 kernel).
enum class PublishedScope { layer, up_gemm, down_gemm };
const char* to_string(PublishedScope s);
int scope_kernels(PublishedScope s);

struct PublishedPoint {
  std::string gpu;             // a built-in hardware profile name
  Dtype dtype = Dtype::bf16;
  int experts = 0, top_k = 0, tp = 1;
  int64_t n = 0, k = 0;        // per-GPU intermediate size (the kernel's N) and hidden size (K)
  int64_t batch = 0;           // tokens (M)
  double measured_s = 0;
  std::string source, tool;
  PublishedScope scope = PublishedScope::layer;
  int line = 0;                // line in its file, for messages
};

struct PublishedTable {
  std::string name;            // the file name without .csv
  std::string origin;          // where it was read: data/validation/NAME.csv (built in) or the path given
  std::vector<PublishedPoint> points;
};

// One CSV line split into fields: commas inside double quotes do not split, "" is a literal quote.
std::vector<std::string> split_csv_line(const std::string& line);

// Parses one CSV (the exact header, one point per line). Errors: InputError "ORIGIN:LINE: COLUMN: expected
// WHAT, got 'VALUE'". A GPU without a built-in profile is an error.
PublishedTable parse_published_csv(const std::string& text, const std::string& origin);

// "all": the tables compiled into the binary (data/validation/*.csv); a directory: its *.csv files; else
// one CSV file. Sorted by name. Errors: InputError naming the path.
std::vector<PublishedTable> load_published(const std::string& spec);

// The model's terms for one point on a profile, the mean over kPublishedDraws routings of `batch` tokens,
// each picking top_k distinct experts uniformly (the ramp over activated experts at tiny batches).
struct PublishedTerms {
  double memory_s = 0;         // (active W + rows A) / BW, the scope's GEMMs
  double compute_s = 0;        // quantized compute (tiles in waves), the scope's GEMMs
  double ideal_compute_s = 0;  // rows 2 P / F (the scope's share), no tiles
  double active_experts = 0;   // mean experts with at least one token
  // K steps in series: per GEMM, waves of tiles (ceil(tiles / sm_count), one tile per SM at a time) times
  // the K steps of one tile (ceil(K / kPublishedKStep)), summed over the scope's GEMMs. Triton's
  // fused_moe_kernel never splits K (SPLIT_K is 1 in every config of the tables), so a tile walks all of K.
  double k_steps = 0;
  int kernels = 0;             // scope_kernels
};
constexpr int64_t kPublishedKStep = 128;
constexpr int kPublishedDraws = 16;
PublishedTerms published_terms(const PublishedPoint& p, const HardwareProfile& hw);

// The physical figures a fit sets: achieved fraction of peak bandwidth and of peak tensor FLOP/s, and the
// fixed cost of each kernel launch (launch to completion of a tiny kernel, CUDA-graph replay included).
struct PublishedFit {
  double efficiency_bw = 1, efficiency_flops = 1, launch_overhead_s = 0;
  // The latency of one K step of a tile: the loads of a step must arrive before its MMAs, so a GEMM of
  // few waves cannot take less than k_steps x k_step_s however little it reads (Little's law).
  double k_step_s = 0;
  int points = 0;              // points fitted
};
// kernels x launch + max(k_steps x k_step, max(memory / eff_bw, compute / eff_flops) + (1 - overlap)
// min(...)): the calibrated column of the cost model (roofline.hpp combine_terms) with the K-step floor.
double published_time_s(const PublishedTerms& t, const PublishedFit& fit, double overlap);

struct PublishedSample {
  PublishedTerms terms;
  double measured_s = 0;
  double overlap = 1;          // the profile's memory_compute_overlap
};
// Least squares in log time over efficiencies in [0.02, 1], launch overhead in [0, 50] us and the K step
// in [0, 4] us (held at 0 unless fit_k_step: a hardware profile has no such figure): a coarse grid, then
// rounds of a finer grid around the best point. Deterministic. Throws PreconditionError when `samples`
// is empty.
PublishedFit fit_published(const std::vector<PublishedSample>& samples, bool fit_k_step = true);

// One point with every column and its relative error (modeled - measured) / measured.
struct PublishedRow {
  int table = 0;               // index into PublishedValidation::tables
  PublishedPoint point;
  PublishedTerms terms;
  double ideal_s = 0, quantized_s = 0, calibrated_s = 0, held_out_s = 0;
};
enum class PublishedColumn { ideal, quantized, calibrated, held_out };
constexpr PublishedColumn kPublishedColumns[] = {PublishedColumn::ideal, PublishedColumn::quantized,
                                                 PublishedColumn::calibrated, PublishedColumn::held_out};
const char* to_string(PublishedColumn c);
double column_s(const PublishedRow& r, PublishedColumn c);
double column_error(const PublishedRow& r, PublishedColumn c);

struct ErrorSummary {
  double median_abs = 0, worst = 0;  // worst: the signed error of largest magnitude
  int points = 0;
};
ErrorSummary summarize_errors(const std::vector<double>& errors);

struct PublishedTableResult {
  PublishedTable table;        // points moved to rows
  std::string gpu, profile_digest;
  // The held-out column: fitted on every other table ("every other table"; "none" when there is none).
  std::string held_out_basis;
  std::vector<std::string> fitted_on;
  PublishedFit fit;
  ErrorSummary errors[4];      // per PublishedColumn
};

struct PublishedValidation {
  std::vector<PublishedTableResult> tables;
  std::vector<PublishedRow> rows;
  ErrorSummary overall[4];
};
PublishedValidation validate_published(const std::vector<PublishedTable>& tables);

// `base_yaml` (the tables' GPU profile text) with a fit's three figures written in (calibrated: true,
// sources naming the tables), as YAML text. Every table must be of one GPU (else InputError).
std::string published_profile_yaml(const std::vector<PublishedTable>& tables, const std::string& base_yaml,
                                   const std::string& name);

}  // namespace moesim
