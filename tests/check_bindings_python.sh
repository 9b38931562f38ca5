#!/usr/bin/env bash
# The Python module generated from bindings/tpurt.i binding's tests (make test-python).
exec bash "$(dirname "$0")/run_binding_tests.sh" python
