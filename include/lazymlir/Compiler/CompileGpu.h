//===- CompileGpu.h - linalg-on-tensors to a GPU launch plan ----*- C++ -*-===//
//
// The NVVM GPU target's compiler entry point: the runtime that executes the
// plan is Python with torch and the CUDA driver (lazymlir.gpu.launch), so
// it runs where no MLIR is.
//
//===----------------------------------------------------------------------===//

#ifndef LAZYMLIR_COMPILER_COMPILEGPU_H
#define LAZYMLIR_COMPILER_COMPILEGPU_H

#include <cstdint>
#include <string>

namespace lazymlir {

struct GpuCompileOptions {
  std::string chip = "sm_90";
  std::string features;  // empty: the chip's lowest PTX version
  std::string libdevice; // path of libdevice.10.bc
  int64_t blockSize = 256;
  bool fusion = true;
};

/// `source` (linalg-on-tensors text, entry `main`) through
/// lazymlir-gpu-pipeline: the launch plan (JSON, with each kernel module's
/// PTX; see lazymlir-gpu-launch-plan). Throws CompileError with MLIR's
/// diagnostics; never aborts the process (bad chips or PTX versions are
/// diagnostics).
std::string compileGpuPlan(const std::string &source,
                           const GpuCompileOptions &options);

} // namespace lazymlir

#endif // LAZYMLIR_COMPILER_COMPILEGPU_H
