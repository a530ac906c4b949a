// RUN: lazymlir-opt %s --split-input-file --verify-diagnostics --lazymlir-donate-arguments --lazymlir-drop-donated-results > /dev/null

// What the runtime asked for and the graph cannot do is a diagnostic (the
// runtime then compiles the graph without donation), never a crash.
// expected-error @+1 {{argument 0 donated to result 0, which is not a tensor of its type}}
func.func @main(%p: tensor<8xf32> {lazymlir.donated_to = 0 : i64}) -> tensor<4xf32> {
  %e = tensor.empty() : tensor<4xf32>
  return %e : tensor<4xf32>
}

// -----

func.func @main(%p: tensor<8xf32> {lazymlir.donated_to = 0 : i64}, %q: tensor<8xf32> {lazymlir.donated_to = 0 : i64}) -> tensor<8xf32> {
  // expected-error @-1 {{result 0 has two donated arguments}}
  return %p : tensor<8xf32>
}
