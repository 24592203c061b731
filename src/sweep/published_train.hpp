// Published training-step measurements against the training step (`moesim validate --published`): reads the
// training tables (data/training-step/*.csv, the header kTrainingHeader; its README.md has the columns), models
// every row with model_train_step (src/train/train_step.hpp, the function `moesim train` calls) on its GPU's
// profile and the shipped model configs, fits the training figures (TrainFigures) to the tables marked fitted,
// and predicts each table from a fit that never saw it (leave one table out). Deterministic. Host only.
// Covered by tests/sweep/published_train_test.cpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "src/config/experiment.hpp"
#include "src/sweep/published.hpp"
#include "src/train/train_step.hpp"

namespace moesim {

// The columns of a training table, in order; more columns may follow `notes`. Of them `fitted` (1: the fits may
// see the row; 0: validation only; 1 when absent) is read, any other is left to its reader.
extern const char* const kTrainingHeader;
// Bounds that keep a validation fast whatever a file says.
constexpr std::size_t kTrainingMaxTables = 64, kTrainingMaxRows = 512;

// What a row measured (the quantity column) and the unit its measured cell is in (the unit column).
enum class TrainQuantity { step_s, tokens_per_s_per_gpu, tflops_per_gpu, mfu, a2a_ms, experts_ms };
const char* to_string(TrainQuantity q);
// The unit a quantity's cells are in: s, tokens/s, TFLOP/s, % (mfu), ms.
const char* unit_of(TrainQuantity q);

struct TrainingPoint {
  std::string model;          // a shipped model config (configs/NAME.yaml) or a model YAML relative to the table
  std::string gpu;            // a built-in hardware profile or a profile YAML relative to the table
  TrainConfig train;          // the layout, batch, precision, recompute, dispatcher and routing of the row
  int devices_per_node = 0;   // the scale-up domain (0: the profile's)
  double capacity_factor = 0; // 0: dropless
  TrainQuantity quantity = TrainQuantity::step_s;
  double measured = 0;        // in unit_of(quantity)
  std::string source, notes;
  bool fitted = true;
  int line = 0;
};

struct TrainingTable {
  std::string name, origin;
  std::vector<TrainingPoint> points;
};

// Parses one training CSV. Errors: InputError "ORIGIN:LINE: COLUMN: expected WHAT, got 'VALUE'" (the layout's
// checks too, naming the column at fault).
TrainingTable parse_training_csv(const std::string& text, const std::string& origin);
// The training tables of a spec: "all", the built-in ones (data/training-step/*.csv); a folder: its training
// tables; a file: it, when it is one. Sorted by name; empty when there is none. Errors: InputError.
std::vector<TrainingTable> load_training_tables(const std::string& spec);

// One row modeled.
struct TrainingRow {
  int table = 0;
  TrainingPoint point;
  double model = 0;           // the prediction with the shipped figures (TrainFit), in the row's unit
  double held_out = 0;        // the prediction with figures fitted without the row's table
  TrainStep step;             // the shipped figures' step
  double error(bool held) const { return (held ? held_out : model) / point.measured - 1.0; }
};

struct TrainingTableResult {
  std::string name, origin;
  bool fitted = false;        // any of its rows is fitted
  ErrorSummary model, held_out;
  std::string held_out_basis; // "every other fitted table", "the shipped fit (never fitted on it)"
  TrainFigures held_out_fit;
};

// A forced-balance row and a row of another routing on the same layout and quantity: what the real router
// costs, predicted (the model column's ratio) and measured.
struct RouterPair {
  int forced = 0, other = 0;  // rows
  double predicted_ratio = 0, measured_ratio = 0;  // other / forced, as step time ratios (time: >= 1 slower)
  double error() const { return predicted_ratio - measured_ratio; }
};

struct TrainingValidation {
  std::vector<TrainingTableResult> tables;
  std::vector<TrainingRow> rows;
  std::vector<RouterPair> pairs;
  TrainFigures fit;           // fitted on every fitted table (what TrainFit ships)
  int fit_rows = 0;
  ErrorSummary model, held_out;                 // every row
  ErrorSummary forced_model, forced_held_out;   // the forced-balance rows
};
TrainingValidation validate_training(const std::vector<TrainingTable>& tables);

// The figures that fit a set of rows best: least squares in log of predicted over measured, each table weighted
// equally (1 / its fitted rows), by coordinate search (golden sections, six sweeps) from fixed figures (efficiencies
// 0.5, no overhead, the whole all-to-all overlappable; the cited attention efficiency held): the GEMM
// efficiencies in log space over [0.05, 1], the layer overhead over [0, kMaxLayerOverhead_s]. An fp8 efficiency
// no row reads takes the bf16 one. The attention's efficiency is cited, not fitted. Deterministic.
constexpr double kMaxLayerOverhead_s = 5e-3;
struct TrainingSample;
TrainFigures fit_training(const std::vector<const TrainingSample*>& samples, int* rows_fitted = nullptr);

}  // namespace moesim
