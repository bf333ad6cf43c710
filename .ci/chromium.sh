#!/usr/bin/env bash
# Installs Debian's headless Chromium for the dashboard test
# (tests/tests/dashboard.rs), which drives it over the DevTools protocol.
# Idempotent: does nothing when `chromium` is already on the PATH.
set -euo pipefail
if command -v chromium >/dev/null 2>&1; then
    exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
# Fonts so that the screenshots show text, not boxes.
apt-get install -y -q --no-install-recommends chromium fonts-dejavu-core
command -v chromium >/dev/null
