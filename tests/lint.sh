#!/usr/bin/env bash
# Lints template.yaml: cfn-lint, `sam validate --lint`, then tests/check_template.py
# (least-privilege IAM, queue settings, table == infra/dynamodb-table.json, and a
# self-test proving those checks can fail), then tests/check_docs.py (the docs agree
# with template.yaml: README's parameter table, recommended memory sizes, settings,
# the Rust version, the Karpenter CRDs). Installs cfn-lint and aws-sam-cli from PyPI
# into target/tools/venv the first time. Needs no AWS account: sam validate gets dummy
# credentials and a region, and never calls AWS for this template.
set -euo pipefail
cd "$(dirname "$0")/.."

venv=target/tools/venv
if [[ ! -x $venv/bin/cfn-lint || ! -x $venv/bin/sam ]]; then
  echo "installing cfn-lint and aws-sam-cli into $venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check cfn-lint aws-sam-cli
fi

export SAM_CLI_TELEMETRY=0
export AWS_ACCESS_KEY_ID=${AWS_ACCESS_KEY_ID:-offline-lint}
export AWS_SECRET_ACCESS_KEY=${AWS_SECRET_ACCESS_KEY:-offline-lint}
export AWS_DEFAULT_REGION=${AWS_DEFAULT_REGION:-us-east-1}

echo "== cfn-lint $("$venv/bin/cfn-lint" --version | awk '{print $2}')"
"$venv/bin/cfn-lint" template.yaml
echo "no findings"

echo "== sam validate --lint ($("$venv/bin/sam" --version))"
"$venv/bin/sam" validate --lint --template template.yaml --region us-east-1

echo "== tests/check_template.py"
"$venv/bin/python" tests/check_template.py template.yaml

echo "== tests/check_docs.py"
"$venv/bin/python" tests/check_docs.py template.yaml
