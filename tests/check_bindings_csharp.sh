#!/usr/bin/env bash
# The C# binding's tests (make test-csharp).
exec bash "$(dirname "$0")/run_binding_tests.sh" csharp
