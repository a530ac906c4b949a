//===- GemmAvx512.cpp - the packed GEMM for avx512 ------------------------===//
//
// Compiled with this ISA's -m flags (lib/Runtime/CMakeLists.txt); called
// only when the CPU reports the ISA (Gemm.cpp).
//
//===----------------------------------------------------------------------===//

#define GEMM_NAMESPACE avx512
#define GEMM_LANES 16
#define GEMM_MR 14
#define GEMM_NV 2
#include "GemmKernel.inc"
