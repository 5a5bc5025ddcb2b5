// Package clustertest holds what every test on the local control plane does, written once:
//
//   - kubectl.go: Kubectl runs the real kubectl against the cluster and fails the test when it
//     fails; TryKubectl leaves the failure to a test that expects one, and KubectlAs runs it with
//     another user's kubeconfig.
//   - seed.go: the seed DaemonSet (testdata/demo/nginx-ds.yaml) as a path (SeedManifest), an
//     object (SeedObject) or a changed manifest (SeedYAML), through the one DaemonSet codec
//     (DecodeDaemonSet, EditDaemonSet) that the demo shares.
//   - budget.go: BudgetSampler watches a DaemonSet's pods and the nodes and records, after every
//     event, how many nodes lack an available pod, with the assertions the rollout tests make on
//     it; PodReady and NodeReachable are its notions of available and counted.
//   - daemonset.go: WaitDaemonSet polls a DaemonSet until it is as a test wants it (RolledOut:
//     every pod updated and available); RolloutCondition and LastMeasurement read what
//     daemonguard's rollout controller writes.
//   - proc.go: MemoryKiB and CPUTime read a process's memory and CPU time from /proc, for the
//     benchmarks that run daemonguard's components as processes.
//
// Tests of the product import it, and so may the demo; the product itself never does (test/
// layout_test.go checks the shipped binaries). A test file that needs the local control plane is
// named *_cluster_test.go (test/naming_test.go).
package clustertest
