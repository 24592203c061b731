#!/usr/bin/env bash
# The --no-execute JSON of every shipped experiment, one file per config and command, into a folder:
# two snapshots of the same tree state are byte-identical, so a restructuring that changes no behaviour
# shows `diff -r` empty between a snapshot before it and one after.
#   scripts/json-snapshot.sh BINARY OUT_DIR
#   diff -r OUT_BEFORE OUT_AFTER
set -euo pipefail
bin=${1:?usage: scripts/json-snapshot.sh BINARY OUT_DIR}
out=${2:?usage: scripts/json-snapshot.sh BINARY OUT_DIR}
root=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$out"
cd "$root"
status=0
for cfg in configs/*.yaml configs/experiments/*.yaml configs/regression/*.yaml; do
  name=$(echo "${cfg%.yaml}" | tr / _)
  for cmd in run compare; do
    rc=0
    "$bin" "$cmd" "$cfg" --no-execute --format json --threads 1 > "$out/$name.$cmd.json" 2> "$out/$name.$cmd.err" || rc=$?
    echo "exit $rc" >> "$out/$name.$cmd.err"
  done
done
# The built-in default and its compare of every strategy.
"$bin" run --no-execute --format json --threads 1 > "$out/builtin.run.json" 2>&1 || status=1
"$bin" compare --gating all --no-execute --format json --threads 1 > "$out/builtin.compare.json" 2>&1 || status=1
ls "$out" | wc -l
exit $status
