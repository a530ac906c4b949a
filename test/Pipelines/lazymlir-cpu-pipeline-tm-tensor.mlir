// RUN: lazymlir-opt %s --allow-unregistered-dialect --split-input-file --lazymlir-cpu-pipeline | FileCheck %s

// torch-mlir's TMTensor ops (generic form, unregistered) go through the
// whole pipeline: lazymlir-lower-tm-tensor runs before the contract check.

// CHECK-LABEL: llvm.func @main
// CHECK-NOT: tm_tensor
func.func @main(%arg0: tensor<6x1x4xf32>, %arg1: tensor<6x1xi64>) -> tensor<10x4xf32> {
  %cst = arith.constant dense<0.000000e+00> : tensor<10x4xf32>
  %0 = "tm_tensor.scatter"(%arg0, %arg1, %cst) <{dimension_map = array<i64: 0>, operandSegmentSizes = array<i32: 2, 1>, unique_indices = false}> ({
  ^bb0(%a: f32, %b: f32):
    %1 = "arith.addf"(%b, %a) <{fastmath = #arith.fastmath<none>}> : (f32, f32) -> f32
    "tm_tensor.yield"(%1) : (f32) -> ()
  }) : (tensor<6x1x4xf32>, tensor<6x1xi64>, tensor<10x4xf32>) -> tensor<10x4xf32>
  return %0 : tensor<10x4xf32>
}

// -----

// CHECK-LABEL: llvm.func @main
// CHECK-NOT: tm_tensor
func.func @main(%arg0: tensor<8x5xf32>) -> (tensor<8x5xf32>, tensor<8x5xi64>) {
  %0 = tensor.empty() : tensor<8x5xi64>
  %1 = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>], iterator_types = ["parallel", "parallel"]} outs(%0 : tensor<8x5xi64>) {
  ^bb0(%out: i64):
    %3 = linalg.index 1 : index
    %4 = arith.index_cast %3 : index to i64
    linalg.yield %4 : i64
  } -> tensor<8x5xi64>
  %2:2 = "tm_tensor.sort"(%arg0, %1) <{dimension = 1 : i64, operandSegmentSizes = array<i32: 0, 2>}> ({
  ^bb0(%a: f32, %b: f32, %c: i64, %d: i64):
    %5 = "arith.cmpf"(%a, %b) <{fastmath = #arith.fastmath<none>, predicate = 5 : i64}> : (f32, f32) -> i1
    "tm_tensor.yield"(%5) : (i1) -> ()
  }) : (tensor<8x5xf32>, tensor<8x5xi64>) -> (tensor<8x5xf32>, tensor<8x5xi64>)
  return %2#0, %2#1 : tensor<8x5xf32>, tensor<8x5xi64>
}

// -----

// CHECK-LABEL: llvm.func @main
// CHECK-NOT: tm_tensor
func.func @main(%arg0: tensor<8x5xf32>) -> tensor<8x5xf32> {
  %cst = arith.constant 0.000000e+00 : f32
  %e = tensor.empty() : tensor<8x5xf32>
  %o = linalg.fill ins(%cst : f32) outs(%e : tensor<8x5xf32>) -> tensor<8x5xf32>
  %ea = tensor.empty() : tensor<8xf32>
  %a = linalg.fill ins(%cst : f32) outs(%ea : tensor<8xf32>) -> tensor<8xf32>
  %0:2 = "tm_tensor.scan"(%arg0, %o, %a) <{dimension = 1 : i64, inclusive = true, operandSegmentSizes = array<i32: 1, 2>}> ({
  ^bb0(%x: f32, %y: f32):
    %1 = "arith.addf"(%x, %y) <{fastmath = #arith.fastmath<none>}> : (f32, f32) -> f32
    "tm_tensor.yield"(%1) : (f32) -> ()
  }) : (tensor<8x5xf32>, tensor<8x5xf32>, tensor<8xf32>) -> (tensor<8x5xf32>, tensor<8xf32>)
  return %0#0 : tensor<8x5xf32>
}
