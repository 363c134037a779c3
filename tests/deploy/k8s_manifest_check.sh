#!/usr/bin/env bash
# Parses deploy/k8s/vlmd.yaml with kubectl, offline (no cluster here: `kubectl label --local`
# decodes every object of the file without an API server), and checks the objects it holds.
# Schema validation needs a cluster's OpenAPI document; tests/serve/deploy_files_test.cpp checks
# what the objects say against the server instead. Exit 77 (skipped) without kubectl.
set -euo pipefail
root=$1
command -v kubectl >/dev/null || { echo "k8s_manifest_check: no kubectl (Debian: kubernetes-client)"; exit 77; }
got=$(kubectl label --local -f "$root/deploy/k8s/vlmd.yaml" vlmd-check=ok -o name)
want="configmap/vlmd-config
persistentvolumeclaim/vlmd-models
deployment.apps/vlmd
service/vlmd
poddisruptionbudget.policy/vlmd
horizontalpodautoscaler.autoscaling/vlmd
ingress.networking.k8s.io/vlmd
configmap/vlmd-prometheus-adapter-rules"
if [[ "$got" != "$want" ]]; then
  echo "k8s_manifest_check: kubectl read:" >&2
  echo "$got" >&2
  echo "expected:" >&2
  echo "$want" >&2
  exit 1
fi
echo "k8s_manifest_check: OK ($(wc -l <<<"$got") objects)"
