// RUN: lazymlir-opt %s --split-input-file --pass-pipeline="builtin.module(func.func(lazymlir-approximate-math))" | FileCheck %s
// RUN: lazymlir-opt %s --split-input-file --pass-pipeline="builtin.module(func.func(lazymlir-approximate-math{ops=math.tanh}))" | FileCheck %s --check-prefix=ONLYTANH

// f32 exp and tanh become arithmetic (vectorizable); f64 and sin keep their
// library lowering.
// CHECK-LABEL: func.func @f32_ops
// CHECK-NOT: math.exp
// CHECK-NOT: math.tanh
// CHECK: math.fma
// CHECK: return
// ONLYTANH-LABEL: func.func @f32_ops
// ONLYTANH: math.exp
// ONLYTANH-NOT: math.tanh
func.func @f32_ops(%x: f32) -> (f32, f32) {
  %0 = math.exp %x : f32
  %1 = math.tanh %x : f32
  return %0, %1 : f32, f32
}

// -----

// CHECK-LABEL: func.func @untouched
// CHECK: math.exp %{{.+}} : f64
// CHECK: math.sin %{{.+}} : f32
func.func @untouched(%x: f64, %y: f32) -> (f64, f32) {
  %0 = math.exp %x : f64
  %1 = math.sin %y : f32
  return %0, %1 : f64, f32
}
