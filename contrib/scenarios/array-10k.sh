#!/bin/bash
# array-10k.sh - the 10,000-IOPS array of the field reports: an 8 GiB origin
# throttled to 10,000 IOPS and 1 ms, alone, then behind hotlund with a 2 GiB
# cache in 4 KiB blocks, zipf(0.9) 4 KiB random reads at QD 64 on two
# sessions. (The popular blocks are scattered over the LUN; with 64 KiB cache
# blocks each would hold one hot 4 KiB and the cache would fill 16x sooner:
# CACHE_BLOCK=64K shows that.)
#
#   contrib/scenarios/array-10k.sh               (about 7 minutes)
#   TIME=60 WARM_TIME=20 BASE_TIME=10 contrib/scenarios/array-10k.sh
. "$(dirname "$0")/common.sh"
NAME=array-10k
TITLE="10,000-IOPS array"
ORIGIN_IOPS=${ORIGIN_IOPS:-10000}
ORIGIN_LAT_MS=${ORIGIN_LAT_MS:-1}
SIZE=${SIZE:-8G}
CACHE_SIZE=${CACHE_SIZE:-2G}
WORKLOAD=${WORKLOAD:-zipf:0.9}
CACHE_BLOCK=${CACHE_BLOCK:-4K}
QD=${QD:-64}
SESSIONS=${SESSIONS:-2}
. "$SC_HERE/warmup-curve.sh"
