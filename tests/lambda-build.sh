#!/usr/bin/env bash
# The functions are built as users build them, with `sam build`, and checked:
# tests/sam-build.sh (this name is kept for the commands that cite it).
#
#   bash tests/lambda-build.sh                what `sam deploy` uploads (optimized)
#   bash tests/lambda-build.sh --unoptimized  the same build at opt-level 0 (CI)
exec bash "$(dirname "$0")/sam-build.sh" "$@"
