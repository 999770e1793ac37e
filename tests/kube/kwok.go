package main

import (
	"strings"

	nodefast "sigs.k8s.io/kwok/kustomize/stage/node/fast"
	nodeheartbeat "sigs.k8s.io/kwok/kustomize/stage/node/heartbeat-with-lease"
	podfast "sigs.k8s.io/kwok/kustomize/stage/pod/fast"
)

// kwokStages is KWOK's configuration: the stages kwokctl gives a cluster by default
// (a node turns Ready, keeps its lease and heartbeat; a pod bound to a managed node
// turns Running and Ready, completes when its containers would, and is removed when
// deleted, as a kubelet confirms a deletion).
func kwokStages() string {
	return strings.Join([]string{
		nodefast.DefaultNodeInit,
		nodeheartbeat.DefaultNodeHeartbeatWithLease,
		podfast.DefaultPodReady,
		podfast.DefaultPodComplete,
		podfast.DefaultPodDelete,
	}, "\n---\n")
}
