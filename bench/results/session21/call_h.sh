#!/usr/bin/env bash
# Session 21's call H (the command line run on the warm H200 right after call G): bench_decode
# e4m3 alternating main (718d313's library, the decode code session 21 started from) and the
# final library (mends.so.3.xz, 10f65c9), two rounds, then bf16 on the final library.
D=.device/s21; R=/tmp/resh; mkdir -p $R; for lib in main mends; do mkdir -p /tmp/lib$lib; cp $D/sys/* /tmp/lib$lib/; xz -dc $D/$lib.so.3.xz > /tmp/lib$lib/libbspa.so.3; done; nvidia-smi --query-gpu=name --format=csv,noheader > $R/gpu.txt; OUT=$R TAG=fp8 ROUNDS=2 BENCH=decode BENCH_ARGS="--pages 64,16 --kv fp8" CHECK=none bash bench/ab_libs.sh $D/bin /tmp/libmain /tmp/libmends; tar czf $OUT/resh.tgz -C /tmp resh; OUT=$R TAG=bf16 ROUNDS=1 BENCH=decode BENCH_ARGS="--pages 64,16" CHECK=none bash bench/ab_libs.sh $D/bin /tmp/libmends; tar czf $OUT/resh.tgz -C /tmp resh
