#!/bin/sh
# sim_grid.sh SIM TRACE > grid.tsv - hotlun-sim's grid of docs/cache-policy.md
# ("RAM per cache block"): sizes 2%-100% x block sizes 4K-1M x policies
# default/always/nhit:2 x options (none, no update buffer, invalidate mode,
# no window, an 8 MiB window without budget, no sequential bypass): 540
# cells, one line each: cell, hit ratio, byte hit ratio, cache-device
# bytes written (fills and updates), sketch and ghost bytes per block.
# sim_grid.sh --diff A.tsv B.tsv: the cells that moved from A to B, the
# sum of the hit ratio changes, the worst cell, the mean change of writes.
set -eu
if [ "${1:-}" = --diff ]; then
	join -t "$(printf '\t')" "$2" "$3" | awk -F'\t' '
	{ dh = $6 - $2; db = $7 - $3; dw = $4 > 0 ? ($8 - $4) / $4 : 0; n++; sw += dw
	  if (dh != 0 || db != 0 || $8 != $4) {
		moved++; sh += dh; sb += db
		if (dh < minh) { minh = dh; minc = $1 }
		if (dh < -0.005) printf "%-46s hit %.4f -> %.4f  byte %.4f -> %.4f  writes %+.1f%%\n", $1, $2, $6, $3, $7, 100 * dw
	  } }
	END { printf "cells %d moved %d: hit ratio sum %+.2f points, worst %+.2f (%s), byte hit sum %+.2f points, writes %+.2f%% mean\n", n, moved, 100 * sh, 100 * minh, minc, 100 * sb, 100 * sw / n }'
	exit 0
fi
SIM=${1:?usage: sim_grid.sh SIM TRACE}
TRACE=${2:?usage: sim_grid.sh SIM TRACE}
for opt in none "--update-buffer 0" "--write-mode invalidate" "--window 0" \
	"--window 8M --write-budget 0" "--seq-bypass 0"; do
	o=$opt
	[ "$o" = none ] && o=
	for bs in 4K 8K 64K 256K 1M; do
		# shellcheck disable=SC2086
		"$SIM" --size 2%,5%,10%,25%,50%,100% --block "$bs" \
			--policy default,always,nhit:2 $o --json "$TRACE" |
			sed -n 's/^ *{\(.*\)},\{0,1\}$/\1/p' |
			awk -v opt="$opt" -v bs="$bs" '{
				n = split($0, f, ", ");
				for (i = 1; i <= n; i++) {
					split(f[i], kv, ": ");
					gsub(/"/, "", kv[1]); gsub(/"/, "", kv[2]);
					v[kv[1]] = kv[2];
				}
				printf "%s|%s|%s|%s\t%s\t%s\t%d\t%.2f\n", opt, bs, v["size_pct"],
				    v["policy"], v["read_hit_ratio"], v["byte_hit_ratio"],
				    v["cache_write_bytes"],
				    v["admit_ram_bytes"] / v["cache_blocks"];
			}'
	done
done
