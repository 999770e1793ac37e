package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"syscall"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/component-base/version"
)

// Where a control plane's files go, under its DIR.
const (
	infoFile       = "control-plane.json"
	pidFile        = "supervisor.pid"
	supervisorLog  = "supervisor.log"
	adminUser      = "admin"
	nodewrightUser = "nodewright"
	// The group infra/rbac.yaml binds, as the stack's EKS access entries put the
	// functions' roles in it.
	nodewrightGroup = "nodewright"
	// KWOK plays the kubelet of every Node carrying this annotation.
	kwokNodeAnnotation = "kwok.x-k8s.io/node=fake"
)

// info is DIR/control-plane.json: how a test reaches the control plane.
type info struct {
	Server            string          `json:"server"`
	CAFile            string          `json:"caFile"`
	Kubeconfig        string          `json:"kubeconfig"`
	AdminToken        string          `json:"adminToken"`
	Users             map[string]user `json:"users"`
	Etcd              string          `json:"etcd"`
	KubernetesVersion string          `json:"kubernetesVersion"`
	CRDs              []string        `json:"crds"`
	Components        []string        `json:"components"`
	AuditLog          string          `json:"auditLog"`
	Logs              string          `json:"logs"`
	ReadySeconds      float64         `json:"readySeconds"`
	KwokNodeSelector  string          `json:"kwokNodeAnnotation"`
}

type user struct {
	Token      string   `json:"token"`
	Groups     []string `json:"groups"`
	Kubeconfig string   `json:"kubeconfig"`
}

// child is one component process.
type child struct {
	name string
	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

// supervise runs the control plane in the foreground until it is told to stop.
func supervise(args []string) error {
	started := time.Now()
	o, err := parseOptions("supervise", args)
	if err != nil {
		return err
	}
	// Children get SIGKILL when the thread that started them ends (PR_SET_PDEATHSIG):
	// start them all from this goroutine, locked to the main thread for good.
	runtime.LockOSThread()
	if err := os.WriteFile(filepath.Join(o.dir, pidFile), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		return err
	}
	s := &supervisor{o: o, exited: make(chan *child, 8)}
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	err = s.start(started)
	if err == nil {
		err = s.wait(stop)
	}
	s.shutdown()
	return err
}

type supervisor struct {
	o        options
	children []*child
	exited   chan *child
	logs     string
}

func (s *supervisor) start(started time.Time) error {
	o := s.o
	s.logs = filepath.Join(o.dir, "logs")
	if err := os.MkdirAll(s.logs, 0o755); err != nil {
		return err
	}
	keys, err := writePKI(filepath.Join(o.dir, "pki"))
	if err != nil {
		return fmt.Errorf("certificates: %w", err)
	}
	adminToken, err := randomToken()
	if err != nil {
		return err
	}
	nodewrightToken, err := randomToken()
	if err != nil {
		return err
	}
	tokens := filepath.Join(o.dir, "tokens.csv")
	tokenLines := fmt.Sprintf("%s,%s,%s,\"system:masters\"\n%s,%s,%s,\"%s\"\n",
		adminToken, adminUser, adminUser, nodewrightToken, nodewrightUser, nodewrightUser, nodewrightGroup)
	if err := os.WriteFile(tokens, []byte(tokenLines), 0o600); err != nil {
		return err
	}
	auditPolicy := filepath.Join(o.dir, "audit-policy.yaml")
	if err := os.WriteFile(auditPolicy, []byte(auditPolicyYAML), 0o644); err != nil {
		return err
	}
	ports, err := freePorts(6)
	if err != nil {
		return err
	}
	etcdURL := fmt.Sprintf("http://127.0.0.1:%d", ports[0])
	server := fmt.Sprintf("https://127.0.0.1:%d", ports[2])

	adminKubeconfig := filepath.Join(o.dir, "kubeconfig")
	if err := writeKubeconfig(adminKubeconfig, server, keys.caCert, adminUser, adminToken); err != nil {
		return err
	}
	nodewrightKubeconfig := filepath.Join(o.dir, "nodewright.kubeconfig")
	if err := writeKubeconfig(nodewrightKubeconfig, server, keys.caCert, nodewrightUser, nodewrightToken); err != nil {
		return err
	}

	if err := s.run("etcd",
		"--data-dir="+filepath.Join(o.dir, "etcd"),
		"--listen-client-url="+etcdURL,
		fmt.Sprintf("--listen-peer-url=http://127.0.0.1:%d", ports[1]),
	); err != nil {
		return err
	}
	if err := s.waitFor("etcd", 30*time.Second, func() bool { return httpOK(etcdURL+"/health", nil) }); err != nil {
		return err
	}

	admission := "--disable-admission-plugins="
	if !o.components["kube-controller-manager"] {
		// Nothing would create the namespaces' default ServiceAccounts.
		admission += "ServiceAccount"
	}
	apiserverArgs := append([]string{
		"--etcd-servers=" + etcdURL,
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		fmt.Sprintf("--secure-port=%d", ports[2]),
		"--tls-cert-file=" + keys.servingCert,
		"--tls-private-key-file=" + keys.servingKey,
		"--client-ca-file=" + keys.caCert,
		"--token-auth-file=" + tokens,
		// As EKS: the Node authorizer, then RBAC.
		"--authorization-mode=Node,RBAC",
		"--service-account-issuer=https://kubernetes.default.svc",
		"--service-account-key-file=" + keys.serviceAccountPub,
		"--service-account-signing-key-file=" + keys.serviceAccountKey,
		"--service-cluster-ip-range=10.96.0.0/16",
		"--allow-privileged=true",
		"--profiling=false",
		"--audit-policy-file=" + auditPolicy,
		"--audit-log-path=" + filepath.Join(o.dir, "audit.log"),
		"--audit-log-format=json",
		admission,
	}, o.apiserverArgs...)
	if err := s.run("kube-apiserver", apiserverArgs...); err != nil {
		return err
	}
	admin := &rest.Config{
		Host:            server,
		BearerToken:     adminToken,
		TLSClientConfig: rest.TLSClientConfig{CAFile: keys.caCert},
		QPS:             100,
		Burst:           200,
	}
	caPool, err := caTransport(keys.caCert)
	if err != nil {
		return err
	}
	if err := s.waitFor("kube-apiserver", 60*time.Second, func() bool {
		return httpOK(server+"/readyz", map[string]string{"Authorization": "Bearer " + adminToken}, caPool)
	}); err != nil {
		return err
	}

	// The rest start while the CRDs are installed.
	var waits []func() error
	if o.components["kube-controller-manager"] {
		port := ports[3]
		if err := s.run("kube-controller-manager", append([]string{
			"--kubeconfig=" + adminKubeconfig,
			"--authentication-kubeconfig=" + adminKubeconfig,
			"--authorization-kubeconfig=" + adminKubeconfig,
			"--bind-address=127.0.0.1",
			fmt.Sprintf("--secure-port=%d", port),
			"--leader-elect=false",
			"--service-account-private-key-file=" + keys.serviceAccountKey,
			"--root-ca-file=" + keys.caCert,
			"--use-service-account-credentials=false",
			"--cluster-name=nodewright-test",
			"--controllers=*",
		}, o.controllerManagerArgs...)...); err != nil {
			return err
		}
		waits = append(waits, func() error {
			return s.waitFor("kube-controller-manager", 60*time.Second, func() bool {
				return httpOK(fmt.Sprintf("https://127.0.0.1:%d/healthz", port), nil, insecureTransport()) &&
					defaultServiceAccountExists(admin)
			})
		})
	}
	if o.components["kube-scheduler"] {
		port := ports[4]
		if err := s.run("kube-scheduler", append([]string{
			"--kubeconfig=" + adminKubeconfig,
			"--authentication-kubeconfig=" + adminKubeconfig,
			"--authorization-kubeconfig=" + adminKubeconfig,
			"--bind-address=127.0.0.1",
			fmt.Sprintf("--secure-port=%d", port),
			"--leader-elect=false",
		}, o.schedulerArgs...)...); err != nil {
			return err
		}
		waits = append(waits, func() error {
			return s.waitFor("kube-scheduler", 60*time.Second, func() bool {
				return httpOK(fmt.Sprintf("https://127.0.0.1:%d/healthz", port), nil, insecureTransport())
			})
		})
	}
	if o.components["kwok"] {
		config := filepath.Join(o.dir, "kwok.yaml")
		if err := os.WriteFile(config, []byte(kwokStages()), 0o644); err != nil {
			return err
		}
		if err := s.run("kwok", append([]string{
			"--kubeconfig=" + adminKubeconfig,
			"--config=" + config,
			"--manage-nodes-with-annotation-selector=" + kwokNodeAnnotation,
			fmt.Sprintf("--node-lease-duration-seconds=%d", o.nodeLeaseSeconds),
			fmt.Sprintf("--server-address=127.0.0.1:%d", ports[5]),
			"--cidr=10.244.0.0/16",
		}, o.kwokArgs...)...); err != nil {
			return err
		}
	}

	var crds []string
	if o.crds != "" {
		if crds, err = installCRDs(admin, o.crds); err != nil {
			return fmt.Errorf("CRDs from %s: %w", o.crds, err)
		}
	}
	for _, manifest := range o.apply {
		if err := applyManifest(admin, manifest); err != nil {
			return fmt.Errorf("applying %s: %w", manifest, err)
		}
	}
	for _, wait := range waits {
		if err := wait(); err != nil {
			return err
		}
	}

	components := []string{"etcd", "kube-apiserver"}
	for _, c := range optionalComponents {
		if o.components[c] {
			components = append(components, c)
		}
	}
	result := info{
		Server:            server,
		CAFile:            keys.caCert,
		Kubeconfig:        adminKubeconfig,
		AdminToken:        adminToken,
		Users:             map[string]user{nodewrightUser: {Token: nodewrightToken, Groups: []string{nodewrightGroup}, Kubeconfig: nodewrightKubeconfig}},
		Etcd:              etcdURL,
		KubernetesVersion: version.Get().GitVersion,
		CRDs:              crds,
		Components:        components,
		AuditLog:          filepath.Join(o.dir, "audit.log"),
		Logs:              s.logs,
		ReadySeconds:      time.Since(started).Seconds(),
		KwokNodeSelector:  kwokNodeAnnotation,
	}
	data, err := json.MarshalIndent(result, "", "  ")
	if err != nil {
		return err
	}
	// Written whole, then renamed: `up` never reads half of it.
	tmp := filepath.Join(o.dir, infoFile+".tmp")
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(o.dir, infoFile))
}

// run starts a component as a child of this process, its output in DIR/logs/NAME.log.
func (s *supervisor) run(name string, args ...string) error {
	logFile, err := os.Create(filepath.Join(s.logs, name+".log"))
	if err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	cmd := exec.Command(self, append([]string{name}, args...)...)
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return fmt.Errorf("starting %s: %w", name, err)
	}
	c := &child{name: name, cmd: cmd, done: make(chan struct{})}
	s.children = append(s.children, c)
	go func() {
		c.err = cmd.Wait()
		logFile.Close()
		close(c.done)
		s.exited <- c
	}()
	return nil
}

// waitFor polls ready every 50 ms until it holds, a component exits, or the timeout.
func (s *supervisor) waitFor(what string, timeout time.Duration, ready func() bool) error {
	deadline := time.Now().Add(timeout)
	for !ready() {
		select {
		case c := <-s.exited:
			return fmt.Errorf("%s exited (%v) while waiting for %s; see %s", c.name, c.err, what, filepath.Join(s.logs, c.name+".log"))
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready after %s; see %s", what, timeout, s.logs)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return nil
}

// wait runs until SIGTERM, a component's exit, or the owner's.
func (s *supervisor) wait(stop chan os.Signal) error {
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return nil
		case c := <-s.exited:
			return fmt.Errorf("%s exited (%v); see %s", c.name, c.err, filepath.Join(s.logs, c.name+".log"))
		case <-tick.C:
			if s.o.ownerPID > 0 && !alive(s.o.ownerPID) {
				fmt.Fprintf(os.Stderr, "owner process %d is gone: stopping\n", s.o.ownerPID)
				return nil
			}
		}
	}
}

// shutdown kills the components at once: a test's control plane holds nothing worth a
// graceful stop (etcd's data dies with it), and a graceful kube-apiserver takes seconds
// to drain, which every test would pay.
func (s *supervisor) shutdown() {
	for _, c := range s.children {
		_ = c.cmd.Process.Kill()
	}
	for _, c := range s.children {
		<-c.done
	}
}

func alive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// freePorts asks the kernel for n free loopback ports.
func freePorts(n int) ([]int, error) {
	var listeners []net.Listener
	defer func() {
		for _, l := range listeners {
			l.Close()
		}
	}()
	var ports []int
	for i := 0; i < n; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		listeners = append(listeners, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

func httpOK(url string, headers map[string]string, transport ...http.RoundTripper) bool {
	client := &http.Client{Timeout: 2 * time.Second}
	if len(transport) > 0 {
		client.Transport = transport[0]
	}
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return false
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := client.Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

func writeKubeconfig(path, server, caFile, name, token string) error {
	text := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: test
  cluster:
    server: %s
    certificate-authority: %s
users:
- name: %s
  user:
    token: %s
contexts:
- name: %s
  context:
    cluster: test
    user: %s
current-context: %s
`, server, caFile, name, token, name, name, name)
	return os.WriteFile(path, []byte(text), 0o600)
}

// Every request of the functions' group is recorded (what, who, the answer), so a test
// can check what nodewright did and what it was refused; nothing else is.
const auditPolicyYAML = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Metadata
  userGroups: ["` + nodewrightGroup + `"]
- level: None
`

func defaultServiceAccountExists(config *rest.Config) bool {
	client, err := rest.HTTPClientFor(config)
	if err != nil {
		return false
	}
	req, err := http.NewRequestWithContext(context.Background(), http.MethodGet,
		config.Host+"/api/v1/namespaces/default/serviceaccounts/default", nil)
	if err != nil {
		return false
	}
	resp, err := client.Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}
