// Package fleet is the end-to-end test of a fleet rollout: three local control planes with kwok
// nodes, each running daemonguard's rollout controller and its own Prometheus, registered by label
// (env=canary, env=rest) in one real Argo CD whose ApplicationSet controller releases the node
// agents of a local git repository with progressive syncs (RollingSync), canary first. The test
// commits releases to that repository and checks, from what the clusters and Argo CD recorded,
// that a good release reaches the rest only after the canary's rollout has completed and baked,
// and that a release whose analysis gate fails on the canary goes no further.
//
// The tests skip with -short, and without Debian's redis-server (Argo CD's cache) or prometheus,
// naming the package (`make testdeps` installs both as root).
package fleet
