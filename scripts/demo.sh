#!/usr/bin/env bash
# Set up .venv if needed, then run the demo: reference engine + reference
# trainer + the monitor window. Extra arguments go to `lucky-monitor demo`.
source "$(dirname "${BASH_SOURCE[0]}")/_env.sh"
exec lucky-monitor demo "$@"
