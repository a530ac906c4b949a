// RUN: lazymlir-opt %s --lazymlir-cpu-pipeline | FileCheck %s
// RUN: lazymlir-opt %s --lazymlir-cpu-pipeline="channels-last=false" | FileCheck %s --check-prefix=NOLAST

// By default the NCHW convolution runs in NHWC (lazymlir-channels-last):
// transposes of the input, filter and output around a directly tiled conv,
// no im2col buffer. With channels-last=false it stays NCHW, im2col into a
// heap temporary, then the contraction.
// CHECK: module attributes {lazymlir.kernel_count = 4 : i64}
// CHECK-NOT: _mlir_memref_to_llvm_aligned_alloc
// NOLAST: module attributes {lazymlir.kernel_count = 3 : i64}
// NOLAST: llvm.call @_mlir_memref_to_llvm_aligned_alloc
func.func @main(%arg0: tensor<2x4x10x10xf32>, %arg1: tensor<8x4x3x3xf32>) -> tensor<2x8x8x8xf32> {
  %cst = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<2x8x8x8xf32>
  %f = linalg.fill ins(%cst : f32) outs(%e : tensor<2x8x8x8xf32>) -> tensor<2x8x8x8xf32>
  %0 = linalg.conv_2d_nchw_fchw {dilations = dense<1> : vector<2xi64>, strides = dense<1> : vector<2xi64>} ins(%arg0, %arg1 : tensor<2x4x10x10xf32>, tensor<8x4x3x3xf32>) outs(%f : tensor<2x8x8x8xf32>) -> tensor<2x8x8x8xf32>
  return %0 : tensor<2x8x8x8xf32>
}
