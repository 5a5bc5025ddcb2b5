package rolloutcli

import (
	"strings"
	"testing"
)

func TestParseArgs(t *testing.T) {
	tests := map[string]struct {
		args    []string
		want    string
		wantErr string
	}{
		"a bare name is a DaemonSet":                 {args: []string{"node-agent"}, want: "node-agent"},
		"ds/NAME is the short form":                  {args: []string{"ds/node-agent"}, want: "node-agent"},
		"daemonset/NAME is the singular kind":        {args: []string{"daemonset/node-agent"}, want: "node-agent"},
		"daemonsets/NAME is the plural resource":     {args: []string{"daemonsets/node-agent"}, want: "node-agent"},
		"daemonsets.apps/NAME names the group":       {args: []string{"daemonsets.apps/node-agent"}, want: "node-agent"},
		"daemonset.v1.apps/NAME names group+version": {args: []string{"daemonset.v1.apps/node-agent"}, want: "node-agent"},
		"the kind is case-insensitive":               {args: []string{"DaemonSet/node-agent"}, want: "node-agent"},
		"two words TYPE NAME work like kubectl":      {args: []string{"ds", "node-agent"}, want: "node-agent"},
		"a Deployment is refused":                    {args: []string{"deployment/web"}, wantErr: `DaemonSets only`},
		"a StatefulSet in the group form is refused": {args: []string{"statefulsets.apps/db"}, wantErr: `not "statefulsets.apps"`},
		"a daemonset of another group is refused":    {args: []string{"daemonsets.extensions/x"}, wantErr: "DaemonSets only"},
		"two words of the wrong kind are refused":    {args: []string{"pod", "x"}, wantErr: "DaemonSets only"},
		"a missing name is refused":                  {args: []string{"ds/"}, wantErr: "missing DaemonSet name"},
		"a missing kind before the slash is refused": {args: []string{"/x"}, wantErr: "missing resource type"},
		"an invalid name is refused":                 {args: []string{"ds/Node_Agent"}, wantErr: "invalid DaemonSet name"},
		"more than one slash is an invalid name":     {args: []string{"ds/a/b"}, wantErr: "invalid DaemonSet name"},
		"slash form mixed with two words is refused": {args: []string{"ds", "ds/x"}, wantErr: "two words"},
		"three arguments are refused":                {args: []string{"ds", "a", "b"}, wantErr: "expected one DaemonSet"},
		"no argument is refused":                     {args: nil, wantErr: "expected one DaemonSet"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := ParseArgs(tc.args)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("ParseArgs(%q) = %q, %v; want error containing %q", tc.args, got, err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("ParseArgs(%q) = %q, %v; want %q", tc.args, got, err, tc.want)
			}
		})
	}
}
