// Bad input must produce MLIR diagnostics and a non-zero exit, never a crash.

// RUN: not lazymlir-opt %s 2>&1 | FileCheck %s --check-prefix=PARSE
// PARSE: invalid-input.mlir:[[# @LINE + 6]]:{{[0-9]+}}: error:

// RUN: not lazymlir-opt %s --no-such-pass 2>&1 | FileCheck %s --check-prefix=UNKNOWN
// UNKNOWN: Unknown command line argument '--no-such-pass'
func.func @main(%arg0: tensor<4xf32>) -> tensor<4xf32> {
  %0 = arith.addf %arg0, %arg0 : tensor<4xf32>
  return %0, %0 : tensor<4xf32>
}
