package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// up starts a supervisor for DIR in its own session and returns once the control plane
// is ready (DIR/control-plane.json written), or fails with the logs that say why.
//
// The components' ports are picked free just before they bind; a control plane started
// at the same moment can take one first. That start is tried again, twice at most.
func up(args []string) error {
	o, err := parseOptions("up", args)
	if err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(o.dir, pidFile)); err == nil {
		return fmt.Errorf("%s already holds a control plane (run `down %s` first)", o.dir, o.dir)
	}
	for attempt := 1; ; attempt++ {
		err := start(o, args)
		if err == nil || attempt == 3 || !strings.Contains(err.Error(), "address already in use") {
			return err
		}
		fmt.Fprintf(os.Stderr, "controlplane: a port was taken by another process; starting again\n")
		_ = down([]string{o.dir})
		entries, _ := os.ReadDir(o.dir)
		for _, e := range entries {
			_ = os.RemoveAll(filepath.Join(o.dir, e.Name()))
		}
	}
}

func start(o options, args []string) error {
	if err := os.MkdirAll(o.dir, 0o755); err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	log, err := os.Create(filepath.Join(o.dir, supervisorLog))
	if err != nil {
		return err
	}
	defer log.Close()
	cmd := exec.Command(self, append([]string{"supervise"}, args...)...)
	cmd.Stdout = log
	cmd.Stderr = log
	// Its own session: the supervisor outlives `up` and is not stopped by a signal to
	// the caller's process group (a test harness's Ctrl-C goes through --owner-pid).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()

	deadline := time.After(time.Duration(o.readyTimeoutSeconds) * time.Second)
	for {
		if _, err := os.Stat(filepath.Join(o.dir, infoFile)); err == nil {
			fmt.Println(filepath.Join(o.dir, infoFile))
			return nil
		}
		select {
		case err := <-exited:
			return fmt.Errorf("the control plane did not start (%v):\n%s", err, logTails(o.dir))
		case <-deadline:
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			return fmt.Errorf("the control plane was not ready after %d s:\n%s", o.readyTimeoutSeconds, logTails(o.dir))
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// down stops the control plane `up DIR` started and waits until it is gone.
func down(args []string) error {
	if len(args) != 1 {
		return errors.New("usage: controlplane down DIR")
	}
	dir := args[0]
	data, err := os.ReadFile(filepath.Join(dir, pidFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil // never started, or already stopped
	}
	if err != nil {
		return err
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil {
		return fmt.Errorf("%s: %w", pidFile, err)
	}
	_ = syscall.Kill(pid, syscall.SIGTERM)
	for deadline := time.Now().Add(15 * time.Second); alive(pid) && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
	}
	if alive(pid) {
		// The whole session: the supervisor and every component it started.
		_ = syscall.Kill(-pid, syscall.SIGKILL)
	}
	return os.Remove(filepath.Join(dir, pidFile))
}

// logTails is the end of the supervisor's log and of every component's.
func logTails(dir string) string {
	var out bytes.Buffer
	files, _ := filepath.Glob(filepath.Join(dir, "logs", "*.log"))
	for _, file := range append([]string{filepath.Join(dir, supervisorLog)}, files...) {
		data, err := os.ReadFile(file)
		if err != nil || len(bytes.TrimSpace(data)) == 0 {
			continue
		}
		lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
		if len(lines) > 15 {
			lines = lines[len(lines)-15:]
		}
		fmt.Fprintf(&out, "--- %s\n%s\n", file, strings.Join(lines, "\n"))
	}
	return out.String()
}
