// Command cert-manager runs cert-manager's certificate issuing controllers (self-signed and CA
// issuers) and its cainjector in one process against a kubeconfig, without leader election. It is
// a test binary of the local cluster, not a cert-manager distribution.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"k8s.io/klog/v2"

	"github.com/daemonguard/daemonguard/tools/certmanager"
)

func main() {
	var opts certmanager.Options
	// Not flag.CommandLine: controller-runtime registers its own --kubeconfig there.
	fs := flag.NewFlagSet(os.Args[0], flag.ExitOnError)
	fs.StringVar(&opts.Kubeconfig, "kubeconfig", "", "kubeconfig of the cluster to run against (required)")
	fs.StringVar(&opts.ClusterResourceNamespace, "cluster-resource-namespace", "kube-system",
		"namespace that holds the Secrets of ClusterIssuers")
	fs.StringVar(&opts.ReadyFile, "ready-file", "", "file written once every informer has synced")
	klog.InitFlags(fs)
	_ = fs.Parse(os.Args[1:])

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := certmanager.Run(ctx, opts)
	klog.Flush()
	if err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}
