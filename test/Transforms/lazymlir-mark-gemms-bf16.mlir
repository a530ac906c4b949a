// RUN: lazymlir-opt %s --split-input-file --lazymlir-mark-gemms="bf16-operands=1" | FileCheck %s
// RUN: lazymlir-opt %s --split-input-file --lazymlir-mark-gemms | FileCheck %s --check-prefix=OFF
// RUN: lazymlir-opt %s --split-input-file --lazymlir-mark-gemms="bf16-operands=1" --one-shot-bufferize="bufferize-function-boundaries function-boundary-type-conversion=identity-layout-map" --lazymlir-gemm-calls | FileCheck %s --check-prefix=CALL

// bf16 autocast's linear layer, as torch-mlir lowers it and the fusion
// leaves it: x and W rounded to bf16 and widened back (one generic each,
// W transposed), then a float32 matmul. With bf16-operands the producers
// yield the bf16 values and the (generalized) matmul widens them.
// CHECK-LABEL: func.func @linear
// CHECK:       %[[X:.+]] = linalg.generic
// CHECK-SAME:  outs(%{{.+}} : tensor<256x128xbf16>)
// CHECK:       %[[T:.+]] = arith.truncf
// CHECK-NOT:   arith.extf
// CHECK:       linalg.yield %[[T]] : bf16
// CHECK:       %[[W:.+]] = linalg.generic
// CHECK-SAME:  outs(%{{.+}} : tensor<128x512xbf16>)
// CHECK:       linalg.generic
// CHECK-SAME:  ins(%[[X]], %[[W]] : tensor<256x128xbf16>, tensor<128x512xbf16>)
// CHECK-SAME:  lazymlir.gemm
// CHECK:       ^bb0(%[[A:.+]]: bf16, %[[B:.+]]: bf16, %{{.+}}: f32):
// CHECK-DAG:   arith.extf %[[A]] : bf16 to f32
// CHECK-DAG:   arith.extf %[[B]] : bf16 to f32
// OFF-LABEL:   func.func @linear
// OFF:         linalg.matmul {lazymlir.gemm}
// OFF-SAME:    tensor<256x128xf32>, tensor<128x512xf32>
// CALL-LABEL:  func.func @linear
// CALL:        call @lazymlir_bf16gemm_batched
// CALL-NOT:    call @lazymlir_sgemm_batched
#id = affine_map<(d0, d1) -> (d0, d1)>
#tr = affine_map<(d0, d1) -> (d1, d0)>
func.func @linear(%x: tensor<256x128xf32>, %w: tensor<512x128xf32>) -> tensor<256x512xf32> {
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
  return %r : tensor<256x512xf32>
}

// -----

// Only one operand widens bf16 values: both stay float32 (the bf16 kernel
// takes A and B in bf16).
// CHECK-LABEL: func.func @one_side
// CHECK:       linalg.matmul {lazymlir.gemm}
// CHECK-SAME:  tensor<256x128xf32>, tensor<128x512xf32>
// CALL-LABEL:  func.func @one_side
// CALL:        call @lazymlir_sgemm_batched
#id = affine_map<(d0, d1) -> (d0, d1)>
func.func @one_side(%x: tensor<256x128xf32>, %w: tensor<128x512xf32>) -> tensor<256x512xf32> {
  %z = arith.constant 0.0 : f32
  %e0 = tensor.empty() : tensor<256x128xf32>
  %xa = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%x : tensor<256x128xf32>) outs(%e0 : tensor<256x128xf32>) {
  ^bb0(%in: f32, %out: f32):
    %t = arith.truncf %in : f32 to bf16
    %w2 = arith.extf %t : bf16 to f32
    linalg.yield %w2 : f32
  } -> tensor<256x128xf32>
  %e2 = tensor.empty() : tensor<256x512xf32>
  %f = linalg.fill ins(%z : f32) outs(%e2 : tensor<256x512xf32>) -> tensor<256x512xf32>
  %r = linalg.matmul ins(%xa, %w : tensor<256x128xf32>, tensor<128x512xf32>) outs(%f : tensor<256x512xf32>) -> tensor<256x512xf32>
  return %r : tensor<256x512xf32>
}

// -----

// The widened operand is also returned (another reader, a bias gradient's
// sum, needs its float32 values): the product reads a bf16 copy of its
// producer, the float32 one stays for the other reader.
// CHECK-LABEL: func.func @shared
// CHECK:       %[[X:.+]] = linalg.generic
// CHECK-SAME:  outs(%{{.+}} : tensor<256x128xbf16>)
// CHECK:       %[[F32:.+]] = linalg.generic
// CHECK-SAME:  outs(%{{.+}} : tensor<256x128xf32>)
// CHECK:       arith.extf
// CHECK:       %[[W:.+]] = linalg.generic
// CHECK-SAME:  outs(%{{.+}} : tensor<128x512xbf16>)
// CHECK:       %[[R:.+]] = linalg.generic
// CHECK-SAME:  ins(%[[X]], %[[W]] : tensor<256x128xbf16>, tensor<128x512xbf16>)
// CHECK-SAME:  lazymlir.gemm
// CHECK:       return %[[R]], %[[F32]]
#id = affine_map<(d0, d1) -> (d0, d1)>
func.func @shared(%x: tensor<256x128xf32>, %w: tensor<128x512xf32>) -> (tensor<256x512xf32>, tensor<256x128xf32>) {
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
  %wa = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%w : tensor<128x512xf32>) outs(%e1 : tensor<128x512xf32>) {
  ^bb0(%in: f32, %out: f32):
    %t = arith.truncf %in : f32 to bf16
    %w2 = arith.extf %t : bf16 to f32
    linalg.yield %w2 : f32
  } -> tensor<128x512xf32>
  %e2 = tensor.empty() : tensor<256x512xf32>
  %f = linalg.fill ins(%z : f32) outs(%e2 : tensor<256x512xf32>) -> tensor<256x512xf32>
  %r = linalg.matmul ins(%xa, %wa : tensor<256x128xf32>, tensor<128x512xf32>) outs(%f : tensor<256x512xf32>) -> tensor<256x512xf32>
  return %r, %xa : tensor<256x512xf32>, tensor<256x128xf32>
}

// -----

// A weight's gradient under bf16 autocast: the layer's input (batch x tokens
// x features, rounded to bf16 and widened back) is collapsed to rows before
// the product. The reshape is looked through: a narrowed copy of its
// producer, collapsed alike, is what the contraction reads in bf16; the
// float32 collapse and its producer, read by nothing else, go. The output
// gradient's transposed copy only widens a bf16 value: the contraction
// reads that value in place, transposed by its indexing map, and the copy
// goes.
// CHECK-LABEL: func.func @through_collapse
// CHECK-SAME:  (%[[DY:arg0]]: tensor<256x512xbf16>
// CHECK-NOT:   tensor<512x256x
// CHECK:       %[[X:.+]] = linalg.generic {{.*}}outs(%{{.+}} : tensor<4x64x128xbf16>)
// CHECK-NOT:   tensor<4x64x128xf32>) {
// CHECK:       %[[C:.+]] = tensor.collapse_shape %[[X]] {{\[}}[0, 1], [2]] : tensor<4x64x128xbf16> into tensor<256x128xbf16>
// CHECK-NOT:   tensor.collapse_shape
// CHECK:       linalg.generic
// CHECK-SAME:  indexing_maps = [#[[AT:map[0-9]*]], #{{.+}}, #{{.+}}]
// CHECK-SAME:  ins(%[[DY]], %[[C]] : tensor<256x512xbf16>, tensor<256x128xbf16>)
// CHECK-SAME:  lazymlir.gemm
// OFF-LABEL:   func.func @through_collapse
// OFF:         linalg.matmul {lazymlir.gemm}
// OFF-SAME:    tensor<512x256xf32>, tensor<256x128xf32>
// CALL-LABEL:  func.func @through_collapse
// CALL:        call @lazymlir_bf16gemm_batched
// CALL-NOT:    call @lazymlir_sgemm_batched
#id = affine_map<(d0, d1) -> (d0, d1)>
#tr = affine_map<(d0, d1) -> (d1, d0)>
#id3 = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
func.func @through_collapse(%dy: tensor<256x512xbf16>, %x: tensor<4x64x128xf32>) -> tensor<512x128xf32> {
  %z = arith.constant 0.0 : f32
  %e0 = tensor.empty() : tensor<512x256xf32>
  %dya = linalg.generic {indexing_maps = [#tr, #id], iterator_types = ["parallel", "parallel"]}
      ins(%dy : tensor<256x512xbf16>) outs(%e0 : tensor<512x256xf32>) {
  ^bb0(%in: bf16, %out: f32):
    %w = arith.extf %in : bf16 to f32
    linalg.yield %w : f32
  } -> tensor<512x256xf32>
  %e1 = tensor.empty() : tensor<4x64x128xf32>
  %xa = linalg.generic {indexing_maps = [#id3, #id3], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%x : tensor<4x64x128xf32>) outs(%e1 : tensor<4x64x128xf32>) {
  ^bb0(%in: f32, %out: f32):
    %t = arith.truncf %in : f32 to bf16
    %w = arith.extf %t : bf16 to f32
    linalg.yield %w : f32
  } -> tensor<4x64x128xf32>
  %rows = tensor.collapse_shape %xa [[0, 1], [2]] : tensor<4x64x128xf32> into tensor<256x128xf32>
  %e2 = tensor.empty() : tensor<512x128xf32>
  %f = linalg.fill ins(%z : f32) outs(%e2 : tensor<512x128xf32>) -> tensor<512x128xf32>
  %r = linalg.matmul ins(%dya, %rows : tensor<512x256xf32>, tensor<256x128xf32>) outs(%f : tensor<512x128xf32>) -> tensor<512x128xf32>
  return %r : tensor<512x128xf32>
}

// -----

// A transposed widening copy read in place by one product and, through a
// reshape, narrowed (copied) for another: the copy goes once, with its
// reshape (erasing it again crashed lazymlir-opt: BERT's bf16 graph).
// CHECK-LABEL: func.func @folded_and_reshaped
// CHECK-SAME:  (%[[DY:arg0]]: tensor<256x512xbf16>
// CHECK:       linalg.generic {{.+}} ins(%[[DY]], %{{.+}} : tensor<256x512xbf16>, tensor<256x128xbf16>)
// CHECK-SAME:  lazymlir.gemm
// CHECK:       tensor.expand_shape %{{.+}} : tensor<512x256xbf16> into tensor<2x256x256xbf16>
// CHECK:       linalg.generic
// CHECK-SAME:  ins(%{{.+}}, %{{.+}} : tensor<2x256x256xbf16>, tensor<2x256x64xbf16>)
// CHECK-SAME:  lazymlir.gemm
// CHECK-NOT:   tensor<512x256xf32>
#id = affine_map<(d0, d1) -> (d0, d1)>
#tr = affine_map<(d0, d1) -> (d1, d0)>
#id3 = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
func.func @folded_and_reshaped(%dy: tensor<256x512xbf16>, %w: tensor<256x128xbf16>, %v: tensor<2x256x64xbf16>) -> (tensor<512x128xf32>, tensor<2x256x64xf32>) {
  %z = arith.constant 0.0 : f32
  %e0 = tensor.empty() : tensor<512x256xf32>
  %dya = linalg.generic {indexing_maps = [#tr, #id], iterator_types = ["parallel", "parallel"]}
      ins(%dy : tensor<256x512xbf16>) outs(%e0 : tensor<512x256xf32>) {
  ^bb0(%in: bf16, %out: f32):
    %x = arith.extf %in : bf16 to f32
    linalg.yield %x : f32
  } -> tensor<512x256xf32>
  %e1 = tensor.empty() : tensor<256x128xf32>
  %wa = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%w : tensor<256x128xbf16>) outs(%e1 : tensor<256x128xf32>) {
  ^bb0(%in: bf16, %out: f32):
    %x = arith.extf %in : bf16 to f32
    linalg.yield %x : f32
  } -> tensor<256x128xf32>
  %e2 = tensor.empty() : tensor<512x128xf32>
  %f = linalg.fill ins(%z : f32) outs(%e2 : tensor<512x128xf32>) -> tensor<512x128xf32>
  %r = linalg.matmul ins(%dya, %wa : tensor<512x256xf32>, tensor<256x128xf32>) outs(%f : tensor<512x128xf32>) -> tensor<512x128xf32>
  %b = tensor.expand_shape %dya [[0, 1], [2]] output_shape [2, 256, 256] : tensor<512x256xf32> into tensor<2x256x256xf32>
  %e3 = tensor.empty() : tensor<2x256x64xf32>
  %va = linalg.generic {indexing_maps = [#id3, #id3], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%v : tensor<2x256x64xbf16>) outs(%e3 : tensor<2x256x64xf32>) {
  ^bb0(%in: bf16, %out: f32):
    %x = arith.extf %in : bf16 to f32
    linalg.yield %x : f32
  } -> tensor<2x256x64xf32>
  %f2 = linalg.fill ins(%z : f32) outs(%e3 : tensor<2x256x64xf32>) -> tensor<2x256x64xf32>
  %r2 = linalg.batch_matmul ins(%b, %va : tensor<2x256x256xf32>, tensor<2x256x64xf32>) outs(%f2 : tensor<2x256x64xf32>) -> tensor<2x256x64xf32>
  return %r, %r2 : tensor<512x128xf32>, tensor<2x256x64xf32>
}
