// Command kubectl-daemonguard is daemonguard's CLI as a kubectl plugin: installed on the PATH, it
// runs as `kubectl daemonguard ...` (e.g. `kubectl daemonguard rollout status ds/node-agent`). It
// is the same command tree as the daemonguard binary; this file only renames it for kubectl.
package main

import (
	"github.com/spf13/cobra"

	"github.com/daemonguard/daemonguard/internal/cli"
)

func main() {
	root := cli.New()
	root.Use = "kubectl daemonguard"
	// Help and usage show "kubectl daemonguard ...", not the first word of Use alone.
	if root.Annotations == nil {
		root.Annotations = map[string]string{}
	}
	root.Annotations[cobra.CommandDisplayNameAnnotation] = "kubectl daemonguard"
	cli.Main(root)
}
