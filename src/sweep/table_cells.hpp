// The cells of the published tables that `moesim validate --published` reads (kernel, communication, training and
// serving-step tables): one-line errors "ORIGIN:LINE: COLUMN: expected WHAT, got 'VALUE'", integers, reals and
// choices in range, and the model a row names. Host only. Covered through each reader's tests.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "src/common/error.hpp"
#include "src/config/experiment.hpp"

namespace moesim {

// One row of a table: where its cells' errors point.
struct TableCell {
  const std::string& origin;
  int line;
  [[noreturn]] void fail(const std::string& column, const std::string& expected, const std::string& got) const {
    throw InputError(origin + ":" + std::to_string(line) + ": " + column + ": expected " + expected + ", got '" + got +
                     "'");
  }
  // An integer from lo to hi; an empty cell is 0 when may_be_empty.
  int64_t integer(const char* column, const std::string& s, int64_t lo, int64_t hi, bool may_be_empty = false) const;
  // A finite number from lo to hi; an empty cell is 0 when may_be_empty.
  double real(const char* column, const std::string& s, double lo, double hi, bool may_be_empty = false) const;
};

// The value of `values` whose to_string is `s`; otherwise fails listing them.
template <class E, std::size_t N>
E table_choice(const TableCell& c, const std::string& column, const std::string& s, const E (&values)[N]) {
  std::string list;
  for (E v : values) {
    if (s == to_string(v)) return v;
    list += (list.empty() ? "" : ", ") + std::string(to_string(v));
  }
  c.fail(column, "one of " + list, s);
}

// Reads a table's lines: the first must start with `header` (more columns only after its last), else an InputError
// "ORIGIN:1: header: expected 'HEADER' (more columns only after notes), got '...'"; then `on_header` gets the
// header's cells and `on_row` every non-blank line with its number (a trailing carriage return dropped), at most
// `max_rows` of them (then "ORIGIN:LINE: rows: expected at most N rows"). An empty file is the header's error.
void read_table(const std::string& text, const std::string& origin, const std::string& header, int max_rows,
                const std::function<void(const std::vector<std::string>&)>& on_header,
                const std::function<void(const TableCell&, const std::string&)>& on_row);

// The experiment a row's model cell names: a shipped model config (configs/NAME.yaml, compiled in), or, for a table
// read from disk (an origin outside `builtin_dir`), a model .yaml file relative to the table. Fails naming the cell
// and listing the shipped names.
Experiment table_model(const TableCell& c, const std::string& cell, const std::string& builtin_dir);

}  // namespace moesim
