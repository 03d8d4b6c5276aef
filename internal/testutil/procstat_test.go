//go:build linux

package testutil

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestProcStatReadsThisProcess: the test's own stat names its binary, its
// parent and a CPU time that grows with work; a child stopped with
// SIGSTOP reads as stopped.
func TestProcStatReadsThisProcess(t *testing.T) {
	before, err := ProcStat(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	// The kernel's name of the process, from the path it was started by,
	// 15 bytes at most.
	comm, err := os.ReadFile("/proc/self/comm")
	if err != nil {
		t.Fatal(err)
	}
	if want := strings.TrimSuffix(string(comm), "\n"); before.Command != want {
		t.Errorf("command %q, want %q", before.Command, want)
	}
	if before.Parent != os.Getppid() {
		t.Errorf("parent %d, want %d", before.Parent, os.Getppid())
	}
	deadline := time.Now().Add(30 * time.Second)
	var after ProcessStat
	for x := 0; ; x++ {
		if x%1_000_000 == 0 {
			if after, err = ProcStat(os.Getpid()); err != nil {
				t.Fatal(err)
			}
			if after.CPU > before.CPU || time.Now().After(deadline) {
				break
			}
		}
	}
	if after.CPU <= before.CPU {
		t.Errorf("CPU %s after 30 s of work, %s before", after.CPU, before.CPU)
	}

	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	Eventually(t, "sleep stopped", 10*time.Second, func() error {
		st, err := ProcStat(cmd.Process.Pid)
		if err != nil {
			return err
		}
		if st.State != 'T' || st.Parent != os.Getpid() || st.Command != "sleep" {
			return fmt.Errorf("state %c, parent %d, command %q", st.State, st.Parent, st.Command)
		}
		return nil
	})
}
