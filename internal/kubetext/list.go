package kubetext

import (
	"fmt"
	"strings"
)

// ListedItems is how many items List names before it counts the rest.
const ListedItems = 3

// List names the first ListedItems items and counts the rest: "a, b, c and 4 more", as the
// rollout's messages and `rollout plan` name nodes, so that a message stays short on a large
// cluster.
func List(items []string) string {
	if len(items) <= ListedItems {
		return strings.Join(items, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(items[:ListedItems], ", "), len(items)-ListedItems)
}
