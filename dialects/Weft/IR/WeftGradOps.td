//===- WeftGradOps.td - GradOps of the weft dialect ---------*- tablegen -*-===//
//
// Included by WeftOps.td. See docs/lowering.md.
//
//===----------------------------------------------------------------------===//
#ifndef WEFT_GRADOPS_TD
#define WEFT_GRADOPS_TD

#endif // WEFT_GRADOPS_TD
