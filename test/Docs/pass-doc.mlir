// docs/Passes.md is generated: PassesDocHeader.md, then mlir-tblgen
// -gen-pass-doc of include/lazymlir/Transforms/Passes.td. This fails while
// the committed copy differs from what they generate; regenerate it with
//   ninja -C build lazymlir-pass-doc && cp build/docs/Passes.md docs/Passes.md

// RUN: mlir-tblgen -gen-pass-doc %mlir_includes -I %lazymlir_src/include \
// RUN:   %lazymlir_src/include/lazymlir/Transforms/Passes.td -o %t.passes.md
// RUN: cat %lazymlir_src/include/lazymlir/Transforms/PassesDocHeader.md \
// RUN:   %t.passes.md > %t.doc.md
// RUN: diff -u %lazymlir_src/docs/Passes.md %t.doc.md
