//go:build tools

// Package tools pins kwok for the local test cluster.
package tools

import _ "sigs.k8s.io/kwok/cmd/kwok"
