#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Makes the local cluster's certificates and kubeconfigs with openssl: a CA, the API
# server's and the registry's serving certificates, one client certificate per component,
# and the service account key pair. Usage: pki.sh DIR NODE NODE_IP
set -euo pipefail
dir=$1 node=$2 node_ip=$3
mkdir -p "$dir"
cd "$dir"
# cert NAME SUBJECT [SANS]
cert() {
  local name=$1 subj=$2 sans=${3:-}
  openssl genrsa -out "$name.key" 2048 2>/dev/null
  openssl req -new -key "$name.key" -subj "$subj" -out "$name.csr" 2>/dev/null
  local ext="basicConstraints=CA:FALSE
keyUsage=digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth,clientAuth"
  [ -n "$sans" ] && ext="$ext
subjectAltName=$sans"
  openssl x509 -req -in "$name.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -days 3650 \
    -extfile <(printf '%s\n' "$ext") -out "$name.crt" 2>/dev/null
  rm -f "$name.csr"
}

if [ -f .done ]; then
  # A PKI made before the stack ran a registry gets the registry's certificate now.
  [ -f registry.crt ] || { cert registry "/CN=nr1-local-registry" "DNS:localhost,IP:127.0.0.1,IP:$node_ip"; chmod 600 registry.key; }
  exit 0
fi

openssl genrsa -out ca.key 2048 2>/dev/null
openssl req -x509 -new -key ca.key -subj "/CN=nr1-local-ca" -days 3650 -out ca.crt 2>/dev/null
openssl genrsa -out sa.key 2048 2>/dev/null
openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null

cert apiserver "/CN=kube-apiserver" \
  "DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local,DNS:$node,IP:127.0.0.1,IP:10.0.0.1,IP:$node_ip"
cert admin "/O=system:masters/CN=admin"
cert kubelet "/O=system:nodes/CN=system:node:$node" "DNS:$node,DNS:localhost,IP:127.0.0.1,IP:$node_ip"
cert controller-manager "/CN=system:kube-controller-manager"
cert scheduler "/CN=system:kube-scheduler"
cert apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client"
# The stack's OCI registry, at the node's address: make release pushes there, and the
# runtime pulls from it, trusting this CA as a cluster trusts its registry's.
cert registry "/CN=nr1-local-registry" "DNS:localhost,IP:127.0.0.1,IP:$node_ip"

# kubeconfig NAME: a kubeconfig using NAME's client certificate.
kubeconfig() {
  local name=$1
  cat >"$name.kubeconfig" <<KC
apiVersion: v1
kind: Config
clusters:
- name: local
  cluster:
    certificate-authority: $dir/ca.crt
    server: https://127.0.0.1:6443
users:
- name: $name
  user:
    client-certificate: $dir/$name.crt
    client-key: $dir/$name.key
contexts:
- name: local
  context: {cluster: local, user: $name}
current-context: local
KC
}
for n in admin kubelet controller-manager scheduler; do kubeconfig "$n"; done
chmod 600 ./*.key
touch .done
