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
// vectorized epilogues of contractions; the dialect's ldexp takes scalars
// only), and every exp without use-ldexp, multiply by 2^(n/2) and then by
// 2^(n - n/2), both built in the exponent bits: results below 2^-126 come
// out as denormals (upstream's expansion flushed them to 0).
// RUN: lazymlir-opt %s --split-input-file --pass-pipeline="builtin.module(func.func(lazymlir-approximate-math{use-ldexp=1}))" | FileCheck %s --check-prefix=LDEXP
// CHECK-LABEL: func.func @exp_scaling
// CHECK-NOT: llvm.intr.ldexp
// CHECK: %[[N:.+]] = arith.subi %{{.+}}, %{{.+}} : i32
// CHECK: %[[N1:.+]] = arith.shrsi %[[N]], %{{.+}} : i32
// CHECK: %[[N2:.+]] = arith.subi %[[N]], %[[N1]] : i32
// CHECK: arith.shli
// CHECK: %[[P1:.+]] = arith.mulf %{{.+}}, %{{.+}} : f32
// CHECK: arith.shli
// CHECK: arith.mulf %[[P1]], %{{.+}} : f32
// CHECK: arith.shrsi %{{.+}} : vector<4x8xi32>
// CHECK-NOT: math.exp
// CHECK: return
// LDEXP-LABEL: func.func @exp_scaling
// LDEXP: arith.minimumf %{{.+}} : f32
// LDEXP: arith.maximumf %{{.+}} : f32
// LDEXP-NOT: arith.shli
// LDEXP: llvm.intr.ldexp(%{{.+}}, %{{.+}}) : (f32, i32) -> f32
// LDEXP-NOT: math.exp
// LDEXP: arith.shrsi %{{.+}} : vector<4x8xi32>
// LDEXP: arith.shli %{{.+}} : vector<4x8xi32>
// LDEXP-NOT: math.exp
// LDEXP: return
func.func @exp_scaling(%x: f32, %v: vector<4x8xf32>) -> (f32, vector<4x8xf32>) {
  %0 = math.exp %x : f32
  %1 = math.exp %v : vector<4x8xf32>
  return %0, %1 : f32, vector<4x8xf32>
}

// -----

// Special values: f32 log and log2 scale a denormal input (x < 2^-126, which
// upstream's expansion reads as 2^-126) by 2^24 and subtract 24 ln 2 (24);
// f32 erf takes the sign of its input (erf(-0.0) = -0.0).
// CHECK-LABEL: func.func @special_values_f32
// CHECK-SAME: (%[[X:.+]]: f32, %[[V:.+]]: vector<8xf32>)
// CHECK-DAG: %[[TINY:.+]] = arith.constant 1.17549435E-38 : f32
// CHECK-DAG: %[[SCALE:.+]] = arith.constant 0x4B800000 : f32
// CHECK-DAG: %[[LN2X24:.+]] = arith.constant 16.6355324 : f32
// CHECK: %[[DENORMAL:.+]] = arith.cmpf olt, %[[X]], %[[TINY]] : f32
// CHECK: %[[SCALED:.+]] = arith.mulf %[[X]], %[[SCALE]] : f32
// CHECK: arith.select %[[DENORMAL]], %[[SCALED]], %[[X]] : f32
// CHECK-NOT: math.log
// CHECK: %[[CORRECTED:.+]] = arith.subf %[[LOG:.+]], %[[LN2X24]] : f32
// CHECK: %[[RESULT:.+]] = arith.select %[[DENORMAL]], %[[CORRECTED]], %[[LOG]] : f32
// CHECK: arith.cmpf olt, %[[V]], %{{.+}} : vector<8xf32>
// CHECK: arith.mulf %[[V]], %{{.+}} : vector<8xf32>
// CHECK: %[[ERF:.+]] = math.copysign %{{.+}}, %[[X]] : f32
// CHECK-NOT: math.erf
// CHECK: return %[[RESULT]], %{{.+}}, %{{.+}}, %[[ERF]]
// Only the ops being approximated are fixed (ops=math.tanh: none of these).
// ONLYTANH-LABEL: func.func @special_values_f32
// ONLYTANH-NOT: math.copysign
// ONLYTANH-NOT: arith.cmpf
// ONLYTANH: math.erf
func.func @special_values_f32(%x: f32, %v: vector<8xf32>) -> (f32, f32, vector<8xf32>, f32) {
  %0 = math.log %x : f32
  %1 = math.log2 %x : f32
  %2 = math.log %v : vector<8xf32>
  %3 = math.erf %x : f32
  return %0, %1, %2, %3 : f32, f32, vector<8xf32>, f32
}

// -----

// f32 erf is ours: a * P(a^2) below 1 (a = |x|); above, 1 - exp(-c^2) *
// R(1/c) with c = a clamped to [1, 4] by NaN-propagating min/max; the exp
// expanded too; the sign of x put back (erf(-0.0) = -0.0). No interval
// tables: one division (1/c), none of upstream's selects between three
// sets of coefficients. Scalars and vectors alike.
// CHECK-LABEL: func.func @erf_f32
// CHECK-SAME: (%[[X:.+]]: f32, %[[V:.+]]: vector<8xf32>)
// CHECK-DAG: %[[ONE:.+]] = arith.constant 1.000000e+00 : f32
// CHECK-DAG: %[[FOUR:.+]] = arith.constant 4.000000e+00 : f32
// CHECK: %[[A:.+]] = math.absf %[[X]] : f32
// CHECK: %[[T:.+]] = arith.mulf %[[A]], %[[A]] : f32
// CHECK-COUNT-6: math.fma %{{.+}}, %[[T]], %{{.+}} : f32
// CHECK: %[[SMALL:.+]] = arith.mulf %[[A]], %{{.+}} : f32
// CHECK: %[[LO:.+]] = arith.maximumf %[[A]], %[[ONE]] : f32
// CHECK: %[[C:.+]] = arith.minimumf %[[LO]], %[[FOUR]] : f32
// CHECK-NOT: math.exp
// CHECK: %[[U:.+]] = arith.divf %[[ONE]], %[[C]] : f32
// CHECK-COUNT-8: math.fma %{{.+}}, %[[U]], %{{.+}} : f32
// CHECK: %[[LARGE:.+]] = arith.subf %[[ONE]], %{{.+}} : f32
// CHECK: %[[BELOW:.+]] = arith.cmpf olt, %[[A]], %[[ONE]] : f32
// CHECK: %[[R:.+]] = arith.select %[[BELOW]], %[[SMALL]], %[[LARGE]] : f32
// CHECK: %[[ERF:.+]] = math.copysign %[[R]], %[[X]] : f32
// CHECK: math.absf %[[V]] : vector<8xf32>
// CHECK: arith.divf %{{.+}}, %{{.+}} : vector<8xf32>
// CHECK: %[[VERF:.+]] = math.copysign %{{.+}}, %[[V]] : vector<8xf32>
// CHECK-NOT: math.erf
// CHECK-NOT: math.exp
// CHECK: return %[[ERF]], %[[VERF]]
func.func @erf_f32(%x: f32, %v: vector<8xf32>) -> (f32, vector<8xf32>) {
  %0 = math.erf %x : f32
  %1 = math.erf %v : vector<8xf32>
  return %0, %1 : f32, vector<8xf32>
}

// -----

// log1p and expm1 that are not approximated (f64 here; f32 when not listed)
// would lower as log(1 + x) and exp(x) - 1, 0 for tiny x: they become
// Goldberg's and Kahan's forms on an accurate log and exp, with x itself
// where 1 + x or exp(x) rounds to 1 (-0.0, denormals), and +inf for +inf.
// CHECK-LABEL: func.func @log1p_expm1_f64
// CHECK-SAME: (%[[X:.+]]: f64)
// CHECK-DAG: %[[ONE:.+]] = arith.constant 1.000000e+00 : f64
// CHECK-DAG: %[[INF:.+]] = arith.constant 0x7FF0000000000000 : f64
// CHECK: %[[U:.+]] = arith.addf %[[X]], %[[ONE]] : f64
// CHECK: %[[D:.+]] = arith.subf %[[U]], %[[ONE]] : f64
// CHECK: %[[LOG:.+]] = math.log %[[U]] : f64
// CHECK: %[[Q:.+]] = arith.divf %[[X]], %[[D]] : f64
// CHECK: %[[R:.+]] = arith.mulf %[[LOG]], %[[Q]] : f64
// CHECK: %[[TINY:.+]] = arith.cmpf oeq, %[[D]], %{{.+}} : f64
// CHECK: %[[R1:.+]] = arith.select %[[TINY]], %[[X]], %[[R]] : f64
// CHECK: %[[ISINF:.+]] = arith.cmpf oeq, %[[U]], %[[INF]] : f64
// CHECK: %[[LOG1P:.+]] = arith.select %[[ISINF]], %[[U]], %[[R1]] : f64
// CHECK: %[[E:.+]] = math.exp %[[X]] : f64
// CHECK: %[[EM1:.+]] = arith.subf %[[E]], %[[ONE]] : f64
// CHECK: math.log %[[E]] : f64
// CHECK: arith.cmpf oeq, %[[E]], %[[ONE]] : f64
// CHECK: arith.cmpf oeq, %[[EM1]], %{{.+}} : f64
// CHECK: %[[EXPM1:.+]] = arith.select %{{.+}}, %[[E]], %{{.+}} : f64
// CHECK-NOT: math.log1p
// CHECK-NOT: math.expm1
// CHECK: return %[[LOG1P]], %[[EXPM1]]
func.func @log1p_expm1_f64(%x: f64) -> (f64, f64) {
  %0 = math.log1p %x : f64
  %1 = math.expm1 %x : f64
  return %0, %1 : f64, f64
}

// x ** n with a constant n >= 0 becomes multiplications (binary
// exponentiation: x ** 5 = x * (x * x) ** 2), vectors too; x ** 0 is 1
// (NaN ** 0 too, as in eager); a negative exponent keeps fpowi.
// CHECK-LABEL: func.func @fpowi
// CHECK-SAME: (%[[X:.*]]: vector<16xf32>, %[[Y:.*]]: f32)
// CHECK-DAG: %[[ONE:.*]] = arith.constant dense<1.000000e+00> : vector<16xf32>
// CHECK: %[[X2:.*]] = arith.mulf %[[X]], %[[X]] : vector<16xf32>
// CHECK: %[[X4:.*]] = arith.mulf %[[X2]], %[[X2]] : vector<16xf32>
// CHECK: %[[X5:.*]] = arith.mulf %[[X]], %[[X4]] : vector<16xf32>
// CHECK: %[[NEG:.*]] = math.fpowi %[[Y]], %{{.*}} : f32, i64
// CHECK: return %[[X5]], %[[ONE]], %[[NEG]]
func.func @fpowi(%x: vector<16xf32>, %y: f32) -> (vector<16xf32>, vector<16xf32>, f32) {
  %c5 = arith.constant dense<5> : vector<16xi64>
  %c0 = arith.constant dense<0> : vector<16xi64>
  %m2 = arith.constant -2 : i64
  %a = math.fpowi %x, %c5 : vector<16xf32>, vector<16xi64>
  %b = math.fpowi %x, %c0 : vector<16xf32>, vector<16xi64>
  %c = math.fpowi %y, %m2 : f32, i64
  return %a, %b, %c : vector<16xf32>, vector<16xf32>, f32
}
