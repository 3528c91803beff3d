"""mas_core.phases: off unless MAS_PHASES names a file (one shared do-nothing timer); on, totals per phase."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from mas_core import phases

ROOT = Path(__file__).resolve().parents[2]


def test_off_a_phase_is_one_shared_empty_context_manager():
    assert not phases.ON  # the test settings do not set MAS_PHASES
    assert phases.timed("tool") is phases.timed("gate")
    with phases.timed("tool"):
        pass
    phases.count("statement")
    phases.dump()
    assert phases.totals == {}


def test_on_the_totals_count_time_and_are_dumped(tmp_path):
    out = tmp_path / "phases.json"
    code = ("import time\nfrom mas_core import phases\n"
            "for _ in range(3):\n    with phases.timed('tool'):\n        time.sleep(0.01)\n"
            "phases.count('statement', 2)\nphases.dump()\n")
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, env={**os.environ, "MAS_PHASES": str(out)}, check=True)
    data = json.loads(out.read_text())
    count, wall, cpu = data["totals"]["tool"]
    assert count == 3 and 0.03 <= wall < 1 and 0 <= cpu < wall
    assert data["totals"]["statement"] == [2, 0.0, 0.0]
