// RUN: lazymlir-opt %s --split-input-file --lazymlir-cpu-pipeline | FileCheck %s

// Graphs as torch-mlir's FX importer emits them (linalg-on-tensors). The
// pipeline must reach the LLVM dialect with the result turned into a
// caller-allocated out-parameter (destination passing): main returns nothing,
// takes one more memref (ptr, ptr, offset, sizes, strides), and writes the
// result in place instead of allocating it.

#map = affine_map<(d0, d1) -> (d0, d1)>
#map1 = affine_map<(d0, d1) -> (d1)>
// matmul + bias + relu: 3 inputs (2-D, 2-D, 1-D) and a 2-D out-parameter.
// The contraction is vectorized into FMAs on vectors of a row (outer
// products), with bias and relu applied to the registers before the store.
// CHECK-LABEL: llvm.func @main(
// CHECK-SAME: %[[A:arg0]]: !llvm.ptr,
// CHECK-SAME: %arg14: !llvm.ptr, %arg15: !llvm.ptr, %arg16: i64, %arg17: i64, %arg18: i64,
// CHECK-SAME: %[[OUT:arg20]]: !llvm.ptr, %arg21: i64, %arg22: i64, %arg23: i64, %arg24: i64, %arg25: i64) {
// CHECK-NOT: llvm.call @{{(malloc|_mlir_memref_to_llvm_aligned_alloc)}}
// CHECK: llvm.intr.fmuladd({{.*}}) : (vector<16xf32>, vector<16xf32>, vector<16xf32>) -> vector<16xf32>
// CHECK: llvm.fcmp "ugt" {{.*}} : vector<16xf32>
// CHECK: llvm.select {{.*}} : vector<16xi1>, vector<16xf32>
// CHECK: llvm.store {{.*}} : vector<16xf32>, !llvm.ptr
// CHECK: llvm.return{{$}}
// CHECK-NOT: linalg.
// CHECK-NOT: memref.
// CHECK-NOT: tensor.
module {
  func.func @main(%arg0: tensor<4x8xf32>, %arg1: tensor<8x16xf32>, %arg2: tensor<16xf32>) -> tensor<4x16xf32> {
    %cst = arith.constant 0.000000e+00 : f32
    %0 = tensor.empty() : tensor<4x16xf32>
    %1 = linalg.fill ins(%cst : f32) outs(%0 : tensor<4x16xf32>) -> tensor<4x16xf32>
    %2 = linalg.matmul ins(%arg0, %arg1 : tensor<4x8xf32>, tensor<8x16xf32>) outs(%1 : tensor<4x16xf32>) -> tensor<4x16xf32>
    %3 = linalg.generic {indexing_maps = [#map, #map1, #map], iterator_types = ["parallel", "parallel"]} ins(%2, %arg2 : tensor<4x16xf32>, tensor<16xf32>) outs(%0 : tensor<4x16xf32>) {
    ^bb0(%in: f32, %in_0: f32, %out: f32):
      %5 = arith.addf %in, %in_0 : f32
      linalg.yield %5 : f32
    } -> tensor<4x16xf32>
    %4 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]} ins(%3 : tensor<4x16xf32>) outs(%0 : tensor<4x16xf32>) {
    ^bb0(%in: f32, %out: f32):
      %5 = arith.cmpf ugt, %in, %cst : f32
      %6 = arith.select %5, %in, %cst : f32
      linalg.yield %6 : f32
    } -> tensor<4x16xf32>
    return %4 : tensor<4x16xf32>
  }
}

// -----

#map = affine_map<(d0, d1) -> (d0, d1)>
#map1 = affine_map<(d0, d1) -> (d0)>
// Row sum: the accumulator is initialised in the out-parameter itself.
// CHECK-LABEL: llvm.func @main(
// CHECK-SAME: %arg7: !llvm.ptr, %arg8: !llvm.ptr, %arg9: i64, %arg10: i64, %arg11: i64) {
// CHECK-NOT: llvm.call @{{(malloc|_mlir_memref_to_llvm_aligned_alloc)}}
// CHECK: llvm.store %{{.*}}, %{{.*}} : f32, !llvm.ptr
// CHECK: llvm.fadd
// CHECK: llvm.return{{$}}
module {
  func.func @main(%arg0: tensor<4x8xf32>) -> tensor<4xf32> {
    %cst = arith.constant 0.000000e+00 : f32
    %0 = tensor.empty() : tensor<4xf32>
    %1 = linalg.fill ins(%cst : f32) outs(%0 : tensor<4xf32>) -> tensor<4xf32>
    %2 = linalg.generic {indexing_maps = [#map, #map1], iterator_types = ["parallel", "reduction"]} ins(%arg0 : tensor<4x8xf32>) outs(%1 : tensor<4xf32>) {
    ^bb0(%in: f32, %out: f32):
      %3 = arith.addf %in, %out : f32
      linalg.yield %3 : f32
    } -> tensor<4xf32>
    return %2 : tensor<4xf32>
  }
}

// -----

#map = affine_map<(d0, d1) -> (d0, d1)>
#map1 = affine_map<(d0, d1) -> (d1)>
// Broadcast of a row vector, in i64 to cover integer element types.
// CHECK-LABEL: llvm.func @main(
// CHECK-SAME: %arg12: !llvm.ptr, %arg13: !llvm.ptr, %arg14: i64, %arg15: i64, %arg16: i64, %arg17: i64, %arg18: i64) {
// CHECK-NOT: llvm.call @{{(malloc|_mlir_memref_to_llvm_aligned_alloc)}}
// CHECK: llvm.mul %{{.*}}, %{{.*}} : i64
// CHECK: llvm.return{{$}}
module {
  func.func @main(%arg0: tensor<4x8xi64>, %arg1: tensor<8xi64>) -> tensor<4x8xi64> {
    %0 = tensor.empty() : tensor<4x8xi64>
    %1 = linalg.generic {indexing_maps = [#map, #map1, #map], iterator_types = ["parallel", "parallel"]} ins(%arg0, %arg1 : tensor<4x8xi64>, tensor<8xi64>) outs(%0 : tensor<4x8xi64>) {
    ^bb0(%in: i64, %in_0: i64, %out: i64):
      %2 = arith.muli %in, %in_0 : i64
      linalg.yield %2 : i64
    } -> tensor<4x8xi64>
    return %1 : tensor<4x8xi64>
  }
}

// -----

// A result that is an input: destination passing still copies it out.
// CHECK-LABEL: llvm.func @main(
// CHECK: "llvm.intr.memcpy"
// CHECK: llvm.return{{$}}
module {
  func.func @main(%arg0: tensor<3xf64>) -> tensor<3xf64> {
    return %arg0 : tensor<3xf64>
  }
}
