//===- Passes.td - lazymlir transformation passes ----------*- tablegen -*-===//

#ifndef LAZYMLIR_TRANSFORMS_PASSES
#define LAZYMLIR_TRANSFORMS_PASSES

include "mlir/Pass/PassBase.td"

def VerifyBackendContractPass
    : Pass<"lazymlir-verify-backend-contract", "mlir::ModuleOp"> {
  let summary = "Check that a module is linalg-on-tensors the lazymlir "
                "backend can compile and call";
  let description = [{
    The contract between torch-mlir's frontend and lazymlir's backend is
    textual linalg-on-tensors IR (DESIGN.md, decision 1). The runtime calls
    one entry function with torch buffers, so its signature must be something
    a torch tensor can be passed as: ranked tensors of static shape whose
    element type the runtime maps to a torch dtype. This pass rejects anything
    else with a diagnostic on the offending argument or result, so that a
    coverage gap surfaces as a clear error (and an eager fallback in the lazy
    device) instead of a failure deep inside bufferization or the JIT.

    Checked: the entry function exists, is public and has a body; every
    argument and result is a ranked, statically shaped tensor of
    f16/bf16/f32/f64 or i1/i8/i16/i32/i64; no op in the module still works on
    torch-dialect types (an unfinished frontend lowering).
  }];
  let options = [
    Option<"entry", "entry", "std::string", /*default=*/"\"main\"",
           "Name of the function the runtime calls">,
  ];
}

#endif // LAZYMLIR_TRANSFORMS_PASSES
