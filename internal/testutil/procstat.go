package testutil

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// ProcStat reads process pid's command name, parent's pid and CPU time
// (user and system) from /proc (Linux only): what a benchmark reads twice
// to say where the machine's cores went between the readings.
func ProcStat(pid int) (comm string, ppid int, cpu time.Duration, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return "", 0, 0, err
	}
	// pid (comm) state ppid … utime stime: comm may hold spaces.
	s := string(b)
	open, closing := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if open < 0 || closing < open {
		return "", 0, 0, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	fields := strings.Fields(s[closing+1:])
	if len(fields) < 13 {
		return "", 0, 0, fmt.Errorf("/proc/%d/stat: %d fields after the command name", pid, len(fields))
	}
	ppid, _ = strconv.Atoi(fields[1])
	utime, _ := strconv.ParseInt(fields[11], 10, 64)
	stime, _ := strconv.ParseInt(fields[12], 10, 64)
	// USER_HZ is 100 on Linux.
	return s[open+1 : closing], ppid, time.Duration(utime+stime) * 10 * time.Millisecond, nil
}
