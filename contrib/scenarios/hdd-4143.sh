#!/bin/bash
# hdd-4143.sh - the 4,143-IOPS HDD tier of the field reports (a host read
# cache turned it into 52,522 IOPS): an 8 GiB origin throttled to 4,143 IOPS
# and 8 ms, alone, then behind hotlund with a 2 GiB cache, 95 % of 4 KiB
# random reads on 10 % of the LUN at QD 64 (the 5 % spread over the rest
# mostly miss: that alone caps the LUN near 4,143 / 0.05 = 83,000 IOPS).
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
QD=${QD:-64}
. "$SC_HERE/warmup-curve.sh"
