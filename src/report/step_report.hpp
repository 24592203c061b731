// `moesim step --format html` (docs/serving.md): a self-contained page with where one serving step's time goes, the
// MoE layer's parts actual beside balanced (stacked bars: attention, dense GEMMs, experts, other kernels, the compute
// stream's wait), the step's parts (MoE layers, dense layers, head, MTP) and its erosion by cause, as inline SVG.
// Host only. Covered by tests/cli/step_cli_test.cpp.
#pragma once

#include <string>

#include "src/step/serving_step.hpp"

namespace moesim {

// `title` heads the page; `lines` are its paragraphs (the setting, as the table prints it).
std::string format_step_html(const std::string& title, const std::vector<std::string>& lines, const ServingStep& s,
                             int moe_layers, int dense_layers);

}  // namespace moesim
