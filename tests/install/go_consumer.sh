#!/usr/bin/env bash
# A Go program outside the repository imports the binding by its module path,
# github.com/bspa-project/bspa/bindings/go, resolved to this checkout (no module proxy is
# reachable here) once through a go.work file and once through a replace directive.
#   bash tests/install/go_consumer.sh WORK_DIR
# Needs libbspa findable by pkg-config (and by the loader when it runs).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
work=$(realpath -m "${1:?usage: go_consumer.sh WORK_DIR}")
module=github.com/bspa-project/bspa/bindings/go
export GOPROXY=off GOFLAGS=-mod=mod GOCACHE=${GOCACHE:-$work/gocache} GOPATH=${GOPATH:-$work/gopath}
rm -rf "$work/replace" "$work/workspace"
mkdir -p "$work/replace" "$work/workspace/app"

cat >"$work/replace/main.go" <<GO
package main

import (
	"errors"
	"fmt"
	"os"

	bspa "$module"
)

func main() {
	pool, err := bspa.NewPool(bspa.PoolOptions{NumKVHeads: 2, HeadDim: 64})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer pool.Close()
	_, err = bspa.NewPool(bspa.PoolOptions{PageSize: 3})
	fmt.Println(bspa.Version(), "pages:", pool.Options().MemoryBytes, errors.Is(err, bspa.ErrInvalidArgument))
}
GO
cp "$work/replace/main.go" "$work/workspace/app/main.go"

# 1. replace directive
cat >"$work/replace/go.mod" <<MOD
module example.com/consumer

go 1.19

require $module v0.0.0
replace $module => $root/bindings/go
MOD
(cd "$work/replace" && go build -o consumer . && ./consumer) | tee "$work/replace/out.txt"
grep -q " true$" "$work/replace/out.txt"

# 2. go.work: the app requires the module; the workspace supplies the checkout.
cat >"$work/workspace/app/go.mod" <<MOD
module example.com/app

go 1.19

require $module v0.0.0
MOD
cat >"$work/workspace/go.work" <<WORK
go 1.19

use (
	./app
	$root/bindings/go
)
WORK
(cd "$work/workspace/app" && GOFLAGS= go build -o app . && ./app) | tee "$work/workspace/out.txt"
grep -q " true$" "$work/workspace/out.txt"
echo "go consumer: imported $module by module path (replace and go.work)"
