//===- GemmAvx2.cpp - the packed GEMM for avx2 ----------------------------===//
//
// Compiled with this ISA's -m flags (lib/Runtime/CMakeLists.txt); called
// only when the CPU reports the ISA (Gemm.cpp).
//
//===----------------------------------------------------------------------===//

#define GEMM_NAMESPACE avx2
#define GEMM_LANES 8
#define GEMM_MR 6
#define GEMM_NV 2
#include "GemmKernel.inc"
