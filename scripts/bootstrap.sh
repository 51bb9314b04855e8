#!/usr/bin/env bash
# Prepare this machine for voicegate: system packages from apt, then .venv with the package.
# Usage: scripts/bootstrap.sh serve|test|cluster
# Idempotent: packages already installed and an unchanged pyproject.toml are skipped.
set -euo pipefail
mode="${1:-serve}"
cd "$(dirname "$0")/.."

apt_packages=(espeak-ng sox sip-tester)
if [ "$mode" = "test" ]; then
  apt_packages+=(chromium baresip-core kamailio kamailio-tls-modules haproxy)
elif [ "$mode" = "cluster" ]; then
  apt_packages+=(kamailio haproxy)
fi

missing=()
for pkg in "${apt_packages[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "bootstrap: installing system packages: ${missing[*]}"
  sudo_cmd=()
  if [ "$(id -u)" -ne 0 ]; then sudo_cmd=(sudo); fi
  export DEBIAN_FRONTEND=noninteractive
  "${sudo_cmd[@]}" apt-get update -qq
  "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

python="${PYTHON:-python3.11}"
command -v "$python" >/dev/null 2>&1 || python=python3
if [ ! -x .venv/bin/python ]; then
  echo "bootstrap: creating .venv with $("$python" --version)"
  "$python" -m venv .venv
fi

extras=""
[ "$mode" = "test" ] && extras="[test]"
[ "$mode" = "cluster" ] && mode=serve  # the same Python packages as `make serve`
stamp=".venv/.voicegate-installed-${mode}-$(sha256sum pyproject.toml | cut -c1-16)"
if [ ! -f "$stamp" ]; then
  echo "bootstrap: installing voicegate${extras} into .venv"
  .venv/bin/python -m pip install -q --upgrade pip >/dev/null
  .venv/bin/python -m pip install -q -e ".${extras}"
  rm -f .venv/.voicegate-installed-"${mode}"-*
  touch "$stamp"
fi

# The end-of-turn model (Smart Turn v3.2) from its pinned PyPI wheel, SHA-256-checked (skipped when present).
.venv/bin/python -m voicegate.internal.turn.weights

# The int8 copy of the Piper voice ([piper] voice_variant), built from the pinned voice and SHA-256-checked
# (skipped when present; when it cannot be built the server speaks with the original).
.venv/bin/python -m voicegate.internal.tts.voice_variant

# Recordings of real people for the turn-taking tests and benches (tests/human_speech.py), pinned sdists from PyPI.
if [ "$mode" = "test" ]; then
  .venv/bin/python -m tests.human_speech
fi
