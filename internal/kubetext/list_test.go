package kubetext

import "testing"

func TestList(t *testing.T) {
	tests := map[string]struct {
		items []string
		want  string
	}{
		"nothing names nothing":                   {want: ""},
		"up to three items are all named":         {items: []string{"a", "b", "c"}, want: "a, b, c"},
		"a fourth is counted, not named":          {items: []string{"a", "b", "c", "d"}, want: "a, b, c and 1 more"},
		"many name the first three and the count": {items: []string{"a", "b", "c", "d", "e", "f", "g"}, want: "a, b, c and 4 more"},
	}
	for name, tc := range tests {
		if got := List(tc.items); got != tc.want {
			t.Errorf("%s: List(%q) = %q, want %q", name, tc.items, got, tc.want)
		}
	}
}
