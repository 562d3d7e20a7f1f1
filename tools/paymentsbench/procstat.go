package main

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// This file reads what the run needs to know about processes and the
// machine from /proc (Linux).

// clockTick is the unit of the CPU times in /proc/PID/stat: USER_HZ, which
// the kernel fixes at 100 for this interface whatever its own HZ.
const clockTick = 10 * time.Millisecond

// procStat is what the run reads of /proc/PID/stat.
type procStat struct {
	PPID int
	// CPU is user + system time of the process itself.
	CPU time.Duration
	// ChildrenCPU is the user + system time of its children that exited and
	// were waited for.
	ChildrenCPU time.Duration
}

// parseProcStat parses the content of /proc/PID/stat. The command name (2nd
// field) is in parentheses and may hold spaces and parentheses itself, so
// the fields are counted from the last ')'.
func parseProcStat(s string) (procStat, error) {
	end := strings.LastIndexByte(s, ')')
	if end < 0 {
		return procStat{}, errors.New("no command name in /proc stat")
	}
	// After ") ": state(3) ppid(4) pgrp(5) session(6) tty_nr(7) tpgid(8)
	// flags(9) minflt(10) cminflt(11) majflt(12) cmajflt(13) utime(14)
	// stime(15) cutime(16) cstime(17) ...
	f := strings.Fields(s[end+1:])
	if len(f) < 15 {
		return procStat{}, fmt.Errorf("/proc stat has %d fields after the command name, want at least 15", len(f))
	}
	field := func(n int) (int64, error) { // n: the field's number in proc(5)
		v, err := strconv.ParseInt(f[n-3], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc stat field %d: %w", n, err)
		}
		return v, nil
	}
	var v [5]int64
	for i, n := range []int{4, 14, 15, 16, 17} {
		x, err := field(n)
		if err != nil {
			return procStat{}, err
		}
		v[i] = x
	}
	return procStat{
		PPID:        int(v[0]),
		CPU:         time.Duration(v[1]+v[2]) * clockTick,
		ChildrenCPU: time.Duration(v[3]+v[4]) * clockTick,
	}, nil
}

func readProcStat(pid int) (procStat, error) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return procStat{}, fmt.Errorf("read CPU time of process %d: %w", pid, err)
	}
	return parseProcStat(string(b))
}

// processCPU is the CPU time a process has used.
func processCPU(pid int) (time.Duration, error) {
	st, err := readProcStat(pid)
	return st.CPU, err
}

// treeCPU is the CPU time used by a server process and its children: the
// ones alive now, and the ones that exited (the server waited for them). For
// the postmaster this is the whole PostgreSQL cluster, backends of closed
// connections included.
func treeCPU(pid int) (time.Duration, error) {
	root, err := readProcStat(pid)
	if err != nil {
		return 0, err
	}
	total := root.CPU + root.ChildrenCPU
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, fmt.Errorf("list processes: %w", err)
	}
	for _, e := range entries {
		child, err := strconv.Atoi(e.Name())
		if err != nil || child == pid {
			continue
		}
		st, err := readProcStat(child)
		if err != nil {
			continue // gone meanwhile
		}
		if st.PPID == pid {
			total += st.CPU
		}
	}
	return total, nil
}

// parseVmRSS returns the resident set size, in bytes, from the content of
// /proc/PID/status.
func parseVmRSS(status string) (int64, error) {
	for line := range strings.Lines(status) {
		rest, ok := strings.CutPrefix(line, "VmRSS:")
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) != 2 || f[1] != "kB" {
			return 0, fmt.Errorf("unexpected VmRSS line %q", strings.TrimSpace(line))
		}
		kb, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("VmRSS: %w", err)
		}
		return kb * 1024, nil
	}
	return 0, errors.New("no VmRSS in /proc status")
}

func processRSS(pid int) (int64, error) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "status"))
	if err != nil {
		return 0, fmt.Errorf("read memory of process %d: %w", pid, err)
	}
	return parseVmRSS(string(b))
}

// parseMetric returns the value of an unlabelled metric in a Prometheus text
// exposition, such as go_goroutines.
func parseMetric(exposition, name string) (float64, error) {
	for line := range strings.Lines(exposition) {
		rest, ok := strings.CutPrefix(line, name+" ")
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
		if err != nil {
			return 0, fmt.Errorf("metric %s: %w", name, err)
		}
		return v, nil
	}
	return 0, fmt.Errorf("metric %s not found", name)
}

// machine describes the machine: CPUs, CPU model and memory.
func machine() string {
	model := "unknown CPU"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		if v, ok := procField(string(b), "model name"); ok {
			model = v
		}
	}
	mem := "unknown memory"
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		if v, ok := procField(string(b), "MemTotal"); ok {
			if f := strings.Fields(v); len(f) == 2 {
				if kb, err := strconv.ParseInt(f[0], 10, 64); err == nil {
					mem = fmt.Sprintf("%.1f GiB RAM", float64(kb)/(1<<20))
				}
			}
		}
	}
	return fmt.Sprintf("%d CPUs (%s), %s, %s/%s", runtime.NumCPU(), model, mem, runtime.GOOS, runtime.GOARCH)
}

// procField returns the value of the first "name: value" line of a /proc
// file such as cpuinfo or meminfo.
func procField(content, name string) (string, bool) {
	sc := bufio.NewScanner(strings.NewReader(content))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok && strings.TrimSpace(k) == name {
			return strings.TrimSpace(v), true
		}
	}
	return "", false
}

// loadAverage is the machine's load average over 1, 5 and 15 minutes, from
// /proc/loadavg. Read before the run it shows other work on the machine;
// after, the run's own processes count too (those waiting for an fsync
// included).
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}
