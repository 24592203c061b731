// The training step's fitted figures (train_step.hpp TrainFigures), fitted by `moesim validate --published` to
// the training tables marked for fitting (data/training-step/*.csv, the `fit` column of their README) as
// fractions of each GPU's own dense peaks, one set for every GPU; the other tables are predicted from them, never
// fitted. docs/training.md "Validation" lists the tables, the fit and the held-out errors; a test refits and
// compares (tests/train/train_published_test.cpp).
#pragma once

namespace moesim {

struct TrainFit {
  static constexpr double gemm_efficiency_bf16 = 0.3621;
  static constexpr double gemm_efficiency_fp8 = 0.1713;
  static constexpr double gemm_efficiency_mxfp8 = 0.7212;
  static constexpr double layer_overhead_us = 454.5;
  static constexpr double ep_overlap_fraction = 0.9917;
  // Not fitted: FlashAttention-3 on H100 in bf16, causal, head dimension 128, 4k tokens reaches about 610 TFLOP/s
  // forward and 470 backward of the 989 dense peak (Shah et al. 2024, "FlashAttention-3", arXiv:2407.08608,
  // figures 5 and 7): 0.52 of the peak over a step whose backward does 2.5 times the forward's FLOPs.
  static constexpr double attention_efficiency = 0.52;
};

}  // namespace moesim
