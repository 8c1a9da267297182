/* A heap-allocation counter preloaded (LD_PRELOAD) into a Python process by
 * bench/host_allocations.py: malloc, calloc, realloc, memalign, posix_memalign,
 * aligned_alloc and valloc (C++'s operator new calls malloc) are counted on the thread
 * that called metalrt_alloc_count_start() until it calls metalrt_alloc_count_stop(),
 * then forwarded to glibc's own allocator. Other threads (the simulated device's queue
 * and workers) are never counted. glibc only: its __libc_* entry points let the
 * counter forward without dlsym, which itself allocates. */
#define _GNU_SOURCE
#include <stddef.h>

extern void* __libc_malloc(size_t size);
extern void* __libc_calloc(size_t count, size_t size);
extern void* __libc_realloc(void* ptr, size_t size);
extern void* __libc_memalign(size_t alignment, size_t size);
extern void* __libc_valloc(size_t size);

static __thread int counting;
static __thread long allocations;

static void count(void) {
  if (counting) ++allocations;
}

void metalrt_alloc_count_start(void) {
  allocations = 0;
  counting = 1;
}

long metalrt_alloc_count_stop(void) {
  counting = 0;
  return allocations;
}

void* malloc(size_t size) {
  count();
  return __libc_malloc(size);
}

void* calloc(size_t count_, size_t size) {
  count();
  return __libc_calloc(count_, size);
}

void* realloc(void* ptr, size_t size) {
  count();
  return __libc_realloc(ptr, size);
}

void* memalign(size_t alignment, size_t size) {
  count();
  return __libc_memalign(alignment, size);
}

void* aligned_alloc(size_t alignment, size_t size) {
  count();
  return __libc_memalign(alignment, size);
}

void* valloc(size_t size) {
  count();
  return __libc_valloc(size);
}

int posix_memalign(void** out, size_t alignment, size_t size) {
  count();
  if (alignment % sizeof(void*) != 0 || (alignment & (alignment - 1)) != 0) return 22; /* EINVAL */
  void* p = __libc_memalign(alignment, size);
  if (p == NULL) return 12; /* ENOMEM */
  *out = p;
  return 0;
}
