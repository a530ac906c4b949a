// RUN: lazymlir-opt %s --split-input-file --lazymlir-mark-gemms="bf16-operands=1 bf16-results=1" | FileCheck %s
// RUN: lazymlir-opt %s --split-input-file --lazymlir-mark-gemms="bf16-operands=1" | FileCheck %s --check-prefix=OFF
// RUN: lazymlir-opt %s --split-input-file --lazymlir-mark-gemms="bf16-operands=1 bf16-results=1" --one-shot-bufferize="bufferize-function-boundaries function-boundary-type-conversion=identity-layout-map" --lazymlir-gemm-calls | FileCheck %s --check-prefix=CALL

// bf16 autocast's linear layer whose output is only read rounded to bf16
// (through a reshape, as a layer's batch x tokens rows are): the product
// yields bf16 into a bf16 zero fill, rounding its float32 sum, and the
// reader takes the bf16 value where it rounded. The call is the GEMM that
// stores bf16, told to overwrite C (the fill is gone).
// CHECK-LABEL: func.func @linear_rounded
// CHECK:       %[[F:.+]] = linalg.fill ins(%{{.+}} : bf16) outs(%{{.+}} : tensor<256x512xbf16>)
// CHECK:       %[[P:.+]] = linalg.generic
// CHECK-SAME:  outs(%[[F]] : tensor<256x512xbf16>)
// CHECK-SAME:  lazymlir.bf16_result
// CHECK-SAME:  lazymlir.gemm
// CHECK:       ^bb0(%{{.+}}: bf16, %{{.+}}: bf16, %[[C:.+]]: bf16):
// CHECK:       %[[CW:.+]] = arith.extf %[[C]] : bf16 to f32
// CHECK:       %[[S:.+]] = arith.addf %[[CW]], %{{.+}} : f32
// CHECK:       %[[R:.+]] = arith.truncf %[[S]] : f32 to bf16
// CHECK:       linalg.yield %[[R]] : bf16
// CHECK:       } -> tensor<256x512xbf16>
// CHECK:       %[[E:.+]] = tensor.expand_shape %[[P]] {{.+}} : tensor<256x512xbf16> into tensor<2x128x512xbf16>
// CHECK:       linalg.generic
// CHECK-SAME:  ins(%[[E]] : tensor<2x128x512xbf16>)
// CHECK:       ^bb0(%[[IN:.+]]: bf16, %{{.+}}: f32):
// CHECK-NOT:   arith.truncf
// CHECK:       arith.extf %[[IN]] : bf16 to f32
// OFF-LABEL:   func.func @linear_rounded
// OFF-NOT:     lazymlir.bf16_result
// OFF:         } -> tensor<256x512xf32>
// CALL-LABEL:  func.func @linear_rounded
// CALL-NOT:    linalg.fill
// CALL:        call @lazymlir_bf16gemm_bf16c_batched({{.+}}, %c0_i64{{[_0-9]*}})
// CALL-SAME:   256x512xbf16
// CALL-NOT:    call @lazymlir_bf16gemm_batched
#id = affine_map<(d0, d1) -> (d0, d1)>
#tr = affine_map<(d0, d1) -> (d1, d0)>
#id3 = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
func.func @linear_rounded(%x: tensor<256x128xf32>, %w: tensor<512x128xf32>) -> tensor<2x128x512xf32> {
  %z = arith.constant 0.0 : f32
  %e0 = tensor.empty() : tensor<256x128xf32>
  %xa = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%x : tensor<256x128xf32>) outs(%e0 : tensor<256x128xf32>) {
  ^bb0(%in: f32, %out: f32):
    %t = arith.truncf %in : f32 to bf16
    %w2 = arith.extf %t : bf16 to f32
    linalg.yield %w2 : f32
  } -> tensor<256x128xf32>
  %e1 = tensor.empty() : tensor<128x512xf32>
  %wa = linalg.generic {indexing_maps = [#tr, #id], iterator_types = ["parallel", "parallel"]}
      ins(%w : tensor<512x128xf32>) outs(%e1 : tensor<128x512xf32>) {
  ^bb0(%in: f32, %out: f32):
    %t = arith.truncf %in : f32 to bf16
    %w2 = arith.extf %t : bf16 to f32
    linalg.yield %w2 : f32
  } -> tensor<128x512xf32>
  %e2 = tensor.empty() : tensor<256x512xf32>
  %f = linalg.fill ins(%z : f32) outs(%e2 : tensor<256x512xf32>) -> tensor<256x512xf32>
  %r = linalg.matmul ins(%xa, %wa : tensor<256x128xf32>, tensor<128x512xf32>) outs(%f : tensor<256x512xf32>) -> tensor<256x512xf32>
  %r3 = tensor.expand_shape %r [[0, 1], [2]] output_shape [2, 128, 512] : tensor<256x512xf32> into tensor<2x128x512xf32>
  %e3 = tensor.empty() : tensor<2x128x512xf32>
  %g = linalg.generic {indexing_maps = [#id3, #id3], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%r3 : tensor<2x128x512xf32>) outs(%e3 : tensor<2x128x512xf32>) {
  ^bb0(%in: f32, %out: f32):
    %t = arith.truncf %in : f32 to bf16
    %w2 = arith.extf %t : bf16 to f32
    %m = arith.mulf %w2, %w2 : f32
    linalg.yield %m : f32
  } -> tensor<2x128x512xf32>
  return %g : tensor<2x128x512xf32>
}

// -----

// A reader that uses the float32 sum itself (a bias added before rounding)
// keeps the product's result float32.
// CHECK-LABEL: func.func @read_unrounded
// CHECK-NOT:   lazymlir.bf16_result
// CHECK:       } -> tensor<256x512xf32>
// CALL-LABEL:  func.func @read_unrounded
// CALL:        call @lazymlir_bf16gemm_batched
#id = affine_map<(d0, d1) -> (d0, d1)>
#tr = affine_map<(d0, d1) -> (d1, d0)>
#row = affine_map<(d0, d1) -> (d1)>
func.func @read_unrounded(%x: tensor<256x128xf32>, %w: tensor<512x128xf32>, %bias: tensor<512xf32>) -> tensor<256x512xbf16> {
  %z = arith.constant 0.0 : f32
  %e0 = tensor.empty() : tensor<256x128xf32>
  %xa = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%x : tensor<256x128xf32>) outs(%e0 : tensor<256x128xf32>) {
  ^bb0(%in: f32, %out: f32):
    %t = arith.truncf %in : f32 to bf16
    %w2 = arith.extf %t : bf16 to f32
    linalg.yield %w2 : f32
  } -> tensor<256x128xf32>
  %e1 = tensor.empty() : tensor<128x512xf32>
  %wa = linalg.generic {indexing_maps = [#tr, #id], iterator_types = ["parallel", "parallel"]}
      ins(%w : tensor<512x128xf32>) outs(%e1 : tensor<128x512xf32>) {
  ^bb0(%in: f32, %out: f32):
    %t = arith.truncf %in : f32 to bf16
    %w2 = arith.extf %t : bf16 to f32
    linalg.yield %w2 : f32
  } -> tensor<128x512xf32>
  %e2 = tensor.empty() : tensor<256x512xf32>
  %f = linalg.fill ins(%z : f32) outs(%e2 : tensor<256x512xf32>) -> tensor<256x512xf32>
  %r = linalg.matmul ins(%xa, %wa : tensor<256x128xf32>, tensor<128x512xf32>) outs(%f : tensor<256x512xf32>) -> tensor<256x512xf32>
  %e3 = tensor.empty() : tensor<256x512xbf16>
  %g = linalg.generic {indexing_maps = [#id, #row, #id], iterator_types = ["parallel", "parallel"]}
      ins(%r, %bias : tensor<256x512xf32>, tensor<512xf32>) outs(%e3 : tensor<256x512xbf16>) {
  ^bb0(%in: f32, %b: f32, %out: bf16):
    %s = arith.addf %in, %b : f32
    %t = arith.truncf %s : f32 to bf16
    linalg.yield %t : bf16
  } -> tensor<256x512xbf16>
  return %g : tensor<256x512xbf16>
}

// -----

// addmm under bf16 autocast: the one reader rounds the sum plus a bf16
// bias, widened. The bias, broadcast in bf16, becomes the product's init
// (the call adds to it: C += A x B, rounded once, the same sum), and the
// reader takes the bf16 result where it rounded.
// CHECK-LABEL: func.func @bias_then_rounded
// CHECK-SAME:  %[[BIAS:arg2]]: tensor<512xbf16>
// CHECK:       %[[INIT:.+]] = linalg.generic {{.+}} ins(%[[BIAS]] : tensor<512xbf16>) outs(%{{.+}} : tensor<256x512xbf16>)
// CHECK:       %[[P:.+]] = linalg.generic
// CHECK-SAME:  outs(%[[INIT]] : tensor<256x512xbf16>)
// CHECK-SAME:  lazymlir.bf16_result
// CHECK:       linalg.generic
// CHECK-SAME:  ins(%[[P]], %[[BIAS]] : tensor<256x512xbf16>, tensor<512xbf16>)
// CHECK:       ^bb0(%[[IN:.+]]: bf16, %{{.+}}: bf16, %{{.+}}: f32):
// CHECK-NOT:   arith.addf
// CHECK:       arith.extf %[[IN]] : bf16 to f32
// CALL-LABEL:  func.func @bias_then_rounded
// CALL:        linalg.generic
// CALL:        call @lazymlir_bf16gemm_bf16c_batched({{.+}}, %c1_i64{{[_0-9]*}})
#id = affine_map<(d0, d1) -> (d0, d1)>
#tr = affine_map<(d0, d1) -> (d1, d0)>
#row = affine_map<(d0, d1) -> (d1)>
func.func @bias_then_rounded(%x: tensor<256x128xf32>, %w: tensor<512x128xf32>, %bias: tensor<512xbf16>) -> tensor<256x512xf32> {
  %z = arith.constant 0.0 : f32
  %e0 = tensor.empty() : tensor<256x128xf32>
  %xa = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%x : tensor<256x128xf32>) outs(%e0 : tensor<256x128xf32>) {
  ^bb0(%in: f32, %out: f32):
    %t = arith.truncf %in : f32 to bf16
    %w2 = arith.extf %t : bf16 to f32
    linalg.yield %w2 : f32
  } -> tensor<256x128xf32>
  %e1 = tensor.empty() : tensor<128x512xf32>
  %wa = linalg.generic {indexing_maps = [#tr, #id], iterator_types = ["parallel", "parallel"]}
      ins(%w : tensor<512x128xf32>) outs(%e1 : tensor<128x512xf32>) {
  ^bb0(%in: f32, %out: f32):
    %t = arith.truncf %in : f32 to bf16
    %w2 = arith.extf %t : bf16 to f32
    linalg.yield %w2 : f32
  } -> tensor<128x512xf32>
  %e2 = tensor.empty() : tensor<256x512xf32>
  %f = linalg.fill ins(%z : f32) outs(%e2 : tensor<256x512xf32>) -> tensor<256x512xf32>
  %r = linalg.matmul ins(%xa, %wa : tensor<256x128xf32>, tensor<128x512xf32>) outs(%f : tensor<256x512xf32>) -> tensor<256x512xf32>
  %e3 = tensor.empty() : tensor<256x512xf32>
  %g = linalg.generic {indexing_maps = [#id, #row, #id], iterator_types = ["parallel", "parallel"]}
      ins(%r, %bias : tensor<256x512xf32>, tensor<512xbf16>) outs(%e3 : tensor<256x512xf32>) {
  ^bb0(%in: f32, %b: bf16, %out: f32):
    %bw = arith.extf %b : bf16 to f32
    %s = arith.addf %in, %bw : f32
    %t = arith.truncf %s : f32 to bf16
    %w2 = arith.extf %t : bf16 to f32
    %m = arith.mulf %w2, %w2 : f32
    linalg.yield %m : f32
  } -> tensor<256x512xf32>
  return %g : tensor<256x512xf32>
}

// -----

// The bias as the fused graph has it: the float32 parameter rounded to bf16
// in the reader's own body. The rounding is computed again, into the init.
// CHECK-LABEL: func.func @bias_rounded_in_body
// CHECK-SAME:  %[[BIAS:arg2]]: tensor<512xf32>
// CHECK:       %[[INIT:.+]] = linalg.generic {{.+}} ins(%[[BIAS]] : tensor<512xf32>) outs(%{{.+}} : tensor<256x512xbf16>)
// CHECK-NEXT:  ^bb0(%[[B:.+]]: f32, %{{.+}}: bf16):
// CHECK-NEXT:  %[[R:.+]] = arith.truncf %[[B]] : f32 to bf16
// CHECK-NEXT:  linalg.yield %[[R]] : bf16
// CHECK:       linalg.generic
// CHECK-SAME:  outs(%[[INIT]] : tensor<256x512xbf16>)
// CHECK-SAME:  lazymlir.bf16_result
#id = affine_map<(d0, d1) -> (d0, d1)>
#tr = affine_map<(d0, d1) -> (d1, d0)>
#row = affine_map<(d0, d1) -> (d1)>
func.func @bias_rounded_in_body(%x: tensor<256x128xf32>, %w: tensor<512x128xf32>, %bias: tensor<512xf32>) -> tensor<256x512xbf16> {
  %z = arith.constant 0.0 : f32
  %e0 = tensor.empty() : tensor<256x128xf32>
  %xa = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%x : tensor<256x128xf32>) outs(%e0 : tensor<256x128xf32>) {
  ^bb0(%in: f32, %out: f32):
    %t = arith.truncf %in : f32 to bf16
    %w2 = arith.extf %t : bf16 to f32
    linalg.yield %w2 : f32
  } -> tensor<256x128xf32>
  %e1 = tensor.empty() : tensor<128x512xf32>
  %wa = linalg.generic {indexing_maps = [#tr, #id], iterator_types = ["parallel", "parallel"]}
      ins(%w : tensor<512x128xf32>) outs(%e1 : tensor<128x512xf32>) {
  ^bb0(%in: f32, %out: f32):
    %t = arith.truncf %in : f32 to bf16
    %w2 = arith.extf %t : bf16 to f32
    linalg.yield %w2 : f32
  } -> tensor<128x512xf32>
  %e2 = tensor.empty() : tensor<256x512xf32>
  %f = linalg.fill ins(%z : f32) outs(%e2 : tensor<256x512xf32>) -> tensor<256x512xf32>
  %r = linalg.matmul ins(%xa, %wa : tensor<256x128xf32>, tensor<128x512xf32>) outs(%f : tensor<256x512xf32>) -> tensor<256x512xf32>
  %e3 = tensor.empty() : tensor<256x512xbf16>
  %g = linalg.generic {indexing_maps = [#id, #row, #id], iterator_types = ["parallel", "parallel"]}
      ins(%r, %bias : tensor<256x512xf32>, tensor<512xf32>) outs(%e3 : tensor<256x512xbf16>) {
  ^bb0(%in: f32, %b: f32, %out: bf16):
    %bt = arith.truncf %b : f32 to bf16
    %bw = arith.extf %bt : bf16 to f32
    %s = arith.addf %in, %bw : f32
    %t = arith.truncf %s : f32 to bf16
    linalg.yield %t : bf16
  } -> tensor<256x512xbf16>
  return %g : tensor<256x512xbf16>
}
