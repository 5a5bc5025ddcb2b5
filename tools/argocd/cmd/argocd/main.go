// Command argocd runs one of Argo CD's application controller, repo server or ApplicationSet
// controller, chosen by its first argument ("application-controller", "repo-server" or
// "applicationset-controller"); the remaining arguments are that command's own flags. It is a
// test binary of the local cluster, not an Argo CD distribution: Argo CD's own cmd package also
// links the API server and CLI, whose dependencies are not in the module graph these commands need.
package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	controller "github.com/argoproj/argo-cd/v3/cmd/argocd-application-controller/commands"
	appset "github.com/argoproj/argo-cd/v3/cmd/argocd-applicationset-controller/commands"
	reposerver "github.com/argoproj/argo-cd/v3/cmd/argocd-repo-server/commands"
)

func main() {
	commands := map[string]func() *cobra.Command{
		"application-controller":    controller.NewCommand,
		"repo-server":               reposerver.NewCommand,
		"applicationset-controller": appset.NewCommand,
	}
	if len(os.Args) < 2 || commands[os.Args[1]] == nil {
		fmt.Fprintln(os.Stderr, "usage: argocd application-controller|repo-server|applicationset-controller [flags]")
		os.Exit(2)
	}
	cmd := commands[os.Args[1]]()
	cmd.SetArgs(os.Args[2:])
	if err := cmd.Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}
