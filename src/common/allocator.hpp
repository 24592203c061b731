// How moesim's own processes (the moesim binary, moesim_bench) keep freed memory: large blocks are reused
// from the heap instead of being mapped anew on every allocation. glibc maps each allocation above its mmap
// threshold (128 KiB at start, raised at most to 32 MiB as mapped blocks are freed) and returns the top of
// the heap to the kernel past its trim threshold (twice that), so a routing of a (65536 x 256) batch, whose
// outputs and scratch are about 10 MiB, paid a page fault per 4 KiB page every time (about 10 us each on a
// virtual machine): half the router's time in `compare`, sweeps and trace replays, which route many batches
// (docs/performance.md "The router"). Fixed here: mapped from 32 MiB up (glibc's own largest dynamic value),
// and up to 256 MiB of freed heap kept. A library user's process (the Python module) keeps its own settings.
// Host only; called first in main().
#pragma once

#include <malloc.h>

namespace moesim {

inline void configure_host_allocator() {
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 256 << 20);
}

}  // namespace moesim
