"""``examples/sglang/launch.sh`` builds the SGLang command with a valid extra config."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

from hicache_storage.integrations.sglang import LOADER_KEYS

SCRIPT = Path(__file__).resolve().parents[2] / "examples" / "sglang" / "launch.sh"


def test_dry_run_prints_the_launch_command() -> None:
    env = {**os.environ, "DRY_RUN": "1", "PYTHON": sys.executable}
    done = subprocess.run(
        ["bash", str(SCRIPT), "org/model", "file", '{"path": "/mnt/kv"}', "--tp", "2"],
        check=True,
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    argv = shlex.split(done.stdout)
    assert argv[1:3] == ["-m", "sglang.launch_server"] and argv[-2:] == ["--tp", "2"]
    extra = json.loads(argv[argv.index("--hicache-storage-backend-extra-config") + 1])
    assert extra == {**LOADER_KEYS, "backend": "file", "path": "/mnt/kv"}


def test_missing_arguments_print_usage() -> None:
    done = subprocess.run(["bash", str(SCRIPT)], check=False, capture_output=True, text=True, timeout=30)
    assert done.returncode == 2 and "MODEL BACKEND" in done.stderr
