// A pipeline that fails on valid IR reports why and exits non-zero.
// RUN: not lazymlir-opt %s --lazymlir-cpu-pipeline 2>&1 | FileCheck %s
// CHECK: error: argument #0 of type 'tensor<?xf32>' must have a static shape
func.func @main(%arg0: tensor<?xf32>) -> tensor<?xf32> {
  return %arg0 : tensor<?xf32>
}
