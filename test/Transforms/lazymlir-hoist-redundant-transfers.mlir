// RUN: lazymlir-opt %s --split-input-file --pass-pipeline="builtin.module(func.func(lazymlir-hoist-redundant-transfers))" | FileCheck %s

// The accumulator of a bufferized contraction tile: read before the K loop,
// carried in a register, written once after it.
// CHECK-LABEL: func.func @accumulator
// CHECK-SAME: (%[[A:.+]]: memref<8x64xf32>, %[[B:.+]]: memref<64x32xf32>, %[[C:.+]]: memref<8x32xf32>)
// CHECK: %[[INIT:.+]] = vector.transfer_read %[[C]]
// CHECK: %[[SUM:.+]] = scf.for {{.*}} iter_args(%[[ACC:.+]] = %[[INIT]]) -> (vector<8x32xf32>)
// CHECK-NOT: vector.transfer_read %[[C]]
// CHECK: vector.contract {{.*}} %[[ACC]]
// CHECK-NOT: vector.transfer_write
// CHECK: scf.yield
// CHECK: vector.transfer_write %[[SUM]], %[[C]]
#a = affine_map<(m, n, k) -> (m, k)>
#b = affine_map<(m, n, k) -> (k, n)>
#c = affine_map<(m, n, k) -> (m, n)>
func.func @accumulator(%A: memref<8x64xf32>, %B: memref<64x32xf32>, %C: memref<8x32xf32>) {
  %c0 = arith.constant 0 : index
  %c8 = arith.constant 8 : index
  %c64 = arith.constant 64 : index
  %pad = arith.constant 0.0 : f32
  scf.for %k = %c0 to %c64 step %c8 {
    %a = vector.transfer_read %A[%c0, %k], %pad {in_bounds = [true, true]} : memref<8x64xf32>, vector<8x8xf32>
    %b = vector.transfer_read %B[%k, %c0], %pad {in_bounds = [true, true]} : memref<64x32xf32>, vector<8x32xf32>
    %acc = vector.transfer_read %C[%c0, %c0], %pad {in_bounds = [true, true]} : memref<8x32xf32>, vector<8x32xf32>
    %r = vector.contract {indexing_maps = [#a, #b, #c], iterator_types = ["parallel", "parallel", "reduction"], kind = #vector.kind<add>} %a, %b, %acc : vector<8x8xf32>, vector<8x32xf32> into vector<8x32xf32>
    vector.transfer_write %r, %C[%c0, %c0] {in_bounds = [true, true]} : vector<8x32xf32>, memref<8x32xf32>
  }
  return
}
