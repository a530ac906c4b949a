//===- VerifyNvvmTargets.cpp - NVVM targets that compile, or diagnostics --===//

#include "lazymlir/Transforms/Passes.h"

#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "llvm/ADT/StringSwitch.h"
#include "llvm/Support/FileSystem.h"

namespace lazymlir {
#define GEN_PASS_DEF_VERIFYNVVMTARGETSPASS
#include "lazymlir/Transforms/Passes.h.inc"
} // namespace lazymlir

using namespace mlir;

namespace {} // namespace

// Chips outside sm_75..sm_120 get 0: CUDA 13's ptxas assembles nothing older
// than sm_75.
int lazymlir::minimumPtxVersion(StringRef chip) {
  return llvm::StringSwitch<int>(chip)
      .Case("sm_75", 63)
      .Case("sm_80", 70)
      .Case("sm_86", 71)
      .Case("sm_87", 74)
      .Case("sm_89", 78)
      .Case("sm_90", 78)
      .Case("sm_90a", 80)
      .Case("sm_100", 86)
      .Case("sm_100a", 86)
      .Case("sm_120", 87)
      .Case("sm_120a", 87)
      .Default(0);
}

namespace {

/// The PTX version a feature string names (`+ptx80` -> 80), or none.
std::optional<int> ptxVersion(StringRef features) {
  SmallVector<StringRef> parts;
  features.split(parts, ',', /*MaxSplit=*/-1, /*KeepEmpty=*/false);
  std::optional<int> version;
  for (StringRef part : parts) {
    part = part.trim();
    int value;
    if (part.consume_front("+ptx") && !part.getAsInteger(10, value))
      version = value;
  }
  return version;
}

struct VerifyNvvmTargetsPass
    : lazymlir::impl::VerifyNvvmTargetsPassBase<VerifyNvvmTargetsPass> {
  void runOnOperation() override {
    bool failed = false;
    getOperation().walk([&](gpu::GPUModuleOp module) {
      ArrayAttr targets = module.getTargetsAttr();
      if (!targets)
        return;
      SmallVector<StringRef> libdeviceCalls;
      module.walk([&](LLVM::LLVMFuncOp func) {
        if (func.isExternal() && func.getName().starts_with("__nv_"))
          libdeviceCalls.push_back(func.getName());
      });
      for (Attribute attr : targets) {
        auto target = dyn_cast<NVVM::NVVMTargetAttr>(attr);
        if (!target)
          continue;
        auto fail = [&]() {
          failed = true;
          return module.emitError()
                 << "lazymlir: NVVM target " << target << ": ";
        };
        int minimum = lazymlir::minimumPtxVersion(target.getChip());
        if (!minimum) {
          fail() << "unsupported chip '" << target.getChip()
                 << "' (supported: sm_75, sm_80, sm_86, sm_87, sm_89, "
                    "sm_90, sm_90a, sm_100, sm_100a, sm_120, sm_120a)";
          continue;
        }
        std::optional<int> ptx = ptxVersion(target.getFeatures());
        if (!ptx) {
          fail() << "features '" << target.getFeatures()
                 << "' name no PTX version (+ptxNN; at least +ptx" << minimum
                 << " for " << target.getChip() << ")";
          continue;
        }
        if (*ptx < minimum) {
          fail() << "PTX " << *ptx / 10 << "." << *ptx % 10
                 << " does not support " << target.getChip()
                 << " (it needs +ptx" << minimum << " or later)";
          continue;
        }
        bool libdevice = false;
        if (ArrayAttr links = target.getLink()) {
          for (Attribute link : links) {
            StringRef path = cast<StringAttr>(link).getValue();
            if (!llvm::sys::fs::exists(path))
              fail() << "linked file '" << path << "' does not exist";
            libdevice |= path.contains("libdevice");
          }
        }
        if (!libdeviceCalls.empty() && !libdevice)
          fail() << "the kernels call libdevice (" << libdeviceCalls.front()
                 << (libdeviceCalls.size() > 1 ? ", ..." : "")
                 << ") but no libdevice is linked: pass its path "
                    "(libdevice.10.bc, from the CUDA toolkit or the "
                    "nvidia-nvvm wheel)";
      }
    });
    if (failed)
      signalPassFailure();
  }
};

} // namespace
