// Command controlplane is the real Kubernetes control plane of nodewright's tests: etcd,
// kube-apiserver, kube-controller-manager, kube-scheduler and KWOK, built from their Go
// modules at the versions go.mod pins, in one binary with one subcommand each (as
// hyperkube once was), plus the commands that start and stop them together:
//
//	controlplane up DIR [flags]   start everything on loopback, return once it is ready
//	controlplane down DIR         stop what `up DIR` started
//
// `up` starts a supervisor in its own session; the supervisor runs etcd in its own
// process and every other component as its child, installs Karpenter's CRDs, writes
// DIR/kubeconfig (cluster-admin) and DIR/control-plane.json (what a test needs to reach
// it), and stops everything when `down` asks, when a component dies, or when the
// process named by --owner-pid is gone, so a test that crashes never leaves it running.
//
// tests/kube/up.sh builds this binary when it is missing or stale and runs `up`;
// docs/architecture.md ("Testing") says how the suite uses it.
package main

import (
	"fmt"
	"os"
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	command := os.Args[1]
	// Each component reads its own flags as its binary would, named as it is.
	args := os.Args[2:]
	switch command {
	case "up":
		exit(up(args))
	case "down":
		exit(down(args))
	case "supervise":
		exit(supervise(args))
	case "etcd":
		exit(runEtcd(args))
	case "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok":
		os.Exit(runComponent(command, args))
	default:
		usage()
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: controlplane up DIR [flags] | down DIR | kube-apiserver|kube-controller-manager|kube-scheduler|kwok|etcd [flags]")
	os.Exit(2)
}

func exit(err error) {
	if err != nil {
		fmt.Fprintf(os.Stderr, "controlplane: %v\n", err)
		os.Exit(1)
	}
	os.Exit(0)
}
