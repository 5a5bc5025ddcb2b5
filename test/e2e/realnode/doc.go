// Package realnode holds the end-to-end tests that run daemonguard as its users run it: the chart
// installed with helm from an OCI registry, pinned by digest to the image `make image` builds, on
// the local cluster's real node (kubelet, containerd, runc, CNI, kube-proxy), beside kwok nodes.
// The chart's pods, the node agents the tests roll out and every fault they inject are real
// containers and real processes on this host.
//
// Every test that needs the real node lives in this one package and runs sequentially on one
// cluster: a real node uses the host's network stack and iptables, so two at once would collide.
// Without the Debian packages the real node needs (see localcluster.NeedRealNode), or with -short,
// the tests skip and say why.
package realnode
