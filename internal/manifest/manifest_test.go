package manifest

import (
	"strings"
	"testing"
)

func TestReadSplitsStreamsAndLists(t *testing.T) {
	stream := `# leading comment only
---
apiVersion: apps/v1
kind: DaemonSet
metadata: {name: a, namespace: x}
---
apiVersion: v1
kind: List
items:
- {apiVersion: apps/v1, kind: DaemonSet, metadata: {name: b}}
- {apiVersion: v1, kind: ConfigMap, metadata: {name: c}}
`
	docs, err := Read([]string{"-"}, strings.NewReader(stream))
	if err != nil {
		t.Fatal(err)
	}
	var refs []string
	for _, d := range docs {
		refs = append(refs, d.Ref())
	}
	want := "-#2 DaemonSet x/a|-#3.items[0] DaemonSet default/b|-#3.items[1] ConfigMap default/c"
	if got := strings.Join(refs, "|"); got != want {
		t.Errorf("refs = %s\nwant  %s", got, want)
	}
}

func TestReadRejectsBrokenYAML(t *testing.T) {
	_, err := Read([]string{"-"}, strings.NewReader("kind: DaemonSet\nmetadata: [unclosed\n"))
	if err == nil || !strings.Contains(err.Error(), "-#1") {
		t.Errorf("error %v does not name the document", err)
	}
}
