// RUN: lazymlir-opt %s --split-input-file --lazymlir-vectorize-column-reductions --canonicalize --cse | FileCheck %s
// RUN: lazymlir-opt %s --split-input-file --verify-diagnostics --lazymlir-vectorize-column-reductions -o /dev/null

// A bias gradient in NHWC (pixels x channels, summed over pixels): 8 rows
// at a time added, in row order, into one vector of the 32 channels carried
// through the row loop in registers; memory is written once, after it.
// CHECK-LABEL: func.func @bias_gradient
// CHECK:       %[[INIT:.*]] = vector.transfer_read {{.*}} : tensor<32xf32>, vector<32xf32>
// CHECK:       %[[SUM:.*]] = scf.for {{.*}} step %c8 iter_args(%[[ACC:.*]] = %[[INIT]]) -> (vector<32xf32>)
// CHECK:         %[[ROWS:.*]] = vector.transfer_read {{.*}} : tensor<8x32xf32>, vector<8x32xf32>
// CHECK:         %[[R0:.*]] = vector.extract %[[ROWS]][0]
// CHECK:         %[[S0:.*]] = arith.addf %[[R0]], %[[ACC]] : vector<32xf32>
// CHECK:         %[[R1:.*]] = vector.extract %[[ROWS]][1]
// CHECK:         %[[S1:.*]] = arith.addf %[[R1]], %[[S0]] : vector<32xf32>
// CHECK-NOT:     vector.transfer_write
// CHECK:         scf.yield %{{.*}} : vector<32xf32>
// CHECK:       vector.transfer_write %[[SUM]]
func.func @bias_gradient(%x: tensor<43264x32xf32>) -> tensor<32xf32> {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<32xf32>
  %acc = linalg.fill ins(%zero : f32) outs(%e : tensor<32xf32>) -> tensor<32xf32>
  %r = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d1)>], iterator_types = ["reduction", "parallel"]} ins(%x : tensor<43264x32xf32>) outs(%acc : tensor<32xf32>) {
  ^bb0(%in: f32, %out: f32):
    %s = arith.addf %in, %out : f32
    linalg.yield %s : f32
  } -> tensor<32xf32>
  return %r : tensor<32xf32>
}

// -----

// 512 columns (a linear layer's bias over batch x sequence): tiles of 64
// columns outside, the row loop inside each.
// CHECK-LABEL: func.func @wide
// CHECK:       scf.for {{.*}} to %c512 step %c64
// CHECK:         scf.for {{.*}} to %c256 step %c8 {{.*}} -> (vector<64xf32>)
// CHECK:           vector.transfer_read {{.*}} : tensor<8x64xf32>, vector<8x64xf32>
// CHECK:           arith.addf {{.*}} : vector<64xf32>
func.func @wide(%x: tensor<256x512xf32>) -> tensor<512xf32> {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<512xf32>
  %acc = linalg.fill ins(%zero : f32) outs(%e : tensor<512xf32>) -> tensor<512xf32>
  %r = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d1)>], iterator_types = ["reduction", "parallel"]} ins(%x : tensor<256x512xf32>) outs(%acc : tensor<512xf32>) {
  ^bb0(%in: f32, %out: f32):
    %s = arith.addf %in, %out : f32
    linalg.yield %s : f32
  } -> tensor<512xf32>
  return %r : tensor<512xf32>
}

// -----

// Left alone: a row reduction (the reduced loop innermost), rows that are
// not a multiple of 8, and a column operand read across rows.
// CHECK-LABEL: func.func @left_alone
// CHECK-NOT:   scf.for
// CHECK-NOT:   vector.
func.func @left_alone(%a: tensor<64x32xf32>, %b: tensor<30x32xf32>, %c: tensor<32x64xf32>) -> (tensor<64xf32>, tensor<32xf32>, tensor<32xf32>) {
  %zero = arith.constant 0.0 : f32
  %e0 = tensor.empty() : tensor<64xf32>
  %z0 = linalg.fill ins(%zero : f32) outs(%e0 : tensor<64xf32>) -> tensor<64xf32>
  %r0 = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0)>], iterator_types = ["parallel", "reduction"]} ins(%a : tensor<64x32xf32>) outs(%z0 : tensor<64xf32>) {
  ^bb0(%in: f32, %out: f32):
    %s = arith.addf %in, %out : f32
    linalg.yield %s : f32
  } -> tensor<64xf32>
  %e1 = tensor.empty() : tensor<32xf32>
  %z1 = linalg.fill ins(%zero : f32) outs(%e1 : tensor<32xf32>) -> tensor<32xf32>
  %r1 = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d1)>], iterator_types = ["reduction", "parallel"]} ins(%b : tensor<30x32xf32>) outs(%z1 : tensor<32xf32>) {
  ^bb0(%in: f32, %out: f32):
    %s = arith.addf %in, %out : f32
    linalg.yield %s : f32
  } -> tensor<32xf32>
  %r2 = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d1, d0)>, affine_map<(d0, d1) -> (d1)>], iterator_types = ["reduction", "parallel"]} ins(%c : tensor<32x64xf32>) outs(%z1 : tensor<32xf32>) {
  ^bb0(%in: f32, %out: f32):
    %s = arith.addf %in, %out : f32
    linalg.yield %s : f32
  } -> tensor<32xf32>
  return %r0, %r1, %r2 : tensor<64xf32>, tensor<32xf32>, tensor<32xf32>
}

// -----

// A dynamic (`?`) row count (a bias gradient over the batch): full tiles of
// 8 rows, the column sums carried in registers, then the partial tile row
// by row, still on vectors.
// CHECK-LABEL: func.func @column_sum
// CHECK: %[[DIM:.+]] = tensor.dim %arg0, %c0
// CHECK: %[[FULL:.+]] = affine.apply #{{.+}}()[%[[DIM]]]
// CHECK: %[[ACC:.+]] = scf.for %{{.+}} = %c0 to %[[FULL]] step %c8 iter_args({{.*}}) -> (vector<64xf32>)
// CHECK: vector.transfer_read {{.*}} : tensor<8x64xf32>, vector<8x64xf32>
// CHECK: scf.for %{{.+}} = %[[FULL]] to %[[DIM]] step %c8 iter_args(%{{.+}} = %[[ACC]]) -> (vector<64xf32>)
// CHECK: scf.for {{.*}} step %c1 {{.*}} -> (vector<64xf32>)
// CHECK: vector.transfer_read {{.*}} : tensor<1x64xf32>, vector<1x64xf32>
// CHECK-NOT: linalg.generic
func.func @column_sum(%arg0: tensor<?x64xf32>) -> tensor<64xf32> {
  %cst = arith.constant 0.000000e+00 : f32
  %0 = tensor.empty() : tensor<64xf32>
  %1 = linalg.fill ins(%cst : f32) outs(%0 : tensor<64xf32>) -> tensor<64xf32>
  %2 = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d1)>], iterator_types = ["reduction", "parallel"]} ins(%arg0 : tensor<?x64xf32>) outs(%1 : tensor<64xf32>) {
  ^bb0(%in: f32, %out: f32):
    %3 = arith.addf %in, %out : f32
    linalg.yield %3 : f32
  } -> tensor<64xf32>
  return %2 : tensor<64xf32>
}

// -----

// Dynamic columns (the vectors): left alone, and said so.
// CHECK-LABEL: func.func @dynamic_columns
// CHECK: linalg.generic
func.func @dynamic_columns(%arg0: tensor<8x?xf32>, %arg1: tensor<?xf32>) -> tensor<?xf32> {
  // expected-remark @below {{lazymlir-vectorize-column-reductions: column reduction not vectorized: dynamic dimension (the columns)}}
  %2 = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d1)>], iterator_types = ["reduction", "parallel"]} ins(%arg0 : tensor<8x?xf32>) outs(%arg1 : tensor<?xf32>) {
  ^bb0(%in: f32, %out: f32):
    %3 = arith.addf %in, %out : f32
    linalg.yield %3 : f32
  } -> tensor<?xf32>
  return %2 : tensor<?xf32>
}
