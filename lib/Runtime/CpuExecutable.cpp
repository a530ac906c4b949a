//===- CpuExecutable.cpp - link, load and run compiled graphs -------------===//
//
// The executable's runtime half: its argument block, linking (through
// TieredKernels), loading from the disk cache, and runs with their buffer
// checks. Compiling is the compiler library's (lib/Compiler).
//
//===----------------------------------------------------------------------===//

#include "Executable.h"
#include "CacheEntries.h"
#include "DiskCache.h"
#include "OpenMP.h"
#include "Profiling.h"

#include <algorithm>
#include <chrono>
#include <optional>
#include <sstream>
#include <utility>

namespace lazymlir {

const char *elementTypeName(ElementType type) {
  switch (type) {
  case ElementType::F16:
    return "f16";
  case ElementType::BF16:
    return "bf16";
  case ElementType::F32:
    return "f32";
  case ElementType::F64:
    return "f64";
  case ElementType::I1:
    return "i1";
  case ElementType::I8:
    return "i8";
  case ElementType::I16:
    return "i16";
  case ElementType::I32:
    return "i32";
  case ElementType::I64:
    return "i64";
  }
  return "?";
}

namespace {

/// Bytes of one element (i1: a byte, as torch's bool).
size_t elementBytes(ElementType type) {
  switch (type) {
  case ElementType::I1:
  case ElementType::I8:
    return 1;
  case ElementType::F16:
  case ElementType::BF16:
  case ElementType::I16:
    return 2;
  case ElementType::F32:
  case ElementType::I32:
    return 4;
  case ElementType::F64:
  case ElementType::I64:
    return 8;
  }
  return 0;
}

using Clock = std::chrono::steady_clock;
double since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

} // namespace

bool TensorSignature::isDynamic() const {
  return std::find(shape.begin(), shape.end(), kDynamicSize) != shape.end();
}

void CpuExecutable::Impl::buildArgumentBlock() {
  for (const auto *list : {&inputs, &outputs}) {
    for (const TensorSignature &signature : *list) {
      size_t bytes = elementBytes(signature.elementType);
      for (int64_t size : signature.shape)
        bytes *= size;
      if (signature.isDynamic()) {
        dynamic = true;
        bytes = 0; // known per run (the descriptor's sizes are filled then)
      }
      bufferBytes.push_back(bytes);
      pointerSlots.push_back(argumentBlock.size());
      argumentBlock.insert(argumentBlock.end(), {0, 0, 0});
      argumentBlock.insert(argumentBlock.end(), signature.shape.begin(),
                           signature.shape.end());
      std::vector<int64_t> strides(signature.shape.size());
      int64_t stride = 1;
      for (size_t d = strides.size(); d-- > 0;) {
        strides[d] = stride;
        stride *= signature.shape[d];
      }
      argumentBlock.insert(argumentBlock.end(), strides.begin(), strides.end());
    }
  }
}

void CpuExecutable::Impl::link(const CompileOptions &options,
                               const std::string &optionsKey,
                               std::string entryObject, bool hasChecks,
                               std::vector<std::string> fastKernels,
                               KernelCompiler compiler) {
  linkage->options = options;
  linkage->optionsKey = optionsKey;
  linkage->compiler = std::move(compiler);
  linkage->entryObject = std::move(entryObject);
  linkage->hasChecks = hasChecks;
  linkage->fastKernels = std::move(fastKernels);
  linkage->link();
  if (linkage->fastKernels.empty())
    linkage->entryObject.clear();
}

bool CpuExecutable::Impl::loadFromDisk(const std::string &key,
                                       const CompileOptions &options,
                                       KernelCompiler compiler) {
  if (!DiskCache::get().enabled())
    return false;
  auto start = Clock::now();
  std::optional<std::string> payload = DiskCache::get().read(key);
  GraphRecord record;
  if (!payload || !record.parse(*payload)) {
    countGraphLookup(false);
    return false;
  }
  initializeLLVMOnce();
  std::string optionsKey = describeOptions(options);
  std::vector<std::string> fastKernels;
  try {
    for (const std::string &name : record.kernels) {
      ObjectTimes unused;
      Acquired kernel =
          acquireKernel(name, nullptr, options, optionsKey, compiler, unused);
      ++(kernel.origin == KernelJit::Origin::Disk ? stats.kernelsFromDisk
                                                  : stats.kernelsReused);
      if (kernel.tier == Tier::Fast)
        fastKernels.push_back(name);
    }
  } catch (const NotOnDisk &) {
    countGraphLookup(false); // compiled again, and written again
    return false;
  }
  inputs = std::move(record.inputs);
  outputs = std::move(record.outputs);
  kernelCount = record.kernelCount;
  cacheKey = key;
  buildArgumentBlock();
  stats.distinctKernels = record.kernels.size();
  stats.fromDisk = true;
  auto linkStart = Clock::now();
  link(options, optionsKey, std::move(record.object), record.hasChecks,
       std::move(fastKernels), std::move(compiler));
  stats.link = since(linkStart);
  stats.total = since(start);
  countGraphLookup(true);
  return true;
}

void CpuExecutable::Impl::invoke(
    const std::vector<void *> &data, bool background,
    const std::vector<const std::vector<int64_t> *> *sizes) const {
  std::vector<int64_t> scalars = argumentBlock;
  if (dynamic && (!sizes || sizes->size() != data.size()))
    throw std::invalid_argument(
        "a graph with dynamic dimensions runs on buffers of known sizes");
  for (size_t i = 0; i < data.size(); ++i) {
    auto pointer = reinterpret_cast<int64_t>(data[i]);
    size_t slot = pointerSlots[i];
    scalars[slot] = pointer;
    scalars[slot + 1] = pointer;
    if (dynamic) {
      // The descriptor: pointers, offset, sizes..., strides... (contiguous).
      const std::vector<int64_t> &dims = *(*sizes)[i];
      size_t rank = dims.size();
      int64_t stride = 1;
      for (size_t d = rank; d-- > 0;) {
        scalars[slot + 3 + d] = dims[d];
        scalars[slot + 3 + rank + d] = stride;
        stride *= dims[d];
      }
    }
  }
  std::vector<void *> args(scalars.size());
  for (size_t i = 0; i < scalars.size(); ++i)
    args[i] = &scalars[i];
  if (!linkage->fastKernels.empty() &&
      linkage->runs.fetch_add(1, std::memory_order_relaxed) + 1 ==
          std::max(1u, linkage->options.tierUpRuns) &&
      !linkage->upgradeRequested.exchange(true))
    requestFullTier(linkage);
  std::optional<ProfileScope> profiling;
  if (!profileSites.empty())
    profiling.emplace(profileEvents, profileMutex);
  if (!linkage->hasChecks) {
    const LinkedGraph *graph = linkage->current.load(std::memory_order_acquire);
    BackgroundScope scope(background);
    graph->entry(args.data());
    return;
  }
  std::lock_guard<std::mutex> lock(checkMutex);
  const LinkedGraph *graph = linkage->current.load(std::memory_order_acquire);
  {
    BackgroundScope scope(background);
    graph->entry(args.data());
  }
  if (graph->checkFlag->exchange(0, std::memory_order_relaxed) != 0)
    throw CheckFailed();
}

CpuExecutable::CpuExecutable(std::unique_ptr<Impl> impl)
    : impl(std::move(impl)) {}
CpuExecutable::~CpuExecutable() = default;

const std::vector<TensorSignature> &CpuExecutable::inputs() const {
  return impl->inputs;
}
const std::vector<TensorSignature> &CpuExecutable::outputs() const {
  return impl->outputs;
}
int64_t CpuExecutable::kernelCount() const { return impl->kernelCount; }
bool CpuExecutable::hasRuntimeChecks() const {
  return impl->linkage->hasChecks;
}
bool CpuExecutable::isDynamic() const { return impl->dynamic; }
const std::string &CpuExecutable::llvmDialect() const {
  return impl->llvmDialect;
}
const CompileStats &CpuExecutable::compileStats() const { return impl->stats; }
const std::string &CpuExecutable::cacheKey() const { return impl->cacheKey; }
const std::vector<ProfileSite> &CpuExecutable::profileSites() const {
  return impl->profileSites;
}
std::vector<ProfileEvent> CpuExecutable::takeProfileEvents() const {
  std::lock_guard<std::mutex> lock(impl->profileMutex);
  return std::exchange(impl->profileEvents, {});
}
bool CpuExecutable::fullyOptimized() const {
  const LinkedGraph *graph = impl->linkage->current.load();
  std::lock_guard<std::mutex> lock(impl->linkage->mutex);
  return impl->linkage->fastKernels.empty() ||
         (impl->linkage->linked.size() > 1 &&
          graph == impl->linkage->linked.back().get());
}

namespace {

std::string describe(const std::vector<int64_t> &dims) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < dims.size(); ++i)
    os << (i ? ", " : "") << dims[i];
  os << "]";
  return os.str();
}

/// Whether `sizes` are a shape of `signature`: its rank, its static sizes,
/// any size >= 0 where it has a dynamic one.
bool fits(const std::vector<int64_t> &sizes, const TensorSignature &signature) {
  if (sizes.size() != signature.shape.size())
    return false;
  for (size_t d = 0; d < sizes.size(); ++d)
    if (sizes[d] != signature.shape[d] &&
        (signature.shape[d] != kDynamicSize || sizes[d] < 0))
      return false;
  return true;
}

void checkBuffer(const BufferView &buffer, const TensorSignature &signature,
                 const char *kind, size_t index) {
  auto where = [&] { return std::string(kind) + " #" + std::to_string(index); };
  if (buffer.elementType != signature.elementType)
    throw std::invalid_argument(
        where() + ": element type " + elementTypeName(buffer.elementType) +
        ", expected " + elementTypeName(signature.elementType));
  if (!fits(buffer.sizes, signature))
    throw std::invalid_argument(where() + ": shape " + describe(buffer.sizes) +
                                ", expected " + describe(signature.shape) +
                                " (-1: any size)");
  if (buffer.strides.size() != buffer.sizes.size())
    throw std::invalid_argument(where() + ": strides and sizes differ in rank");
  // The compiled code assumes the identity layout; a dimension of size 1 may
  // have any stride.
  int64_t expected = 1;
  for (size_t d = buffer.sizes.size(); d-- > 0;) {
    if (buffer.sizes[d] != 1 && buffer.strides[d] != expected)
      throw std::invalid_argument(where() + ": not contiguous (strides " +
                                  describe(buffer.strides) + ")");
    expected *= buffer.sizes[d];
  }
}

} // namespace

void CpuExecutable::checkCounts(size_t numInputs, size_t numOutputs) const {
  if (numInputs != impl->inputs.size() || numOutputs != impl->outputs.size())
    throw std::invalid_argument(
        "expected " + std::to_string(impl->inputs.size()) + " inputs and " +
        std::to_string(impl->outputs.size()) + " outputs, got " +
        std::to_string(numInputs) + " and " + std::to_string(numOutputs));
}

void CpuExecutable::run(const std::vector<BufferView> &inputs,
                        const std::vector<BufferView> &outputs,
                        bool background) const {
  checkCounts(inputs.size(), outputs.size());
  for (size_t i = 0; i < inputs.size(); ++i)
    checkBuffer(inputs[i], impl->inputs[i], "input", i);
  for (size_t i = 0; i < outputs.size(); ++i)
    checkBuffer(outputs[i], impl->outputs[i], "output", i);

  std::vector<void *> data;
  std::vector<const std::vector<int64_t> *> sizes;
  data.reserve(inputs.size() + outputs.size());
  sizes.reserve(inputs.size() + outputs.size());
  for (const auto *list : {&inputs, &outputs})
    for (const BufferView &buffer : *list) {
      data.push_back(buffer.data);
      sizes.push_back(&buffer.sizes);
    }
  impl->invoke(data, background, &sizes);
}

void CpuExecutable::run(const std::vector<RawBuffer> &inputs,
                        const std::vector<RawBuffer> &outputs,
                        bool background) const {
  checkCounts(inputs.size(), outputs.size());
  std::vector<void *> data;
  std::vector<const std::vector<int64_t> *> sizes;
  data.reserve(inputs.size() + outputs.size());
  if (impl->dynamic)
    sizes.reserve(inputs.size() + outputs.size());
  auto check = [&](const std::vector<RawBuffer> &buffers,
                   const std::vector<TensorSignature> &signatures,
                   const char *kind, size_t first) {
    for (size_t i = 0; i < buffers.size(); ++i) {
      const RawBuffer &buffer = buffers[i];
      const TensorSignature &signature = signatures[i];
      auto fail = [&](const std::string &what) {
        throw std::invalid_argument(std::string(kind) + " #" +
                                    std::to_string(i) + ": " + what + " (" +
                                    elementTypeName(signature.elementType) +
                                    " " + describe(signature.shape) + ")");
      };
      size_t bytes = impl->bufferBytes[first + i];
      if (impl->dynamic) {
        // The sizes fill the descriptor: they must fit the signature and
        // the buffer's byte count.
        if (!fits(buffer.sizes, signature))
          fail("sizes " + describe(buffer.sizes) + " do not fit");
        bytes = elementBytes(signature.elementType);
        for (int64_t size : buffer.sizes)
          bytes *= static_cast<size_t>(size);
        sizes.push_back(&buffer.sizes);
      }
      if (buffer.bytes != bytes)
        fail(std::to_string(buffer.bytes) + " bytes, expected " +
             std::to_string(bytes));
      data.push_back(buffer.data);
    }
  };
  check(inputs, impl->inputs, "input", 0);
  check(outputs, impl->outputs, "output", inputs.size());
  impl->invoke(data, background, impl->dynamic ? &sizes : nullptr);
}

} // namespace lazymlir
