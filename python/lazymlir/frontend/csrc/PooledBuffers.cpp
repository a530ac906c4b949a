// Output buffers from the compiled code's buffer pool, made here as torch
// tensors (at::from_blob with the pool's release as deleter). The pool lives
// in lazymlir._native, which knows nothing of torch: it hands over its
// functions once, as addresses (set_buffer_pool).
// Before, each output went through DLPack and torch.utils.dlpack's Python
// (2 us a buffer warm, ~20 us with cold caches, the largest piece of a
// step's overhead in softmax and layer norm 4096x1024 after the kernel).

#include <torch/extension.h>

#include <c10/core/CPUAllocator.h>

#include <algorithm>
#include <cstdint>
#include <mutex>
#include <unordered_set>

namespace lazymlir::device {
namespace {

namespace py = pybind11;

using Allocate = void* (*)(size_t);
using Release = void (*)(void*);

Release poolRelease = nullptr;
Allocate poolAllocateEager = nullptr;   // blocks for graphs run eagerly
Allocate poolAllocateOutput = nullptr;  // outputs, paged in at their first write
Release poolOutputReady = nullptr;      // ... which is next

void installPoolingAllocator();

void setBufferPool(uintptr_t release, uintptr_t allocateEager, uintptr_t allocateOutput, uintptr_t outputReady) {
  TORCH_CHECK(release && allocateEager && allocateOutput && outputReady,
              "lazymlir: set_buffer_pool needs all four functions");
  poolRelease = reinterpret_cast<Release>(release);
  poolAllocateEager = reinterpret_cast<Allocate>(allocateEager);
  poolAllocateOutput = reinterpret_cast<Allocate>(allocateOutput);
  poolOutputReady = reinterpret_cast<Release>(outputReady);
  installPoolingAllocator();
}

// An output of the pool's (allocate_output): large ones get their pages when
// the graph is about to write them. Compiled entries say so themselves;
// torch's writes into an output (a graph run eagerly) call this first.
void outputReady(const at::Tensor& out) {
  if (poolOutputReady && out.defined() && out.device().is_cpu() && out.has_storage())
    poolOutputReady(out.storage().mutable_data());
}

at::Tensor pooledEmpty(c10::IntArrayRef shape, at::ScalarType dtype) {
  TORCH_CHECK(poolAllocateOutput, "lazymlir: pooled_empty before set_buffer_pool");
  int64_t numel = 1;
  for (int64_t size : shape) {
    TORCH_CHECK(size >= 0, "lazymlir: pooled_empty: negative size ", size);
    numel *= size;
  }
  size_t bytes = static_cast<size_t>(numel) * c10::elementSize(dtype);
  void* block = poolAllocateOutput(bytes);
  TORCH_CHECK(block, "lazymlir: the buffer pool could not allocate ", bytes, " bytes");
  Release release = poolRelease;
  return at::from_blob(
      block, shape, [release](void* p) { release(p); }, at::TensorOptions().dtype(dtype).device(at::kCPU));
}

constexpr size_t kPooledBytes = 128 * 1024;

// torch's CPU allocator, wrapped: on a thread inside pooledAllocations(true)
// (a graph run eagerly, entries.run_fx), blocks of at least kPooledBytes come
// from the buffer pool; everything else, and every other thread, gets the
// allocator it replaced. Why: a training step run eagerly allocates fresh
// tensors where eager's optimizer works in place; from glibc each large one
// is a fresh mapping whose pages fault in on first write (a BERT-base step
// 1.5-2x eager's time), and glibc's raised mmap threshold leaves the
// temporaries in per-thread heaps that keep them (the peak varied 3.6-4.6
// GiB between identical runs). The pool keeps blocks by size for the next
// run, and counts them in what it may keep idle.
class PoolingCpuAllocator final : public c10::Allocator {
 public:
  explicit PoolingCpuAllocator(c10::Allocator* fallback) : fallback_(fallback) {}

  c10::DataPtr allocate(size_t bytes) override {
    if (pooling_ && poolAllocateEager && bytes >= kPooledBytes) {
      if (void* block = poolAllocateEager(bytes)) {
        {
          std::lock_guard<std::mutex> lock(mutex_);
          pooled_.insert(block);
        }
        return {block, block, &releasePooled, c10::Device(c10::DeviceType::CPU)};
      }
    }
    return fallback_->allocate(bytes);
  }

  // raw_allocate/raw_deallocate: whichever allocator the block came from.
  c10::DeleterFnPtr raw_deleter() const override { return fallback_->raw_deleter() ? &rawDelete : nullptr; }

  void copy_data(void* dest, const void* src, std::size_t count) const override { default_copy_data(dest, src, count); }

  static PoolingCpuAllocator* instance;
  static thread_local bool pooling_;

 private:
  static void releasePooled(void* block) {
    {
      std::lock_guard<std::mutex> lock(instance->mutex_);
      instance->pooled_.erase(block);
    }
    poolRelease(block);
  }

  static void rawDelete(void* block) {
    bool pooled;
    {
      std::lock_guard<std::mutex> lock(instance->mutex_);
      pooled = instance->pooled_.count(block) > 0;
    }
    if (pooled)
      releasePooled(block);
    else
      instance->fallback_->raw_deleter()(block);
  }

  c10::Allocator* fallback_;
  std::mutex mutex_;
  std::unordered_set<void*> pooled_;  // blocks handed out from the pool
};

PoolingCpuAllocator* PoolingCpuAllocator::instance = nullptr;
thread_local bool PoolingCpuAllocator::pooling_ = false;

// Installed once, with the pool; never destroyed (tensors outlive modules).
void installPoolingAllocator() {
  if (PoolingCpuAllocator::instance) return;
  c10::Allocator* current = c10::GetCPUAllocator();
  auto* allocator = new PoolingCpuAllocator(current);
  c10::SetCPUAllocator(allocator, /*priority=*/0);
  if (c10::GetCPUAllocator() == allocator) PoolingCpuAllocator::instance = allocator;
  // else another allocator holds a higher priority: eager runs keep it.
}

// Large allocations of this thread from the pool (true) or not; returns the
// previous setting. A no-op before the pool is known or when torch kept
// another CPU allocator.
bool pooledAllocations(bool enable) {
  bool previous = PoolingCpuAllocator::pooling_;
  PoolingCpuAllocator::pooling_ = enable && PoolingCpuAllocator::instance != nullptr;
  return previous;
}

}  // namespace

// An output buffer: large ones from the pool (a training step frees and
// allocates its outputs with the same sizes every step; a fresh large
// allocation is page-faulted in on its first write, which made a 4M-element
// kernel 3x slower: the pool's get pages it already holds when first
// written), small ones, or any before the pool is known, from torch's
// allocator.
at::Tensor outputBuffer(c10::IntArrayRef shape, at::ScalarType dtype) {
  size_t bytes = c10::elementSize(dtype);
  for (int64_t size : shape) bytes *= static_cast<size_t>(std::max<int64_t>(size, 0));
  if (poolAllocateOutput == nullptr || bytes < kPooledBytes) return at::empty(shape, at::TensorOptions().dtype(dtype));
  return pooledEmpty(shape, dtype);
}

void definePooledBuffers(py::module_& m) {
  m.def("set_buffer_pool", &setBufferPool, py::arg("release"), py::arg("allocate_eager"), py::arg("allocate_output"),
        py::arg("output_ready"),
        "The buffer pool's release(pointer), allocate_eager(bytes) (for graphs run eagerly), allocate_output(bytes) "
        "(paged in at the first write) and output_ready(pointer) (that write is next) functions, as addresses.");
  m.def("output_ready", &outputReady, py::arg("out"),
        "An output buffer (output_buffer) is about to be written: a large one gets its pages now, moved in from "
        "the pool's idle blocks where it has them. A no-op for any other tensor and on later calls.");
  m.def("output_buffer", &outputBuffer, py::arg("shape"), py::arg("dtype"),
        "A contiguous CPU tensor for a graph's output: from the buffer pool when it is at least 128 KiB "
        "(and the pool is known; paged in at its first write: output_ready), else from torch's allocator.");
  m.def("pooled_allocations", &pooledAllocations, py::arg("enable"),
        "While true on this thread, torch's CPU allocations of at least 128 KiB come from the buffer pool "
        "(a graph run eagerly); returns the previous setting.");
}

}  // namespace lazymlir::device
