"""``sglang-args``: the configuration checked without opening the store, then SGLang's exact flags."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

from hicache_storage.cli.commands import run
from hicache_storage.integrations.sglang import launch_args


def test_prints_the_flags_launch_args_gives(tmp_path: Path, capsys: Any) -> None:
    root = tmp_path / "nvme" / "hicache"
    options = {"path": str(root), "max_bytes": 1 << 40, "namespace": "prod"}
    assert run(["sglang-args", "file", "--config", json.dumps(options)]) == 0
    out, err = capsys.readouterr()
    assert shlex.split(out) == launch_args("file", **options)
    assert "file: options checked; capabilities: zero_copy" in err and "may_evict" in err
    assert f"{root} does not exist yet" in err and not root.exists()  # nothing opened, nothing created
    assert run(["sglang-args", "sim", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == launch_args("sim")


def test_a_bad_option_is_one_line_naming_the_right_one(capsys: Any) -> None:
    assert run(["sglang-args", "slab", "--config", '{"path": "/mnt/nvme/slab", "capacity_byte": 1}']) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert "extra_config.capacity_byte: unknown option (did you mean capacity_bytes?)" in err
    assert len(err.strip().splitlines()) == 1
