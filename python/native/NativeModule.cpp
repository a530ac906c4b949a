//===- NativeModule.cpp - lazymlir._native (private) ----------------------===//
//
// Thin bindings over lazymlir::CpuExecutable. Buffers arrive through DLPack
// (nanobind's ndarray) and never get copied: the compiled code reads and
// writes torch's memory in place. Nothing here knows torch: output buffers
// from the runtime's pool are made into torch tensors by lazymlir._device,
// which takes the pool's functions by address (buffer_pool_functions).
//
//===----------------------------------------------------------------------===//

#include "lazymlir/Compiler/CompileGpu.h"
#include "lazymlir/Runtime/CpuExecutable.h"
#include "lazymlir/Runtime/Gemm.h"

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
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
    if (code == Code::Float && dtype.bits == 16)
      return ElementType::F16;
    if (code == Code::Bfloat && dtype.bits == 16)
      return ElementType::BF16;
    if (code == Code::Float && dtype.bits == 32)
      return ElementType::F32;
    if (code == Code::Float && dtype.bits == 64)
      return ElementType::F64;
    if (code == Code::Bool && dtype.bits == 8)
      return ElementType::I1;
    // MLIR integers are signless: torch's int8 and uint8 are both i8.
    if ((code == Code::Int || code == Code::UInt) && dtype.bits == 8)
      return ElementType::I8;
    if (code == Code::Int && dtype.bits == 16)
      return ElementType::I16;
    if (code == Code::Int && dtype.bits == 32)
      return ElementType::I32;
    if (code == Code::Int && dtype.bits == 64)
      return ElementType::I64;
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

// CpuExecutable::run on raw buffers as a C function, for lazymlir._device's
// replay of a compiled step (which links no MLIR and gets this by address):
// 0 when it ran; 1 when a runtime check failed; 2 on any other error
// (counts, byte sizes). The caller holds no GIL.
int runRaw(const void *executable, void *const *inputs,
           const size_t *inputBytes, size_t numInputs, void *const *outputs,
           const size_t *outputBytes, size_t numOutputs) noexcept {
  try {
    std::vector<RawBuffer> in, out;
    in.reserve(numInputs);
    out.reserve(numOutputs);
    for (size_t i = 0; i < numInputs; ++i)
      in.push_back({inputs[i], inputBytes[i]});
    for (size_t i = 0; i < numOutputs; ++i)
      out.push_back({outputs[i], outputBytes[i]});
    static_cast<const CpuExecutable *>(executable)->run(in, out);
    return 0;
  } catch (const CheckFailed &) {
    return 1;
  } catch (...) {
    return 2;
  }
}

} // namespace

NB_MODULE(_native, m) {
  m.doc() = "lazymlir's private native backend (MLIR 22). Not a public API.";

  nb::exception<CompileError>(m, "CompileError", PyExc_RuntimeError);
  nb::exception<CheckFailed>(m, "CheckFailed", PyExc_RuntimeError);

  nb::class_<CpuExecutable>(m, "CpuExecutable")
      .def_prop_ro(
          "inputs",
          [](const CpuExecutable &e) { return signatures(e.inputs()); },
          "[(element type, shape)] of the entry's arguments")
      .def_prop_ro(
          "outputs",
          [](const CpuExecutable &e) { return signatures(e.outputs()); },
          "[(element type, shape)] of the entry's results")
      .def_prop_ro(
          "address",
          [](const CpuExecutable &e) {
            return reinterpret_cast<uintptr_t>(&e);
          },
          "The executable's address, for raw_run_function's callers (valid "
          "while this object lives)")
      .def_prop_ro("kernel_count", &CpuExecutable::kernelCount,
                   "Loop nests (kernels) in the compiled entry function")
      .def_prop_ro("has_runtime_checks", &CpuExecutable::hasRuntimeChecks,
                   "Whether runs read the compiled code's check flag "
                   "(and raise CheckFailed when a check failed)")
      .def_prop_ro("is_dynamic", &CpuExecutable::isDynamic,
                   "Whether some input or output has a dynamic dimension "
                   "(-1 in its shape): runs pass each buffer's sizes (run, or "
                   "run_raw with shapes)")
      .def_prop_ro("llvm_dialect", &CpuExecutable::llvmDialect,
                   "LLVM-dialect text (empty unless kept at compile time)")
      .def_prop_ro("cache_key", &CpuExecutable::cacheKey,
                   "The graph's key in the disk cache (for load_cpu)")
      .def_prop_ro(
          "profile_sites",
          [](const CpuExecutable &e) {
            nb::list sites;
            for (const ProfileSite &site : e.profileSites()) {
              nb::dict d;
              d["kernel"] = site.kernel;
              d["ops"] = site.ops;
              d["shapes"] = site.shapes;
              d["bytes"] = site.bytes;
              d["flops"] = site.flops;
              sites.append(d);
            }
            return sites;
          },
          "The timed kernel call sites, by number: kernel, ops, shapes, "
          "bytes, flops (empty unless compiled with profile=True)")
      .def(
          "take_profile_events",
          [](const CpuExecutable &e) {
            nb::list events;
            for (const ProfileEvent &event : e.takeProfileEvents())
              events.append(
                  nb::make_tuple(event.site, event.startNs, event.endNs));
            return events;
          },
          "[(site, start, end)] of the kernel calls timed since the last "
          "call (CLOCK_MONOTONIC nanoseconds, as time.monotonic_ns())")
      .def_prop_ro("fully_optimized", &CpuExecutable::fullyOptimized,
                   "Whether runs use full-effort code only (no kernel waits "
                   "for its background recompile)")
      .def_prop_ro(
          "compile_stats",
          [](const CpuExecutable &e) {
            const CompileStats &s = e.compileStats();
            nb::dict d;
            d["parse"] = s.parse;
            d["tensor_stage"] = s.tensorStage;
            d["bufferize_stage"] = s.bufferizeStage;
            d["llvm_stage"] = s.llvmStage;
            d["translate"] = s.translate;
            d["optimize"] = s.optimize;
            d["codegen"] = s.codegen;
            d["link"] = s.link;
            d["total"] = s.total;
            d["input_ops"] = s.inputOps;
            d["loop_nests"] = s.loopNests;
            d["distinct_kernels"] = s.distinctKernels;
            d["kernels_compiled"] = s.kernelsCompiled;
            d["kernels_reused"] = s.kernelsReused;
            d["kernels_from_disk"] = s.kernelsFromDisk;
            d["llvm_instructions"] = s.llvmInstructions;
            d["object_bytes"] = s.objectBytes;
            d["from_disk"] = s.fromDisk;
            return d;
          },
          "Where the compile's time went (seconds; per-kernel phases summed "
          "over kernels compiled in parallel) and its sizes")
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
          "the compiled code failed. Releases the GIL. `background`: on a "
          "worker while the host thread "
          "may be busy; parallel loops then leave it a core until it waits "
          "(host_wait_begin/host_wait_end).")
      .def(
          "run_raw",
          [](const CpuExecutable &e, const std::vector<uintptr_t> &inputs,
             const std::vector<size_t> &inputBytes,
             const std::vector<uintptr_t> &outputs,
             const std::vector<size_t> &outputBytes, bool background,
             std::optional<std::vector<std::vector<int64_t>>> shapes) {
            if (e.isDynamic() && !shapes)
              throw std::invalid_argument(
                  "run_raw: this graph has dynamic dimensions: pass each "
                  "buffer's sizes (shapes)");
            if (shapes && shapes->size() != inputs.size() + outputs.size())
              throw std::invalid_argument(
                  "run_raw: expected a shape for each input and output");
            auto raw = [&](const std::vector<uintptr_t> &addresses,
                           const std::vector<size_t> &bytes, size_t first) {
              if (addresses.size() != bytes.size())
                throw std::invalid_argument(
                    "run_raw: addresses and byte sizes differ in count");
              std::vector<RawBuffer> buffers;
              buffers.reserve(addresses.size());
              for (size_t i = 0; i < addresses.size(); ++i) {
                buffers.push_back(
                    {reinterpret_cast<void *>(addresses[i]), bytes[i]});
                if (shapes)
                  buffers.back().sizes = std::move((*shapes)[first + i]);
              }
              return buffers;
            };
            std::vector<RawBuffer> in = raw(inputs, inputBytes, 0);
            std::vector<RawBuffer> out =
                raw(outputs, outputBytes, inputs.size());
            nb::gil_scoped_release release;
            e.run(in, out, background);
          },
          nb::arg("inputs"), nb::arg("input_bytes"), nb::arg("outputs"),
          nb::arg("output_bytes"), nb::arg("background") = false,
          nb::arg("shapes") = nb::none(),
          "`run` on raw buffers (addresses and byte sizes) that the caller "
          "allocated contiguous with the signatures' element types; only "
          "counts and byte sizes are checked (and, for a graph with dynamic "
          "dimensions, `shapes`: each input's then each output's sizes, "
          "required there). Skips DLPack's per-buffer "
          "cost. Raises CheckFailed like `run`. Releases the GIL.");

  m.def(
      "buffer_pool_functions",
      [] {
        void *(*allocate)(size_t) = &allocateBuffer;
        void (*release)(void *) = &releaseBuffer;
        void *(*allocateEager)(size_t) = &allocateEagerBuffer;
        void *(*allocateOutput)(size_t) = &allocateOutputBuffer;
        void (*ready)(void *) = &outputBufferReady;
        return std::make_tuple(reinterpret_cast<uintptr_t>(allocate),
                               reinterpret_cast<uintptr_t>(release),
                               reinterpret_cast<uintptr_t>(allocateEager),
                               reinterpret_cast<uintptr_t>(allocateOutput),
                               reinterpret_cast<uintptr_t>(ready));
      },
      "The addresses of the runtime's buffer pool functions, `void "
      "*allocate(size_t bytes)`, `void release(void *)`, `void "
      "*allocate_eager(size_t bytes)` (for a graph run eagerly), `void "
      "*allocate_output(size_t bytes)` (an output, paged in at its first "
      "write) and `void output_ready(void *)` (that write is next): "
      "lazymlir._device makes output tensors from the pool with them and "
      "serves graphs run eagerly from it (set_buffer_pool).");
  m.def(
      "raw_run_function",
      [] {
        int (*run)(const void *, void *const *, const size_t *, size_t,
                   void *const *, const size_t *, size_t) = &runRaw;
        return reinterpret_cast<uintptr_t>(run);
      },
      "The address of `int run(const void *executable, void *const "
      "*inputs, const size_t *input_bytes, size_t n_inputs, void *const "
      "*outputs, const size_t *output_bytes, size_t n_outputs)`: a static "
      "graph's run on raw contiguous buffers (as run_raw), called without the "
      "GIL by lazymlir._device's replay; 0 when it ran, 1 when a runtime "
      "check failed, 2 on any other error.");
  // One product on buffers given by address and element strides, with the
  // float32 or the bf16 GEMM (`with`: sgemmWith, bf16GemmWith).
  auto defineGemm = [&m](const char *name,
                         bool (*with)(const GemmArgs &, const std::string &,
                                      int),
                         const char *doc) {
    m.def(
        name,
        [with](int64_t m, int64_t n, int64_t k, uintptr_t a, int64_t aRow,
               int64_t aCol, uintptr_t b, int64_t bRow, int64_t bCol,
               uintptr_t c, int64_t cRow, int64_t cCol, const std::string &isa,
               int threads, bool accumulate, bool cBf16) {
          GemmArgs args =
              gemmArgs(m, n, k, a, aRow, aCol, b, bRow, bCol, c, cRow, cCol);
          args.overwrite = !accumulate;
          args.cBf16 = cBf16;
          nb::gil_scoped_release release;
          return with(args, isa, threads);
        },
        nb::arg("m"), nb::arg("n"), nb::arg("k"), nb::arg("a"),
        nb::arg("a_row"), nb::arg("a_col"), nb::arg("b"), nb::arg("b_row"),
        nb::arg("b_col"), nb::arg("c"), nb::arg("c_row"), nb::arg("c_col"),
        nb::arg("isa") = "", nb::arg("threads") = 0,
        nb::arg("accumulate") = true, nb::arg("c_bf16") = false, doc);
  };
  defineGemm(
      "sgemm", &sgemmWith,
      "For tests and benchmarks: C += A x B (accumulate=False: C = A x B) "
      "with the runtime's float32 GEMM (what compiled contractions call) on "
      "float32 buffers given by address and element strides; `isa` (avx512f, "
      "avx2, sse2; '' the host's) and `threads` (0: every core). False when "
      "the host lacks the ISA (c_bf16 is the bf16 GEMM's: False).");
  defineGemm(
      "bf16gemm", &bf16GemmWith,
      "For tests: sgemm's product with A and B bfloat16, C float32, as "
      "compiled bf16 contractions call it; `isa` avx512bf16 (the dot-product "
      "kernel; False when the host lacks it), widen (float32 copies, the "
      "float32 kernel) or '' (the host's); c_bf16=True: C bfloat16 too, the "
      "float32 sums rounded once (as compiled code calls "
      "lazymlir_bf16gemm_bf16c_batched).");
  m.def(
      "fma_peak",
      [] {
        nb::gil_scoped_release release;
        return measureFmaPeak();
      },
      "The host's float32 multiply-add peak in GFLOP/s, measured on every "
      "core with the GEMM kernel's ISA (about 0.1 s).");
  m.def("gemm_kernel", &gemmKernelDescription,
        "The GEMM micro-kernel and cache blocking chosen for this host "
        "(for large products; see gemm_pick).");
  m.def(
      "gemm_pick",
      [](int64_t m, int64_t n,
         const std::vector<std::tuple<int64_t, int64_t, double>> &tiles,
         size_t host) {
        std::vector<GemmTileRate> rates;
        for (const auto &[mr, nr, rate] : tiles)
          rates.push_back({mr, nr, rate});
        if (host >= rates.size())
          throw nb::index_error("host: not one of the tiles");
        return pickGemmTile(rates, host, m, n);
      },
      nb::arg("m"), nb::arg("n"), nb::arg("tiles"), nb::arg("host"),
      "For tests: which of the float32 micro-kernels `tiles` ((MR, NR, "
      "measured GFLOP/s) each) computes C's m x n, `host` the pick for "
      "large products: the soonest done counting the tiles' padding at C's "
      "edges, the host's unless another is at least 3% sooner.");
  m.def("host_wait_begin", &beginHostWait,
        "The host thread starts blocking on background runs.");
  m.def("host_wait_end", &endHostWait, "The host thread stops waiting.");
  m.def("trim_buffer_pool", &trimBufferPool,
        "Return the pool's idle blocks to the system; returns the bytes.");
  m.def(
      "buffer_pool_stats",
      [] {
        BufferPoolStats stats = bufferPoolStats();
        return nb::make_tuple(stats.inUse, stats.peakInUse, stats.idle,
                              stats.recycled);
      },
      "The buffer pool's (bytes in use, most bytes in use at once since the "
      "last trim, idle bytes, bytes of pages moved in from idle blocks so "
      "far: outputs at their first write, blocks of sizes no idle one fits).");
  m.def("idle_buffer_bytes", &idleBufferBytes,
        "Bytes the buffer pool holds idle.");

  m.def(
      "configure_disk_cache",
      [](const std::string &directory, uint64_t maxBytes) {
        configureDiskCache(directory, maxBytes);
      },
      nb::arg("directory"), nb::arg("max_bytes"),
      "Where compiled code is kept on disk ('' : nowhere) and how many bytes "
      "at most (least recently used entries go first).");
  m.def(
      "disk_cache_counts",
      [] {
        DiskCacheCounts c = diskCacheCounts();
        nb::dict d;
        d["graph_hits"] = c.graphHits;
        d["graph_misses"] = c.graphMisses;
        d["hits"] = c.hits;
        d["misses"] = c.misses;
        d["corrupt"] = c.corrupt;
        d["writes"] = c.writes;
        d["evicted"] = c.evicted;
        return d;
      },
      "The disk cache's counters since the process started.");
  m.def("take_disk_cache_warnings", &takeDiskCacheWarnings,
        "Warnings of the disk cache since the last call.");
  m.def(
      "disk_cache_read",
      [](const std::string &key) -> std::optional<nb::bytes> {
        std::optional<std::string> payload;
        {
          nb::gil_scoped_release release;
          payload = readDiskCacheEntry(key);
        }
        if (!payload)
          return std::nullopt;
        return nb::bytes(payload->data(), payload->size());
      },
      nb::arg("key"), "A verified entry of the disk cache, or None.");
  m.def(
      "disk_cache_write",
      [](const std::string &key, nb::bytes payload) {
        std::string data(payload.c_str(), payload.size());
        nb::gil_scoped_release release;
        writeDiskCacheEntry(key, data);
      },
      nb::arg("key"), nb::arg("payload"),
      "Store an entry in the disk cache (atomically).");
  m.def(
      "wait_background_compiles",
      [] {
        nb::gil_scoped_release release;
        waitForBackgroundCompiles();
      },
      "Block until the background compiler (full-effort recompiles of hot "
      "graphs' kernels) is idle.");
  m.def(
      "stop_background_compiles",
      [] {
        nb::gil_scoped_release release;
        stopBackgroundCompiles();
      },
      "Stop the background compiler after its current kernel (at exit).");
  m.def(
      "background_compile_counts",
      [] {
        BackgroundCompileCounts c = backgroundCompileCounts();
        nb::dict d;
        d["kernels_upgraded"] = c.kernelsUpgraded;
        d["graphs_relinked"] = c.graphsRelinked;
        return d;
      },
      "Kernels recompiled at full effort and graphs switched to them.");
  m.def(
      "code_identity", [] { return codeIdentity(); },
      "What besides the IR changes compiled code: this build's digest, "
      "LLVM's version, the host CPU and its features.");
  // CompileOptions with its pipeline settings flattened, for compile_cpu and
  // load_cpu; defaults are CompileOptions' own.
  using Settings = CpuPipelineSettings;
  nb::class_<CompileOptions>(m, "CompileOptions")
      .def(nb::init<>())
      .def_rw("opt_level", &CompileOptions::optLevel)
      .def_rw("tiered", &CompileOptions::tiered)
      .def_rw("tier_up_runs", &CompileOptions::tierUpRuns)
      .def_rw("keep_llvm_dialect", &CompileOptions::keepLLVMDialect)
      .def_rw("donate", &CompileOptions::donate)
#define LAZYMLIR_SETTING(python, field)                                        \
  def_prop_rw(                                                                 \
      python, [](const CompileOptions &o) { return o.pipeline.field; },        \
      [](CompileOptions &o, decltype(Settings::field) v) {                     \
        o.pipeline.field = v;                                                  \
      })
      .LAZYMLIR_SETTING("entry", entry)
      .LAZYMLIR_SETTING("fusion", fusion)
      .LAZYMLIR_SETTING("channels_last", channelsLast)
      .LAZYMLIR_SETTING("threads", threads)
      .LAZYMLIR_SETTING("runtime_checks", runtimeChecks)
      .LAZYMLIR_SETTING("parallel_threshold", parallelThreshold)
      .LAZYMLIR_SETTING("streaming_store_bytes", streamingStoreBytes)
      .LAZYMLIR_SETTING("profile", profile);
#undef LAZYMLIR_SETTING
  m.def(
      "load_cpu",
      [](const std::string &cacheKey, const CompileOptions &options) {
        nb::gil_scoped_release release;
        return CpuExecutable::load(cacheKey, options);
      },
      nb::arg("cache_key"), nb::arg("options"),
      "The graph compiled before under `cache_key` with these options, from "
      "the disk cache, or None.");
  m.def(
      "compile_cpu",
      [](const std::string &source, const CompileOptions &options) {
        nb::gil_scoped_release release;
        return CpuExecutable::compile(source, options);
      },
      nb::arg("source"), nb::arg("options"),
      "Compile linalg-on-tensors text for this CPU. Releases the GIL; raises "
      "CompileError with MLIR's diagnostics.");
  m.def(
      "compile_gpu",
      [](const std::string &source, const std::string &chip,
         const std::string &libdevice, const std::string &features,
         int64_t blockSize, bool fusion) {
        GpuCompileOptions options;
        options.chip = chip;
        options.libdevice = libdevice;
        options.features = features;
        options.blockSize = blockSize;
        options.fusion = fusion;
        nb::gil_scoped_release release;
        return compileGpuPlan(source, options);
      },
      nb::arg("source"), nb::arg("chip"), nb::arg("libdevice"),
      nb::arg("features") = "", nb::arg("block_size") = 256,
      nb::arg("fusion") = true,
      "Compile linalg-on-tensors text for an NVIDIA GPU (`chip`, e.g. "
      "sm_90): the launch plan as JSON, with the kernels' PTX (see "
      "lazymlir.gpu.launch). Needs no GPU. Releases the GIL; raises "
      "CompileError with MLIR's diagnostics.");
}
