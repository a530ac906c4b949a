//===- Gemm.h - packed float32 GEMM kernels chosen for the host -*- C++ -*-===//
//
// What compiled code calls for a float32 matrix product large enough to pay
// for packing (lazymlir-gemm-calls rewrites such linalg contractions into a
// call of lazymlir_sgemm_batched): C += A x B, every operand addressed by a
// base pointer and an element stride per dimension, so that transposed operands
// (a linear layer's weight, its gradients' A^T and B^T) are read in place.
//
// The kernel is the one of GotoBLAS and BLIS: B packed into KC x NR slivers
// and A into MR x KC ones, so that a register-blocked micro-kernel streams
// both from the L1 cache while MR x NR accumulators stay in registers. What
// is chosen at run time, on the host the code runs on (never constants
// fitted to one machine):
//   - the micro-kernel, by the ISA the CPU reports (AVX-512F: 14 x 32 in
//     zmm registers; AVX2 with FMA: 6 x 16 in ymm; else SSE2: 6 x 8);
//   - KC, MC and NC from the L1d, L2 and L3 sizes the C library reads from
//     the CPU (half of L1 for a B sliver, half of L2 for an A block);
//   - the threads: every core. When A has the rows for it, they split C's
//     rows into blocks taken from a shared counter (a core busy elsewhere
//     takes fewer) and pack each KC x NC panel of B once, together, as BLIS
//     does; else (few rows, a wide B) chunks of C's columns, each packing
//     the small A again.
//
//===----------------------------------------------------------------------===//

#ifndef LAZYMLIR_RUNTIME_GEMM_H
#define LAZYMLIR_RUNTIME_GEMM_H

#include <cstdint>
#include <string>
#include <vector>

namespace lazymlir {

/// One product C[m, n] += sum_k A[m, k] * B[k, n] (with `overwrite`,
/// C[m, n] = the sum: C's old values are never read); strides in elements.
struct GemmArgs {
  int64_t m, n, k;
  const float *a;
  int64_t aRow, aCol; // A[i, p] = a[i * aRow + p * aCol]
  const float *b;
  int64_t bRow, bCol; // B[p, j] = b[p * bRow + j * bCol]
  float *c;
  int64_t cRow, cCol; // C[i, j] = c[i * cRow + j * cCol]
  bool overwrite = false;
  // The bf16 GEMM only: C holds bfloat16 values (`c` points at them; its
  // strides in elements). The sums are float32 and rounded once, to nearest
  // even (every NaN to 0xFFFF, as lazymlir-expand-bf16-conversions rounds);
  // without `overwrite`, C's old values are widened and added first.
  bool cBf16 = false;
};

/// The arguments of a product whose operands are given by address (as
/// compiled code and the Python binding pass them).
inline GemmArgs gemmArgs(int64_t m, int64_t n, int64_t k, uintptr_t a,
                         int64_t aRow, int64_t aCol, uintptr_t b, int64_t bRow,
                         int64_t bCol, uintptr_t c, int64_t cRow,
                         int64_t cCol) {
  return {m,
          n,
          k,
          reinterpret_cast<const float *>(a),
          aRow,
          aCol,
          reinterpret_cast<const float *>(b),
          bRow,
          bCol,
          reinterpret_cast<float *>(c),
          cRow,
          cCol};
}

/// The cache blocking of one micro-kernel on this host.
struct GemmBlocking {
  int mr, nr; // the micro-kernel's tile
  int64_t kc, mc, nc;
};

/// A kernel of one ISA: the rows [rowBegin, rowEnd) and columns
/// [colBegin, colEnd) of C, on the calling thread.
using GemmChunkFn = void (*)(const GemmArgs &, const GemmBlocking &,
                             int64_t rowBegin, int64_t rowEnd, int64_t colBegin,
                             int64_t colEnd);

/// Slivers [s0, s1) of B's panel of rows [p0, p0 + kc), columns
/// [j0, j0 + nc), into the panel's packed buffer.
using GemmPackPanelFn = void (*)(const GemmArgs &, int64_t p0, int64_t kc,
                                 int64_t j0, int64_t nc, int64_t s0, int64_t s1,
                                 float *packed);

/// C's rows [r0, r1), columns [j0, j0 + nc) += (with `overwrite`, =) A's
/// rows [r0, r1), columns [p0, p0 + kc) times B's packed panel of those
/// columns and rows.
using GemmPanelRowsFn = void (*)(const GemmArgs &, const GemmBlocking &,
                                 int64_t p0, int64_t kc, int64_t j0, int64_t nc,
                                 const float *packed, int64_t r0, int64_t r1,
                                 bool overwrite);

/// `batch` products C_i += A_i x B_i, operand i's at its pointer + i x its
/// batch stride (elements), on `threads` threads (0: every core; one when
/// called from a thread that is already one of a parallel region's team):
/// each product split between them, or, when the products are small and
/// many (attention heads), the products.
void sgemmBatched(const GemmArgs &args, int64_t batch, int64_t aBatch,
                  int64_t bBatch, int64_t cBatch, int threads);

/// The same with A and B in bfloat16 (GemmArgs' `a` and `b` point at bf16
/// values; strides in elements), C in float32: on AVX512-BF16 hosts the
/// dot-product kernel (GemmBf16.cpp), elsewhere A and B widened to float32
/// copies for the float32 kernel. The products are exact in float32 either
/// way; the sums' order (and so their rounding) differs.
void bf16GemmBatched(const GemmArgs &args, int64_t batch, int64_t aBatch,
                     int64_t bBatch, int64_t cBatch, int threads);

/// For tests: one bf16 product with `isa` "avx512bf16" (false when the host
/// lacks it), "widen" (the float32 copies) or "" (the host's choice).
bool bf16GemmWith(const GemmArgs &args, const std::string &isa, int threads);

/// The micro-kernel and blocking chosen for this host, in words, with the
/// one-thread rates of the candidates it was picked from ("avx2 6x16, kc 256
/// mc 510 nc 8192 (measured here, GFLOP/s on one thread: avx512f kc 128 92;
/// ...)"; the first "kc" is the chosen one's).
std::string gemmKernelDescription();

/// A candidate float32 micro-kernel: its tile (MR x NR) and its measured
/// one-thread rate (GFLOP/s).
struct GemmTileRate {
  int64_t mr, nr;
  double rate;
};

/// Which of `tiles` should compute C's m x n: the one whose rate, discounted
/// by the tiles' padding at C's edges, finishes soonest (a 128-row product
/// is 10 AVX-512 14x32 tiles, 140 rows of work, or 22 AVX2 6x16 tiles, 132
/// rows: attention's products ran ~20% faster with the latter on a Zen 4).
/// `host` (the pick for large products) stays unless another is expected at
/// least 3% sooner, so near ties keep the sums' order from process to
/// process.
size_t pickGemmTile(const std::vector<GemmTileRate> &tiles, size_t host,
                    int64_t m, int64_t n);

/// The host's multiply-add peak in GFLOP/s, measured: every core running
/// independent FMA chains of each ISA's vectors the host has (best of 3
/// rounds each).
double measureFmaPeak();

/// For tests and benchmarks: the product with the kernel of `isa` ("" the
/// host's) on `threads` threads (0: every core). False when the host lacks
/// that ISA.
bool sgemmWith(const GemmArgs &args, const std::string &isa, int threads);

} // namespace lazymlir

// The entry point compiled code calls (bound in the JIT by name); pointers
// and strides as 64-bit integers.
// `batch` products, operand i's at its address + i x its batch stride;
// `threads` 0: every core; `accumulate` 0: C = A x B (C's old values
// unread: compiled code passes 0 instead of zero-filling C first), else
// C += A x B.
extern "C" void lazymlir_sgemm_batched(int64_t batch, int64_t m, int64_t n,
                                       int64_t k, int64_t a, int64_t aBatch,
                                       int64_t aRow, int64_t aCol, int64_t b,
                                       int64_t bBatch, int64_t bRow,
                                       int64_t bCol, int64_t c, int64_t cBatch,
                                       int64_t cRow, int64_t cCol,
                                       int64_t threads, int64_t accumulate);

/// The same with A and B in bfloat16 (bf16GemmBatched), C in float32.
extern "C" void
lazymlir_bf16gemm_batched(int64_t batch, int64_t m, int64_t n, int64_t k,
                          int64_t a, int64_t aBatch, int64_t aRow, int64_t aCol,
                          int64_t b, int64_t bBatch, int64_t bRow, int64_t bCol,
                          int64_t c, int64_t cBatch, int64_t cRow, int64_t cCol,
                          int64_t threads, int64_t accumulate);

/// The same with C in bfloat16 too (GemmArgs' `cBf16`): compiled code calls
/// it for a bf16 product whose float32 result was only ever read rounded to
/// bf16 (lazymlir-mark-gemms' bf16-operands).
extern "C" void lazymlir_bf16gemm_bf16c_batched(
    int64_t batch, int64_t m, int64_t n, int64_t k, int64_t a, int64_t aBatch,
    int64_t aRow, int64_t aCol, int64_t b, int64_t bBatch, int64_t bRow,
    int64_t bCol, int64_t c, int64_t cBatch, int64_t cRow, int64_t cCol,
    int64_t threads, int64_t accumulate);

#endif // LAZYMLIR_RUNTIME_GEMM_H
