// Output buffers from the compiled code's buffer pool, made here as torch
// tensors (at::from_blob with the pool's release as deleter). The pool lives
// in lazymlir._native, which knows nothing of torch: it hands over its
// allocate and release functions once, as addresses (set_buffer_pool).
// Before, each output went through DLPack and torch.utils.dlpack's Python
// (2 us a buffer warm, ~20 us with cold caches, the largest piece of a
// step's overhead in softmax and layer norm 4096x1024 after the kernel).

#include <torch/extension.h>

#include <algorithm>
#include <cstdint>

namespace lazymlir::device {
namespace {

namespace py = pybind11;

using Allocate = void* (*)(size_t);
using Release = void (*)(void*);

Allocate poolAllocate = nullptr;
Release poolRelease = nullptr;

void setBufferPool(uintptr_t allocate, uintptr_t release) {
  TORCH_CHECK(allocate && release, "lazymlir: set_buffer_pool needs both functions");
  poolAllocate = reinterpret_cast<Allocate>(allocate);
  poolRelease = reinterpret_cast<Release>(release);
}

at::Tensor pooledEmpty(c10::IntArrayRef shape, at::ScalarType dtype) {
  TORCH_CHECK(poolAllocate, "lazymlir: pooled_empty before set_buffer_pool");
  int64_t numel = 1;
  for (int64_t size : shape) {
    TORCH_CHECK(size >= 0, "lazymlir: pooled_empty: negative size ", size);
    numel *= size;
  }
  size_t bytes = static_cast<size_t>(numel) * c10::elementSize(dtype);
  void* block = poolAllocate(bytes);
  TORCH_CHECK(block, "lazymlir: the buffer pool could not allocate ", bytes, " bytes");
  Release release = poolRelease;
  return at::from_blob(
      block, shape, [release](void* p) { release(p); }, at::TensorOptions().dtype(dtype).device(at::kCPU));
}

}  // namespace

// An output buffer: large ones from the pool (a training step frees and
// allocates its outputs with the same sizes every step; a fresh large
// allocation is page-faulted in on its first write, which made a 4M-element
// kernel 3x slower), small ones, or any before the pool is known, from
// torch's allocator.
at::Tensor outputBuffer(c10::IntArrayRef shape, at::ScalarType dtype) {
  constexpr size_t kPooledBytes = 128 * 1024;
  size_t bytes = c10::elementSize(dtype);
  for (int64_t size : shape) bytes *= static_cast<size_t>(std::max<int64_t>(size, 0));
  if (poolAllocate == nullptr || bytes < kPooledBytes) return at::empty(shape, at::TensorOptions().dtype(dtype));
  return pooledEmpty(shape, dtype);
}

void definePooledBuffers(py::module_& m) {
  m.def("set_buffer_pool", &setBufferPool, py::arg("allocate"), py::arg("release"),
        "The buffer pool's allocate(bytes) and release(pointer) functions, as addresses.");
  m.def("output_buffer", &outputBuffer, py::arg("shape"), py::arg("dtype"),
        "A contiguous CPU tensor for a graph's output: from the buffer pool when it is at least 128 KiB "
        "(and the pool is known), else from torch's allocator.");
}

}  // namespace lazymlir::device
