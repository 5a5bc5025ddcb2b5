//go:build tools

// Package tools pins helm for the local test cluster.
package tools

import _ "helm.sh/helm/v3/cmd/helm"
