//===- WeftInterfaces.td - Weft op interfaces --------------*- tablegen -*-===//
//
// Included by WeftOps.td.
//
//===----------------------------------------------------------------------===//
#ifndef WEFT_INTERFACES_TD
#define WEFT_INTERFACES_TD

include "mlir/IR/OpBase.td"

def Weft_OpStateInterface : OpInterface<"OpStateInterface"> {
  let description = [{
    A layer whose backward kernel reads tensors that the forward computes
    internally (a norm's row statistics; queries, keys, values, the attention
    context and log-sum-exp; the MLP's up, gate and hidden activations). A forward op may return them
    as trailing `state` results, and its grad op then takes them as trailing
    `state` operands instead of recomputing them from its inputs;
    weft-autodiff decides which (docs/autodiff.md, "Op state"). Both sides
    implement `getStateTypes`: the forward op for its results, the grad op
    for its operands, from the same operands and attributes.
  }];
  let cppNamespace = "::mlir::weft";
  let methods = [
    InterfaceMethod<[{
        The types the state tensors have, in order, whether or not this op
        carries them.
      }], "::llvm::SmallVector<::mlir::Type>", "getStateTypes">,
    InterfaceMethod<[{
        The names of the state tensors, in order (for diagnostics and plan
        buffer names).
      }], "::llvm::SmallVector<::llvm::StringRef>", "getStateNames">,
  ];
}

#endif // WEFT_INTERFACES_TD
