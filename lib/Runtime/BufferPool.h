//===- BufferPool.h - memory for buffers and temporaries --------*- C++ -*-===//
//
// The pool behind allocateBuffer (CpuExecutable.h) and the allocation entry
// points compiled code calls for its temporaries, which KernelJit binds in
// the JIT by address. Internal to the runtime.
//
//===----------------------------------------------------------------------===//

#ifndef LAZYMLIR_RUNTIME_BUFFERPOOL_H
#define LAZYMLIR_RUNTIME_BUFFERPOOL_H

#include <cstdint>

namespace lazymlir {

// Compiled code's _mlir_memref_to_llvm_{aligned_alloc,alloc,free}.
extern "C" void *lazymlirAlignedAlloc(uint64_t alignment, uint64_t size);
extern "C" void *lazymlirAlloc(uint64_t size);
extern "C" void lazymlirFree(void *block);
// Compiled entries call this before the first kernel that writes an output
// (lazymlir-outputs-at-first-write): outputBufferReady.
extern "C" void lazymlirOutputReady(void *block);

} // namespace lazymlir

#endif // LAZYMLIR_RUNTIME_BUFFERPOOL_H
