// RUN: lazymlir-opt %s --lazymlir-outputs-at-first-write | FileCheck %s
// RUN: lazymlir-opt %s | FileCheck %s --check-prefix=PLAIN

// Each out-parameter (bufferize.result) is announced to the runtime right
// before the first op that touches it, a view's users included (the view
// itself touches nothing): %grad only after the temporary %t was freed, %y
// before its first kernel. An input and an out-parameter nothing uses get
// no call, and the attribute is gone.

// CHECK-LABEL: func.func @main(
// CHECK-SAME:    %[[X:[^:]*]]: memref<64x32xf32>,
// CHECK-SAME:    %[[Y:[^:]*]]: memref<64x32xf32>,
// CHECK-SAME:    %[[G:[^:]*]]: memref<2048xf32>,
// CHECK-SAME:    %[[U:[^:]*]]: memref<4xf32>)
// CHECK-NOT:     bufferize.result
// CHECK:         %[[T:.*]] = memref.alloc() : memref<64x32xf32>
// CHECK-NEXT:    call @k_scale(%[[X]], %[[T]])
// CHECK-NEXT:    %[[YP:.*]] = memref.extract_aligned_pointer_as_index %[[Y]]
// CHECK-NEXT:    %[[YI:.*]] = arith.index_cast %[[YP]] : index to i64
// CHECK-NEXT:    call @lazymlir_output_ready(%[[YI]]) : (i64) -> ()
// CHECK-NEXT:    call @k_scale(%[[T]], %[[Y]])
// CHECK-NEXT:    memref.dealloc %[[T]]
// CHECK-NEXT:    %[[V:.*]] = memref.expand_shape %[[G]]
// CHECK-NEXT:    %[[GP:.*]] = memref.extract_aligned_pointer_as_index %[[G]]
// CHECK-NEXT:    %[[GI:.*]] = arith.index_cast %[[GP]] : index to i64
// CHECK-NEXT:    call @lazymlir_output_ready(%[[GI]]) : (i64) -> ()
// CHECK-NEXT:    call @k_scale(%[[Y]], %[[V]])
// CHECK-NOT:     lazymlir_output_ready
// CHECK:         return
// CHECK:       func.func private @lazymlir_output_ready(i64)

// PLAIN-NOT:   lazymlir_output_ready

func.func private @k_scale(memref<64x32xf32>, memref<64x32xf32>)

func.func @main(%x: memref<64x32xf32>, %y: memref<64x32xf32> {bufferize.result},
                %grad: memref<2048xf32> {bufferize.result},
                %unused: memref<4xf32> {bufferize.result}) {
  %t = memref.alloc() : memref<64x32xf32>
  call @k_scale(%x, %t) : (memref<64x32xf32>, memref<64x32xf32>) -> ()
  call @k_scale(%t, %y) : (memref<64x32xf32>, memref<64x32xf32>) -> ()
  memref.dealloc %t : memref<64x32xf32>
  %v = memref.expand_shape %grad [[0, 1]] output_shape [64, 32] : memref<2048xf32> into memref<64x32xf32>
  call @k_scale(%y, %v) : (memref<64x32xf32>, memref<64x32xf32>) -> ()
  return
}
