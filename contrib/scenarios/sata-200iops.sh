#!/bin/bash
# sata-200iops.sh - the 200-IOPS SATA LUN of the field reports (a host read
# cache took such a LUN to 7,000 IOPS): a 2 GiB origin throttled to 200 IOPS
# and 5 ms, alone, then behind hotlund with a 1 GiB cache, 98 % of 4 KiB
# random reads on 2 % of the LUN (a 40 MiB working set; the 2 % of reads
# spread over the rest mostly miss, and the origin serves 200 of them a
# second, which alone caps the LUN near 200 / 0.02 = 10,000 IOPS until cold
# blocks get cached too). Watch IOPS climb as the cache warms.
#
#   contrib/scenarios/sata-200iops.sh            (about 7 minutes)
#   TIME=60 WARM_TIME=20 BASE_TIME=10 contrib/scenarios/sata-200iops.sh
#
# Other knobs: SIZE CACHE_SIZE CACHE_BLOCK ADMISSION WORKLOAD BS READ QD
# SESSIONS OUT HOTLUN_BUILD FILL=1 (see common.sh).
. "$(dirname "$0")/common.sh"
NAME=sata-200iops
TITLE="200-IOPS SATA LUN"
ORIGIN_IOPS=${ORIGIN_IOPS:-200}
ORIGIN_LAT_MS=${ORIGIN_LAT_MS:-5}
SIZE=${SIZE:-2G}
WORKLOAD=${WORKLOAD:-hotset:98/2}
. "$SC_HERE/warmup-curve.sh"
