// RUN: lazymlir-opt %s --lazymlir-cpu-pipeline="fusion=false" | FileCheck %s
// RUN: lazymlir-opt %s --lazymlir-cpu-pipeline="threads=2" | FileCheck %s

// Batch x sequence rows viewed back as [batch, sequence, 8], both `?`:
// expand-strided-metadata crashed (the whole process) on this view; it
// compiles now (lazymlir-dynamic-expand-shapes), and merge-loop-runs does
// not merge the two `?` loops of the elementwise op into one.
// CHECK: llvm.func @main(
// CHECK-NOT: -9223372036854775808
func.func @main(%arg0: tensor<?x?x8xf32>) -> tensor<?x?x8xf32> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %d0 = tensor.dim %arg0, %c0 : tensor<?x?x8xf32>
  %d1 = tensor.dim %arg0, %c1 : tensor<?x?x8xf32>
  %0 = tensor.collapse_shape %arg0 [[0, 1], [2]] : tensor<?x?x8xf32> into tensor<?x8xf32>
  %n = tensor.dim %0, %c0 : tensor<?x8xf32>
  %1 = tensor.empty(%n) : tensor<?x8xf32>
  %2 = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0, d1)>], iterator_types = ["parallel", "parallel"]} ins(%0 : tensor<?x8xf32>) outs(%1 : tensor<?x8xf32>) {
  ^bb0(%in: f32, %out: f32):
    %3 = arith.addf %in, %in : f32
    linalg.yield %3 : f32
  } -> tensor<?x8xf32>
  %4 = tensor.expand_shape %2 [[0, 1], [2]] output_shape [%d0, %d1, 8] : tensor<?x8xf32> into tensor<?x?x8xf32>
  return %4 : tensor<?x?x8xf32>
}
