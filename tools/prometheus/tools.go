//go:build tools

// Package tools pins Prometheus for the tests that need its Kubernetes service discovery.
package tools

import _ "github.com/prometheus/prometheus/cmd/prometheus"
