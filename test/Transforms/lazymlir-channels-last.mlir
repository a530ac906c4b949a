// RUN: lazymlir-opt %s --split-input-file --pass-pipeline="builtin.module(func.func(lazymlir-channels-last))" | FileCheck %s
// RUN: lazymlir-opt %s --split-input-file --pass-pipeline="builtin.module(func.func(lazymlir-channels-last,lazymlir-fuse-elementwise),canonicalize,cse)" --mlir-print-local-scope | FileCheck %s --check-prefix=FUSED

// One conv: transposes in (input NCHW->NHWC, filter FCHW->HWCF, init) and
// out (NHWC->NCHW) around the NHWC conv.
// CHECK-LABEL: func.func @one_conv
// CHECK-SAME: (%[[X:.+]]: tensor<2x4x10x10xf32>, %[[W:.+]]: tensor<8x4x3x3xf32>, %[[INIT:.+]]: tensor<2x8x8x8xf32>)
// CHECK-DAG: %[[XT:.+]] = linalg.transpose ins(%[[X]] : tensor<2x4x10x10xf32>) outs(%{{.+}} : tensor<2x10x10x4xf32>) permutation = [0, 2, 3, 1]
// CHECK-DAG: %[[WT:.+]] = linalg.transpose ins(%[[W]] : tensor<8x4x3x3xf32>) outs(%{{.+}} : tensor<3x3x4x8xf32>) permutation = [2, 3, 1, 0]
// CHECK-DAG: %[[IT:.+]] = linalg.transpose ins(%[[INIT]] : tensor<2x8x8x8xf32>) outs(%{{.+}} : tensor<2x8x8x8xf32>) permutation = [0, 2, 3, 1]
// CHECK: %[[C:.+]] = linalg.conv_2d_nhwc_hwcf {dilations = dense<1> : vector<2xi64>, strides = dense<1> : vector<2xi64>} ins(%[[XT]], %[[WT]] : tensor<2x10x10x4xf32>, tensor<3x3x4x8xf32>) outs(%[[IT]] : tensor<2x8x8x8xf32>)
// CHECK: %[[R:.+]] = linalg.transpose ins(%[[C]] : tensor<2x8x8x8xf32>) outs(%{{.+}} : tensor<2x8x8x8xf32>) permutation = [0, 3, 1, 2]
// CHECK: return %[[R]]
func.func @one_conv(%x: tensor<2x4x10x10xf32>, %w: tensor<8x4x3x3xf32>, %init: tensor<2x8x8x8xf32>) -> tensor<2x8x8x8xf32> {
  %0 = linalg.conv_2d_nchw_fchw {dilations = dense<1> : vector<2xi64>, strides = dense<1> : vector<2xi64>} ins(%x, %w : tensor<2x4x10x10xf32>, tensor<8x4x3x3xf32>) outs(%init : tensor<2x8x8x8xf32>) -> tensor<2x8x8x8xf32>
  return %0 : tensor<2x8x8x8xf32>
}

// -----

// A strided conv on padded input: strides are kept, and the padding moves
// behind the input transpose with its amounts permuted to NHWC.
// CHECK-LABEL: func.func @strided_padded_conv
// CHECK: %[[XT:.+]] = linalg.transpose ins(%arg0 : tensor<1x3x9x9xf32>) {{.*}} permutation = [0, 2, 3, 1]
// CHECK: %[[P:.+]] = tensor.pad %[[XT]] low[0, 1, 1, 0] high[0, 1, 1, 0]
// CHECK: linalg.conv_2d_nhwc_hwcf {dilations = dense<1> : vector<2xi64>, strides = dense<2> : vector<2xi64>} ins(%[[P]], %{{.+}} : tensor<1x11x11x3xf32>, tensor<3x3x3x4xf32>)
func.func @strided_padded_conv(%x: tensor<1x3x9x9xf32>, %w: tensor<4x3x3x3xf32>, %init: tensor<1x4x5x5xf32>) -> tensor<1x4x5x5xf32> {
  %cst = arith.constant 0.0 : f32
  %p = tensor.pad %x low[0, 0, 1, 1] high[0, 0, 1, 1] {
  ^bb0(%a: index, %b: index, %c: index, %d: index):
    tensor.yield %cst : f32
  } : tensor<1x3x9x9xf32> to tensor<1x3x11x11xf32>
  %0 = linalg.conv_2d_nchw_fchw {dilations = dense<1> : vector<2xi64>, strides = dense<2> : vector<2xi64>} ins(%p, %w : tensor<1x3x11x11xf32>, tensor<4x3x3x3xf32>) outs(%init : tensor<1x4x5x5xf32>) -> tensor<1x4x5x5xf32>
  return %0 : tensor<1x4x5x5xf32>
}

// -----

// Max pooling (the window operand has no layout).
// CHECK-LABEL: func.func @max_pool
// CHECK: linalg.transpose ins(%arg0 : tensor<1x4x8x8xf32>) {{.*}} permutation = [0, 2, 3, 1]
// CHECK: linalg.pooling_nhwc_max {dilations = dense<1> : vector<2xi64>, strides = dense<2> : vector<2xi64>} ins(%{{.+}}, %arg1 : tensor<1x8x8x4xf32>, tensor<2x2xf32>)
// CHECK: permutation = [0, 3, 1, 2]
func.func @max_pool(%x: tensor<1x4x8x8xf32>, %window: tensor<2x2xf32>, %init: tensor<1x4x4x4xf32>) -> tensor<1x4x4x4xf32> {
  %0 = linalg.pooling_nchw_max {dilations = dense<1> : vector<2xi64>, strides = dense<2> : vector<2xi64>} ins(%x, %window : tensor<1x4x8x8xf32>, tensor<2x2xf32>) outs(%init : tensor<1x4x4x4xf32>) -> tensor<1x4x4x4xf32>
  return %0 : tensor<1x4x4x4xf32>
}

// -----

#id = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
#chan = affine_map<(d0, d1, d2, d3) -> (d1)>
// conv -> batch norm (per-channel scale/shift) -> relu -> conv -> residual
// add, as a ResNet block does it. With fusion, the transposes between the
// convs cancel: the only permuted accesses are the block's input (NCHW ->
// NHWC) and its output (NHWC -> NCHW, fused into the residual add).
// Maps printed inline: (d0, d3, d1, d2) reads NCHW memory in NHWC order,
// (d0, d2, d3, d1) reads NHWC memory in NCHW order.
// FUSED-LABEL: func.func @conv_bn_relu_conv_residual
// FUSED-NOT: linalg.transpose
// FUSED: linalg.generic {indexing_maps = [affine_map<(d0, d1, d2, d3) -> (d0, d3, d1, d2)>, {{.*}}ins(%arg0 :
// FUSED: %[[C1:.+]] = linalg.conv_2d_nhwc_hwcf
// FUSED-NOT: -> (d0, d3, d1, d2)>
// FUSED-NOT: -> (d0, d2, d3, d1)>
// FUSED: %[[BN:.+]] = linalg.generic {{.*}} ins(%[[C1]],
// FUSED-NOT: -> (d0, d3, d1, d2)>
// FUSED-NOT: -> (d0, d2, d3, d1)>
// FUSED: %[[C2:.+]] = linalg.conv_2d_nhwc_hwcf {{.*}} ins(%[[BN]],
// FUSED: %[[OUT:.+]] = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2, d3) -> (d0, d2, d3, d1)>, {{.*}} ins(%[[C2]], %arg0 :
// FUSED: return %[[OUT]]
func.func @conv_bn_relu_conv_residual(%x: tensor<2x8x8x8xf32>, %w1: tensor<8x8x1x1xf32>, %w2: tensor<8x8x1x1xf32>, %scale: tensor<8xf32>, %shift: tensor<8xf32>) -> tensor<2x8x8x8xf32> {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<2x8x8x8xf32>
  %init = linalg.fill ins(%zero : f32) outs(%e : tensor<2x8x8x8xf32>) -> tensor<2x8x8x8xf32>
  %c1 = linalg.conv_2d_nchw_fchw {dilations = dense<1> : vector<2xi64>, strides = dense<1> : vector<2xi64>} ins(%x, %w1 : tensor<2x8x8x8xf32>, tensor<8x8x1x1xf32>) outs(%init : tensor<2x8x8x8xf32>) -> tensor<2x8x8x8xf32>
  %bn = linalg.generic {indexing_maps = [#id, #chan, #chan, #id], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%c1, %scale, %shift : tensor<2x8x8x8xf32>, tensor<8xf32>, tensor<8xf32>) outs(%e : tensor<2x8x8x8xf32>) {
  ^bb0(%v: f32, %s: f32, %t: f32, %o: f32):
    %m = arith.mulf %v, %s : f32
    %a = arith.addf %m, %t : f32
    %r = arith.maximumf %a, %zero : f32
    linalg.yield %r : f32
  } -> tensor<2x8x8x8xf32>
  %c2 = linalg.conv_2d_nchw_fchw {dilations = dense<1> : vector<2xi64>, strides = dense<1> : vector<2xi64>} ins(%bn, %w2 : tensor<2x8x8x8xf32>, tensor<8x8x1x1xf32>) outs(%init : tensor<2x8x8x8xf32>) -> tensor<2x8x8x8xf32>
  %out = linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%c2, %x : tensor<2x8x8x8xf32>, tensor<2x8x8x8xf32>) outs(%e : tensor<2x8x8x8xf32>) {
  ^bb0(%v: f32, %r: f32, %o: f32):
    %s = arith.addf %v, %r : f32
    linalg.yield %s : f32
  } -> tensor<2x8x8x8xf32>
  return %out : tensor<2x8x8x8xf32>
}

// -----

// Dynamic batch: the transposes carry the dynamic size.
// CHECK-LABEL: func.func @dynamic_batch
// CHECK: %[[N:.+]] = tensor.dim %arg0, %c0 : tensor<?x4x10x10xf32>
// CHECK: tensor.empty(%[[N]]) : tensor<?x10x10x4xf32>
// CHECK: linalg.conv_2d_nhwc_hwcf
func.func @dynamic_batch(%x: tensor<?x4x10x10xf32>, %w: tensor<8x4x3x3xf32>, %init: tensor<?x8x8x8xf32>) -> tensor<?x8x8x8xf32> {
  %0 = linalg.conv_2d_nchw_fchw {dilations = dense<1> : vector<2xi64>, strides = dense<1> : vector<2xi64>} ins(%x, %w : tensor<?x4x10x10xf32>, tensor<8x4x3x3xf32>) outs(%init : tensor<?x8x8x8xf32>) -> tensor<?x8x8x8xf32>
  return %0 : tensor<?x8x8x8xf32>
}

// -----

// Left untouched: already NHWC, grouped (no NHWC form here), and matmul.
// CHECK-LABEL: func.func @untouched
// CHECK-NOT: linalg.transpose
// CHECK: linalg.conv_2d_nhwc_hwcf
// CHECK: linalg.conv_2d_ngchw_fgchw
// CHECK: linalg.matmul
func.func @untouched(%x: tensor<1x6x6x4xf32>, %w: tensor<3x3x4x8xf32>, %i: tensor<1x4x4x8xf32>,
                     %gx: tensor<1x2x2x6x6xf32>, %gw: tensor<4x2x2x3x3xf32>, %gi: tensor<1x2x4x4x4xf32>,
                     %a: tensor<4x4xf32>, %mi: tensor<4x4xf32>) -> (tensor<1x4x4x8xf32>, tensor<1x2x4x4x4xf32>, tensor<4x4xf32>) {
  %0 = linalg.conv_2d_nhwc_hwcf {dilations = dense<1> : vector<2xi64>, strides = dense<1> : vector<2xi64>} ins(%x, %w : tensor<1x6x6x4xf32>, tensor<3x3x4x8xf32>) outs(%i : tensor<1x4x4x8xf32>) -> tensor<1x4x4x8xf32>
  %1 = linalg.conv_2d_ngchw_fgchw {dilations = dense<1> : vector<2xi64>, strides = dense<1> : vector<2xi64>} ins(%gx, %gw : tensor<1x2x2x6x6xf32>, tensor<4x2x2x3x3xf32>) outs(%gi : tensor<1x2x4x4x4xf32>) -> tensor<1x2x4x4x4xf32>
  %2 = linalg.matmul ins(%a, %a : tensor<4x4xf32>, tensor<4x4xf32>) outs(%mi : tensor<4x4xf32>) -> tensor<4x4xf32>
  return %0, %1, %2 : tensor<1x4x4x8xf32>, tensor<1x2x4x4x4xf32>, tensor<4x4xf32>
}
