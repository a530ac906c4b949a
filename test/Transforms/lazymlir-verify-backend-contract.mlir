// RUN: lazymlir-opt %s --allow-unregistered-dialect --split-input-file --verify-diagnostics --lazymlir-verify-backend-contract | FileCheck %s
// RUN: not lazymlir-opt %s --allow-unregistered-dialect --split-input-file --lazymlir-verify-backend-contract=entry=forward 2>&1 | FileCheck %s --check-prefix=ENTRY

// The entry is looked up by the option's name.
// ENTRY: error: entry function 'forward' not found

// CHECK-LABEL: func.func @main
// CHECK-SAME: tensor<2x3xbf16>
func.func @main(%arg0: tensor<2x3xf32>, %arg1: tensor<i1>, %arg2: tensor<2x3xbf16>) -> tensor<2x3xi64> {
  %0 = tensor.empty() : tensor<2x3xi64>
  return %0 : tensor<2x3xi64>
}

// -----

// Dynamic dimensions cross the boundary: each run's buffers give their sizes.
// CHECK-LABEL: func.func @main
// CHECK-SAME: tensor<?x3xf32>
func.func @main(%arg0: tensor<?x3xf32>) -> tensor<?x3xf32> {
  return %arg0 : tensor<?x3xf32>
}

// -----

// expected-error @+1 {{argument #0 of type 'tensor<*xf32>' must be a ranked tensor}}
func.func @main(%arg0: tensor<*xf32>) -> tensor<4x3xf32> {
  %0 = tensor.empty() : tensor<4x3xf32>
  return %0 : tensor<4x3xf32>
}

// -----

// expected-error @+2 {{argument #0 of type 'tensor<2xcomplex<f32>>' has an element type the runtime cannot map to a torch dtype}}
// expected-error @+1 {{result #0 of type 'tensor<2xcomplex<f32>>' has an element type the runtime cannot map to a torch dtype}}
func.func @main(%arg0: tensor<2xcomplex<f32>>) -> tensor<2xcomplex<f32>> {
  return %arg0 : tensor<2xcomplex<f32>>
}

// -----

// expected-error @+1 {{argument #0 of type 'tensor<*xf32>' must be a ranked tensor}}
func.func @main(%arg0: tensor<*xf32>) -> tensor<4xf32> {
  %0 = tensor.empty() : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// expected-error @+1 {{result #0 of type 'f32' must be a ranked tensor}}
func.func @main(%arg0: tensor<4xf32>) -> f32 {
  %cst = arith.constant 0.0 : f32
  return %cst : f32
}

// -----

// expected-error @+1 {{entry function 'main' not found}}
module {
  func.func @forward(%arg0: tensor<4xf32>) -> tensor<4xf32> {
    return %arg0 : tensor<4xf32>
  }
}

// -----

// expected-error @+1 {{entry function 'main' must be public}}
func.func private @main(%arg0: tensor<4xf32>) -> tensor<4xf32> {
  return %arg0 : tensor<4xf32>
}

// -----

// The runtime parses with unregistered dialects allowed (for torch-mlir's
// TMTensor ops, lowered before this check); anything unregistered left is
// rejected with a diagnostic.
func.func @main(%arg0: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{unregistered op 'foo.bar' in the backend input: the backend cannot compile it}}
  %0 = "foo.bar"(%arg0) : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}
