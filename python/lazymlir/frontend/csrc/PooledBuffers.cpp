// Output buffers from the compiled code's buffer pool, made here as torch
// tensors (at::from_blob with the pool's release as deleter). The pool lives
// in lazymlir._native, which knows nothing of torch: it hands over its
// allocate and release functions once, as addresses (set_buffer_pool).
// Before, each output went through DLPack and torch.utils.dlpack's Python
// (2 us a buffer warm, ~20 us with cold caches, the largest piece of a
// step's overhead in softmax and layer norm 4096x1024 after the kernel).

#include <torch/extension.h>

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

void definePooledBuffers(py::module_& m) {
  m.def("set_buffer_pool", &setBufferPool, py::arg("allocate"), py::arg("release"),
        "The buffer pool's allocate(bytes) and release(pointer) functions, as addresses.");
  m.def("pooled_empty", &pooledEmpty, py::arg("shape"), py::arg("dtype"),
        "A contiguous CPU tensor from the buffer pool; its memory goes back to the pool when it dies.");
}

}  // namespace lazymlir::device
