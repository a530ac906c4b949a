// A pipeline that fails on valid IR reports why and exits non-zero.
// RUN: not lazymlir-opt %s --lazymlir-cpu-pipeline 2>&1 | FileCheck %s
// CHECK: error: argument #0 of type 'tensor<2xcomplex<f32>>' has an element type the runtime cannot map to a torch dtype
func.func @main(%arg0: tensor<2xcomplex<f32>>) -> tensor<2xcomplex<f32>> {
  return %arg0 : tensor<2xcomplex<f32>>
}
