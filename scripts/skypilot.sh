# Sourced by ./test: SkyPilot 0.14.1 in a venv of its own (no cloud extras; outside the clone so
# fresh clones on one machine share it). tests/launcher/test_sky_export.py reads every export
# with SkyPilot's own reader (tests marked `skypilot`, run in their own pass at the end).
# Made once: ~1.5 min from pip's cache, ~5 min cold, 460 MB; it is made in the background while
# the other passes run, so a cold install costs the test command next to nothing.
srifty_skypilot_start() {
  SRIFTY_SKYPILOT_VENV="${SRIFTY_SKYPILOT_VENV:-$HOME/.cache/srifty/skypilot-0.14.1}"
  SRIFTY_SKYPILOT_LOG="$PWD/var/test-services/skypilot-install.log"
  mkdir -p "$(dirname "$SRIFTY_SKYPILOT_LOG")" "$(dirname "$SRIFTY_SKYPILOT_VENV")"
  (
    venv="$SRIFTY_SKYPILOT_VENV"
    if "$venv/bin/python" -c 'import sky, sys; sys.exit(sky.__version__ != "0.14.1")' 2>/dev/null; then
      exit 0
    fi
    rm -rf "$venv"
    python3 -m venv "$venv" && "$venv/bin/python" -m pip install -q --disable-pip-version-check \
      skypilot==0.14.1 && "$venv/bin/python" -c 'import sky' || { rm -rf "$venv"; exit 1; }
  ) >"$SRIFTY_SKYPILOT_LOG" 2>&1 &
  SRIFTY_SKYPILOT_PID=$!
}

# Waits for the install; exports SRIFTY_SKYPILOT_PYTHON, or says why the tests will skip (fails
# the run under CI=true: a green CI must not hide skipped SkyPilot checks).
srifty_skypilot_ready() {
  if wait "$SRIFTY_SKYPILOT_PID" && [ -x "$SRIFTY_SKYPILOT_VENV/bin/python" ]; then
    export SRIFTY_SKYPILOT_PYTHON="$SRIFTY_SKYPILOT_VENV/bin/python"
    return 0
  fi
  echo "==> skypilot==0.14.1 could not be installed (log: $SRIFTY_SKYPILOT_LOG):"
  tail -5 "$SRIFTY_SKYPILOT_LOG" | sed 's/^/    /'
  if [ "${CI:-}" = "true" ]; then
    echo "==> CI=true: failing (the SkyPilot reader tests would be skipped)"
    return 1
  fi
  echo "    the tests that read exports with SkyPilot SKIP"
}
