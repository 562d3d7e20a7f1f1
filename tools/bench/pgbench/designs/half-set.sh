#!/usr/bin/env bash
# half-set.sh K claims|settles writes to stdout a design with K payments per
# transaction in which one of the two transactions is set-based (its
# statement from api-set-based.sql, over K rows) and the other K batches one
# after another in one pipeline (api-pipelined.sql's, as grouped.sh sends
# them): what half of the set-based step buys. Run it like grouped.sh's
# output, with -D k=K:
#
#   tools/bench/pgbench/designs/half-set.sh 4 claims > /tmp/claims4.sql
#   pgbench -n -M prepared -c 4 -j 2 -T 15 -D k=4 -f /tmp/claims4.sql URL   # tps x 4 = payments/s
set -euo pipefail
k=${1:?payments per transaction}
half=${2:?claims or settles}
dir=$(dirname "$0")
# pipeline N of api-pipelined.sql (1: the claim, 2: the settle), its body only
batch() { awk -v n="$1" '/^\\startpipeline$/{p++; next} /^\\endpipeline$/{next} p==n' "$dir/api-pipelined.sql"; }
# statement N of api-set-based.sql (1: the claims, 2: the settles)
set_based() { awk -v n="$1" '/^WITH input AS/{p++} p==n' "$dir/api-set-based.sql" | awk '{print} /^SELECT .*;$/{exit}'; }
pipelined() {
	echo '\startpipeline'
	for ((i = 1; i <= k; i++)); do batch "$1" | sed "s/:r\b/:r$i/g"; done
	echo '\endpipeline'
}
# api-set-based.sql's rows are :r + 1 .. :r + k; the batches' the same.
echo '\set r random(1, 4611686018427387903)'
for ((i = 1; i <= k; i++)); do echo "\\set r$i :r + $i"; done
case $half in
claims) set_based 1; pipelined 2 ;;
settles) pipelined 1; set_based 2 ;;
*) echo "half-set.sh: claims or settles, not $half" >&2; exit 2 ;;
esac
