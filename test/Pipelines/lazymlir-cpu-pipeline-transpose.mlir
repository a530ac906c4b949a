// RUN: lazymlir-opt %s --lazymlir-cpu-pipeline | FileCheck %s

// A weight transpose (F.linear's w.t()) compiles to 16x16 register blocks
// whose transposes are shuffles (AVX-512 unpack/permute), not 256 element
// extracts and inserts.
// CHECK: llvm.func @main
// CHECK: llvm.func @__lazymlir_k_
// CHECK-NOT: llvm.extractelement
// CHECK: llvm.shufflevector
// CHECK-NOT: llvm.extractelement
func.func @main(%w: tensor<128x256xf32>) -> tensor<256x128xf32> {
  %e = tensor.empty() : tensor<256x128xf32>
  %r = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d1, d0)>, affine_map<(d0, d1) -> (d0, d1)>], iterator_types = ["parallel", "parallel"]} ins(%w : tensor<128x256xf32>) outs(%e : tensor<256x128xf32>) {
  ^bb0(%in: f32, %out: f32):
    linalg.yield %in : f32
  } -> tensor<256x128xf32>
  return %r : tensor<256x128xf32>
}
