#!/usr/bin/env bash
# Installs sglang==0.5.23 without its dependencies (the full server needs CUDA, transformers, ...) into a
# directory inside the virtual environment that only the SGLang tier puts on PYTHONPATH, together with
# the few small packages SGLang's storage modules import. When triton is not installed, a small
# stand-in lets those modules import on a CPU-only machine (no kernel runs). Does nothing when that
# directory is complete for this script. Prints the directory.
set -euo pipefail
# Everything but the directory goes to stderr.
exec 3>&1 1>&2
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
bash scripts/setup.sh
VENV="${HICACHE_VENV:-$ROOT/.venv}"
PY="$VENV/bin/python"
SGLANG_VERSION="0.5.23"
OVERLAY="${HICACHE_SGLANG_DIR:-$VENV/sglang-$SGLANG_VERSION}"
# import name=requirement, for what sglang.srt.mem_cache.hicache_storage, the storage backend
# factory and HiCacheFile (through sglang.srt.utils) import on a CPU machine.
EXTRAS=(
  "orjson=orjson==3.13.0"
  "psutil=psutil==7.2.2"
  "pybase64=pybase64==1.5.1"
  "requests=requests==2.34.2"
  "urllib3=urllib3==2.8.0"
  "idna=idna==3.20"
  "certifi=certifi==2026.10.19.post1"
  "PIL=pillow==13.0.0"
  "starlette=starlette==1.10.0"
  "anyio=anyio==4.16.0"
  "msgspec=msgspec==0.23.0"
  "zmq=pyzmq==27.3.0"
  "typing_inspection=typing-inspection==0.4.5"
  "annotated_types=annotated-types==0.8.0"
  "pydantic_core=pydantic-core==2.50.5"
  "pydantic=pydantic==2.14.4"
)

if [ "$(cat "$OVERLAY/.complete" 2>/dev/null)" != "$(sha256sum "$0" | cut -d" " -f1)" ]; then
  echo "[sglang-install] installing sglang==$SGLANG_VERSION (no dependencies) into $OVERLAY" >&2
  rm -rf "$OVERLAY"
  mkdir -p "$OVERLAY"
  # One pip run for sglang and whichever extra the environment lacks (each pip run costs seconds).
  wanted=("sglang==$SGLANG_VERSION")
  for item in "${EXTRAS[@]}"; do
    module="${item%%=*}"
    if ! "$PY" -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('$module') is None)" 2>/dev/null; then
      wanted+=("${item#*=}")
    fi
  done
  "$PY" -m pip install -q --disable-pip-version-check --no-compile --no-deps --target "$OVERLAY" "${wanted[@]}"
  if ! "$PY" -c "import triton" >/dev/null 2>&1; then
    mkdir -p "$OVERLAY/triton"
    cat > "$OVERLAY/triton/__init__.py" <<'PYEOF'
"""Stand-in for triton on CPU-only test machines: lets modules that define kernels import; none runs."""

import sys
import types
from importlib.abc import Loader, MetaPathFinder
from importlib.machinery import ModuleSpec

__version__ = "0.0.0"


class _Anything:
    def __init__(self, *args, **kwargs):
        pass

    def __call__(self, *args, **kwargs):
        if len(args) == 1 and callable(args[0]) and not kwargs:
            return args[0]
        return _Anything()

    def __getattr__(self, name):
        return _Anything()

    def __getitem__(self, item):
        return _Anything()


def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)
    return _Anything()


def jit(fn=None, **kwargs):
    return fn if fn is not None else (lambda f: f)


class _Submodules(MetaPathFinder, Loader):
    def find_spec(self, fullname, path=None, target=None):
        return ModuleSpec(fullname, self, is_package=True) if fullname.startswith("triton.") else None

    def create_module(self, spec):
        module = types.ModuleType(spec.name)
        module.__path__ = []
        module.__getattr__ = __getattr__
        return module

    def exec_module(self, module):
        pass


sys.meta_path.append(_Submodules())
PYEOF
  fi
  sha256sum "$0" | cut -d" " -f1 > "$OVERLAY/.complete"
fi

echo "$OVERLAY" >&3
