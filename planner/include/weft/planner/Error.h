//===- Error.h - The planner's one error type -------------------*- C++ -*-===//
//
// Every user-facing failure of the planner (bad cluster file, unknown preset,
// invalid constraint, impossible world size) is a weft::planner::Error whose
// message is a single line that names the input and the offending field, so a
// driver can print it verbatim after "error: ".
//
//===----------------------------------------------------------------------===//
#ifndef WEFT_PLANNER_ERROR_H
#define WEFT_PLANNER_ERROR_H

#include <stdexcept>

namespace weft::planner {

class Error : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

} // namespace weft::planner

#endif // WEFT_PLANNER_ERROR_H
