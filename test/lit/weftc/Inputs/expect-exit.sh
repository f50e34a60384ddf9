#!/usr/bin/env bash
# expect-exit.sh CODE CMD...: runs CMD, fails unless it exits with CODE and
# writes exactly one line to stderr; prints that line on stdout for FileCheck.
expected=$1; shift
err=$(mktemp)
"$@" 2>"$err" >/dev/null
status=$?
lines=$(wc -l <"$err")
cat "$err"
rm -f "$err"
if [ "$status" -ne "$expected" ]; then
  echo "expect-exit: exit status $status, expected $expected" >&2; exit 1
fi
if [ "$lines" -ne 1 ]; then
  echo "expect-exit: $lines lines on stderr, expected 1" >&2; exit 1
fi
