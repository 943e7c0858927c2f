"""Runs a snippet in a fresh interpreter that imports the same bspa as the tests: for checks
that may crash the process (freed memory, garbage-collection order) and so cannot run here."""

import os
import subprocess
import sys
import textwrap


def run_child(code: str, **env: str) -> subprocess.CompletedProcess:
    """The snippet's completed process (stdout and stderr as text); `env` adds variables."""
    environ = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path), **env)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          env=environ, timeout=120)


def engine_in_cycle(bspa, **pool_options):
    """An object that refers to itself and holds a new bspa.Pool(**pool_options) as .pool: like a
    runtime's engine, it becomes garbage only the cycle collector frees (for snippets run by
    run_child, which imports this module from the tests' folder)."""

    class Engine:
        pass

    e = Engine()
    e.self = e
    e.pool = bspa.Pool(**pool_options)
    return e
