// RUN: lazymlir-opt %s --split-input-file --lazymlir-early-deallocs | FileCheck %s

// Two temporaries freed at the end of the block (as the ownership-based
// deallocation leaves them): each moves to right after its last use, so
// the second allocation can reuse the first one's memory. A use through a
// view and through the buffer's address passed to a call count.
// CHECK-LABEL: func.func @step
// CHECK:       %[[A:.*]] = memref.alloc() : memref<1024xf32>
// CHECK:       linalg.fill {{.*}} outs(%[[A]]
// CHECK:       %[[V:.*]] = memref.subview %[[A]]
// CHECK:       linalg.copy ins(%[[V]] {{.*}} outs(%arg0
// CHECK:       %[[P:.*]] = memref.extract_aligned_pointer_as_index %[[A]]
// CHECK:       %[[I:.*]] = arith.index_cast %[[P]]
// CHECK:       call @use(%[[I]])
// CHECK-NEXT:  memref.dealloc %[[A]]
// CHECK:       %[[B:.*]] = memref.alloc() : memref<1024xf32>
// CHECK:       linalg.copy ins(%[[B]] {{.*}} outs(%arg1
// CHECK-NEXT:  memref.dealloc %[[B]]
// CHECK:       call @other
// CHECK-NEXT:  return
func.func private @use(i64)
func.func private @other()
func.func @step(%out0: memref<16xf32>, %out1: memref<1024xf32>) {
  %c = arith.constant 1.0 : f32
  %a = memref.alloc() : memref<1024xf32>
  linalg.fill ins(%c : f32) outs(%a : memref<1024xf32>)
  %v = memref.subview %a[0] [16] [1] : memref<1024xf32> to memref<16xf32, strided<[1]>>
  linalg.copy ins(%v : memref<16xf32, strided<[1]>>) outs(%out0 : memref<16xf32>)
  %p = memref.extract_aligned_pointer_as_index %a : memref<1024xf32> -> index
  %i = arith.index_cast %p : index to i64
  call @use(%i) : (i64) -> ()
  %b = memref.alloc() : memref<1024xf32>
  linalg.fill ins(%c : f32) outs(%b : memref<1024xf32>)
  linalg.copy ins(%b : memref<1024xf32>) outs(%out1 : memref<1024xf32>)
  call @other() : () -> ()
  memref.dealloc %a : memref<1024xf32>
  memref.dealloc %b : memref<1024xf32>
  return
}

// -----

// A buffer used inside a loop: freed after the loop. One whose view is
// returned is not moved (its memory outlives the block).
// CHECK-LABEL: func.func @nested
// CHECK:       scf.for
// CHECK:       }
// CHECK-NEXT:  memref.dealloc %[[A:.*]] :
// CHECK:       call @other
// CHECK:       memref.dealloc
// CHECK-NEXT:  return
func.func private @other()
func.func @nested(%n: index) -> memref<4xf32, strided<[1]>> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %f = arith.constant 2.0 : f32
  %a = memref.alloc() : memref<8xf32>
  %b = memref.alloc() : memref<8xf32>
  scf.for %i = %c0 to %n step %c1 {
    memref.store %f, %a[%c0] : memref<8xf32>
  }
  %v = memref.subview %b[0] [4] [1] : memref<8xf32> to memref<4xf32, strided<[1]>>
  call @other() : () -> ()
  memref.dealloc %a : memref<8xf32>
  memref.dealloc %b : memref<8xf32>
  return %v : memref<4xf32, strided<[1]>>
}
