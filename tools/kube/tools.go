//go:build tools

// Package tools pins the Kubernetes binaries built for the local test cluster: the control plane
// and kwok, which fakes its nodes, and kubelet and kube-proxy for a real node. kwok is pinned here
// rather than in a module of its own so that it builds with the control plane's versions of the
// packages they share (client-go, apimachinery, grpc, ...) and compiles only its own on top.
package tools

import (
	_ "go.etcd.io/etcd/server/v3"
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-proxy"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubelet"
	_ "sigs.k8s.io/kwok/cmd/kwok"
)
