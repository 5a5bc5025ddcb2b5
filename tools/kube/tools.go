//go:build tools

// Package tools pins the Kubernetes binaries built for the local test cluster: the control plane,
// kwok's fake nodes, and kubelet and kube-proxy for its real node. kwok is built here rather than in
// a module of its own because most of what it compiles is the control plane's client-go,
// apimachinery and api: in one module those are compiled once, at one version, for both.
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
