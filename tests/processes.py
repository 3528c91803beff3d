"""A script run by a new Python: what a process pays the first time, seen from a clean start."""

import os
import subprocess
import sys


def in_a_fresh_process(script: str, *arguments: str) -> subprocess.CompletedProcess:
    """``script`` run by a new Python with the test settings (``arguments`` in its ``sys.argv[1:]``): what it prints,
    its exit status and errors."""
    return subprocess.run([sys.executable, "-c", script, *arguments], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "DJANGO_SETTINGS_MODULE": "mas_project.settings_test"})
