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

// -----

// With use-ldexp, scalar f32 exp scales by 2^n with llvm.intr.ldexp (one
// vscalefps on AVX-512) instead of building 2^n in the exponent bits; a NaN
// is carried through by the NaN-propagating clamps. Vector exps (the
// vectorized epilogues of contractions) keep upstream's expansion: the
// dialect's ldexp takes scalars only.
// RUN: lazymlir-opt %s --split-input-file --pass-pipeline="builtin.module(func.func(lazymlir-approximate-math{use-ldexp=1}))" | FileCheck %s --check-prefix=LDEXP
// CHECK-LABEL: func.func @exp_scaling
// CHECK-NOT: llvm.intr.ldexp
// CHECK: arith.shli
// CHECK: return
// LDEXP-LABEL: func.func @exp_scaling
// LDEXP: arith.minimumf %{{.+}} : f32
// LDEXP: arith.maximumf %{{.+}} : f32
// LDEXP-NOT: arith.shli
// LDEXP: llvm.intr.ldexp(%{{.+}}, %{{.+}}) : (f32, i32) -> f32
// LDEXP-NOT: math.exp
// LDEXP: arith.shli %{{.+}} : vector<4x8xi32>
// LDEXP-NOT: math.exp
// LDEXP: return
func.func @exp_scaling(%x: f32, %v: vector<4x8xf32>) -> (f32, vector<4x8xf32>) {
  %0 = math.exp %x : f32
  %1 = math.exp %v : vector<4x8xf32>
  return %0, %1 : f32, vector<4x8xf32>
}
