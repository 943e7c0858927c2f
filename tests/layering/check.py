#!/usr/bin/env python3
"""The layering is enforced by the build: a file of one layer that includes a header of a layer
it may not use does not compile (docs/design.md §3, cmake/layers.cmake).

For each layer this takes the compile command the build really uses for one of the layer's
.cpp files (compile_commands.json), and compiles a one-line probe with it: an allowed include
must compile, a forbidden one must fail with "No such file" for that header. So the test
fails if a layer's include path grows (the repository root on it, say) or if the probes rot.

    python3 tests/layering/check.py BUILD_DIR SOURCE_DIR
"""
import json
import os
import shlex
import subprocess
import sys
import tempfile

# (layer folder, header, may include?)
CASES = [
    ("common", "common/error.hpp", True),
    ("common", "cache/key.hpp", False),
    ("common", "kernels/layout.hpp", False),
    ("cache", "common/error.hpp", True),
    ("cache", "cache/key.hpp", True),
    ("cache", "kernels/layout.hpp", False),
    ("cache", "capi/src/guard.hpp", False),
    ("kernels", "common/error.hpp", True),
    ("kernels", "kernels/layout.hpp", True),
    ("kernels", "cache/key.hpp", False),
    ("kernels", "capi/src/guard.hpp", False),
    ("capi/src", "cache/key.hpp", True),
    ("capi/src", "kernels/layout.hpp", True),
    ("capi/src", "capi/src/guard.hpp", True),
]


def layer_command(db, src, layer):
    """argv of the compile of a .cpp file directly in SOURCE_DIR/layer, without its input and output."""
    folder = os.path.join(src, layer)
    for entry in db:
        f = os.path.realpath(os.path.join(entry["directory"], entry["file"]))
        if os.path.dirname(f) == os.path.realpath(folder) and f.endswith(".cpp"):
            argv = entry.get("arguments") or shlex.split(entry["command"])
            out, skip = [], False
            for a in argv:
                if skip:
                    skip = False
                    continue
                if a in ("-o", "-MF", "-MT", "-MQ"):
                    skip = True
                    continue
                if a in ("-c", "-MD", "-MMD") or os.path.realpath(os.path.join(entry["directory"], a)) == f:
                    continue
                out.append(a)
            return out, entry["directory"]
    raise SystemExit(f"no compile command for a .cpp file in {folder}")


def main():
    build, src = sys.argv[1], os.path.realpath(sys.argv[2])
    with open(os.path.join(build, "compile_commands.json")) as fh:
        db = json.load(fh)
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        probe = os.path.join(tmp, "probe.cpp")
        for layer, header, allowed in CASES:
            with open(probe, "w") as fh:
                fh.write(f'#include "{header}"\n')
            argv, cwd = layer_command(db, src, layer)
            r = subprocess.run(argv + ["-fsyntax-only", probe], cwd=cwd, capture_output=True, text=True)
            refused = r.returncode != 0 and header in r.stderr and "No such file" in r.stderr
            ok = (r.returncode == 0) if allowed else refused
            verdict = "compiles" if r.returncode == 0 else "does not compile"
            print(f"{'ok  ' if ok else 'FAIL'} {layer}/ including {header}: {verdict} "
                  f"({'allowed' if allowed else 'forbidden'})")
            if not ok:
                failures += 1
                print(r.stderr[-2000:])
    if failures:
        print(f"{failures} layering check(s) failed")
        return 1
    print("layering enforced")
    return 0


if __name__ == "__main__":
    sys.exit(main())
