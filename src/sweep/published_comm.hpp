// Published expert-parallel dispatch/combine measurements against the all-to-all model (`moesim validate
// --published`): reads the communication tables of data/validation (*-a2a.csv, the header kCommHeader; its
// README.md has the columns), models every row with src/cost/all_to_all.hpp (the function `run` calls) on its
// GPU's profile, fits each kernel family's four figures (floors per phase, scale-up and scale-out efficiency)
// to its tables, and predicts each table from a fit that never saw it (leave one table out).
// Deterministic. Host only. Covered by tests/sweep/published_comm_test.cpp.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "src/config/experiment.hpp"
#include "src/cost/all_to_all.hpp"
#include "src/cost/hardware_profile.hpp"
#include "src/sweep/published.hpp"

namespace moesim {

// The columns of a communication table, in order (node_limit and devices_per_node may be empty).
extern const char* const kCommHeader;
constexpr int kCommMaxDevices = 1024;

enum class CommPhase { dispatch, combine };
const char* to_string(CommPhase p);

struct CommPoint {
  CommPhase phase = CommPhase::dispatch;
  A2aKernel kernel = A2aKernel::normal;
  int ep = 1, top_k = 1, experts = 1;
  int64_t tokens_per_rank = 0, hidden = 0;
  A2aDtype dtype = A2aDtype::bf16;      // the copy's format in this phase
  A2aFanout fanout = A2aFanout::random;  // routing uniform_random (random) or balanced (spread)
  int node_limit = 0;                    // nodes a token may span (0: any)
  int devices_per_node = 0;              // 0: the profile's; 1: every GPU over its NIC (no scale-up path)
  double measured_s = 0;
  std::string source, notes;
  int line = 0;
};

struct CommTable {
  std::string name, origin;
  HardwareProfile hardware;  // the gpu cell's profile (one per table)
  std::string profile_ref;
  std::vector<CommPoint> points;
};

// Parses one communication CSV. Errors: InputError "ORIGIN:LINE: COLUMN: expected WHAT, got 'VALUE'".
CommTable parse_comm_csv(const std::string& text, const std::string& origin);
// The communication tables among `spec`'s files ("all": the built-in ones; a folder; one CSV), sorted by
// name; none when the spec holds only kernel tables. Errors as load_published.
std::vector<CommTable> load_published_comm(const std::string& spec);

// The traffic and the profile one point is modeled on: the profile with the point's devices_per_node, and
// every rank holding tokens_per_rank x top_k assignments.
struct CommModelInput {
  HardwareProfile hardware;
  A2aTraffic traffic;
  int per_node = 1;
  A2aCopies copies;  // a2a_copies of the point's kernel: they do not depend on the figures
};
CommModelInput comm_model_input(const CommPoint& p, const HardwareProfile& hw);
// The point's phase time under `figures` (a2a_figures of its kernel replaced).
double comm_time_s(const CommPoint& p, const CommModelInput& in, const A2aFigures& figures);

// The four figures of one kernel family fitted to a set of points: least squares in log time, each table
// weighted equally (1 / its points), over floors in [0, 500] us and efficiencies in [0.05, 1]: a coarse grid,
// then rounds of a finer one around the best. Deterministic. Each floor's distance from kCommPriorFloor_us
// adds kCommPriorWeight ((floor - prior) / prior)^2: tables of large transfers alone (DeepEP's normal kernels
// at 4096 tokens a rank, milliseconds long) cannot tell a floor from the transfer, and the prior keeps it at
// a kernel's order (tens of us) where they are silent; a table of small messages outweighs it.
constexpr double kCommPriorFloor_us = 20.0, kCommPriorWeight = 0.05;
struct CommFit {
  A2aFigures figures;
  int points = 0;
};
struct CommSample {
  CommPoint point;
  CommModelInput input;
  double weight = 1;
};
CommFit fit_comm(const std::vector<CommSample>& samples);

struct CommRow {
  int table = 0;
  CommPoint point;
  double model_s = 0, held_out_s = 0;  // the shipped profile's figures; a fit without this table
  double error(PublishedColumn c) const;
};

struct CommTableResult {
  CommTable table;        // points moved to rows
  std::string gpu;
  A2aKernel kernel = A2aKernel::normal;
  std::string held_out_basis;           // the family's other tables, or "none"
  CommFit held_out_fit;
  ErrorSummary model, held_out;
};

struct CommFamily {
  A2aKernel kernel = A2aKernel::normal;
  CommFit fit;                          // over every table of the family: A2aPooledFit's figures
  std::vector<std::string> tables;
  ErrorSummary model, held_out;
};

struct CommValidation {
  std::vector<CommTableResult> tables;
  std::vector<CommRow> rows;
  std::vector<CommFamily> families;     // normal, low_latency (those with tables)
  ErrorSummary model, held_out;         // every row
};
CommValidation validate_comm(const std::vector<CommTable>& tables);

}  // namespace moesim
