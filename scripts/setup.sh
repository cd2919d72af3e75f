#!/usr/bin/env bash
# Set up gpuplan on this machine (called by `make setup`, `make demo` and `make test`).
#
#   scripts/setup.sh            the package, its extras and fio
#   scripts/setup.sh --test     the same, plus what the test suite drives for real:
#                               headless Chromium (report/browser tests) and PostgreSQL
#
# torch: kept when the environment can already import it; otherwise the CPU build
# (torch==$TORCH_CPU_VERSION, which this kind of machine holds on disk) where there is no
# GPU, and the default (CUDA/ROCm) build where `nvidia-smi -L` or /dev/kfd shows one.
# System packages come from apt-get when we run as root; otherwise we say what to run.
set -euo pipefail

VENV=${VENV:-.venv}
PYTHON=${PYTHON:-python3}
TORCH_CPU_VERSION=${TORCH_CPU_VERSION:-2.13.0}
WITH_TEST=0
[ "${1:-}" = "--test" ] && WITH_TEST=1

say() { printf 'setup: %s\n' "$*" >&2; }

if [ ! -x "$VENV/bin/python" ]; then
  say "creating virtual environment $VENV (with system site-packages, so an installed torch is kept)"
  "$PYTHON" -m venv --system-site-packages "$VENV"
fi
PIP=("$VENV/bin/python" -m pip -q --disable-pip-version-check)

if "$VENV/bin/python" -c "import torch" 2>/dev/null; then
  say "torch $("$VENV/bin/python" -c 'import torch; print(torch.__version__)') already importable: kept"
elif { command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; } || [ -e /dev/kfd ]; then
  say "GPU found: installing the default torch build"
  "${PIP[@]}" install torch
else
  say "no GPU: installing the CPU build torch==$TORCH_CPU_VERSION"
  "${PIP[@]}" install "torch==$TORCH_CPU_VERSION"
fi

STAMP="$VENV/.gpuplan-installed"
if [ ! -f "$STAMP" ] || [ pyproject.toml -nt "$STAMP" ]; then
  say "installing gpuplan (editable) with extras probes,service,test,dev"
  "${PIP[@]}" install -e '.[probes,service,test,dev]' 2>&1 | grep -v 'is ignored' || true
  "$VENV/bin/python" -c "import gpuplan, typer, sklearn, fastapi" # fail loudly if the install did not work
  touch "$STAMP"
fi

apt_install() {  # apt_install <command-to-check> <package>...
  local check=$1; shift
  if command -v "$check" >/dev/null 2>&1; then return 0; fi
  if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
    say "installing $* from the system package manager"
    if [ ! -f /tmp/.gpuplan-apt-updated ]; then
      DEBIAN_FRONTEND=noninteractive apt-get update -qq && touch /tmp/.gpuplan-apt-updated
    fi
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
  else
    say "'$check' is missing: install it with 'sudo apt-get install $*' (or your distribution's package)"
    return 0
  fi
}

apt_install fio fio
if [ "$WITH_TEST" = "1" ]; then
  apt_install chromium chromium
  apt_install pg_ctlcluster postgresql
fi
say "done"
