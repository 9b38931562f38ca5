#!/usr/bin/env bash
# Floors point down: a file of lib/<layer>/ or of a folder under it includes only its own
# layer's headers, those of layers below it in DESIGN.md's table, the public tpurt/
# headers and the generated protobuf-c ones. The transport (lib/net) reaching up into
# the cluster, collectives or runtime is the case this guards first.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
# DESIGN.md's layers, top first (checkpoint: lib/checkpoint, over the runtime and embeddings). The MPI plugin (lib/mpi_plugin) sits on net's floor.
# lib/trace (traces of steps) sits under the layers whose hooks call it, on topology.
layers=(capi checkpoint runtime embedding collectives trace topology cluster net core)
rank() {
  local name=$1 i
  [ "$name" = mpi_plugin ] && name=net
  for i in "${!layers[@]}"; do [ "${layers[$i]}" = "$name" ] && { echo "$i"; return; }; done
  echo -1
}
bad=()
for dir in lib/*/; do
  layer=$(basename "$dir")
  mine=$(rank "$layer")
  [ "$mine" -ge 0 ] || { bad+=("$dir: a folder that is not in DESIGN.md's layer table"); continue; }
  while IFS=: read -r file line included; do
    to=${included%%/*}
    [ "$to" = tpurt ] && continue
    [ "$to" = "$layer" ] && continue
    [ "$layer" = mpi_plugin ] && [ "$to" = net ] && continue  # the plugin implements net's API
    theirs=$(rank "$to")
    if [ "$theirs" -lt 0 ] || [ "$theirs" -le "$mine" ]; then
      bad+=("$file:$line includes $included ($layer may include only the layers below it)")
    fi
  # Every file under the folder, subfolders too (lib/embedding/optimizers/ is embedding's).
  done < <(grep -rHn '^#include "[^"]*/' "$dir" 2>/dev/null | sed 's/^\([^:]*\):\([0-9]*\):#include "\([^"]*\)".*/\1:\2:\3/')
done
if [ ${#bad[@]} -gt 0 ]; then
  echo "check_layers: includes that point up or sideways:" >&2
  printf '  %s\n' "${bad[@]}" >&2
  exit 1
fi
echo "check_layers: every include in lib/ points down the layer table"
