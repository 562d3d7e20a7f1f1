#!/usr/bin/env bash
# grouped.sh [N] writes to stdout api-pipelined.sql with N payments (default
# 8) in each of its two transactions: N claims' batches one after the other
# in one pipeline, then N settles', as internal/groupcommit sends a group of
# requests. Run the result with pgbench like api-pipelined.sql:
#
#   tools/bench/pgbench/designs/grouped.sh 8 > /tmp/grouped.sql
#   pgbench -n -M prepared -c 4 -j 2 -T 20 -f /tmp/grouped.sql URL   # tps x 8 = payments/s
set -euo pipefail
n=${1:-8}
src=$(dirname "$0")/api-pipelined.sql
# pipeline K of the source (1: the claim, 2: the settle), its body only
body() { awk -v k="$1" '/^\\startpipeline$/{p++; next} /^\\endpipeline$/{next} p==k' "$src"; }
for ((i = 0; i < n; i++)); do echo "\\set r$i random(1, 4611686018427387903)"; done
for k in 1 2; do
	echo '\startpipeline'
	for ((i = 0; i < n; i++)); do body "$k" | sed "s/:r\b/:r$i/g"; done
	echo '\endpipeline'
done
