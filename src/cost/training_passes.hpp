// The backward pass of a GEMM launch in training, in the kernel model's terms (roofline.hpp kernel_time_s), so
// that a training step's GEMMs, dense or grouped, are costed by the one formula every modeled time uses
// (docs/training.md "Forward and backward"). A GEMM Y = X W of 2 M N K FLOPs has two backward GEMMs of the same
// FLOPs: the data gradient dX = dY W^T and the weight gradient dW = X^T dY (Megatron-LM counts every GEMM 3 times
// a step: forward, wgrad, dgrad). Pure arithmetic. Covered by tests/cost/training_passes_test.cpp.
#pragma once

#include "src/cost/roofline.hpp"

namespace moesim {

// The terms of the data and weight gradients of a forward launch `forward` (one launch sequence's terms, as
// GroupedCost::terms gives them):
//   compute_s, ideal_compute_s, k_steps and kernels: twice the forward's (each gradient GEMM does the forward's
//     FLOPs in the forward's tiles; the transposed GEMMs' tile shapes are taken as the forward's);
//   memory_s: twice the forward's (dgrad reads dY and W and writes dX: the forward's traffic with the roles of
//     input and output swapped; wgrad reads X and dY and writes dW, the size of W) plus
//     `weight_grad_accumulate_s`, the fp32 main gradient read and written per weight (Megatron-LM's
//     gradient_accumulation_fusion adds each micro-batch's dW into it: 8 bytes a weight over the bandwidth);
//   reread_s and weight_only: the forward's (a weight-only kernel's rereads happen in dgrad only: once).
KernelTerms backward_terms(const KernelTerms& forward, double weight_grad_accumulate_s);

}  // namespace moesim
