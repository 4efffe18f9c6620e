/* The timed loop of the host-overhead benchmark (bench_host_overhead.cpp), written in C: an
 * engine's C code calls dsv4_run the same way. */
#ifndef DSV4_BENCH_HOST_OVERHEAD_BURST_H
#define DSV4_BENCH_HOST_OVERHEAD_BURST_H

#include "dsv4/dsv4.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Calls dsv4_run(plan, args) `calls` times back to back (stopping at the first failure) and
 * stores their wall time in *seconds (CLOCK_MONOTONIC). Returns the last call's status. */
dsv4_status dsv4_bench_run_burst(const dsv4_plan* plan, const dsv4_run_args* args, int calls,
                                 double* seconds);

#ifdef __cplusplus
}
#endif

#endif /* DSV4_BENCH_HOST_OVERHEAD_BURST_H */
