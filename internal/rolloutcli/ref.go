package rolloutcli

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// ParseArgs reads the DaemonSet named on a kubectl-style command line: "ds/NAME",
// "daemonset/NAME", "daemonsets.apps/NAME", "NAME", or the two words "daemonset NAME".
func ParseArgs(args []string) (string, error) {
	switch len(args) {
	case 1:
		return ParseRef(args[0])
	case 2:
		if strings.Contains(args[0], "/") || strings.Contains(args[1], "/") {
			return "", fmt.Errorf("give the DaemonSet as ds/NAME or as the two words ds NAME, not %q", strings.Join(args, " "))
		}
		if !isDaemonSetKind(args[0]) {
			return "", wrongKind(args[0], args[0]+" "+args[1])
		}
		return checkName(args[1])
	default:
		return "", fmt.Errorf("expected one DaemonSet (ds/NAME, daemonset/NAME or NAME), got %d arguments", len(args))
	}
}

// ParseRef reads one "KIND/NAME" or "NAME" argument; KIND must name DaemonSets.
func ParseRef(arg string) (string, error) {
	kind, name, found := strings.Cut(arg, "/")
	if !found {
		return checkName(arg)
	}
	if !isDaemonSetKind(kind) {
		return "", wrongKind(kind, arg)
	}
	return checkName(name)
}

// isDaemonSetKind accepts what kubectl resolves to apps/v1 DaemonSets: ds, daemonset(s), with an
// optional group (".apps") or version and group (".v1.apps"), in any case.
func isDaemonSetKind(kind string) bool {
	k := strings.ToLower(kind)
	for _, suffix := range []string{".v1.apps", ".apps"} {
		if strings.HasSuffix(k, suffix) {
			k = strings.TrimSuffix(k, suffix)
			break
		}
	}
	switch k {
	case "ds", "daemonset", "daemonsets":
		return true
	}
	return false
}

func wrongKind(kind, arg string) error {
	if kind == "" {
		return fmt.Errorf("%q: missing resource type before the slash; use ds/NAME", arg)
	}
	return fmt.Errorf("%q: daemonguard rollout works on DaemonSets only (ds/NAME, daemonset/NAME or NAME), not %q", arg, kind)
}

func checkName(name string) (string, error) {
	if name == "" {
		return "", fmt.Errorf("missing DaemonSet name (ds/NAME)")
	}
	if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
		return "", fmt.Errorf("invalid DaemonSet name %q: %s", name, strings.Join(errs, "; "))
	}
	return name, nil
}
