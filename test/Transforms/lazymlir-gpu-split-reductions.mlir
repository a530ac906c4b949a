// RUN: lazymlir-opt %s --split-input-file --lazymlir-gpu-split-reductions --canonicalize | FileCheck %s

// A sum of 1179648 elements into a scalar: 1024 partial sums (threads) of
// 1152 elements each, interleaved (partial j sums elements j + 1024 i:
// consecutive threads read consecutive elements), parallel loop first; then
// the sum of the 1024 partials.
// CHECK-DAG:   #[[READ:.*]] = affine_map<(d0, d1) -> (d1, d0)>
// CHECK-DAG:   #[[PARTIAL:.*]] = affine_map<(d0, d1) -> (d0)>
// CHECK-LABEL: func.func @full_sum
// CHECK:       %[[X:.*]] = tensor.expand_shape %{{.*}} {{\[\[}}0, 1]] output_shape [1152, 1024] : tensor<1179648xf32> into tensor<1152x1024xf32>
// CHECK:       %[[P:.*]] = linalg.generic {indexing_maps = [#[[READ]], #[[PARTIAL]]], iterator_types = ["parallel", "reduction"]} ins(%[[X]] : tensor<1152x1024xf32>) outs(%{{.*}} : tensor<1024xf32>)
// CHECK:       linalg.generic {{.*}} iterator_types = ["reduction"]} ins(%[[P]] : tensor<1024xf32>) outs(%{{.*}} : tensor<f32>)
func.func @full_sum(%x: tensor<1179648xf32>) -> tensor<f32> {
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<f32>
  %f = linalg.fill ins(%z : f32) outs(%e : tensor<f32>) -> tensor<f32>
  %sum = linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> ()>], iterator_types = ["reduction"]} ins(%x : tensor<1179648xf32>) outs(%f : tensor<f32>) {
  ^bb0(%a: f32, %o: f32):
    %s = arith.addf %a, %o : f32
    linalg.yield %s : f32
  } -> tensor<f32>
  return %sum : tensor<f32>
}

// -----

// Enough outputs to fill the GPU already (4096 rows), or too short to be
// worth a second kernel: left alone.
// CHECK-LABEL: func.func @left_alone
// CHECK-NOT:   tensor.expand_shape
// CHECK-COUNT-2: linalg.generic
// CHECK-NOT:   linalg.generic
func.func @left_alone(%x: tensor<4096x8192xf32>, %y: tensor<1000xf32>) -> (tensor<4096xf32>, tensor<f32>) {
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<4096xf32>
  %f = linalg.fill ins(%z : f32) outs(%e : tensor<4096xf32>) -> tensor<4096xf32>
  %rows = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0)>], iterator_types = ["parallel", "reduction"]} ins(%x : tensor<4096x8192xf32>) outs(%f : tensor<4096xf32>) {
  ^bb0(%a: f32, %o: f32):
    %s = arith.addf %a, %o : f32
    linalg.yield %s : f32
  } -> tensor<4096xf32>
  %e2 = tensor.empty() : tensor<f32>
  %f2 = linalg.fill ins(%z : f32) outs(%e2 : tensor<f32>) -> tensor<f32>
  %short = linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> ()>], iterator_types = ["reduction"]} ins(%y : tensor<1000xf32>) outs(%f2 : tensor<f32>) {
  ^bb0(%a: f32, %o: f32):
    %s = arith.maximumf %a, %o : f32
    linalg.yield %s : f32
  } -> tensor<f32>
  return %rows, %short : tensor<4096xf32>, tensor<f32>
}

// -----

// A conv bias's gradient in NCHW: reduced over the batch (outside) and the
// pixels (inside), around the channels. Parallel loops go first, each
// output's sum in its order (batch, then pixels): the channels become
// threads. With the batch loop leading, no loop was parallel and the whole
// nest ran as one thread (28 ms of an MNIST step on an H100).
// CHECK-DAG:   #[[X:.*]] = affine_map<(d0, d1, d2) -> (d1, d0, d2)>
// CHECK-DAG:   #[[OUT:.*]] = affine_map<(d0, d1, d2) -> (d0)>
// CHECK-LABEL: func.func @bias_gradient
// CHECK:       linalg.generic {indexing_maps = [#[[X]], #[[OUT]]], iterator_types = ["parallel", "reduction", "reduction"]}
func.func @bias_gradient(%x: tensor<64x64x576xf32>) -> tensor<64xf32> {
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<64xf32>
  %f = linalg.fill ins(%z : f32) outs(%e : tensor<64xf32>) -> tensor<64xf32>
  %sum = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d1, d2)>, affine_map<(d0, d1, d2) -> (d1)>], iterator_types = ["reduction", "parallel", "reduction"]} ins(%x : tensor<64x64x576xf32>) outs(%f : tensor<64xf32>) {
  ^bb0(%a: f32, %o: f32):
    %s = arith.addf %a, %o : f32
    linalg.yield %s : f32
  } -> tensor<64xf32>
  return %sum : tensor<64xf32>
}
