//===- GemmBf16.cpp - the packed bfloat16 GEMM for AVX512-BF16 ------------===//
//
// C (float32) += A x B with A and B in bfloat16, on the CPU's bf16
// dot-product instruction (vdpbf16ps: per float32 lane, the products of two
// adjacent bf16 pairs added to the accumulator). Compiled with AVX512-BF16's
// -m flags (lib/Runtime/CMakeLists.txt); called only when the CPU reports
// it (Gemm.cpp). The driver (threads, panels, blocking) is the float32
// kernels'; what differs is the packing: A's sliver holds, per pair of K
// rows, MR 32-bit pairs (A[i, p], A[i, p + 1]); B's holds, per pair, NR
// such pairs (B[p, j], B[p + 1, j]), so that one broadcast of A's pair and
// NR / 16 loads of B feed MR x NR / 16 dot products. An odd K is padded with
// a zero. The packed buffers are sized in floats (GemmScratch.h): a pair is
// one float's 4 bytes.
//
//===----------------------------------------------------------------------===//

#include "lazymlir/Runtime/Gemm.h"
#include "GemmScratch.h"

#include <immintrin.h>

#include <cstring>

namespace lazymlir {
namespace avx512bf16 {
namespace {

// No inline function or template shared with other files (see
// GemmKernel.inc).
inline int64_t lo(int64_t a, int64_t b) { return a < b ? a : b; }

constexpr int W = 16, MR = 14, NV = 2, NR = NV * W;

inline const uint16_t *bf16(const float *p) {
  return reinterpret_cast<const uint16_t *>(p);
}
inline uint32_t pair(uint16_t low, uint16_t high) {
  return static_cast<uint32_t>(low) | static_cast<uint32_t>(high) << 16;
}
inline uint32_t load32(const uint16_t *p) {
  uint32_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

/// Transposes the 8x8 matrix of 32-bit words in `r` (rows to columns).
inline void transpose8(__m256i r[8]) {
  __m256i a[8], b[8];
  for (int i = 0; i < 8; i += 2) {
    a[i] = _mm256_unpacklo_epi32(r[i], r[i + 1]);
    a[i + 1] = _mm256_unpackhi_epi32(r[i], r[i + 1]);
  }
  for (int i = 0; i < 8; i += 4) {
    b[i] = _mm256_unpacklo_epi64(a[i], a[i + 2]);
    b[i + 1] = _mm256_unpackhi_epi64(a[i], a[i + 2]);
    b[i + 2] = _mm256_unpacklo_epi64(a[i + 1], a[i + 3]);
    b[i + 3] = _mm256_unpackhi_epi64(a[i + 1], a[i + 3]);
  }
  for (int i = 0; i < 4; ++i) {
    r[i] = _mm256_permute2x128_si256(b[i], b[i + 4], 0x20);
    r[i + 4] = _mm256_permute2x128_si256(b[i], b[i + 4], 0x31);
  }
}

/// One sliver of `width` lines (A's rows, B's columns): per pair q of its
/// kc values along K, the pairs (X[2q][t], X[2q + 1][t]) of lines t <
/// `count`, zeros past `count` and past kc, where X[p][t] =
/// base[p * pStride + t * tStride].
void packSliver(const uint16_t *base, int64_t pStride, int64_t tStride,
                int64_t kc, int count, int width, uint32_t *sliver) {
  int64_t pairs = (kc + 1) / 2;
  if (pStride == 1) {
    // Each line contiguous along K (a row-major A; B^T, a linear layer's
    // weight, read in place): a pair is one 32-bit word, and the sliver is
    // the lines' words transposed, 8 words of 8 lines at a time in
    // registers (one word at a time, the forward linears' B and every
    // row-major A cost ~6% of the product: 1024x768 x (3072x768)^T 344
    // against 367 GFLOP/s with B row-major).
    int t = 0;
    for (; t + 8 <= count; t += 8) {
      int64_t q = 0;
      for (; 2 * (q + 8) <= kc; q += 8) {
        __m256i r[8];
        for (int l = 0; l < 8; ++l)
          r[l] = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(
              base + (t + l) * tStride + 2 * q));
        transpose8(r);
        for (int l = 0; l < 8; ++l)
          _mm256_storeu_si256(
              reinterpret_cast<__m256i *>(sliver + (q + l) * width + t), r[l]);
      }
      for (; q < pairs; ++q)
        for (int l = 0; l < 8; ++l) {
          const uint16_t *line = base + (t + l) * tStride;
          sliver[q * width + t + l] =
              2 * q + 1 < kc ? load32(line + 2 * q) : pair(line[2 * q], 0);
        }
    }
    for (; t < width; ++t) {
      const uint16_t *line = base + t * tStride;
      int64_t q = 0;
      if (t < count)
        for (; 2 * q + 1 < kc; ++q)
          sliver[q * width + t] = load32(line + 2 * q);
      for (; q < pairs; ++q)
        sliver[q * width + t] = t < count ? pair(line[2 * q], 0) : 0;
    }
    return;
  }
  // The lines side by side (a row-major B; A^T, a weight gradient's
  // activations, read in place): a pair of K rows gives a run of the sliver.
  for (int64_t q = 0; q < pairs; ++q) {
    const uint16_t *row0 = base + 2 * q * pStride;
    const uint16_t *row1 = row0 + pStride;
    bool second = 2 * q + 1 < kc;
    uint32_t *to = sliver + q * width;
    if (tStride == 1 && count == width && second) {
      for (int t = 0; t < width; ++t) // vectorized: zero-extend, shift, or
        to[t] = pair(row0[t], row1[t]);
      continue;
    }
    for (int t = 0; t < count; ++t)
      to[t] = pair(row0[t * tStride], second ? row1[t * tStride] : 0);
    for (int t = count; t < width; ++t)
      to[t] = 0;
  }
}

/// A's rows [i0, i0 + mc), columns [p0, p0 + kc) as slivers of MR rows.
void packA(const GemmArgs &g, int64_t i0, int64_t mc, int64_t p0, int64_t kc,
           uint32_t *out) {
  const uint16_t *a = bf16(g.a);
  int64_t pairs = (kc + 1) / 2;
  for (int64_t ir = 0; ir < mc; ir += MR)
    packSliver(a + (i0 + ir) * g.aRow + p0 * g.aCol, g.aCol, g.aRow, kc,
               static_cast<int>(lo(MR, mc - ir)), MR, out + ir * pairs);
}

/// B's rows [p0, p0 + kc), columns [j0, j0 + nc) as slivers of NR columns.
void packB(const GemmArgs &g, int64_t p0, int64_t kc, int64_t j0, int64_t nc,
           uint32_t *out) {
  const uint16_t *b = bf16(g.b);
  int64_t pairs = (kc + 1) / 2;
  for (int64_t jr = 0; jr < nc; jr += NR)
    packSliver(b + p0 * g.bRow + (j0 + jr) * g.bCol, g.bRow, g.bCol, kc,
               static_cast<int>(lo(NR, nc - jr)), NR, out + jr * pairs);
}

/// 16 float32 values rounded to bf16: to nearest even by integer
/// arithmetic (the rounding bias 0x7FFF + the kept part's lowest bit), every
/// NaN to 0xFFFF: bit for bit what lazymlir-expand-bf16-conversions makes of
/// an arith.truncf, so a product rounded here equals one rounded by the
/// loops that read its float32 result.
inline __m256i roundToBf16(__m512 value) {
  __m512i bits = _mm512_castps_si512(value);
  __m512i lowestKept =
      _mm512_and_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(1));
  __m512i rounded = _mm512_srli_epi32(
      _mm512_add_epi32(_mm512_add_epi32(bits, _mm512_set1_epi32(0x7fff)),
                       lowestKept),
      16);
  __mmask16 nan = _mm512_cmpgt_epu32_mask(
      _mm512_and_si512(bits, _mm512_set1_epi32(0x7fffffff)),
      _mm512_set1_epi32(0x7f800000));
  rounded = _mm512_mask_mov_epi32(rounded, nan, _mm512_set1_epi32(0xffff));
  return _mm512_cvtepi32_epi16(rounded);
}
inline __m512 widen16(const uint16_t *p) {
  return _mm512_castsi512_ps(
      _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256(
                            reinterpret_cast<const __m256i *>(p))),
                        16));
}

/// C's MR x NR tile at `c` += (with `overwrite`, =) the packed slivers'
/// product over `pairs` pairs of K; an edge tile or a C whose rows are not
/// contiguous goes through a buffer. `CT` is C's element: float, or
/// uint16_t for bf16 (the sums rounded once, as they are stored).
template <bool Direct, typename CT>
void micro(int64_t pairs, const uint32_t *__restrict a,
           const uint32_t *__restrict b, CT *c, int64_t cRow, int64_t cCol,
           int mr, int nr, bool overwrite) {
  constexpr bool Bf16C = sizeof(CT) == 2;
  if (Direct)
    for (int i = 0; i < MR; ++i) {
      __builtin_prefetch(c + i * cRow, 1, 3);
      __builtin_prefetch(c + i * cRow + NR - 1, 1, 3);
    }
  __m512 acc[MR][NV];
  for (int i = 0; i < MR; ++i)
    for (int v = 0; v < NV; ++v)
      acc[i][v] = _mm512_setzero_ps();
#pragma GCC unroll 2
  for (int64_t q = 0; q < pairs; ++q) {
    __m512bh bv[NV];
    for (int v = 0; v < NV; ++v)
      bv[v] = (__m512bh)_mm512_loadu_si512(b + q * NR + v * W);
    for (int i = 0; i < MR; ++i) {
      __m512bh ai =
          (__m512bh)_mm512_set1_epi32(static_cast<int>(a[q * MR + i]));
      for (int v = 0; v < NV; ++v)
        acc[i][v] = _mm512_dpbf16_ps(acc[i][v], ai, bv[v]);
    }
  }
  if (Direct) {
    for (int i = 0; i < MR; ++i)
      for (int v = 0; v < NV; ++v) {
        CT *at = c + i * cRow + v * W;
        if constexpr (Bf16C)
          _mm256_storeu_si256(
              reinterpret_cast<__m256i *>(at),
              roundToBf16(overwrite ? acc[i][v]
                                    : _mm512_add_ps(widen16(at), acc[i][v])));
        else
          _mm512_storeu_ps(
              at, overwrite ? acc[i][v]
                            : _mm512_add_ps(_mm512_loadu_ps(at), acc[i][v]));
      }
    return;
  }
  alignas(64) float tile[MR][NR];
  for (int i = 0; i < MR; ++i)
    for (int v = 0; v < NV; ++v)
      _mm512_store_ps(&tile[i][v * W], acc[i][v]);
  for (int i = 0; i < mr; ++i)
    for (int j = 0; j < nr; ++j) {
      CT &at = c[i * cRow + j * cCol];
      if constexpr (Bf16C)
        at = floatToBf16(overwrite ? tile[i][j] : bf16ToFloat(at) + tile[i][j]);
      else
        at = overwrite ? tile[i][j] : at + tile[i][j];
    }
}

/// C's rows [r0, r1) (elements CT) by B's packed panel: A's blocks of MC
/// rows packed in turn.
template <typename CT>
void rowsOf(const GemmArgs &g, const GemmBlocking &bl, int64_t p0, int64_t kc,
            int64_t j0, int64_t nc, const uint32_t *pb, int64_t r0, int64_t r1,
            bool overwrite) {
  auto *pa = reinterpret_cast<uint32_t *>(gemmScratch(
      GemmBuffer::PackedA, static_cast<size_t>(bl.mc + MR) * bl.kc));
  CT *c = reinterpret_cast<CT *>(g.c);
  int64_t pairs = (kc + 1) / 2;
  for (int64_t ic = r0; ic < r1; ic += bl.mc) {
    int64_t mc = lo(bl.mc, r1 - ic);
    packA(g, ic, mc, p0, kc, pa);
    for (int64_t jr = 0; jr < nc; jr += NR) {
      int nr = static_cast<int>(lo(NR, nc - jr));
      for (int64_t ir = 0; ir < mc; ir += MR) {
        int mr = static_cast<int>(lo(MR, mc - ir));
        CT *cp = c + (ic + ir) * g.cRow + (j0 + jr) * g.cCol;
        if (mr == MR && nr == NR && g.cCol == 1)
          micro<true>(pairs, pa + ir * pairs, pb + jr * pairs, cp, g.cRow,
                      g.cCol, mr, nr, overwrite);
        else
          micro<false>(pairs, pa + ir * pairs, pb + jr * pairs, cp, g.cRow,
                       g.cCol, mr, nr, overwrite);
      }
    }
  }
}

} // namespace

GemmBlocking tile() {
  GemmBlocking blocking;
  blocking.mr = MR;
  blocking.nr = NR;
  return blocking;
}

float fmaLoop(int64_t) { return 0.0f; } // the peak is the float32 kernel's

int lanes() { return W; }

void packPanel(const GemmArgs &g, int64_t p0, int64_t kc, int64_t j0,
               int64_t nc, int64_t s0, int64_t s1, float *out) {
  int64_t begin = s0 * NR, end = lo(nc, s1 * NR);
  if (begin < end)
    packB(g, p0, kc, j0 + begin, end - begin,
          reinterpret_cast<uint32_t *>(out) + begin * ((kc + 1) / 2));
}

void panelRows(const GemmArgs &g, const GemmBlocking &bl, int64_t p0,
               int64_t kc, int64_t j0, int64_t nc, const float *pbFloats,
               int64_t r0, int64_t r1, bool overwrite) {
  const auto *pb = reinterpret_cast<const uint32_t *>(pbFloats);
  // A bf16 C is rounded as it is stored: its product must be one panel of
  // K (the caller's blocking, Gemm.cpp).
  if (g.cBf16)
    rowsOf<uint16_t>(g, bl, p0, kc, j0, nc, pb, r0, r1, overwrite);
  else
    rowsOf<float>(g, bl, p0, kc, j0, nc, pb, r0, r1, overwrite);
}

void chunk(const GemmArgs &g, const GemmBlocking &bl, int64_t r0, int64_t r1,
           int64_t c0, int64_t c1) {
  float *pb =
      gemmScratch(GemmBuffer::PackedB, static_cast<size_t>(bl.nc + NR) * bl.kc);
  for (int64_t jc = c0; jc < c1; jc += bl.nc) {
    int64_t nc = lo(bl.nc, c1 - jc);
    for (int64_t pc = 0; pc < g.k; pc += bl.kc) {
      int64_t kc = lo(bl.kc, g.k - pc);
      packPanel(g, pc, kc, jc, nc, 0, (nc + NR - 1) / NR, pb);
      panelRows(g, bl, pc, kc, jc, nc, pb, r0, r1, g.overwrite && pc == 0);
    }
  }
}

} // namespace avx512bf16
} // namespace lazymlir
