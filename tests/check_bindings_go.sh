#!/usr/bin/env bash
# The Go binding's tests (make test-go).
exec bash "$(dirname "$0")/run_binding_tests.sh" go
