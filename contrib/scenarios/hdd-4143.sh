#!/bin/bash
# hdd-4143.sh - the 4,143-IOPS HDD tier of the field reports (a host read
# cache turned it into 52,522 IOPS): an 8 GiB origin throttled to 4,143 IOPS
# and 8 ms, alone, then behind hotlund with a 2 GiB cache, 95 % of 4 KiB
# random reads on 10 % of the LUN at QD 64 (the 5 % spread over the rest
# mostly miss: that alone caps the LUN near 4,143 / 0.05 = 83,000 IOPS).
# The hot 4 KiB blocks are scattered over the LUN, so the cache uses 4 KiB
# blocks: with the default 64 KiB, 200,000 scattered hot blocks would need
# 12 GiB of cache slots (the field's lesson: match the cache block size to
# the workload; CACHE_BLOCK=64K shows what happens otherwise).
#
#   contrib/scenarios/hdd-4143.sh                (about 7 minutes)
#   TIME=60 WARM_TIME=20 BASE_TIME=10 contrib/scenarios/hdd-4143.sh
. "$(dirname "$0")/common.sh"
NAME=hdd-4143
TITLE="4,143-IOPS HDD tier"
ORIGIN_IOPS=${ORIGIN_IOPS:-4143}
ORIGIN_LAT_MS=${ORIGIN_LAT_MS:-8}
SIZE=${SIZE:-8G}
CACHE_SIZE=${CACHE_SIZE:-2G}
WORKLOAD=${WORKLOAD:-hotset:95/10}
CACHE_BLOCK=${CACHE_BLOCK:-4K}
QD=${QD:-64}
. "$SC_HERE/warmup-curve.sh"
