package main

import (
	"flag"
	"fmt"
	"strings"
)

// options are what `up` accepts and passes on to the supervisor unchanged.
type options struct {
	dir string
	// A directory of CRD manifests to install (*.yaml), e.g. Karpenter's at one release.
	crds string
	// Manifests applied (server-side) once the CRDs are established, e.g. infra/rbac.yaml.
	apply multiFlag
	// Stop everything when this process is gone (0: only on `down`).
	ownerPID int
	// Components besides etcd and kube-apiserver.
	components map[string]bool
	// Seconds a KWOK node's lease lasts (KWOK renews it at a quarter of that).
	nodeLeaseSeconds uint
	// Extra flags per component, appended after the defaults (a later flag wins).
	apiserverArgs, controllerManagerArgs, schedulerArgs, kwokArgs multiFlag
	// How long `up` waits for the control plane to be ready.
	readyTimeoutSeconds int
}

// The components `--components` may name; etcd and kube-apiserver always run.
var optionalComponents = []string{"kube-controller-manager", "kube-scheduler", "kwok"}

type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

func parseOptions(command string, args []string) (options, error) {
	if len(args) < 1 || strings.HasPrefix(args[0], "-") {
		return options{}, fmt.Errorf("usage: controlplane %s DIR [flags]", command)
	}
	o := options{dir: args[0], components: map[string]bool{}}
	flags := flag.NewFlagSet(command, flag.ContinueOnError)
	flags.StringVar(&o.crds, "crds", "", "directory of CRD manifests to install")
	flags.Var(&o.apply, "apply", "manifest applied once the CRDs are established (repeatable)")
	flags.IntVar(&o.ownerPID, "owner-pid", 0, "stop when this process is gone")
	components := flags.String("components", strings.Join(optionalComponents, ","),
		"components besides etcd and kube-apiserver: "+strings.Join(optionalComponents, ",")+" (or none)")
	flags.UintVar(&o.nodeLeaseSeconds, "node-lease-duration-seconds", 40, "KWOK nodes' lease duration (the kubelet's default)")
	flags.Var(&o.apiserverArgs, "apiserver-arg", "extra kube-apiserver flag (repeatable)")
	flags.Var(&o.controllerManagerArgs, "controller-manager-arg", "extra kube-controller-manager flag (repeatable)")
	flags.Var(&o.schedulerArgs, "scheduler-arg", "extra kube-scheduler flag (repeatable)")
	flags.Var(&o.kwokArgs, "kwok-arg", "extra kwok flag (repeatable)")
	flags.IntVar(&o.readyTimeoutSeconds, "ready-timeout", 120, "seconds to wait for readiness")
	if err := flags.Parse(args[1:]); err != nil {
		return options{}, err
	}
	if flags.NArg() > 0 {
		return options{}, fmt.Errorf("unexpected argument %q", flags.Arg(0))
	}
	if *components != "none" && *components != "" {
		for _, c := range strings.Split(*components, ",") {
			known := false
			for _, k := range optionalComponents {
				known = known || k == c
			}
			if !known {
				return options{}, fmt.Errorf("--components: unknown component %q (known: %s)", c, strings.Join(optionalComponents, ", "))
			}
			o.components[c] = true
		}
	}
	return o, nil
}
