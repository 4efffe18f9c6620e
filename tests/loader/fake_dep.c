/* A shared library the missing_dep fake module links against; it is built into a directory that is
 * on neither the module's RUNPATH nor the loader path, so dlopen of the module fails. */
__attribute__((visibility("default"))) int dsv4_fake_dep_value(void);
__attribute__((visibility("default"))) int dsv4_fake_dep_value(void) { return 1; }
