package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	_ "time/tzdata" // as kube-apiserver's main: CronJob time zones

	"github.com/spf13/pflag"
	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	apiserver "k8s.io/kubernetes/cmd/kube-apiserver/app"
	controllermanager "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	scheduler "k8s.io/kubernetes/cmd/kube-scheduler/app"
	kwokconfig "sigs.k8s.io/kwok/pkg/config"
	kwokcmd "sigs.k8s.io/kwok/pkg/kwok/cmd"
	kwoklog "sigs.k8s.io/kwok/pkg/log"
)

// runComponent runs one Kubernetes component as its own binary's main would, with the
// arguments after its name.
func runComponent(name string, args []string) int {
	os.Args = append([]string{name}, args...)
	switch name {
	case "kube-apiserver":
		return cli.Run(apiserver.NewAPIServerCommand())
	case "kube-controller-manager":
		return cli.Run(controllermanager.NewControllerManagerCommand())
	case "kube-scheduler":
		return cli.Run(scheduler.NewSchedulerCommand())
	case "kwok":
		return runKwok()
	}
	return 2
}

// runKwok is cmd/kwok's main: its global flags (config files, verbosity) beside the
// command's own.
func runKwok() int {
	flagset := pflag.NewFlagSet("global", pflag.ContinueOnError)
	flagset.ParseErrorsAllowlist.UnknownFlags = true
	flagset.Usage = func() {}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	ctx, logger := kwoklog.InitFlags(ctx, flagset)
	ctx, err := kwokconfig.InitFlags(ctx, flagset)
	if err != nil {
		logger.Error("kwok configuration", "err", err)
		return 1
	}
	command := kwokcmd.NewCommand(ctx)
	// The Kubernetes components linked beside KWOK register component-base's --version
	// flag globally; cobra would read it as KWOK's boolean one and refuse to run.
	command.Version = ""
	command.PersistentFlags().AddFlagSet(flagset)
	if err := command.ExecuteContext(ctx); err != nil {
		logger.Error("kwok", "err", err)
		return 1
	}
	return 0
}
