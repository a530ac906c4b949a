//===- lazymlir-opt.cpp - mlir-opt with lazymlir's passes -----------------===//
//
// Runs lazymlir's passes and pipelines (and all upstream ones) on the graphs
// lazymlir dumps, e.g.
//   lazymlir-opt <hash>.linalg.mlir --lazymlir-cpu-pipeline
//
//===----------------------------------------------------------------------===//

#include "lazymlir/Pipelines/Pipelines.h"

#include "mlir/IR/DialectRegistry.h"
#include "mlir/InitAllDialects.h"
#include "mlir/InitAllExtensions.h"
#include "mlir/InitAllPasses.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"

int main(int argc, char **argv) {
  mlir::registerAllPasses();
  lazymlir::registerAllPassesAndPipelines();

  mlir::DialectRegistry registry;
  mlir::registerAllDialects(registry);
  mlir::registerAllExtensions(registry);
  return mlir::asMainReturnCode(mlir::MlirOptMain(
      argc, argv, "lazymlir optimizer driver\n", registry));
}
