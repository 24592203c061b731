// The backward terms of a training GEMM (see training_passes.hpp).
#include "src/cost/training_passes.hpp"

namespace moesim {

KernelTerms backward_terms(const KernelTerms& forward, double weight_grad_accumulate_s) {
  KernelTerms b = forward;
  b.memory_s = 2.0 * forward.memory_s + weight_grad_accumulate_s;
  b.compute_s = 2.0 * forward.compute_s;
  b.ideal_compute_s = 2.0 * forward.ideal_compute_s;
  b.k_steps = 2.0 * forward.k_steps;
  b.kernels = 2 * forward.kernels;
  return b;
}

}  // namespace moesim
