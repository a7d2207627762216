#!/usr/bin/env bash
# Debian's Chromium for the browser tests (tests/test_browser.py drives it through Playwright;
# `playwright install` is never used). Reuses an installed one; without root or apt it only
# says so, and the browser tests skip with that reason.
set -euo pipefail
if [ -x /usr/bin/chromium ]; then
  exit 0
fi
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  echo "installing chromium"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
else
  echo "chromium is not installed and cannot be installed here: the browser tests will be skipped" >&2
fi
