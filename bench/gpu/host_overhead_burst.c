#define _POSIX_C_SOURCE 199309L
#include "host_overhead_burst.h"

#include <time.h>

dsv4_status dsv4_bench_run_burst(const dsv4_plan* plan, const dsv4_run_args* args, int calls,
                                 double* seconds) {
  struct timespec start, stop;
  dsv4_status status = DSV4_STATUS_OK;
  int i;
  clock_gettime(CLOCK_MONOTONIC, &start);
  for (i = 0; i < calls && status == DSV4_STATUS_OK; ++i) status = dsv4_run(plan, args);
  clock_gettime(CLOCK_MONOTONIC, &stop);
  *seconds = (double)(stop.tv_sec - start.tv_sec) + (double)(stop.tv_nsec - start.tv_nsec) * 1e-9;
  return status;
}
