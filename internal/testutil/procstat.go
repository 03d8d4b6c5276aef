package testutil

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// ProcessStat is what /proc/<pid>/stat says of a process (Linux only).
type ProcessStat struct {
	// Command is the process's command name.
	Command string
	// State is its state: 'R' running, 'S' sleeping, 'T' stopped, and so on.
	State byte
	// Parent is its parent's process id.
	Parent int
	// CPU is the CPU time it has used, user and system.
	CPU time.Duration
}

// ProcStat reads process pid's /proc/<pid>/stat: a benchmark reads it
// twice to say where the machine's cores went between the readings, a
// test to see a process stopped.
func ProcStat(pid int) (ProcessStat, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ProcessStat{}, err
	}
	// pid (comm) state ppid … utime stime: comm may hold spaces and
	// parentheses.
	s := string(b)
	open, closing := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if open < 0 || closing < open {
		return ProcessStat{}, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	fields := strings.Fields(s[closing+1:])
	if len(fields) < 13 || len(fields[0]) != 1 {
		return ProcessStat{}, fmt.Errorf("/proc/%d/stat: %q after the command name", pid, s[closing+1:])
	}
	parent, err := strconv.Atoi(fields[1])
	if err != nil {
		return ProcessStat{}, fmt.Errorf("/proc/%d/stat: parent: %w", pid, err)
	}
	utime, err := strconv.ParseInt(fields[11], 10, 64)
	if err != nil {
		return ProcessStat{}, fmt.Errorf("/proc/%d/stat: utime: %w", pid, err)
	}
	stime, err := strconv.ParseInt(fields[12], 10, 64)
	if err != nil {
		return ProcessStat{}, fmt.Errorf("/proc/%d/stat: stime: %w", pid, err)
	}
	// USER_HZ is 100 on Linux.
	cpu := time.Duration(utime+stime) * 10 * time.Millisecond
	return ProcessStat{Command: s[open+1 : closing], State: fields[0][0], Parent: parent, CPU: cpu}, nil
}
