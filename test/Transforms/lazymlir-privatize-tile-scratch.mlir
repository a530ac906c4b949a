// RUN: lazymlir-opt %s --pass-pipeline="builtin.module(func.func(lazymlir-privatize-tile-scratch))" | FileCheck %s

// A tile's scratch (an empty 1x64 tensor) that CSE merged with an identical
// empty tensor before the parallel tile loop: the use inside the loop gets a
// clone of its own (one buffer per iteration once bufferized); the use before
// the loop keeps the original. A loop not marked parallel is left alone.
// CHECK-LABEL: func.func @scratch
// CHECK: %[[OUTER:.*]] = tensor.empty() : tensor<1x64xf32>
// CHECK: linalg.fill ins(%{{.*}}) outs(%[[OUTER]] : tensor<1x64xf32>)
// CHECK: scf.for
// CHECK: %[[INNER:.*]] = tensor.empty() : tensor<1x64xf32>
// CHECK: linalg.fill ins(%{{.*}}) outs(%[[INNER]] : tensor<1x64xf32>)
// CHECK: lazymlir.parallel_tiles
// CHECK: scf.for
// CHECK-NOT: tensor.empty
// CHECK: linalg.fill ins(%{{.*}}) outs(%[[OUTER]] : tensor<1x64xf32>)
func.func @scratch(%x: tensor<4x64xf32>) -> (tensor<1x64xf32>, tensor<4x64xf32>, tensor<4x64xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c4 = arith.constant 4 : index
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<1x64xf32>
  %before = linalg.fill ins(%zero : f32) outs(%e : tensor<1x64xf32>) -> tensor<1x64xf32>
  %r = scf.for %i = %c0 to %c4 step %c1 iter_args(%acc = %x) -> (tensor<4x64xf32>) {
    %t = linalg.fill ins(%zero : f32) outs(%e : tensor<1x64xf32>) -> tensor<1x64xf32>
    %u = tensor.insert_slice %t into %acc[%i, 0] [1, 64] [1, 1] : tensor<1x64xf32> into tensor<4x64xf32>
    scf.yield %u : tensor<4x64xf32>
  } {lazymlir.parallel_tiles = 256 : i64}
  %s = scf.for %i = %c0 to %c4 step %c1 iter_args(%acc = %x) -> (tensor<4x64xf32>) {
    %t = linalg.fill ins(%zero : f32) outs(%e : tensor<1x64xf32>) -> tensor<1x64xf32>
    %u = tensor.insert_slice %t into %acc[%i, 0] [1, 64] [1, 1] : tensor<1x64xf32> into tensor<4x64xf32>
    scf.yield %u : tensor<4x64xf32>
  }
  return %before, %r, %s : tensor<1x64xf32>, tensor<4x64xf32>, tensor<4x64xf32>
}
