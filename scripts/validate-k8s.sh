#!/usr/bin/env bash
# Validates deploy/k8s/*.yaml against the Kubernetes API schemas with
# kubernetes-validate (PyPI), installed into target/k8s-validate on first use.
# Strict: unknown fields fail. KEDA's kinds have no schema in it and are
# reported as warnings (their CRDs are not among the Kubernetes schemas).
set -euo pipefail
cd "$(dirname "$0")/.."
VERSION=1.37.0
VENV=target/k8s-validate
if [ ! -x "$VENV/bin/kubernetes-validate" ]; then
  echo "validate-k8s: installing kubernetes-validate $VERSION into $VENV" >&2
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q --disable-pip-version-check "kubernetes-validate==$VERSION"
fi
"$VENV/bin/kubernetes-validate" --strict --quiet deploy/k8s/*.yaml
echo "validate-k8s: deploy/k8s/*.yaml valid against Kubernetes $("$VENV/bin/kubernetes-validate" --version 2>/dev/null | awk '{print $NF}') schemas (strict)"
