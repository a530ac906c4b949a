// RUN: lazymlir-opt %s --lazymlir-cpu-pipeline="threads=1" 2>&1 | FileCheck %s

// x ** 3 with an integer exponent, as torch-mlir lowers aten.pow with an
// int: math.fpowi. It became llvm.intr.powi (a libm-style call per
// element), and in a fused kernel that was vectorized, llvm.intr.powi with
// a vector<16xi64> exponent, which the LLVM dialect rejects (the whole
// graph then ran eagerly). The pipeline expands it into multiplications.
// CHECK-NOT: error
// CHECK-NOT: powi
// CHECK: llvm.fmul
// CHECK-NOT: powi

#map = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
func.func @main(%arg0: tensor<4x16x50xf32>) -> tensor<4x16x50xf32> {
  %c3 = arith.constant 3 : i64
  %e = tensor.empty() : tensor<4x16x50xf32>
  %r = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%arg0 : tensor<4x16x50xf32>) outs(%e : tensor<4x16x50xf32>) {
  ^bb0(%in: f32, %out: f32):
    %p = math.fpowi %in, %c3 : f32, i64
    linalg.yield %p : f32
  } -> tensor<4x16x50xf32>
  return %r : tensor<4x16x50xf32>
}
