#!/usr/bin/env bash
# The Java binding's tests (make test-java).
exec bash "$(dirname "$0")/run_binding_tests.sh" java
