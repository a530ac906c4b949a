// RUN: lazymlir-opt %s --split-input-file --lazymlir-expand-bf16-conversions | FileCheck %s

// f32 -> bf16: the bias 0x7FFF plus the lowest kept bit, the high half;
// NaN -> 0xFFFF.
// CHECK-LABEL: func.func @trunc
// CHECK-DAG:   %[[C16:.*]] = arith.constant 16 : i32
// CHECK-DAG:   %[[C1:.*]] = arith.constant 1 : i32
// CHECK-DAG:   %[[BIAS:.*]] = arith.constant 32767 : i32
// CHECK-DAG:   %[[ABS:.*]] = arith.constant 2147483647 : i32
// CHECK-DAG:   %[[INF:.*]] = arith.constant 2139095040 : i32
// CHECK-DAG:   %[[NAN:.*]] = arith.constant -1 : i16
// CHECK:       %[[BITS:.*]] = arith.bitcast %arg0 : f32 to i32
// CHECK:       %[[HIGH:.*]] = arith.shrui %[[BITS]], %[[C16]]
// CHECK:       %[[LSB:.*]] = arith.andi %[[HIGH]], %[[C1]]
// CHECK:       %[[B1:.*]] = arith.addi %[[BITS]], %[[BIAS]]
// CHECK:       %[[B2:.*]] = arith.addi %[[B1]], %[[LSB]]
// CHECK:       %[[SH:.*]] = arith.shrui %[[B2]], %[[C16]]
// CHECK:       %[[R:.*]] = arith.trunci %[[SH]] : i32 to i16
// CHECK:       %[[M:.*]] = arith.andi %[[BITS]], %[[ABS]]
// CHECK:       %[[ISNAN:.*]] = arith.cmpi ugt, %[[M]], %[[INF]]
// CHECK:       %[[SEL:.*]] = arith.select %[[ISNAN]], %[[NAN]], %[[R]]
// CHECK:       %[[OUT:.*]] = arith.bitcast %[[SEL]] : i16 to bf16
// CHECK-NOT:   arith.truncf
// CHECK:       return %[[OUT]]
func.func @trunc(%x: f32) -> bf16 {
  %r = arith.truncf %x : f32 to bf16
  return %r : bf16
}

// -----

// Vectors: the same arithmetic on splat constants.
// CHECK-LABEL: func.func @trunc_vector
// CHECK-DAG:   arith.constant dense<32767> : vector<8xi32>
// CHECK:       arith.bitcast %arg0 : vector<8xf32> to vector<8xi32>
// CHECK:       arith.trunci %{{.*}} : vector<8xi32> to vector<8xi16>
// CHECK:       arith.bitcast %{{.*}} : vector<8xi16> to vector<8xbf16>
// CHECK-NOT:   arith.truncf
func.func @trunc_vector(%x: vector<8xf32>) -> vector<8xbf16> {
  %r = arith.truncf %x : vector<8xf32> to vector<8xbf16>
  return %r : vector<8xbf16>
}

// -----

// f64 -> bf16 through f32 (as c10 converts).
// CHECK-LABEL: func.func @trunc_f64
// CHECK:       %[[F:.*]] = arith.truncf %arg0 : f64 to f32
// CHECK:       arith.bitcast %[[F]] : f32 to i32
// CHECK-NOT:   arith.truncf
func.func @trunc_f64(%x: f64) -> bf16 {
  %r = arith.truncf %x : f64 to bf16
  return %r : bf16
}

// -----

// bf16 -> f32 and f64: the bits moved to the high half.
// CHECK-LABEL: func.func @ext
// CHECK:       %[[I:.*]] = arith.bitcast %arg0 : bf16 to i16
// CHECK:       %[[W:.*]] = arith.extui %[[I]] : i16 to i32
// CHECK:       %[[S:.*]] = arith.shli %[[W]], %{{.*}} : i32
// CHECK:       %[[F:.*]] = arith.bitcast %[[S]] : i32 to f32
// CHECK:       %[[F2:.*]] = arith.bitcast %{{.*}} : i32 to f32
// CHECK:       %[[D:.*]] = arith.extf %[[F2]] : f32 to f64
// CHECK-NOT:   arith.extf %arg0
// CHECK:       return %[[F]], %[[D]]
func.func @ext(%x: bf16) -> (f32, f64) {
  %a = arith.extf %x : bf16 to f32
  %b = arith.extf %x : bf16 to f64
  return %a, %b : f32, f64
}

// -----

// Left alone: f16, a truncation with its own rounding mode, tensors.
// CHECK-LABEL: func.func @others
// CHECK:       arith.truncf %arg0 : f32 to f16
// CHECK:       arith.truncf %arg0 toward_zero : f32 to bf16
// CHECK:       arith.truncf %arg1 : tensor<4xf32> to tensor<4xbf16>
func.func @others(%x: f32, %t: tensor<4xf32>) -> (f16, bf16, tensor<4xbf16>) {
  %a = arith.truncf %x : f32 to f16
  %b = arith.truncf %x toward_zero : f32 to bf16
  %c = arith.truncf %t : tensor<4xf32> to tensor<4xbf16>
  return %a, %b, %c : f16, bf16, tensor<4xbf16>
}
