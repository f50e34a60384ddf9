//===- Error.h - The plan-format library's one error type -------*- C++ -*-===//
//
// Every failure to load, write or verify a plan bundle is a weft::plan::Error
// whose message is one line naming the file, the JSON path and the reason, so
// drivers can print it verbatim after "error: ".
//
//===----------------------------------------------------------------------===//
#ifndef WEFT_PLAN_ERROR_H
#define WEFT_PLAN_ERROR_H

#include <stdexcept>

namespace weft::plan {

class Error : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

} // namespace weft::plan

#endif // WEFT_PLAN_ERROR_H
