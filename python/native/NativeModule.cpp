//===- NativeModule.cpp - lazymlir._native (private) ----------------------===//
//
// Thin bindings over lazymlir::CpuExecutable. Buffers arrive through DLPack
// (nanobind's ndarray), so this module knows nothing of torch and never
// copies: the compiled code reads and writes torch's memory in place.
//
//===----------------------------------------------------------------------===//

#include "lazymlir/Runtime/CpuExecutable.h"

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/unique_ptr.h>
#include <nanobind/stl/vector.h>

namespace nb = nanobind;
using namespace lazymlir;

namespace {

using CpuArray = nb::ndarray<nb::device::cpu>;

ElementType toElementType(nb::dlpack::dtype dtype) {
  using Code = nb::dlpack::dtype_code;
  auto code = static_cast<Code>(dtype.code);
  if (dtype.lanes == 1) {
    if (code == Code::Float && dtype.bits == 16) return ElementType::F16;
    if (code == Code::Bfloat && dtype.bits == 16) return ElementType::BF16;
    if (code == Code::Float && dtype.bits == 32) return ElementType::F32;
    if (code == Code::Float && dtype.bits == 64) return ElementType::F64;
    if (code == Code::Bool && dtype.bits == 8) return ElementType::I1;
    // MLIR integers are signless: torch's int8 and uint8 are both i8.
    if ((code == Code::Int || code == Code::UInt) && dtype.bits == 8)
      return ElementType::I8;
    if (code == Code::Int && dtype.bits == 16) return ElementType::I16;
    if (code == Code::Int && dtype.bits == 32) return ElementType::I32;
    if (code == Code::Int && dtype.bits == 64) return ElementType::I64;
  }
  throw std::invalid_argument("unsupported buffer dtype (DLPack code " +
                              std::to_string(dtype.code) + ", " +
                              std::to_string(dtype.bits) + " bits)");
}

std::vector<BufferView> toViews(const std::vector<CpuArray> &arrays) {
  std::vector<BufferView> views;
  views.reserve(arrays.size());
  for (const CpuArray &array : arrays) {
    BufferView view;
    view.data = array.data();
    view.elementType = toElementType(array.dtype());
    view.sizes.reserve(array.ndim());
    view.strides.reserve(array.ndim());
    for (size_t d = 0; d < array.ndim(); ++d) {
      view.sizes.push_back(array.shape(d));
      view.strides.push_back(array.stride(d));
    }
    views.push_back(std::move(view));
  }
  return views;
}

nb::list signatures(const std::vector<TensorSignature> &list) {
  nb::list result;
  for (const TensorSignature &sig : list)
    result.append(nb::make_tuple(elementTypeName(sig.elementType),
                                 nb::tuple(nb::cast(sig.shape))));
  return result;
}

} // namespace

NB_MODULE(_native, m) {
  m.doc() = "lazymlir's private native backend (MLIR 22). Not a public API.";

  nb::exception<CompileError>(m, "CompileError", PyExc_RuntimeError);
  nb::exception<CheckFailed>(m, "CheckFailed", PyExc_RuntimeError);

  nb::class_<CpuExecutable>(m, "CpuExecutable")
      .def_prop_ro("inputs",
                   [](const CpuExecutable &e) { return signatures(e.inputs()); },
                   "[(element type, shape)] of the entry's arguments")
      .def_prop_ro(
          "outputs",
          [](const CpuExecutable &e) { return signatures(e.outputs()); },
          "[(element type, shape)] of the entry's results")
      .def_prop_ro("num_kernels", &CpuExecutable::numKernels,
                   "Loop nests (kernels) in the compiled entry function")
      .def_prop_ro("has_runtime_checks", &CpuExecutable::hasRuntimeChecks,
                   "Whether runs read the compiled code's check flag "
                   "(and raise CheckFailed when a check failed)")
      .def_prop_ro("llvm_dialect", &CpuExecutable::llvmDialect,
                   "LLVM-dialect text (empty unless kept at compile time)")
      .def(
          "run",
          [](const CpuExecutable &e, const std::vector<CpuArray> &inputs,
             const std::vector<CpuArray> &outputs, bool background) {
            std::vector<BufferView> in = toViews(inputs);
            std::vector<BufferView> out = toViews(outputs);
            nb::gil_scoped_release release;
            e.run(in, out, background);
          },
          nb::arg("inputs"), nb::arg("outputs"), nb::arg("background") = false,
          "Run on contiguous CPU buffers, writing the results into `outputs`. "
          "Raises CheckFailed (outputs then garbage) when a runtime check of "
          "the compiled code failed. Releases the GIL. `background`: on a worker while the host thread "
          "may be busy; parallel loops then leave it a core until it waits "
          "(host_wait_begin/host_wait_end).")
      .def(
          "run_raw",
          [](const CpuExecutable &e, const std::vector<uintptr_t> &inputs,
             const std::vector<size_t> &inputBytes,
             const std::vector<uintptr_t> &outputs,
             const std::vector<size_t> &outputBytes, bool background) {
            auto raw = [](const std::vector<uintptr_t> &addresses,
                          const std::vector<size_t> &bytes) {
              if (addresses.size() != bytes.size())
                throw std::invalid_argument(
                    "run_raw: addresses and byte sizes differ in count");
              std::vector<RawBuffer> buffers;
              buffers.reserve(addresses.size());
              for (size_t i = 0; i < addresses.size(); ++i)
                buffers.push_back(
                    {reinterpret_cast<void *>(addresses[i]), bytes[i]});
              return buffers;
            };
            std::vector<RawBuffer> in = raw(inputs, inputBytes);
            std::vector<RawBuffer> out = raw(outputs, outputBytes);
            nb::gil_scoped_release release;
            e.run(in, out, background);
          },
          nb::arg("inputs"), nb::arg("input_bytes"), nb::arg("outputs"),
          nb::arg("output_bytes"), nb::arg("background") = false,
          "`run` on raw buffers (addresses and byte sizes) that the caller "
          "allocated contiguous with the signatures' element types; only "
          "counts and byte sizes are checked. Skips DLPack's per-buffer "
          "cost. Raises CheckFailed like `run`. Releases the GIL.");

  m.def(
      "pooled_tensor",
      [](const std::vector<size_t> &shape, uint8_t code, uint8_t bits) {
        size_t bytes = (bits + 7) / 8;
        for (size_t size : shape)
          bytes *= size;
        void *block = allocateBuffer(bytes);
        nb::capsule owner(block, [](void *p) noexcept { releaseBuffer(p); });
        nb::dlpack::dtype dtype{code, bits, 1};
        return nb::ndarray<nb::pytorch>(block, shape.size(), shape.data(),
                                        owner, /*strides=*/nullptr, dtype);
      },
      nb::arg("shape"), nb::arg("dtype_code"), nb::arg("bits"),
      "A contiguous torch tensor of `shape` whose elements are DLPack's "
      "(`dtype_code`, `bits`), from the runtime's buffer pool; its memory "
      "goes back to the pool when the tensor is freed.");
  m.def("host_wait_begin", &beginHostWait,
        "The host thread starts blocking on background runs.");
  m.def("host_wait_end", &endHostWait, "The host thread stops waiting.");
  m.def("trim_buffer_pool", &trimBufferPool,
        "Return the pool's idle blocks to the system; returns the bytes.");
  m.def("idle_buffer_bytes", &idleBufferBytes,
        "Bytes the buffer pool holds idle.");

  m.def(
      "compile_cpu",
      [](const std::string &source, const std::string &entry,
         unsigned optLevel, bool fusion, bool channelsLast, unsigned threads,
         bool keepLLVMDialect, bool runtimeChecks) {
        CompileOptions options;
        options.runtimeChecks = runtimeChecks;
        options.threads = threads;
        options.fusion = fusion;
        options.channelsLast = channelsLast;
        options.entry = entry;
        options.optLevel = optLevel;
        options.keepLLVMDialect = keepLLVMDialect;
        nb::gil_scoped_release release;
        return CpuExecutable::compile(source, options);
      },
      nb::arg("source"), nb::arg("entry") = "main", nb::arg("opt_level") = 3,
      nb::arg("fusion") = true, nb::arg("channels_last") = true,
      nb::arg("threads") = 0,
      nb::arg("keep_llvm_dialect") = false, nb::arg("runtime_checks") = true,
      "Compile linalg-on-tensors text for this CPU. Releases the GIL; raises "
      "CompileError with MLIR's diagnostics. `runtime_checks=False` drops the "
      "bounds and divisor checks (only to measure their cost).");
}
