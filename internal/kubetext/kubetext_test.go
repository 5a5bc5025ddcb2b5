package kubetext

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestTruncate(t *testing.T) {
	cases := map[string]struct {
		in   string
		max  int
		want string
	}{
		"short text stays":                                    {in: "abc", max: 3, want: "abc"},
		"long text ends with an ellipsis":                     {in: "abcdef", max: 5, want: "ab…"},
		"a cut never splits a rune":                           {in: "éééé", max: 6, want: "é…"},
		"a bound below the ellipsis gives the ellipsis alone": {in: "abcdef", max: 2, want: "…"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			if got := Truncate(c.in, c.max); got != c.want {
				t.Errorf("Truncate(%q, %d) = %q, want %q", c.in, c.max, got, c.want)
			}
		})
	}
}

// Every result is valid UTF-8 within the bound (when the bound holds the ellipsis) and a prefix
// of the input plus the ellipsis.
func TestTruncateProperties(t *testing.T) {
	inputs := []string{"", "a", "héllo wörld", strings.Repeat("日本", 50), strings.Repeat("é", 1000) + "x"}
	for _, in := range inputs {
		for max := len("…"); max <= len(in)+2; max++ {
			got := Truncate(in, max)
			if !utf8.ValidString(got) || len(got) > max {
				t.Fatalf("Truncate(%q, %d) = %q: invalid or over the bound", in, max, got)
			}
			if got != in && !strings.HasPrefix(in, strings.TrimSuffix(got, "…")) {
				t.Fatalf("Truncate(%q, %d) = %q is not a prefix of the input", in, max, got)
			}
		}
	}
}

func TestIndent(t *testing.T) {
	cases := map[string]struct{ in, want string }{
		"every line gets the prefix":      {in: "a\nb\n", want: "> a\n> b\n"},
		"an empty line stays empty":       {in: "a\n\nb", want: "> a\n\n> b"},
		"no text, no prefix":              {in: "", want: ""},
		"a last line without a line feed": {in: "a", want: "> a"},
	}
	for name, c := range cases {
		if got := Indent(c.in, "> "); got != c.want {
			t.Errorf("%s: Indent(%q) = %q, want %q", name, c.in, got, c.want)
		}
	}
}

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
