//===- WeftParallelOps.td - ParallelOps of the weft dialect ---------*- tablegen -*-===//
//
// Included by WeftOps.td. See docs/lowering.md.
//
//===----------------------------------------------------------------------===//
#ifndef WEFT_PARALLELOPS_TD
#define WEFT_PARALLELOPS_TD

#endif // WEFT_PARALLELOPS_TD
