//===- CacheEntries.cpp - what the disk cache keeps -----------------------===//

#include "CacheEntries.h"
#include "DiskCache.h"

#include "llvm/ADT/StringMap.h"
#include "llvm/Config/llvm-config.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/TargetParser/Host.h"

#include <algorithm>
#include <atomic>
#include <dlfcn.h>
#include <sstream>
#include <thread>

namespace lazymlir {

namespace {

/// This build (a digest of the library holding this code), LLVM's version,
/// the host CPU and its features.
std::string computeCodeIdentity() {
  std::string identity = "lazymlir-native;";
  Dl_info info;
  if (dladdr(reinterpret_cast<void *>(&computeCodeIdentity), &info) &&
      info.dli_fname) {
    auto file = llvm::MemoryBuffer::getFile(info.dli_fname, false, false);
    if (file)
      identity += sha256Hex((*file)->getBuffer().str());
    else
      identity += std::string("unread:") + info.dli_fname;
  }
  identity += ";llvm=" LLVM_VERSION_STRING ";cpu=";
  identity += llvm::sys::getHostCPUName().str();
  std::vector<std::string> features;
  for (const auto &feature : llvm::sys::getHostCPUFeatures())
    features.push_back((feature.second ? "+" : "-") + feature.first().str());
  std::sort(features.begin(), features.end());
  for (const std::string &feature : features)
    identity += feature + ",";
  return identity;
}

std::atomic<uint64_t> graphDiskHits{0}, graphDiskMisses{0};

} // namespace

const std::string &codeIdentity() {
  static const std::string identity = computeCodeIdentity();
  return identity;
}

void configureDiskCache(const std::string &directory, uint64_t maxBytes) {
  DiskCache::get().configure(directory, maxBytes);
}

DiskCacheCounts diskCacheCounts() {
  DiskCacheStats stats = DiskCache::get().stats();
  DiskCacheCounts counts;
  counts.graphHits = graphDiskHits;
  counts.graphMisses = graphDiskMisses;
  counts.hits = stats.hits;
  counts.misses = stats.misses;
  counts.corrupt = stats.corrupt;
  counts.writes = stats.writes;
  counts.evicted = stats.evicted;
  return counts;
}

std::vector<std::string> takeDiskCacheWarnings() {
  return DiskCache::get().takeWarnings();
}

std::optional<std::string> readDiskCacheEntry(const std::string &key) {
  return DiskCache::get().read(key);
}

void writeDiskCacheEntry(const std::string &key, const std::string &payload) {
  DiskCache::get().write(key, payload);
}

CpuPipelineSettings hostPipelineSettings(const CompileOptions &options) {
  CpuPipelineSettings settings = options.pipeline;
  if (!settings.threads)
    settings.threads = std::max(1u, std::thread::hardware_concurrency());
  // Code is compiled for the host (KernelJit): AVX-512 has a vector ldexp
  // (vscalefps) for exp's 2^n.
  static const llvm::StringMap<bool> features = llvm::sys::getHostCPUFeatures();
  settings.useLdexp = features.lookup("avx512f");
  // Elementwise loops vectorized at the width of the host's registers.
  settings.vectorWidth = features.lookup("avx512f") ? 16u
                         : features.lookup("avx")   ? 8u
                                                    : 4u;
  // bf16 products on the CPU's bf16 dot product (the runtime's bf16 GEMM).
  settings.bf16Gemm = features.lookup("avx512bf16");
  return settings;
}

std::string describeOptions(const CompileOptions &options) {
  CpuPipelineSettings pipeline = hostPipelineSettings(options);
  std::ostringstream os;
  os << "entry=" << pipeline.entry << ";opt=" << options.optLevel
     << ";fusion=" << pipeline.fusion << ";nhwc=" << pipeline.channelsLast
     << ";threads=" << pipeline.threads << ";checks=" << pipeline.runtimeChecks
     << ";parallel=" << pipeline.parallelThreshold
     << ";ldexp=" << pipeline.useLdexp << ";vw=" << pipeline.vectorWidth
     << ";bf16gemm=" << pipeline.bf16Gemm
     << ";streaming=" << pipeline.streamingStoreBytes;
  return os.str();
}

std::string kernelCacheKey(const std::string &options, Tier tier,
                           const std::string &name) {
  return sha256Hex(codeIdentity() + "\nkernel\n" + tierName(tier) + "\n" +
                   options + "\n" + name);
}

std::string sourceCacheKey(const std::string &options,
                           const std::string &name) {
  return sha256Hex(codeIdentity() + "\nkernel-source\n" + options + "\n" +
                   name);
}

std::string graphCacheKey(const std::string &options,
                          const std::string &source) {
  return sha256Hex(codeIdentity() + "\ngraph\n" + options + "\n" + source);
}

void countGraphLookup(bool found) {
  ++(found ? graphDiskHits : graphDiskMisses);
}

std::string GraphRecord::serialize() const {
  std::ostringstream os;
  os << "lazymlir-graph 1\n" << kernelCount << " " << hasChecks << "\n";
  for (const auto *list : {&inputs, &outputs}) {
    os << list->size() << "\n";
    for (const TensorSignature &signature : *list) {
      os << int(signature.elementType) << " " << signature.shape.size();
      for (int64_t size : signature.shape)
        os << " " << size;
      os << "\n";
    }
  }
  os << kernels.size() << "\n";
  for (const std::string &kernel : kernels)
    os << kernel << "\n";
  os << object.size() << "\n";
  return os.str() + object;
}

bool GraphRecord::parse(const std::string &payload) {
  std::istringstream is(payload);
  std::string magic;
  int version = 0;
  if (!(is >> magic >> version) || magic != "lazymlir-graph" || version != 1)
    return false;
  if (!(is >> kernelCount >> hasChecks))
    return false;
  for (auto *list : {&inputs, &outputs}) {
    size_t count;
    if (!(is >> count) || count > (1u << 20))
      return false;
    for (size_t i = 0; i < count; ++i) {
      int type;
      size_t rank;
      if (!(is >> type >> rank) || type < 0 || type > int(ElementType::I64) ||
          rank > 64)
        return false;
      TensorSignature signature{ElementType(type), {}};
      signature.shape.resize(rank);
      for (int64_t &size : signature.shape)
        if (!(is >> size))
          return false;
      list->push_back(std::move(signature));
    }
  }
  size_t count;
  if (!(is >> count) || count > (1u << 20))
    return false;
  kernels.resize(count);
  for (std::string &kernel : kernels)
    if (!(is >> kernel))
      return false;
  size_t bytes;
  if (!(is >> bytes) || is.get() != '\n')
    return false;
  size_t offset = size_t(is.tellg());
  if (offset + bytes != payload.size())
    return false;
  object = payload.substr(offset);
  return true;
}

} // namespace lazymlir
