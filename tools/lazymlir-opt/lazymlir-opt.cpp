//===- lazymlir-opt.cpp - mlir-opt with lazymlir's passes -----------------===//
//
// Runs lazymlir's passes and pipelines (and all upstream ones) on the graphs
// lazymlir dumps, e.g.
//   lazymlir-opt <hash>.linalg.mlir --lazymlir-cpu-pipeline
//
// Unregistered dialects are allowed by default: a dump holds torch-mlir's
// TMTensor ops (cumsum, scatter, sort) in the generic form, which the
// pipeline's lazymlir-lower-tm-tensor rewrites, as the compiler does.
//
//===----------------------------------------------------------------------===//

#include "lazymlir/Pipelines/Pipelines.h"

#include "mlir/IR/DialectRegistry.h"
#include "mlir/InitAllDialects.h"
#include "mlir/InitAllExtensions.h"
#include "mlir/InitAllPasses.h"
#include "mlir/Target/LLVMIR/Dialect/All.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"

#include <algorithm>
#include <cstring>
#include <vector>

int main(int argc, char **argv) {
  mlir::registerAllPasses();
  lazymlir::registerAllPassesAndPipelines();

  mlir::DialectRegistry registry;
  mlir::registerAllDialects(registry);
  mlir::registerAllExtensions(registry);
  // gpu-module-to-binary translates kernel modules to LLVM IR.
  mlir::registerAllToLLVMIRTranslations(registry);
  // Unless the command line sets it (either way).
  std::vector<char *> args(argv, argv + argc);
  static char allowUnregistered[] = "--allow-unregistered-dialect";
  bool given = std::any_of(args.begin() + 1, args.end(), [](const char *arg) {
    arg += std::strspn(arg, "-");
    return std::strncmp(arg, allowUnregistered + 2,
                        std::strlen(allowUnregistered + 2)) == 0;
  });
  if (!given)
    args.insert(args.begin() + 1, allowUnregistered);
  return mlir::asMainReturnCode(
      mlir::MlirOptMain(static_cast<int>(args.size()), args.data(),
                        "lazymlir optimizer driver\n", registry));
}
