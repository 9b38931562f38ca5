# Sourced by the multi-process checks (check_cluster.sh, check_mpi.sh): ok and bad
# count the checks; bad also prints the tail of the output it is given.
passed=0
failed=0
ok() { echo "ok: $1"; passed=$((passed + 1)); }
bad() {
  echo "FAILED: $1" >&2
  [ -n "${2:-}" ] && printf '%s\n' "$2" | tail -n 40 >&2
  failed=$((failed + 1))
}
