package main

import (
	"flag"
	"fmt"
	"net/url"
	"os"
	"os/signal"
	"syscall"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
)

// runEtcd runs a single-member etcd from go.etcd.io/etcd/server/v3, the version
// k8s.io/kubernetes itself requires, until SIGTERM.
//
// It is configured for a test: one member on loopback, no fsync (the data dies with the
// test), and no automatic compaction beyond what kube-apiserver asks for (every 5
// minutes, as on EKS); a test compacts at will through the client URL's JSON gateway.
func runEtcd(args []string) error {
	flags := flag.NewFlagSet("etcd", flag.ContinueOnError)
	dataDir := flags.String("data-dir", "", "where etcd keeps its data")
	clientURL := flags.String("listen-client-url", "", "http://127.0.0.1:PORT")
	peerURL := flags.String("listen-peer-url", "", "http://127.0.0.1:PORT")
	if err := flags.Parse(args); err != nil {
		return err
	}
	client, err := url.Parse(*clientURL)
	if err != nil || *clientURL == "" {
		return fmt.Errorf("etcd: --listen-client-url %q is not a URL", *clientURL)
	}
	peer, err := url.Parse(*peerURL)
	if err != nil || *peerURL == "" {
		return fmt.Errorf("etcd: --listen-peer-url %q is not a URL", *peerURL)
	}

	cfg := embed.NewConfig()
	cfg.Name = "default"
	cfg.Dir = *dataDir
	cfg.ListenClientUrls = []url.URL{*client}
	cfg.AdvertiseClientUrls = []url.URL{*client}
	cfg.ListenPeerUrls = []url.URL{*peer}
	cfg.AdvertisePeerUrls = []url.URL{*peer}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.UnsafeNoFsync = true
	// Errors only: at warn, etcd logs a line for every request it serves.
	cfg.LogLevel = "error"
	cfg.ListenMetricsUrls = nil

	server, err := embed.StartEtcd(cfg)
	if err != nil {
		return fmt.Errorf("etcd: %w", err)
	}
	defer server.Close()
	select {
	case <-server.Server.ReadyNotify():
	case <-time.After(60 * time.Second):
		return fmt.Errorf("etcd: not ready after 60 s")
	}
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT)
	select {
	case <-signals:
		return nil
	case err := <-server.Err():
		return fmt.Errorf("etcd: %w", err)
	}
}
