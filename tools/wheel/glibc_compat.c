// glibc_compat.c - the four glibc symbols newer than 2.28 that the wheel's
// static archives reference (tools/wheel/build_wheel.py links this object
// into _native, _device and lazymlir-opt; docs/NOTES.md, section 17).
//
// The archives (Debian 12's LLVM/MLIR, GCC 12's libstdc++.a and libgcc_eh.a)
// were compiled against glibc 2.36. Linked against glibc 2.28's stubs, every
// symbol they use resolves at 2.28 or older except these four; each gets a
// definition here with the meaning glibc documents for it (the types are
// zig's glibc headers', which declare them). Compiled with hidden visibility
// and the linker's version script exports nothing but the module's entry
// point, so no other library in the process ever binds to these.
//
//   __libc_single_threaded (2.32)  libstdc++'s shared_ptr/locale reference
//       counts skip atomics while it is nonzero. Always 0 here: atomics
//       always, which is what glibc itself gives once a thread exists.
//   _dl_find_object (2.35)         libgcc_eh's unwinder finds a PC's
//       .eh_frame with it, and with no fallback: a failure means "no
//       unwind info" (std::terminate on the next throw). glibc's own when
//       the running glibc has it (dlvsym), otherwise dl_iterate_phdr, as
//       the unwinder did before 2.35.
//   arc4random (2.36)              libstdc++'s random_device and LLVM's
//       Process::GetRandomNumber. getrandom(2) (glibc 2.25), /dev/urandom
//       when the kernel lacks it; aborts if neither gives bytes, as glibc's
//       arc4random does.
//   mallinfo2 (2.33)               LLVM's Process::GetMallocUsage. glibc's
//       own when present, otherwise mallinfo's int fields widened.

#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <malloc.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

char __libc_single_threaded = 0;

typedef int (*FindObjectFn)(void *, struct dl_find_object *);

// glibc's own `name`@`version`, looked up once into *slot ((void *)-1
// there when it has none); NULL when the running glibc lacks it.
static void *glibcOwn(void **slot, const char *name, const char *version) {
  void *fn = __atomic_load_n(slot, __ATOMIC_ACQUIRE);
  if (!fn) {
    fn = dlvsym(RTLD_DEFAULT, name, version);
    if (!fn)
      fn = (void *)-1;
    __atomic_store_n(slot, fn, __ATOMIC_RELEASE);
  }
  return fn == (void *)-1 ? NULL : fn;
}

struct PhdrSearch {
  uintptr_t pc;
  struct dl_find_object *result;
  int found;
};

static int findObjectCallback(struct dl_phdr_info *info, size_t size,
                              void *data) {
  (void)size;
  struct PhdrSearch *search = data;
  uintptr_t low = UINTPTR_MAX, high = 0;
  int contains = 0;
  const ElfW(Phdr) *ehFrame = NULL;
  for (ElfW(Half) i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr) *phdr = &info->dlpi_phdr[i];
    if (phdr->p_type == PT_LOAD) {
      uintptr_t start = info->dlpi_addr + phdr->p_vaddr;
      uintptr_t end = start + phdr->p_memsz;
      if (start < low)
        low = start;
      if (end > high)
        high = end;
      if (search->pc >= start && search->pc < end)
        contains = 1;
    } else if (phdr->p_type == PT_GNU_EH_FRAME) {
      ehFrame = phdr;
    }
  }
  if (!contains)
    return 0;
  memset(search->result, 0, sizeof *search->result);
  search->result->dlfo_map_start = (void *)low;
  search->result->dlfo_map_end = (void *)high;
  search->result->dlfo_eh_frame =
      ehFrame ? (void *)(info->dlpi_addr + ehFrame->p_vaddr) : NULL;
  search->found = 1;
  return 1;
}

int _dl_find_object(void *pc, struct dl_find_object *result) {
  static void *resolved;
  void *fn = glibcOwn(&resolved, "_dl_find_object", "GLIBC_2.35");
  if (fn)
    return ((FindObjectFn)fn)(pc, result);
  struct PhdrSearch search = {(uintptr_t)pc, result, 0};
  dl_iterate_phdr(findObjectCallback, &search);
  return search.found ? 0 : -1;
}

static void fillRandom(void *buffer, size_t length) {
  unsigned char *bytes = buffer;
  while (length) {
    ssize_t got = getrandom(bytes, length, 0);
    if (got < 0 && errno == EINTR)
      continue;
    if (got <= 0)
      break;
    bytes += got;
    length -= (size_t)got;
  }
  if (!length)
    return;
  int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  while (fd >= 0 && length) {
    ssize_t got = read(fd, bytes, length);
    if (got < 0 && errno == EINTR)
      continue;
    if (got <= 0)
      break;
    bytes += got;
    length -= (size_t)got;
  }
  if (fd >= 0)
    close(fd);
  if (length)
    abort();
}

uint32_t arc4random(void) {
  uint32_t value;
  fillRandom(&value, sizeof value);
  return value;
}

struct mallinfo2 mallinfo2(void) {
  typedef struct mallinfo2 (*MallInfo2Fn)(void);
  static void *resolved;
  void *fn = glibcOwn(&resolved, "mallinfo2", "GLIBC_2.33");
  if (fn)
    return ((MallInfo2Fn)fn)();
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
  struct mallinfo old = mallinfo();
#pragma GCC diagnostic pop
  struct mallinfo2 info = {(unsigned)old.arena,    (unsigned)old.ordblks,
                           (unsigned)old.smblks,   (unsigned)old.hblks,
                           (unsigned)old.hblkhd,   (unsigned)old.usmblks,
                           (unsigned)old.fsmblks,  (unsigned)old.uordblks,
                           (unsigned)old.fordblks, (unsigned)old.keepcost};
  return info;
}
