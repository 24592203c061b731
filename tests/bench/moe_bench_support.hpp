// Shared pieces of moesim_bench's cases (tests/bench/moe_bench.cpp, moe_bench_cases.cpp): the Mixtral
// router rule, thread control, checks of routings, plans and GEMM rows against the references, and the
// machine's copy ceiling. Host only; built only into moesim_bench.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>

#include "kernels/moe_layer.hpp"
#include "router/route.hpp"
#include "tests/bench/bench_inputs.hpp"

namespace moesim::bench::detail {

using benchmark::State;

// The Mixtral rule, as the PyTorch reference computes it: softmax over all E, top-k, renormalise.
RouterConfig mixtral_router();

void sgemm(const float* a, const float* b, float* c, int64_t m, int64_t k, int64_t n);

int max_threads();

void set_threads(int n);

// Records a verification failure: the case reports the error and moesim_bench exits 1.
void fail(State& state, const std::string& what);

// route_omp against route_ref: experts exactly, weights within 1e-6 relative (both evaluate the same
// double formulas; the bound leaves room for a changed summation order before the float rounding).
std::string compare_routing(const Routing& got, const Routing& want);

std::string compare_plans(const DispatchPlan& got, const DispatchPlan& want);

// Float tolerance of GEMM outputs against the double references: float32 products summed over
// K <= 2816 terms in a blocked order; |err| <= 2e-4 * (1 + |want|) holds with a wide margin.
std::string compare_floats(const float* got, const std::vector<double>& want, const std::string& what);

// Parallel copy of the large-copy ceiling: each thread copies one contiguous chunk.
void parallel_copy(const float* src, float* dst, int64_t n);

// Large-copy ceiling: bytes read + written per second (Counter "bytes_per_second").
void run_copy_ceiling(State& state);

// Rows spread over the whole buffer for the sampled GEMM checks.
std::vector<int64_t> sample_rows(int64_t rows, int64_t count);

// Expert of each row of a plan (-1: padding).
std::vector<int> row_expert(const DispatchPlan& plan);

// Sampled check of a grouped SwiGLU output against swiglu_token_ref (double).
std::string check_swiglu_rows(const ExpertWeights& w, const DispatchPlan& plan, const std::vector<float>& xg,
                              const std::vector<float>& out);

// The cases of moe_bench_cases.cpp: dispatch-only, router-only, small experts, cost model.
// phase: 0 permutation, 1 gather, 2 combine (identity experts: expert_out = gathered rows), 3 all three.
void bench_dispatch(State& state, DispatchShape s, int phase);

void bench_router(State& state, RouterShape shape, RouterConfig cfg);

// The floor of any router: one parallel pass reading the logits (a sum).
void bench_router_read(State& state, RouterShape shape);

// which: 0 grouped SwiGLU over 16 experts of 8 rows, 1 one sgemm of 8 rows (8 x 1024 x 1024).
void bench_small(State& state, int which, int threads);

// One cost-model evaluation of a layer at a model's real size: Mixtral 8x7B (hidden 4096, ffn 14336,
// E 8, top-2) or DeepSeek-V3 (7168, 2048, E 256, top-8), 16384 tokens, uneven loads.
void bench_cost_model(State& state, int num_experts, int devices);
// A search of DeepSeek-V3's training layouts: one router for all (shared), or a fresh one per layout.
void bench_train_search(State& state, bool shared);

}  // namespace moesim::bench::detail
