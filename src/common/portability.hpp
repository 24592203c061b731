// Portability macros shared by every backend-neutral header.
// MOESIM_HD marks functors that run on host and device: CUDA qualifiers under nvcc, nothing under g++.
// Built by: g++ (host backend) and nvcc (CUDA backend). Covered by every router/kernel test.
#pragma once

#if defined(__CUDACC__)
#define MOESIM_HD __host__ __device__
#else
#define MOESIM_HD
#endif
