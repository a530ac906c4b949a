// compat_fallback.h - force-included into glibc_compat.c for compat_test
// (build_wheel.py): dlvsym finds nothing, so _dl_find_object and mallinfo2
// take the paths a glibc older than 2.35 (2.33) gets.
#define _GNU_SOURCE
#include <dlfcn.h>
static inline void *noDlvsym(void *handle, const char *name,
                             const char *version) {
  (void)handle, (void)name, (void)version;
  return 0;
}
#define dlvsym noDlvsym
