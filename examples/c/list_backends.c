/*
 * list_backends.c — which backend modules libdsv4 finds, and which one a CPU context gets.
 *
 *   dsv4_enumerate_backends  every module file in the search path, loaded or not, with the reason
 *   dsv4_get_device_info     the devices of an available module
 *   dsv4_ctx_create          selection: options.backend > DSV4_BACKEND > highest probe score
 *
 * Build: part of the libdsv4 build (target example_list_backends); run:
 * build/bin/example_list_backends Exit status 0 when a CPU context could be created.
 */
#include <dsv4/dsv4.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(void) {
  int32_t count = 0, filled = 0, i, d;
  dsv4_backend_info* modules;
  dsv4_ctx* ctx = NULL;
  dsv4_ctx_info info;
  dsv4_status st = dsv4_enumerate_backends(NULL, NULL, 0, &count); /* how many? */
  if (st != DSV4_STATUS_OK) {
    fprintf(stderr, "%s: %s\n", dsv4_status_string(st), dsv4_last_error_message());
    return 1;
  }
  printf("libdsv4 %s: %d backend module(s)\n", dsv4_get_version_string(), (int)count);
  modules = (dsv4_backend_info*)calloc(count > 0 ? (size_t)count : 1u, sizeof *modules);
  if (modules == NULL) return 1;
  for (i = 0; i < count; ++i) modules[i].struct_size = sizeof *modules;
  st = dsv4_enumerate_backends(NULL, modules, count, &filled);
  if (st != DSV4_STATUS_OK) {
    fprintf(stderr, "%s: %s\n", dsv4_status_string(st), dsv4_last_error_message());
    free(modules);
    return 1;
  }
  for (i = 0; i < filled && i < count; ++i) {
    const dsv4_backend_info* m = &modules[i];
    printf("  %-6s %s, score %d, %d device(s): %s (%s)\n", m->name,
           m->available ? "available" : "unavailable", (int)m->score, (int)m->device_count,
           m->status, m->path);
    for (d = 0; m->available && d < m->device_count; ++d) {
      dsv4_device_info dev;
      memset(&dev, 0, sizeof dev);
      dev.struct_size = sizeof dev;
      if (dsv4_get_device_info(NULL, m->name, d, &dev) == DSV4_STATUS_OK)
        printf("         device %d: %s, %d compute units\n", (int)d, dev.name,
               (int)dev.compute_units);
    }
  }
  free(modules);

  st = dsv4_ctx_create(NULL, &ctx); /* NULL options: CPU tensors, automatic choice */
  if (st != DSV4_STATUS_OK) {
    fprintf(stderr, "dsv4_ctx_create: %s: %s\n", dsv4_status_string(st), dsv4_last_error_message());
    return 1;
  }
  memset(&info, 0, sizeof info);
  info.struct_size = sizeof info;
  st = dsv4_ctx_get_info(ctx, &info);
  if (st == DSV4_STATUS_OK)
    printf("a CPU context uses '%s' (%s), %d threads\n", info.backend, info.reason,
           (int)info.num_threads);
  dsv4_ctx_destroy(ctx);
  return st == DSV4_STATUS_OK ? 0 : 1;
}
