// RUN: lazymlir-opt %s --lazymlir-cpu-pipeline | FileCheck %s

// An elementwise kernel under bf16 autocast: every op's result rounded to
// bf16 and widened again. The roundings reach LLVM as integer arithmetic
// (lazymlir-expand-bf16-conversions), never as fptrunc/fpext on bfloat,
// which LLVM lowers to a call per element (__truncsfbf2) on hosts without
// AVX512-BF16.
// CHECK-LABEL: llvm.func @__lazymlir_k_
// CHECK-NOT:   llvm.fptrunc {{.*}} to bf16
// CHECK-NOT:   llvm.fpext {{.*}} : bf16
// CHECK:       llvm.bitcast {{.*}} : bf16 to i16
// CHECK:       llvm.lshr
// CHECK:       llvm.bitcast {{.*}} : i16 to bf16
// CHECK-NOT:   llvm.fptrunc {{.*}} to bf16
// CHECK-NOT:   llvm.fpext {{.*}} : bf16
#map = affine_map<(d0, d1) -> (d0, d1)>
func.func @main(%x: tensor<64x256xbf16>) -> tensor<64x256xbf16> {
  %half = arith.constant 5.000000e-01 : f32
  %e = tensor.empty() : tensor<64x256xbf16>
  %0 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]} ins(%x : tensor<64x256xbf16>) outs(%e : tensor<64x256xbf16>) {
  ^bb0(%in: bf16, %out: bf16):
    %a = arith.extf %in : bf16 to f32
    %b = arith.mulf %a, %a : f32
    %c = arith.truncf %b : f32 to bf16
    %d = arith.extf %c : bf16 to f32
    %f = arith.mulf %d, %half : f32
    %g = arith.truncf %f : f32 to bf16
    linalg.yield %g : bf16
  } -> tensor<64x256xbf16>
  return %0 : tensor<64x256xbf16>
}
