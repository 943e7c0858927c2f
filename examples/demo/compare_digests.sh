#!/bin/sh
# Runs bspa-demo once per launch mode with the same arguments: every run must pass its
# checks (exit 0) and print the same token digest (the generated tokens are a function of
# the attention outputs, so equal digests mean the modes computed the same outputs).
# Usage: compare_digests.sh BSPA_DEMO "MODES" [ARGS...]
#   MODES: batch, plan, fixed (--launch MODE) and graphs (--graphs), space-separated.
# Example (a GPU machine): compare_digests.sh build/examples/demo/bspa-demo "fixed graphs" --device cuda
demo=$1
modes=$2
shift 2
first=
for m in $modes; do
  if [ "$m" = graphs ]; then flag=--graphs; else flag="--launch $m"; fi
  # shellcheck disable=SC2086 # $flag is one or two words on purpose
  out=$("$demo" "$@" $flag)
  rc=$?
  digest=$(printf '%s\n' "$out" | sed -n 's/^token digest *\(0x[0-9a-f]*\).*/\1/p')
  printf '%s\n' "$out" | grep -E '^(launches|graphs|token digest|result) ' | sed "s/^/[$m] /"
  if [ "$rc" -ne 0 ] || [ -z "$digest" ]; then
    printf '%s\n' "$out"
    if [ -n "$digest" ]; then what="digest $digest"; else what="no token digest"; fi
    echo "compare_digests: $flag: exit status $rc, $what" >&2
    exit 1
  fi
  if [ -z "$first" ]; then
    first=$digest
    first_mode=$m
  elif [ "$digest" != "$first" ]; then
    echo "compare_digests: $m's token digest $digest differs from $first_mode's $first" >&2
    exit 1
  fi
done
echo "compare_digests: $modes: the same token digest $first"
