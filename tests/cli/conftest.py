"""Makes the replay tests' ``replay_support`` and this folder's ``operate_support`` importable."""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "replay"))
sys.path.insert(0, str(HERE))
