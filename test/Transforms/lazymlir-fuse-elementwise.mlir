// RUN: lazymlir-opt %s --split-input-file --pass-pipeline="builtin.module(func.func(lazymlir-fuse-elementwise))" | FileCheck %s
// RUN: lazymlir-opt %s --split-input-file --pass-pipeline="builtin.module(func.func(lazymlir-fuse-elementwise{max-recompute-ops=0}))" | FileCheck %s --check-prefix=NORECOMPUTE
// RUN: lazymlir-opt %s --split-input-file --pass-pipeline="builtin.module(func.func(lazymlir-fuse-elementwise{propagate-reshapes=0}))" | FileCheck %s --check-prefix=NORESHAPE
// RUN: lazymlir-opt %s --split-input-file --pass-pipeline="builtin.module(func.func(lazymlir-fuse-elementwise{runtime-gemms=1}))" | FileCheck %s --check-prefix=GEMM

#map = affine_map<(d0, d1) -> (d0, d1)>
// A chain through a named broadcast: one loop nest reading the 1-D operand
// through a broadcasting map; no intermediate tensor survives.
// CHECK-DAG: #[[$ID:.+]] = affine_map<(d0, d1) -> (d0, d1)>
// CHECK-DAG: #[[$ROW:.+]] = affine_map<(d0, d1) -> (d1)>
// CHECK-LABEL: func.func @chain_with_broadcast
// CHECK-SAME: (%[[X:.+]]: tensor<4x8xf32>, %[[Y:.+]]: tensor<8xf32>)
// CHECK-NOT: linalg.broadcast
// CHECK: %[[R:.+]] = linalg.generic {indexing_maps = [#[[$ID]], #[[$ROW]], #[[$ID]]]
// CHECK-SAME: ins(%[[X]], %[[Y]] : tensor<4x8xf32>, tensor<8xf32>)
// CHECK: arith.mulf
// CHECK: math.exp
// CHECK: arith.negf
// CHECK-NOT: linalg.generic
// CHECK: return %[[R]]
func.func @chain_with_broadcast(%arg0: tensor<4x8xf32>, %arg1: tensor<8xf32>) -> tensor<4x8xf32> {
  %0 = tensor.empty() : tensor<4x8xf32>
  %b = linalg.broadcast ins(%arg1 : tensor<8xf32>) outs(%0 : tensor<4x8xf32>) dimensions = [0]
  %1 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel"]} ins(%arg0, %b : tensor<4x8xf32>, tensor<4x8xf32>) outs(%0 : tensor<4x8xf32>) {
  ^bb0(%in: f32, %in_0: f32, %out: f32):
    %2 = arith.mulf %in, %in_0 : f32
    linalg.yield %2 : f32
  } -> tensor<4x8xf32>
  %2 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]} ins(%1 : tensor<4x8xf32>) outs(%0 : tensor<4x8xf32>) {
  ^bb0(%in: f32, %out: f32):
    %3 = math.exp %in : f32
    linalg.yield %3 : f32
  } -> tensor<4x8xf32>
  %3 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]} ins(%2 : tensor<4x8xf32>) outs(%0 : tensor<4x8xf32>) {
  ^bb0(%in: f32, %out: f32):
    %4 = arith.negf %in : f32
    linalg.yield %4 : f32
  } -> tensor<4x8xf32>
  return %3 : tensor<4x8xf32>
}

// -----

#map1 = affine_map<(d0) -> (d0)>
#map2 = affine_map<(d0, d1) -> (d0, d1)>
// A reshape between two elementwise ops does not split the chain: it is
// propagated to the function input. Without propagate-reshapes it stays
// between the two ops, which are not fused.
// CHECK-LABEL: func.func @reshape_in_the_middle
// CHECK: tensor.expand_shape
// CHECK: linalg.generic
// CHECK: arith.addf
// CHECK: arith.mulf
// CHECK-NOT: linalg.generic
// NORESHAPE-LABEL: func.func @reshape_in_the_middle
// NORESHAPE: linalg.generic
// NORESHAPE: arith.addf
// NORESHAPE: tensor.expand_shape
// NORESHAPE: linalg.generic
// NORESHAPE: arith.mulf
func.func @reshape_in_the_middle(%arg0: tensor<32xf32>) -> tensor<4x8xf32> {
  %cst = arith.constant 2.0 : f32
  %e = tensor.empty() : tensor<32xf32>
  %0 = linalg.generic {indexing_maps = [#map1, #map1], iterator_types = ["parallel"]} ins(%arg0 : tensor<32xf32>) outs(%e : tensor<32xf32>) {
  ^bb0(%in: f32, %out: f32):
    %1 = arith.addf %in, %cst : f32
    linalg.yield %1 : f32
  } -> tensor<32xf32>
  %r = tensor.expand_shape %0 [[0, 1]] output_shape [4, 8] : tensor<32xf32> into tensor<4x8xf32>
  %e2 = tensor.empty() : tensor<4x8xf32>
  %2 = linalg.generic {indexing_maps = [#map2, #map2], iterator_types = ["parallel", "parallel"]} ins(%r : tensor<4x8xf32>) outs(%e2 : tensor<4x8xf32>) {
  ^bb0(%in: f32, %out: f32):
    %3 = arith.mulf %in, %cst : f32
    linalg.yield %3 : f32
  } -> tensor<4x8xf32>
  return %2 : tensor<4x8xf32>
}

// -----

#map = affine_map<(d0) -> (d0)>
// A producer whose result the graph returns, read element for element by an
// elementwise consumer: one op computes both and returns both (nothing is
// recomputed, so max-recompute-ops does not matter).
// CHECK-LABEL: func.func @multi_use_producer
// CHECK: %[[R:.+]]:2 = linalg.generic
// CHECK: %[[P:.+]] = arith.addf
// CHECK: %[[E:.+]] = math.exp %[[P]]
// CHECK: linalg.yield %[[P]], %[[E]]
// CHECK-NOT: linalg.generic
// CHECK: return %[[R]]#0, %[[R]]#1
// NORECOMPUTE-LABEL: func.func @multi_use_producer
// NORECOMPUTE: %[[R:.+]]:2 = linalg.generic
// NORECOMPUTE-NOT: linalg.generic
// NORECOMPUTE: return %[[R]]#0, %[[R]]#1
func.func @multi_use_producer(%arg0: tensor<16xf32>) -> (tensor<16xf32>, tensor<16xf32>) {
  %e = tensor.empty() : tensor<16xf32>
  %0 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel"]} ins(%arg0 : tensor<16xf32>) outs(%e : tensor<16xf32>) {
  ^bb0(%in: f32, %out: f32):
    %1 = arith.addf %in, %in : f32
    linalg.yield %1 : f32
  } -> tensor<16xf32>
  %2 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel"]} ins(%0 : tensor<16xf32>) outs(%e : tensor<16xf32>) {
  ^bb0(%in: f32, %out: f32):
    %3 = math.exp %in : f32
    linalg.yield %3 : f32
  } -> tensor<16xf32>
  return %0, %2 : tensor<16xf32>, tensor<16xf32>
}

// -----

#map = affine_map<(d0) -> (d0)>
// A kept producer that the consumer reads through two operands is left to
// upstream's fusion (operand by operand): fused keeping its result, the
// second operand would read the fused op's own result (this failed
// verification: operand does not dominate its use).
// CHECK-LABEL: func.func @read_twice
// CHECK: %[[R:.+]]:2 = linalg.generic
// CHECK: arith.mulf
// CHECK-NOT: linalg.generic
// CHECK: return %[[R]]#0, %[[R]]#1
func.func @read_twice(%arg0: tensor<16xf32>) -> (tensor<16xf32>, tensor<16xf32>) {
  %e = tensor.empty() : tensor<16xf32>
  %0 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel"]} ins(%arg0 : tensor<16xf32>) outs(%e : tensor<16xf32>) {
  ^bb0(%in: f32, %out: f32):
    %1 = arith.addf %in, %in : f32
    linalg.yield %1 : f32
  } -> tensor<16xf32>
  %2 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel"]} ins(%0, %0 : tensor<16xf32>, tensor<16xf32>) outs(%e : tensor<16xf32>) {
  ^bb0(%a: f32, %b: f32, %out: f32):
    %3 = arith.mulf %a, %b : f32
    linalg.yield %3 : f32
  } -> tensor<16xf32>
  return %0, %2 : tensor<16xf32>, tensor<16xf32>
}

// -----

#map = affine_map<(d0) -> (d0)>
// A cheap producer (one op) read by two elementwise consumers and nothing
// else: each consumer recomputes it and it goes. With max-recompute-ops=0 it
// stays a kernel of its own, read by both.
// CHECK-LABEL: func.func @two_consumers
// CHECK-COUNT-2: linalg.generic
// CHECK-NOT: linalg.generic
// CHECK: return
// NORECOMPUTE-LABEL: func.func @two_consumers
// NORECOMPUTE: %[[P:.+]] = linalg.generic
// NORECOMPUTE: arith.addf
// NORECOMPUTE: linalg.generic
// NORECOMPUTE-SAME: ins(%[[P]] :
// NORECOMPUTE: math.exp
// NORECOMPUTE: linalg.generic
// NORECOMPUTE-SAME: ins(%[[P]] :
// NORECOMPUTE: math.log
// NORECOMPUTE: return
func.func @two_consumers(%arg0: tensor<16xf32>) -> (tensor<16xf32>, tensor<16xf32>) {
  %e = tensor.empty() : tensor<16xf32>
  %0 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel"]} ins(%arg0 : tensor<16xf32>) outs(%e : tensor<16xf32>) {
  ^bb0(%in: f32, %out: f32):
    %1 = arith.addf %in, %in : f32
    linalg.yield %1 : f32
  } -> tensor<16xf32>
  %2 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel"]} ins(%0 : tensor<16xf32>) outs(%e : tensor<16xf32>) {
  ^bb0(%in: f32, %out: f32):
    %3 = math.exp %in : f32
    linalg.yield %3 : f32
  } -> tensor<16xf32>
  %4 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel"]} ins(%0 : tensor<16xf32>) outs(%e : tensor<16xf32>) {
  ^bb0(%in: f32, %out: f32):
    %5 = math.log %in : f32
    linalg.yield %5 : f32
  } -> tensor<16xf32>
  return %2, %4 : tensor<16xf32>, tensor<16xf32>
}

// -----

#map = affine_map<(d0, d1) -> (d0, d1)>
#map1 = affine_map<(d0, d1) -> (d0)>
// An elementwise producer fuses into a reduction: exp(x) is summed without
// being written out.
// CHECK-LABEL: func.func @elementwise_into_reduction
// CHECK: linalg.fill
// CHECK: linalg.generic
// CHECK-SAME: iterator_types = ["parallel", "reduction"]
// CHECK: math.exp
// CHECK: arith.addf
// CHECK-NOT: linalg.generic
func.func @elementwise_into_reduction(%arg0: tensor<4x8xf32>) -> tensor<4xf32> {
  %cst = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<4x8xf32>
  %0 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]} ins(%arg0 : tensor<4x8xf32>) outs(%e : tensor<4x8xf32>) {
  ^bb0(%in: f32, %out: f32):
    %1 = math.exp %in : f32
    linalg.yield %1 : f32
  } -> tensor<4x8xf32>
  %r = tensor.empty() : tensor<4xf32>
  %f = linalg.fill ins(%cst : f32) outs(%r : tensor<4xf32>) -> tensor<4xf32>
  %2 = linalg.generic {indexing_maps = [#map, #map1], iterator_types = ["parallel", "reduction"]} ins(%0 : tensor<4x8xf32>) outs(%f : tensor<4xf32>) {
  ^bb0(%in: f32, %out: f32):
    %3 = arith.addf %in, %out : f32
    linalg.yield %3 : f32
  } -> tensor<4xf32>
  return %2 : tensor<4xf32>
}

// -----

#map = affine_map<(d0, d1) -> (d0, d1)>
#map1 = affine_map<(d0, d1) -> (d1)>
// Contractions stay named; the bias add and relu after them become one
// generic.
// CHECK-LABEL: func.func @matmul_bias_relu
// CHECK: linalg.matmul
// CHECK: linalg.generic
// CHECK: arith.addf
// CHECK: arith.select
// CHECK-NOT: linalg.generic
func.func @matmul_bias_relu(%arg0: tensor<4x8xf32>, %arg1: tensor<8x16xf32>, %arg2: tensor<16xf32>) -> tensor<4x16xf32> {
  %cst = arith.constant 0.000000e+00 : f32
  %0 = tensor.empty() : tensor<4x16xf32>
  %1 = linalg.fill ins(%cst : f32) outs(%0 : tensor<4x16xf32>) -> tensor<4x16xf32>
  %2 = linalg.matmul ins(%arg0, %arg1 : tensor<4x8xf32>, tensor<8x16xf32>) outs(%1 : tensor<4x16xf32>) -> tensor<4x16xf32>
  %3 = linalg.generic {indexing_maps = [#map, #map1, #map], iterator_types = ["parallel", "parallel"]} ins(%2, %arg2 : tensor<4x16xf32>, tensor<16xf32>) outs(%0 : tensor<4x16xf32>) {
  ^bb0(%in: f32, %in_0: f32, %out: f32):
    %5 = arith.addf %in, %in_0 : f32
    linalg.yield %5 : f32
  } -> tensor<4x16xf32>
  %4 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]} ins(%3 : tensor<4x16xf32>) outs(%0 : tensor<4x16xf32>) {
  ^bb0(%in: f32, %out: f32):
    %5 = arith.cmpf ugt, %in, %cst : f32
    %6 = arith.select %5, %in, %cst : f32
    linalg.yield %6 : f32
  } -> tensor<4x16xf32>
  return %4 : tensor<4x16xf32>
}

// -----

#x = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
#a = affine_map<(d0, d1, d2, d3) -> (d2, d3, d0)>
#b = affine_map<(d0, d1, d2, d3) -> (d2, d3, d1)>
#c = affine_map<(d0, d1, d2, d3) -> (d0, d1)>
// A contraction that reshape propagation made generic (a weight gradient
// over batch x sequence) gets nothing fused into it, even a single-use
// producer: it must stay a multiply-accumulate for lazymlir-tile-contractions.
// CHECK-LABEL: func.func @no_fusion_into_contraction
// CHECK:       %[[N:.*]] = linalg.generic
// CHECK:         arith.mulf
// CHECK:         linalg.yield
// CHECK:       linalg.generic
// CHECK-SAME:    iterator_types = ["parallel", "parallel", "reduction", "reduction"]
// CHECK-SAME:    ins(%{{.*}}, %[[N]] :
// CHECK:         arith.mulf
// CHECK-NEXT:    arith.addf
// CHECK-NEXT:    linalg.yield
func.func @no_fusion_into_contraction(%g: tensor<4x64x512xf32>, %x: tensor<4x64x128xf32>, %s: f32) -> tensor<512x128xf32> {
  %e = tensor.empty() : tensor<4x64x128xf32>
  %n = linalg.generic {indexing_maps = [#x, #x], iterator_types = ["parallel", "parallel", "parallel"]} ins(%x : tensor<4x64x128xf32>) outs(%e : tensor<4x64x128xf32>) {
  ^bb0(%in: f32, %out: f32):
    %m = arith.mulf %in, %s : f32
    linalg.yield %m : f32
  } -> tensor<4x64x128xf32>
  %zero = arith.constant 0.0 : f32
  %o = tensor.empty() : tensor<512x128xf32>
  %acc = linalg.fill ins(%zero : f32) outs(%o : tensor<512x128xf32>) -> tensor<512x128xf32>
  %r = linalg.generic {indexing_maps = [#a, #b, #c], iterator_types = ["parallel", "parallel", "reduction", "reduction"]} ins(%g, %n : tensor<4x64x512xf32>, tensor<4x64x128xf32>) outs(%acc : tensor<512x128xf32>) {
  ^bb0(%in: f32, %in_0: f32, %out: f32):
    %m = arith.mulf %in, %in_0 : f32
    %a = arith.addf %out, %m : f32
    linalg.yield %a : f32
  } -> tensor<512x128xf32>
  return %r : tensor<512x128xf32>
}

// -----

#x = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
#t = affine_map<(d0, d1, d2) -> (d2, d0, d1)>
#a = affine_map<(d0, d1, d2, d3) -> (d0, d2, d3)>
#b = affine_map<(d0, d1, d2, d3) -> (d2, d3, d1)>
#c = affine_map<(d0, d1, d2, d3) -> (d0, d1)>
// A weight gradient's transpose stays materialized: fused, the contraction
// would read its A operand (the activations) as (k, m), a parallel loop
// innermost, and every tile would be transposed element by element (a
// 512x2048x4112 gradient: 61 GFLOP/s in place, 168 after the transpose).
// CHECK-LABEL: func.func @weight_gradient_transpose_stays
// With runtime-gemms, the runtime GEMM computes it and packs A from any
// strides: the gradient is read in place, no copy per step.
// GEMM-LABEL: func.func @weight_gradient_transpose_stays
// GEMM-NOT:   linalg.yield %in
// GEMM:       linalg.generic
// GEMM-SAME:    ins(%arg0, %arg1 :
// CHECK:       %[[T:.+]] = linalg.generic
// CHECK-SAME:    iterator_types = ["parallel", "parallel", "parallel"]
// CHECK-SAME:    ins(%arg0 :
// CHECK:       linalg.generic
// CHECK-SAME:    iterator_types = ["parallel", "parallel", "reduction", "reduction"]
// CHECK-SAME:    ins(%[[T]], %arg1 :
// CHECK:         arith.mulf
// CHECK-NEXT:    arith.addf
// CHECK-NEXT:    linalg.yield
func.func @weight_gradient_transpose_stays(%g: tensor<4x64x512xf32>, %x: tensor<4x64x128xf32>) -> tensor<512x128xf32> {
  %e = tensor.empty() : tensor<512x4x64xf32>
  %t = linalg.generic {indexing_maps = [#x, #t], iterator_types = ["parallel", "parallel", "parallel"]} ins(%g : tensor<4x64x512xf32>) outs(%e : tensor<512x4x64xf32>) {
  ^bb0(%in: f32, %out: f32):
    linalg.yield %in : f32
  } -> tensor<512x4x64xf32>
  %zero = arith.constant 0.0 : f32
  %o = tensor.empty() : tensor<512x128xf32>
  %acc = linalg.fill ins(%zero : f32) outs(%o : tensor<512x128xf32>) -> tensor<512x128xf32>
  %r = linalg.generic {indexing_maps = [#a, #b, #c], iterator_types = ["parallel", "parallel", "reduction", "reduction"]} ins(%t, %x : tensor<512x4x64xf32>, tensor<4x64x128xf32>) outs(%acc : tensor<512x128xf32>) {
  ^bb0(%in: f32, %in_0: f32, %out: f32):
    %m = arith.mulf %in, %in_0 : f32
    %a = arith.addf %out, %m : f32
    linalg.yield %a : f32
  } -> tensor<512x128xf32>
  return %r : tensor<512x128xf32>
}

// -----

#x = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
#t = affine_map<(d0, d1, d2) -> (d2, d0, d1)>
#a = affine_map<(d0, d1, d2, d3) -> (d0, d2, d3)>
#b = affine_map<(d0, d1, d2, d3) -> (d2, d3, d1)>
#c = affine_map<(d0, d1, d2, d3) -> (d0, d1)>
// A transpose that is also returned is not fused: the fused op would yield
// the transposed value as a second result and be no contraction any more.
// CHECK-LABEL: func.func @shared_transpose_stays
// CHECK:       %[[T:.*]] = linalg.generic
// CHECK:         linalg.yield %in
// CHECK:       linalg.generic
// CHECK-SAME:    ins(%[[T]], %arg1 :
// CHECK:         arith.mulf
// CHECK-NEXT:    arith.addf
// CHECK-NEXT:    linalg.yield %{{[0-9a-z_]+}} : f32
func.func @shared_transpose_stays(%g: tensor<4x64x512xf32>, %x: tensor<4x64x128xf32>) -> (tensor<512x128xf32>, tensor<512x4x64xf32>) {
  %e = tensor.empty() : tensor<512x4x64xf32>
  %t = linalg.generic {indexing_maps = [#x, #t], iterator_types = ["parallel", "parallel", "parallel"]} ins(%g : tensor<4x64x512xf32>) outs(%e : tensor<512x4x64xf32>) {
  ^bb0(%in: f32, %out: f32):
    linalg.yield %in : f32
  } -> tensor<512x4x64xf32>
  %zero = arith.constant 0.0 : f32
  %o = tensor.empty() : tensor<512x128xf32>
  %acc = linalg.fill ins(%zero : f32) outs(%o : tensor<512x128xf32>) -> tensor<512x128xf32>
  %r = linalg.generic {indexing_maps = [#a, #b, #c], iterator_types = ["parallel", "parallel", "reduction", "reduction"]} ins(%t, %x : tensor<512x4x64xf32>, tensor<4x64x128xf32>) outs(%acc : tensor<512x128xf32>) {
  ^bb0(%in: f32, %in_0: f32, %out: f32):
    %m = arith.mulf %in, %in_0 : f32
    %a = arith.addf %out, %m : f32
    linalg.yield %a : f32
  } -> tensor<512x128xf32>
  return %r, %t : tensor<512x128xf32>, tensor<512x4x64xf32>
}

// -----

#x = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
#t = affine_map<(d0, d1, d2) -> (d1, d2, d0)>
#a = affine_map<(d0, d1, d2, d3) -> (d0, d1, d3)>
#b = affine_map<(d0, d1, d2, d3) -> (d3, d2)>
#c = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2)>
// The B operand of x @ w.t(): fused, the contraction would read w across its
// innermost parallel loop (d2, the vectorized one): the transpose stays.
// CHECK-LABEL: func.func @transposed_b_stays
// With runtime-gemms, the weight is read in place (the GEMM packs B^T).
// GEMM-LABEL: func.func @transposed_b_stays
// GEMM-NOT:   linalg.yield %in
// GEMM:       linalg.generic
// GEMM-SAME:    ins(%arg0, %arg1 :
// CHECK:       %[[T:.*]] = linalg.generic
// CHECK:         linalg.yield %in
// CHECK:       linalg.generic
// CHECK-SAME:    ins(%arg0, %[[T]] :
#tb = affine_map<(d0, d1) -> (d1, d0)>
#id = affine_map<(d0, d1) -> (d0, d1)>
func.func @transposed_b_stays(%x: tensor<4x64x128xf32>, %w: tensor<512x128xf32>) -> tensor<4x64x512xf32> {
  %e = tensor.empty() : tensor<128x512xf32>
  %t = linalg.generic {indexing_maps = [#tb, #id], iterator_types = ["parallel", "parallel"]} ins(%w : tensor<512x128xf32>) outs(%e : tensor<128x512xf32>) {
  ^bb0(%in: f32, %out: f32):
    linalg.yield %in : f32
  } -> tensor<128x512xf32>
  %zero = arith.constant 0.0 : f32
  %o = tensor.empty() : tensor<4x64x512xf32>
  %acc = linalg.fill ins(%zero : f32) outs(%o : tensor<4x64x512xf32>) -> tensor<4x64x512xf32>
  %r = linalg.generic {indexing_maps = [#a, #b, #c], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%x, %t : tensor<4x64x128xf32>, tensor<128x512xf32>) outs(%acc : tensor<4x64x512xf32>) {
  ^bb0(%in: f32, %in_0: f32, %out: f32):
    %m = arith.mulf %in, %in_0 : f32
    %a = arith.addf %out, %m : f32
    linalg.yield %a : f32
  } -> tensor<4x64x512xf32>
  return %r : tensor<4x64x512xf32>
}

// -----

#x = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
#t = affine_map<(d0, d1, d2, d3) -> (d0, d2, d1, d3)>
#a = affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d3, d4)>
#w = affine_map<(d0, d1, d2, d3, d4) -> (d3, d4, d2)>
#c = affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d2)>
// Attention heads merged ((b, h, s, d) -> (b, s, h, d)) before a projection:
// read in place, heads and head size would no longer be adjacent in the
// operand and the reduction over them could not be merged into one loop by
// lazymlir-tile-contractions: the transpose stays.
// CHECK-LABEL: func.func @head_merging_transpose_stays
// With runtime-gemms too: read in place, the rows (batch, sequence) would
// not be adjacent in A, which would no longer read as a GEMM's matrix.
// GEMM-LABEL: func.func @head_merging_transpose_stays
// GEMM:       %[[T:.*]] = linalg.generic
// GEMM:         linalg.yield %in
// GEMM:       linalg.generic
// GEMM-SAME:    ins(%[[T]], %arg1 :
// CHECK:       %[[T:.*]] = linalg.generic
// CHECK:         linalg.yield %in
// CHECK:       linalg.generic
// CHECK-SAME:    ins(%[[T]], %arg1 :
func.func @head_merging_transpose_stays(%attn: tensor<4x4x64x32xf32>, %w: tensor<4x32x128xf32>) -> tensor<4x64x128xf32> {
  %e = tensor.empty() : tensor<4x64x4x32xf32>
  %t = linalg.generic {indexing_maps = [#x, #t], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%attn : tensor<4x4x64x32xf32>) outs(%e : tensor<4x64x4x32xf32>) {
  ^bb0(%in: f32, %out: f32):
    linalg.yield %in : f32
  } -> tensor<4x64x4x32xf32>
  %zero = arith.constant 0.0 : f32
  %o = tensor.empty() : tensor<4x64x128xf32>
  %acc = linalg.fill ins(%zero : f32) outs(%o : tensor<4x64x128xf32>) -> tensor<4x64x128xf32>
  %r = linalg.generic {indexing_maps = [#a, #w, #c], iterator_types = ["parallel", "parallel", "parallel", "reduction", "reduction"]} ins(%t, %w : tensor<4x64x4x32xf32>, tensor<4x32x128xf32>) outs(%acc : tensor<4x64x128xf32>) {
  ^bb0(%in: f32, %in_0: f32, %out: f32):
    %m = arith.mulf %in, %in_0 : f32
    %a = arith.addf %out, %m : f32
    linalg.yield %a : f32
  } -> tensor<4x64x128xf32>
  return %r : tensor<4x64x128xf32>
}

// -----

// torch-mlir guards an index into a tensor with a `?` dimension against
// that dimension being 1: select(size == 1, 0, i). When the size is the
// loop's own trip count (here the output's tensor.empty size), i < size
// makes the guard i: it folds, and the read is contiguous again.
// CHECK-LABEL: func.func @broadcast_guard
// CHECK: %[[I:.+]] = linalg.index 0
// CHECK: %[[J:.+]] = linalg.index 1
// CHECK-NOT: arith.select
// CHECK: tensor.extract %arg0[%[[I]], %[[J]]]
func.func @broadcast_guard(%src: tensor<?x64xf32>) -> tensor<?x64xf32> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %dim = tensor.dim %src, %c0 : tensor<?x64xf32>
  %0 = tensor.empty(%dim) : tensor<?x64xf32>
  %1 = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>], iterator_types = ["parallel", "parallel"]} outs(%0 : tensor<?x64xf32>) {
  ^bb0(%out: f32):
    %i = linalg.index 0 : index
    %j = linalg.index 1 : index
    %one = arith.cmpi eq, %dim, %c1 : index
    %r = arith.select %one, %c0, %i : index
    %x = tensor.extract %src[%r, %j] : tensor<?x64xf32>
    linalg.yield %x : f32
  } -> tensor<?x64xf32>
  return %1 : tensor<?x64xf32>
}

// -----

// The same guard as i mod size.
// CHECK-LABEL: func.func @remainder_guard
// CHECK: %[[I:.+]] = linalg.index 0
// CHECK: %[[J:.+]] = linalg.index 1
// CHECK-NOT: arith.remsi
// CHECK: tensor.extract %arg0[%[[I]], %[[J]]]
func.func @remainder_guard(%src: tensor<?x64xf32>) -> tensor<?x64xf32> {
  %c0 = arith.constant 0 : index
  %dim = tensor.dim %src, %c0 : tensor<?x64xf32>
  %0 = tensor.empty(%dim) : tensor<?x64xf32>
  %1 = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>], iterator_types = ["parallel", "parallel"]} outs(%0 : tensor<?x64xf32>) {
  ^bb0(%out: f32):
    %i = linalg.index 0 : index
    %j = linalg.index 1 : index
    %r = arith.remsi %i, %dim : index
    %x = tensor.extract %src[%r, %j] : tensor<?x64xf32>
    linalg.yield %x : f32
  } -> tensor<?x64xf32>
  return %1 : tensor<?x64xf32>
}

// -----

// A size that is not the loop's (a real broadcast when it is 1): kept.
// CHECK-LABEL: func.func @real_broadcast
// CHECK: %[[R:.+]] = arith.select
// CHECK: tensor.extract %arg0[%[[R]], %{{.+}}]
func.func @real_broadcast(%src: tensor<?x64xf32>, %n: index) -> tensor<?x64xf32> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %dim = tensor.dim %src, %c0 : tensor<?x64xf32>
  %0 = tensor.empty(%n) : tensor<?x64xf32>
  %1 = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>], iterator_types = ["parallel", "parallel"]} outs(%0 : tensor<?x64xf32>) {
  ^bb0(%out: f32):
    %i = linalg.index 0 : index
    %j = linalg.index 1 : index
    %one = arith.cmpi eq, %dim, %c1 : index
    %r = arith.select %one, %c0, %i : index
    %x = tensor.extract %src[%r, %j] : tensor<?x64xf32>
    linalg.yield %x : f32
  } -> tensor<?x64xf32>
  return %1 : tensor<?x64xf32>
}
