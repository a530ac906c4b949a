// compat_test.cpp - build_wheel.py's check of glibc_compat.c and
// memref_copy.c, linked as the wheel's binaries are (zig's driver for glibc
// 2.28, static libstdc++ and libgcc_eh), with glibc_compat.c compiled so that
// it never finds glibc's own functions (compat_fallback.h): what runs is
// what a glibc older than 2.35 gets. Prints "compat_test: ok" or exits 1.
//
// - _dl_find_object's dl_iterate_phdr fallback gives what glibc's own gives
//   (this host's, when it has one) for addresses in this program, libc,
//   libm, the stack and the heap;
// - C++ exceptions unwind through it (thrown here and inside libstdc++);
// - mallinfo2's fallback sees an allocation; arc4random varies;
//   __libc_single_threaded is 0;
// - memrefCopy copies rank 0-3 memrefs, strided and offset, as a loop does.

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dlfcn.h>
#include <malloc.h>
#include <stdexcept>
#include <string>
#include <vector>

#include <sys/single_threaded.h>

// glibc 2.36's headers declare _dl_find_object, arc4random and
// __libc_single_threaded (as for the archives the wheel links).
extern "C" {
struct UnrankedMemRef {
  int64_t rank;
  void *descriptor;
};
void memrefCopy(int64_t elemSize, UnrankedMemRef *src, UnrankedMemRef *dst);
}

static int failures = 0;
#define EXPECT(cond)                                                           \
  do {                                                                         \
    if (!(cond)) {                                                             \
      std::fprintf(stderr, "compat_test: %s:%d: %s\n", __FILE__, __LINE__,     \
                   #cond);                                                     \
      ++failures;                                                              \
    }                                                                          \
  } while (0)

__attribute__((noinline)) static void thrower(int depth) {
  if (depth == 0)
    throw std::runtime_error("deep");
  thrower(depth - 1);
  asm volatile(""); // no tail call
}

static void checkFindObject() {
  using Fn = int (*)(void *, dl_find_object *);
  auto real = reinterpret_cast<Fn>(
      dlvsym(RTLD_DEFAULT, "_dl_find_object", "GLIBC_2.35"));
  int onStack = 0;
  void *heap = std::malloc(64);
  void *addresses[] = {reinterpret_cast<void *>(&checkFindObject),
                       dlsym(RTLD_DEFAULT, "printf"),
                       dlsym(RTLD_DEFAULT, "cos"), &onStack, heap};
  for (void *address : addresses) {
    dl_find_object ours{}, theirs{};
    int found = _dl_find_object(address, &ours);
    if (found == 0) {
      EXPECT(ours.dlfo_map_start <= address && address < ours.dlfo_map_end);
    }
    if (real) {
      int expected = real(address, &theirs);
      EXPECT(found == expected);
      if (found == 0 && expected == 0) {
        EXPECT(ours.dlfo_eh_frame == theirs.dlfo_eh_frame);
      }
    }
  }
  dl_find_object self{};
  EXPECT(_dl_find_object(reinterpret_cast<void *>(&checkFindObject), &self) ==
             0 &&
         self.dlfo_eh_frame != nullptr);
  std::free(heap);
  std::printf("compat_test: _dl_find_object fallback%s\n",
              real ? " equals glibc's" : " (no glibc one to compare)");
}

static void checkExceptions() {
  bool caught = false;
  try {
    thrower(8);
  } catch (const std::runtime_error &error) {
    caught = std::string(error.what()) == "deep";
  }
  EXPECT(caught);
  caught = false;
  try {
    std::string("abc").at(7);
  } catch (const std::out_of_range &) {
    caught = true;
  }
  EXPECT(caught);
}

static void checkMisc() {
  EXPECT(__libc_single_threaded == 0);
  void *block = std::malloc(1 << 16);
  std::memset(block, 1, 1 << 16);
  struct mallinfo2 info = mallinfo2();
  EXPECT(info.uordblks >= (1 << 16) || info.hblkhd >= (1 << 16));
  std::free(block);
  uint32_t a = arc4random(), b = arc4random(), c = arc4random();
  EXPECT(!(a == b && b == c)); // all three equal: 2^-64
}

// memrefCopy on float memrefs against an index loop.
template <int Rank> struct Descriptor {
  float *basePtr, *data;
  int64_t offset, sizes[Rank], strides[Rank];
};
template <> struct Descriptor<0> {
  float *basePtr, *data;
  int64_t offset;
};

template <int Rank>
static void copyCase(const int64_t (&sizes)[Rank],
                     const int64_t (&srcStrides)[Rank], int64_t srcOffset,
                     const int64_t (&dstStrides)[Rank], int64_t dstOffset) {
  std::vector<float> src(4096), dst(4096, -1.0f), want(4096, -1.0f);
  for (size_t i = 0; i < src.size(); ++i)
    src[i] = float(i);
  Descriptor<Rank> s{src.data(), src.data(), srcOffset, {}, {}};
  Descriptor<Rank> d{dst.data(), dst.data(), dstOffset, {}, {}};
  int64_t total = 1;
  for (int r = 0; r < Rank; ++r) {
    s.sizes[r] = d.sizes[r] = sizes[r];
    s.strides[r] = srcStrides[r];
    d.strides[r] = dstStrides[r];
    total *= sizes[r];
  }
  for (int64_t flat = 0; flat < total; ++flat) {
    int64_t rest = flat, from = srcOffset, to = dstOffset;
    for (int r = Rank - 1; r >= 0; --r) {
      from += (rest % sizes[r]) * srcStrides[r];
      to += (rest % sizes[r]) * dstStrides[r];
      rest /= sizes[r];
    }
    want[to] = src[from];
  }
  UnrankedMemRef us{Rank, &s}, ud{Rank, &d};
  memrefCopy(sizeof(float), &us, &ud);
  EXPECT(dst == want);
}

static void checkMemrefCopy() {
  std::vector<float> src{1, 2, 3}, dst{0, 0, 0};
  Descriptor<0> s{src.data(), src.data(), 2}, d{dst.data(), dst.data(), 1};
  UnrankedMemRef us{0, &s}, ud{0, &d};
  memrefCopy(sizeof(float), &us, &ud);
  EXPECT(dst[1] == 3 && dst[0] == 0 && dst[2] == 0);
  copyCase<1>({7}, {1}, 3, {1}, 5);           // contiguous
  copyCase<1>({7}, {3}, 1, {2}, 0);           // strided
  copyCase<2>({5, 6}, {6, 1}, 0, {1, 5}, 2);  // transposed destination
  copyCase<2>({5, 6}, {12, 2}, 1, {6, 1}, 0); // strided rows
  copyCase<2>({4, 5}, {8, 1}, 2, {5, 1}, 0);  // padded rows, dense runs
  copyCase<3>({3, 4, 5}, {20, 5, 1}, 7, {20, 5, 1}, 9); // contiguous, offset
  copyCase<3>({3, 4, 5}, {1, 3, 12}, 0, {40, 10, 2}, 3);
  copyCase<2>({0, 6}, {6, 1}, 0, {6, 1}, 0); // empty
}

int main() {
  checkFindObject();
  checkExceptions();
  checkMisc();
  checkMemrefCopy();
  if (failures)
    return 1;
  std::printf("compat_test: ok\n");
  return 0;
}
