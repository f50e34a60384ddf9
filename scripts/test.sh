#!/usr/bin/env bash
# Installs what is needed, builds, and runs every test (GoogleTest suites and
# lit suites, through ctest). Ends with the line `N passed, N failed`
# (`, N skipped` when GPU tests were skipped for lack of a GPU).
set -uo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh || exit 1
./scripts/build.sh || exit 1
BUILD=${WEFT_BUILD_DIR:-build}
rm -f "$BUILD/ctest-results.xml" "$BUILD/lit-results.xml"
(cd "$BUILD" && ctest --output-on-failure -j "$(nproc)" \
  --output-junit ctest-results.xml)
ctest_status=$?
python3 scripts/summarize-tests.py "$BUILD/ctest-results.xml" "$BUILD/lit-results.xml"
summary_status=$?
[ $ctest_status -eq 0 ] && [ $summary_status -eq 0 ]
