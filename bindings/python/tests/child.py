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
