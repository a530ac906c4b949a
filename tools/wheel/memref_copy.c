// memref_copy.c - memrefCopy for the wheel's _native
// (tools/wheel/build_wheel.py).
//
// Compiled code calls memrefCopy(elemSize, src, dst) for copies between
// strided memrefs that do not lower to loops (KernelJit binds it by
// address). The developer build takes it from Debian's
// libmlir_c_runner_utils.so, which has no static archive and links
// libMLIR/libLLVM, so the self-contained wheel carries this definition of
// the same C interface instead (mlir/ExecutionEngine/CRunnerUtils.h):
// src and dst are unranked memrefs whose descriptor is {basePtr, data,
// offset, sizes[rank], strides[rank]}, offsets and strides in elements;
// both have the same sizes. Contiguous copies are one memcpy; otherwise
// the innermost dimension's run is copied row by row.

#include <stdint.h>
#include <string.h>

struct UnrankedMemRef {
  int64_t rank;
  void *descriptor;
};

struct StridedMemRef {
  char *basePtr;
  char *data;
  int64_t offset;
  int64_t sizesAndStrides[]; // sizes[rank], then strides[rank]
};

// Whether the memref's elements are one dense run in row-major order.
static int isContiguous(int64_t rank, const int64_t *sizes,
                        const int64_t *strides) {
  int64_t expected = 1;
  for (int64_t d = rank - 1; d >= 0; --d) {
    if (sizes[d] != 1 && strides[d] != expected)
      return 0;
    expected *= sizes[d];
  }
  return 1;
}

void memrefCopy(int64_t elemSize, struct UnrankedMemRef *srcArg,
                struct UnrankedMemRef *dstArg) {
  int64_t rank = srcArg->rank;
  struct StridedMemRef *src = srcArg->descriptor;
  struct StridedMemRef *dst = dstArg->descriptor;
  char *srcData = src->data + src->offset * elemSize;
  char *dstData = dst->data + dst->offset * elemSize;
  if (rank == 0) {
    memcpy(dstData, srcData, (size_t)elemSize);
    return;
  }
  const int64_t *sizes = src->sizesAndStrides;
  const int64_t *srcStrides = src->sizesAndStrides + rank;
  const int64_t *dstStrides = dst->sizesAndStrides + rank;
  int64_t total = 1;
  for (int64_t d = 0; d < rank; ++d)
    total *= sizes[d];
  if (total == 0)
    return;
  if (isContiguous(rank, sizes, srcStrides) &&
      isContiguous(rank, sizes, dstStrides)) {
    memmove(dstData, srcData, (size_t)(total * elemSize));
    return;
  }
  // An odometer over the outer dimensions; the innermost one is a loop.
  int64_t index[rank];
  memset(index, 0, sizeof index);
  int64_t inner = sizes[rank - 1];
  int64_t srcInner = srcStrides[rank - 1] * elemSize;
  int64_t dstInner = dstStrides[rank - 1] * elemSize;
  int contiguousRow = srcInner == elemSize && dstInner == elemSize;
  for (;;) {
    int64_t srcOffset = 0, dstOffset = 0;
    for (int64_t d = 0; d < rank - 1; ++d) {
      srcOffset += index[d] * srcStrides[d];
      dstOffset += index[d] * dstStrides[d];
    }
    char *from = srcData + srcOffset * elemSize;
    char *to = dstData + dstOffset * elemSize;
    if (contiguousRow) {
      memmove(to, from, (size_t)(inner * elemSize));
    } else {
      for (int64_t i = 0; i < inner; ++i)
        memcpy(to + i * dstInner, from + i * srcInner, (size_t)elemSize);
    }
    int64_t d = rank - 2;
    while (d >= 0 && ++index[d] == sizes[d])
      index[d--] = 0;
    if (d < 0)
      return;
  }
}
