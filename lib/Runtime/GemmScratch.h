//===- GemmScratch.h - the GEMM's per-thread packing buffers ----*- C++ -*-===//
//
// One implementation (Gemm.cpp, compiled for no particular ISA) of the
// buffers every ISA's kernel (GemmKernel.inc) and the team's shared panels
// pack into: a call, not an inline helper, so that no code compiled for one
// ISA is shared with callers on another CPU.
//
//===----------------------------------------------------------------------===//

#ifndef LAZYMLIR_RUNTIME_GEMMSCRATCH_H
#define LAZYMLIR_RUNTIME_GEMMSCRATCH_H

#include <cstddef>
#include <cstdint>

namespace lazymlir {

enum class GemmBuffer {
  PackedA,      // a thread's MC x KC block of A
  PackedB,      // a thread's own KC x NC panel of B (column chunks)
  SharedPanels, // the two KC x NC panels of B a team packs together
};

/// The calling thread's buffer `which`, at least `floats` long and 64-byte
/// aligned, grown as needed and kept for the thread's life; the process
/// aborts when it cannot be allocated (a few MB at most).
float *gemmScratch(GemmBuffer which, size_t floats);

/// A bf16 value (its bits) widened to float32, and a float32 rounded to
/// bf16 (to nearest even, every NaN to 0xFFFF, as
/// lazymlir-expand-bf16-conversions rounds a truncf): calls for the same
/// reason, used where C is not stored a vector at a time.
float bf16ToFloat(uint16_t bits);
uint16_t floatToBf16(float value);

} // namespace lazymlir

#endif // LAZYMLIR_RUNTIME_GEMMSCRATCH_H
