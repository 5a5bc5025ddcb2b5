package toolbin

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
)

// The tool sets that entry points build, named in one place: `make demo` and `make cluster` build
// "demo" (adding "real-node" with REAL_NODE=1), `make test` builds "all". The Makefile passes the
// names to `testbin --set` (cmd/testbin).
var (
	// DemoTools are what the demo and `make cluster` run: the control plane and kwok's fake
	// nodes. Nothing else: every tool here is minutes of a new user's first `make demo`.
	DemoTools = []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok"}
	// RealNodeTools are what a real node (REAL_NODE=1) runs besides the control plane.
	RealNodeTools = []string{"kubelet", "kube-proxy"}
)

// ToolSetNames are the names ToolSet accepts.
var ToolSetNames = []string{"demo", "real-node", "all"}

// ToolSet returns the binaries of the set called name.
func ToolSet(name string) ([]string, error) {
	switch name {
	case "demo":
		return DemoTools, nil
	case "real-node":
		return RealNodeTools, nil
	case "all":
		return AllTools(), nil
	}
	return nil, fmt.Errorf("unknown tool set %q (want one of %s)", name, strings.Join(ToolSetNames, ", "))
}

// AllTools lists every binary and folder the tools modules provide, sorted, but for the modules
// built only when named (Gatekeeper, for the peer benchmark).
func AllTools() []string {
	all := map[string]bool{}
	for _, m := range toolModules {
		if m.onlyNamed {
			continue
		}
		for _, set := range m.sets {
			for name := range set.outputs {
				all[name] = true
			}
		}
		for name := range m.files {
			all[name] = true
		}
	}
	return slices.Sorted(maps.Keys(all))
}

// Build ensures the binaries of the named sets and the names given one by one; with neither it
// ensures every tool.
func Build(ctx context.Context, log io.Writer, sets, names []string) (*Binaries, error) {
	for _, s := range sets {
		tools, err := ToolSet(s)
		if err != nil {
			return nil, err
		}
		names = append(names, tools...)
	}
	return Ensure(ctx, log, names...)
}
