#!/usr/bin/env bash
# The asyncio runner's adapter uses the same venv as python-thread's.
exec "$(dirname "$0")/../python-thread/build.sh" "$@"
