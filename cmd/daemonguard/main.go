// Command daemonguard is the single daemonguard binary: admission webhooks, the rollout controller
// and the CLI. All logic lives in importable packages; this file only runs the root command
// (cli.Main wires the signals and the exit code).
package main

import "github.com/daemonguard/daemonguard/internal/cli"

func main() { cli.Main(cli.New()) }
