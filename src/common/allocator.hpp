// How moesim's own processes (the moesim binary, moesim_bench) keep freed memory: large blocks are reused
// from the heap instead of being mapped anew on every allocation. glibc maps each allocation above its mmap
// threshold (128 KiB at start, raised at most to 32 MiB as mapped blocks are freed) and returns the top of
// the heap to the kernel past its trim threshold (twice that), so every routing paid a page fault per 4 KiB
// page of its outputs and scratch (about 10 us each on a virtual machine; a (65536 x 256) batch's expert
// choice, Sinkhorn and group-limited scratch is 134-268 MB): half the router's time in `compare`, sweeps and
// trace replays, which route many batches (docs/performance.md "The router"). Here blocks up to 1 GiB come
// from the heap and up to 1 GiB of freed heap is kept for the next routing: the peak is what it was (the
// memory estimates' tests, tests/cli/large_input_test.cpp, hold it), the memory between two routings stays
// with the process until it exits. A library user's process (the Python module) keeps its own settings.
// Host only; called first in main().
#pragma once

#include <malloc.h>

namespace moesim {

inline void configure_host_allocator() {
  mallopt(M_MMAP_THRESHOLD, 1 << 30);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
}

}  // namespace moesim
