#!/usr/bin/env bash
# Set up .venv if needed, then run the demo: reference engine + reference
# trainer + the monitor window. Extra arguments go to `lucky-monitor demo`.
source "$(dirname "${BASH_SOURCE[0]}")/_env.sh"

# Qt's X11 plugin needs a few system libraries that minimal Linux installs lack.
# With a display and without them, install them where we may (root or
# passwordless sudo, Debian/Ubuntu); otherwise the demo says what to install
# and falls back to status lines in the terminal.
# The probe runs in a subshell that does more than exec python, so when Qt aborts it is the
# subshell (its stderr going nowhere) that reports "Aborted", not this script.
if [ -n "${DISPLAY:-}" ] && [ -z "${QT_QPA_PLATFORM:-}" ] && command -v apt-get >/dev/null 2>&1; then
  if ! ( python -c 'import sys; from PySide6.QtGui import QGuiApplication; QGuiApplication(sys.argv[:1])'; exit $? ) >/dev/null 2>&1; then
    pkgs=$(python -c 'from lucky_monitor.ui.app import XCB_PACKAGES; print(XCB_PACKAGES)')
    if [ "$(id -u)" = 0 ]; then SUDO=""; elif sudo -n true 2>/dev/null; then SUDO="sudo -n"; else SUDO=none; fi
    if [ "$SUDO" != none ]; then
      echo "== installing the X11 libraries Qt needs: $pkgs" >&2
      $SUDO apt-get install -y -qq $pkgs >/dev/null 2>&1 \
        || { $SUDO apt-get update -qq >/dev/null 2>&1 && $SUDO apt-get install -y -qq $pkgs >/dev/null 2>&1; } \
        || echo "== could not install them; the demo will say what is missing" >&2
    fi
  fi
fi
exec lucky-monitor demo "$@"
