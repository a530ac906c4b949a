// RUN: lazymlir-opt %s --allow-unregistered-dialect --split-input-file --verify-diagnostics --lazymlir-lower-tm-tensor --canonicalize --cse | FileCheck %s
// lazymlir-opt allows unregistered dialects by default (dumps hold TMTensor ops):
// RUN: lazymlir-opt %s --split-input-file --verify-diagnostics --lazymlir-lower-tm-tensor --canonicalize --cse | FileCheck %s

// torch-mlir's TMTensor ops arrive in the generic form (MLIR 22 parses them
// as unregistered ops), as the frontend prints them.

// embedding_dense_backward: updates [6, 1, 4] at rows indices[i, 0] of a
// zero 10x4 (a splat constant: becomes a fill), combined by addition;
// rows out of range (negative ones too: the frontend wraps index_put's) are
// skipped and fail a cf.assert (the runtime checks' flag).
// CHECK-LABEL: func.func @scatter_add
// CHECK-NOT: tm_tensor
// CHECK: %[[EMPTY:.*]] = tensor.empty() : tensor<10x4xf32>
// CHECK: %[[FILL:.*]] = linalg.fill ins(%{{.*}} : f32) outs(%[[EMPTY]] : tensor<10x4xf32>)
// (the loop over the update's unit dimension 1 folds away)
// CHECK: scf.for %[[I:.*]] = %{{.*}} iter_args(%[[A0:.*]] = %[[FILL]])
// CHECK: scf.for %[[K:.*]] = %{{.*}} iter_args(%[[A2:.*]] = %[[A0]])
// CHECK: %[[IDX:.*]] = tensor.extract %arg1[%[[I]], %c0] : tensor<6x1xi64>
// CHECK: %[[ROW:.*]] = arith.index_cast %[[IDX]] : i64 to index
// CHECK: %[[GE:.*]] = arith.cmpi sge, %[[ROW]], %c0
// CHECK: %[[LT:.*]] = arith.cmpi slt, %[[ROW]], %c10
// CHECK: %[[OK:.*]] = arith.andi %[[GE]], %[[LT]]
// CHECK: cf.assert %[[OK]], "scatter index out of range"
// CHECK: scf.if %[[OK]]
// CHECK: %[[U:.*]] = tensor.extract %arg0[%[[I]], %c0, %[[K]]]
// CHECK: %[[C:.*]] = tensor.extract %[[A2]][%[[ROW]], %[[K]]]
// CHECK: %[[S:.*]] = arith.addf %[[C]], %[[U]]
// CHECK: tensor.insert %[[S]] into %[[A2]][%[[ROW]], %[[K]]]
// CHECK: } else {
// CHECK: scf.yield %[[A2]]
func.func @scatter_add(%arg0: tensor<6x1x4xf32>, %arg1: tensor<6x1xi64>) -> tensor<10x4xf32> {
  %cst = arith.constant dense<0.000000e+00> : tensor<10x4xf32>
  %0 = "tm_tensor.scatter"(%arg0, %arg1, %cst) <{dimension_map = array<i64: 0>, operandSegmentSizes = array<i32: 2, 1>, unique_indices = false}> ({
  ^bb0(%a: f32, %b: f32):
    %1 = "arith.addf"(%b, %a) <{fastmath = #arith.fastmath<none>}> : (f32, f32) -> f32
    "tm_tensor.yield"(%1) : (f32) -> ()
  }) : (tensor<6x1x4xf32>, tensor<6x1xi64>, tensor<10x4xf32>) -> tensor<10x4xf32>
  return %0 : tensor<10x4xf32>
}

// -----

// Scatter into a function argument (index_put): the loops carry the
// argument (lazymlir-readonly-arguments makes bufferization copy it); an
// overwriting combiner ignores the current value.
// CHECK-LABEL: func.func @scatter_into_argument
// CHECK: scf.for {{.*}} iter_args(%[[A:.*]] = %arg0)
// CHECK: %[[IDX:.*]] = tensor.extract %arg2[%{{.*}}, %c0] : tensor<3x1xi32>
// CHECK: arith.index_cast %[[IDX]] : i32 to index
// CHECK: scf.if
// CHECK: %[[U:.*]] = tensor.extract %arg1
// CHECK: tensor.insert %[[U]] into %[[A]]
func.func @scatter_into_argument(%arg0: tensor<8xi32>, %arg1: tensor<3xi32>, %arg2: tensor<3x1xi32>) -> tensor<8xi32> {
  %0 = "tm_tensor.scatter"(%arg1, %arg2, %arg0) <{dimension_map = array<i64: 0>, operandSegmentSizes = array<i32: 2, 1>, unique_indices = true}> ({
  ^bb0(%a: i32, %b: i32):
    "tm_tensor.yield"(%a) : (i32) -> ()
  }) : (tensor<3xi32>, tensor<3x1xi32>, tensor<8xi32>) -> tensor<8xi32>
  return %0 : tensor<8xi32>
}

// -----

// cumsum along dim 1 (innermost): the first column is copied, then each
// element is the running value (a loop-carried scalar) combined with the
// input; torch-mlir's zero fill of the output is dead (every element is
// written) and dropped.
// CHECK-LABEL: func.func @scan_inclusive
// CHECK-NOT: tm_tensor
// CHECK-NOT: linalg.fill
// CHECK: %[[E:.*]] = tensor.empty() : tensor<8x5xf32>
// CHECK: scf.for %[[R:.*]] = {{.*}} iter_args(%[[O:.*]] = %[[E]])
// CHECK: %[[X0:.*]] = tensor.extract %arg0[%[[R]], %c0]
// CHECK: %[[O1:.*]] = tensor.insert %[[X0]] into %[[O]][%[[R]], %c0]
// CHECK: scf.for %[[I:.*]] = %c1 to %c5 step %c1 iter_args(%[[O2:.*]] = %[[O1]], %[[P:.*]] = %[[X0]])
// CHECK: %[[X:.*]] = tensor.extract %arg0[%[[R]], %[[I]]]
// CHECK: %[[S:.*]] = arith.addf %[[P]], %[[X]]
// CHECK: %[[O3:.*]] = tensor.insert %[[S]] into %[[O2]][%[[R]], %[[I]]]
// CHECK: scf.yield %[[O3]], %[[S]]
// CHECK: %[[ACC:.*]] = tensor.extract_slice %{{.*}}[0, 4] [8, 1] [1, 1] : tensor<8x5xf32> to tensor<8xf32>
// CHECK: return %{{.*}}, %[[ACC]]
func.func @scan_inclusive(%arg0: tensor<8x5xf32>) -> (tensor<8x5xf32>, tensor<8xf32>) {
  %cst = arith.constant 0.000000e+00 : f32
  %e = tensor.empty() : tensor<8x5xf32>
  %o = linalg.fill ins(%cst : f32) outs(%e : tensor<8x5xf32>) -> tensor<8x5xf32>
  %ea = tensor.empty() : tensor<8xf32>
  %a = linalg.fill ins(%cst : f32) outs(%ea : tensor<8xf32>) -> tensor<8xf32>
  %0:2 = "tm_tensor.scan"(%arg0, %o, %a) <{dimension = 1 : i64, inclusive = true, operandSegmentSizes = array<i32: 1, 2>}> ({
  ^bb0(%x: f32, %y: f32):
    %1 = "arith.addf"(%x, %y) <{fastmath = #arith.fastmath<none>}> : (f32, f32) -> f32
    "tm_tensor.yield"(%1) : (f32) -> ()
  }) : (tensor<8x5xf32>, tensor<8x5xf32>, tensor<8xf32>) -> (tensor<8x5xf32>, tensor<8xf32>)
  return %0#0, %0#1 : tensor<8x5xf32>, tensor<8xf32>
}

// -----

// Along an outer dimension: row by row, each row from the previous one
// (contiguous inner loop).
// CHECK-LABEL: func.func @scan_outer
// CHECK: scf.for %[[J0:.*]] = %c0 to %c6 step %c1
// CHECK: tensor.extract %arg0[%c0, %[[J0]]]
// CHECK: scf.for %[[I:.*]] = %c1 to %c4 step %c1 iter_args(%[[O:.*]] = %{{.*}})
// CHECK: %[[IM1:.*]] = arith.subi %[[I]], %c1
// CHECK: scf.for %[[J:.*]] = %c0 to %c6 step %c1 iter_args(%[[O2:.*]] = %[[O]])
// CHECK: %[[P:.*]] = tensor.extract %[[O2]][%[[IM1]], %[[J]]]
// CHECK: %[[X:.*]] = tensor.extract %arg0[%[[I]], %[[J]]]
// CHECK: %[[S:.*]] = arith.addi %[[P]], %[[X]]
// CHECK: tensor.insert %[[S]] into %[[O2]][%[[I]], %[[J]]]
func.func @scan_outer(%arg0: tensor<4x6xi64>) -> tensor<4x6xi64> {
  %c0 = arith.constant 0 : i64
  %e = tensor.empty() : tensor<4x6xi64>
  %o = linalg.fill ins(%c0 : i64) outs(%e : tensor<4x6xi64>) -> tensor<4x6xi64>
  %ea = tensor.empty() : tensor<6xi64>
  %a = linalg.fill ins(%c0 : i64) outs(%ea : tensor<6xi64>) -> tensor<6xi64>
  %0:2 = "tm_tensor.scan"(%arg0, %o, %a) <{dimension = 0 : i64, inclusive = true, operandSegmentSizes = array<i32: 1, 2>}> ({
  ^bb0(%x: i64, %y: i64):
    %1 = "arith.addi"(%x, %y) <{overflowFlags = #arith.overflow<none>}> : (i64, i64) -> i64
    "tm_tensor.yield"(%1) : (i64) -> ()
  }) : (tensor<4x6xi64>, tensor<4x6xi64>, tensor<6xi64>) -> (tensor<4x6xi64>, tensor<6xi64>)
  return %0#0 : tensor<4x6xi64>
}

// -----

// Exclusive scan: the first element is the accumulator, then in[i-1].
// CHECK-LABEL: func.func @scan_exclusive
// CHECK: %[[A:.*]] = tensor.extract %arg1[]
// CHECK: scf.for %[[I:.*]] = %c1 to %c4 step %c1 iter_args(%{{.*}} = %{{.*}}, %[[P:.*]] = %[[A]])
// CHECK: %[[IM1:.*]] = arith.subi %[[I]], %c1
// CHECK: %[[X:.*]] = tensor.extract %arg0[%[[IM1]]]
// CHECK: arith.muli %[[P]], %[[X]]
func.func @scan_exclusive(%arg0: tensor<4xi64>, %arg1: tensor<i64>) -> tensor<4xi64> {
  %e = tensor.empty() : tensor<4xi64>
  %0:2 = "tm_tensor.scan"(%arg0, %e, %arg1) <{dimension = 0 : i64, inclusive = false, operandSegmentSizes = array<i32: 1, 2>}> ({
  ^bb0(%x: i64, %y: i64):
    %1 = "arith.muli"(%x, %y) <{overflowFlags = #arith.overflow<none>}> : (i64, i64) -> i64
    "tm_tensor.yield"(%1) : (i64) -> ()
  }) : (tensor<4xi64>, tensor<4xi64>, tensor<i64>) -> (tensor<4xi64>, tensor<i64>)
  return %0#0 : tensor<4xi64>
}

// -----

// sort of values and their indices along dim 1 (torch.sort): merge passes
// of widths 4^p and 2*4^p (5 elements: 3 levels, 2 pairs), the comparator
// inlined on both operands' left and right elements; scratch tensors of the
// operands' shapes (distinct allocations: CSE'd tensor.empty ops made
// bufferization share one buffer) take every other pass.
// CHECK-LABEL: func.func @sort
// CHECK-NOT: tm_tensor
// CHECK: %[[T0:.*]] = bufferization.alloc_tensor() : tensor<8x5xf32>
// CHECK: %[[T1:.*]] = bufferization.alloc_tensor() : tensor<8x5xi64>
// CHECK: scf.for %[[R:.*]] = {{.*}} iter_args(%[[V:.*]] = %arg0, %[[X:.*]] = %arg1, %[[TV:.*]] = %[[T0]], %[[TX:.*]] = %[[T1]])
// CHECK: scf.for %[[P:.*]] = %c0 to %c2 step %c1
// CHECK: scf.for
// CHECK: scf.for
// CHECK: %[[L:.*]] = tensor.extract %{{.*}}[%[[R]], %{{.*}}] : tensor<8x5xf32>
// CHECK: %[[RR:.*]] = tensor.extract %{{.*}}[%[[R]], %{{.*}}] : tensor<8x5xf32>
// CHECK: %[[LE:.*]] = arith.cmpf ole, %[[L]], %[[RR]]
// CHECK: %[[OR:.*]] = arith.ori %{{.*}}, %[[LE]]
// CHECK: %[[TAKE:.*]] = arith.andi %{{.*}}, %[[OR]]
// CHECK: arith.select %[[TAKE]], %[[L]], %[[RR]] : f32
// CHECK: arith.select %[[TAKE]], %{{.*}}, %{{.*}} : i64
func.func @sort(%arg0: tensor<8x5xf32>, %arg1: tensor<8x5xi64>) -> (tensor<8x5xf32>, tensor<8x5xi64>) {
  %0:2 = "tm_tensor.sort"(%arg0, %arg1) <{dimension = 1 : i64, operandSegmentSizes = array<i32: 0, 2>}> ({
  ^bb0(%a: f32, %b: f32, %c: i64, %d: i64):
    %1 = "arith.cmpf"(%a, %b) <{fastmath = #arith.fastmath<none>, predicate = 5 : i64}> : (f32, f32) -> i1
    "tm_tensor.yield"(%1) : (i1) -> ()
  }) : (tensor<8x5xf32>, tensor<8x5xi64>) -> (tensor<8x5xf32>, tensor<8x5xi64>)
  return %0#0, %0#1 : tensor<8x5xf32>, tensor<8x5xi64>
}

// -----

// A TMTensor op the pass does not lower is an error, not a crash.
func.func @attention(%q: tensor<1x4x8xf32>, %k: tensor<1x4x8xf32>, %v: tensor<1x4x8xf32>) -> tensor<1x4x8xf32> {
  %e = tensor.empty() : tensor<1x4x8xf32>
  // expected-error @+1 {{unsupported TMTensor op 'tm_tensor.attention'}}
  %0 = "tm_tensor.attention"(%q, %k, %v, %e) <{operandSegmentSizes = array<i32: 3, 1>}> : (tensor<1x4x8xf32>, tensor<1x4x8xf32>, tensor<1x4x8xf32>, tensor<1x4x8xf32>) -> tensor<1x4x8xf32>
  return %0 : tensor<1x4x8xf32>
}

// -----

// Dynamic shapes (lazymlir.trace.dynamic): the embedding backward of a `?`-long
// sequence. The loops run to tensor.dim of the updates, and the rows are
// checked against the original's size as before.
// CHECK-LABEL: func.func @scatter_dynamic
// CHECK-NOT: tm_tensor
// CHECK: %[[N:.*]] = tensor.dim %arg0, %c0 : tensor<?x1x4xf32>
// CHECK: scf.for %[[I:.*]] = %c0 to %[[N]] step %c1
// CHECK: arith.cmpi slt, %{{.*}}, %c10
// CHECK: cf.assert
func.func @scatter_dynamic(%arg0: tensor<?x1x4xf32>, %arg1: tensor<?x1xi64>) -> tensor<10x4xf32> {
  %cst = arith.constant dense<0.000000e+00> : tensor<10x4xf32>
  %0 = "tm_tensor.scatter"(%arg0, %arg1, %cst) <{dimension_map = array<i64: 0>, operandSegmentSizes = array<i32: 2, 1>, unique_indices = false}> ({
  ^bb0(%a: f32, %b: f32):
    %1 = "arith.addf"(%b, %a) <{fastmath = #arith.fastmath<none>}> : (f32, f32) -> f32
    "tm_tensor.yield"(%1) : (f32) -> ()
  }) : (tensor<?x1x4xf32>, tensor<?x1xi64>, tensor<10x4xf32>) -> tensor<10x4xf32>
  return %0 : tensor<10x4xf32>
}

// -----

// An update slice of dynamic size in a dimension that is not indexed could
// write past the original: refused with a diagnostic (the graph then
// compiles static).
func.func @scatter_dynamic_slice(%arg0: tensor<3x?xf32>, %arg1: tensor<3x1xi64>, %arg2: tensor<10x4xf32>) -> tensor<10x4xf32> {
  // expected-error @+1 {{update slice of dynamic size in a dimension that is not indexed}}
  %0 = "tm_tensor.scatter"(%arg0, %arg1, %arg2) <{dimension_map = array<i64: 0>, operandSegmentSizes = array<i32: 2, 1>, unique_indices = false}> ({
  ^bb0(%a: f32, %b: f32):
    "tm_tensor.yield"(%a) : (f32) -> ()
  }) : (tensor<3x?xf32>, tensor<3x1xi64>, tensor<10x4xf32>) -> tensor<10x4xf32>
  return %0 : tensor<10x4xf32>
}

// -----

// cumsum along a `?` dimension: the scan runs only when the length is
// positive, to tensor.dim; the accumulator is the last slice from a length
// of 2 on, else the initial one.
// CHECK-LABEL: func.func @scan_dynamic
// CHECK-NOT: tm_tensor
// CHECK: %[[N:.*]] = tensor.dim %arg0, %c1 : tensor<8x?xf32>
// CHECK: %[[POS:.*]] = arith.cmpi sgt, %[[N]], %c0
// CHECK: scf.if %[[POS]]
// CHECK: scf.for %{{.*}} = %c1 to %[[N]] step %c1
// CHECK: %[[TWO:.*]] = arith.cmpi sge, %[[N]], %c2
// CHECK: scf.if %[[TWO]]
// CHECK: %[[LAST:.*]] = arith.subi %[[N]], %c1
// CHECK: tensor.extract_slice %{{.*}}[0, %[[LAST]]] [8, 1] [1, 1] : tensor<8x?xf32> to tensor<8xf32>
func.func @scan_dynamic(%arg0: tensor<8x?xf32>) -> (tensor<8x?xf32>, tensor<8xf32>) {
  %cst = arith.constant 0.000000e+00 : f32
  %c1 = arith.constant 1 : index
  %n = tensor.dim %arg0, %c1 : tensor<8x?xf32>
  %e = tensor.empty(%n) : tensor<8x?xf32>
  %o = linalg.fill ins(%cst : f32) outs(%e : tensor<8x?xf32>) -> tensor<8x?xf32>
  %ea = tensor.empty() : tensor<8xf32>
  %a = linalg.fill ins(%cst : f32) outs(%ea : tensor<8xf32>) -> tensor<8xf32>
  %0:2 = "tm_tensor.scan"(%arg0, %o, %a) <{dimension = 1 : i64, inclusive = true, operandSegmentSizes = array<i32: 1, 2>}> ({
  ^bb0(%x: f32, %y: f32):
    %1 = "arith.addf"(%x, %y) <{fastmath = #arith.fastmath<none>}> : (f32, f32) -> f32
    "tm_tensor.yield"(%1) : (f32) -> ()
  }) : (tensor<8x?xf32>, tensor<8x?xf32>, tensor<8xf32>) -> (tensor<8x?xf32>, tensor<8xf32>)
  return %0#0, %0#1 : tensor<8x?xf32>, tensor<8xf32>
}

// -----

// Sorting rows of a `?` count: the slices loop to tensor.dim, and the
// scratch tensors are allocated with it.
// CHECK-LABEL: func.func @sort_dynamic_rows
// CHECK-NOT: tm_tensor
// CHECK: %[[R:.*]] = tensor.dim %arg0, %c0 : tensor<?x5xf32>
// CHECK: bufferization.alloc_tensor(%[[R]]) : tensor<?x5xf32>
// CHECK: scf.for %{{.*}} = %c0 to %[[R]] step %c1
func.func @sort_dynamic_rows(%arg0: tensor<?x5xf32>) -> tensor<?x5xf32> {
  %0 = "tm_tensor.sort"(%arg0) <{dimension = 1 : i64, operandSegmentSizes = array<i32: 0, 1>}> ({
  ^bb0(%a: f32, %b: f32):
    %1 = "arith.cmpf"(%a, %b) <{predicate = 5 : i64}> : (f32, f32) -> i1
    "tm_tensor.yield"(%1) : (i1) -> ()
  }) : (tensor<?x5xf32>) -> tensor<?x5xf32>
  return %0 : tensor<?x5xf32>
}

// -----

// The number of merge passes is fixed at compile time: a `?` sort
// dimension is refused (the graph compiles static).
func.func @sort_dynamic_length(%arg0: tensor<4x?xf32>) -> tensor<4x?xf32> {
  // expected-error @+1 {{sorting along a dynamic dimension is not supported}}
  %0 = "tm_tensor.sort"(%arg0) <{dimension = 1 : i64, operandSegmentSizes = array<i32: 0, 1>}> ({
  ^bb0(%a: f32, %b: f32):
    %1 = "arith.cmpf"(%a, %b) <{predicate = 5 : i64}> : (f32, f32) -> i1
    "tm_tensor.yield"(%1) : (i1) -> ()
  }) : (tensor<4x?xf32>) -> tensor<4x?xf32>
  return %0 : tensor<4x?xf32>
}
