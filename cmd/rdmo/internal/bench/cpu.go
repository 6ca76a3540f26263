package bench

import (
	"bytes"
	"os"
	"sort"
	"strconv"
	"time"
)

// CPU time from the processes' own accounting (/proc/<pid>/stat: user and
// system time of all the process's threads, dead ones included). On a
// shared machine a rate moves with everyone else's work; the CPU time an
// operation costs moves far less, so every row reports it.

// clockTick is the unit of /proc/<pid>/stat's times (USER_HZ, 100 on
// every Linux architecture Go supports).
const clockTick = 10 * time.Millisecond

// cpuTime is a process's CPU time so far, and the context switches of its
// threads (switches).
type cpuTime struct {
	user, sys time.Duration
	switches  uint64
}

func (c cpuTime) total() time.Duration { return c.user + c.sys }

func (c cpuTime) sub(o cpuTime) cpuTime {
	return cpuTime{c.user - o.user, c.sys - o.sys, c.switches - o.switches}
}

func (c cpuTime) add(o cpuTime) cpuTime {
	return cpuTime{c.user + o.user, c.sys + o.sys, c.switches + o.switches}
}

// readCPU reads the CPU time and context switches of process pid (zero if
// it is gone).
func readCPU(pid int) cpuTime {
	if pid <= 0 {
		return cpuTime{}
	}
	c := readStat(pid)
	c.switches = readSwitches(pid)
	return c
}

// readStat reads the user and system time of process pid from
// /proc/<pid>/stat.
func readStat(pid int) cpuTime {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return cpuTime{}
	}
	// The command name (field 2) may hold spaces: fields are counted
	// after its closing parenthesis, where field 3 (state) is index 0.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return cpuTime{}
	}
	f := bytes.Fields(b[i+1:])
	if len(f) < 13 {
		return cpuTime{}
	}
	ut, _ := strconv.ParseUint(string(f[11]), 10, 64) // field 14: utime
	st, _ := strconv.ParseUint(string(f[12]), 10, 64) // field 15: stime
	return cpuTime{user: time.Duration(ut) * clockTick, sys: time.Duration(st) * clockTick}
}

// readSwitches sums the context switches, voluntary (the thread blocked:
// a futex wait, a sleep, a blocking poll) and involuntary (it was
// preempted), of process pid's live threads (/proc/<pid>/task/*/status;
// the kernel keeps no total for the process). Every switch costs the
// thread's CPU a trip through the scheduler, and on a machine whose busy
// threads outnumber its CPUs each wake-up preempts one of them: a
// saturated pipeline should need few per operation. Threads that exited
// take their counts with them; Go's threads rarely exit.
func readSwitches(pid int) uint64 {
	dir := "/proc/" + strconv.Itoa(pid) + "/task"
	tasks, err := os.ReadDir(dir)
	if err != nil {
		return 0
	}
	var n uint64
	for _, t := range tasks {
		b, err := os.ReadFile(dir + "/" + t.Name() + "/status")
		if err != nil {
			continue // the thread exited meanwhile
		}
		n += ctxtSwitches(b)
	}
	return n
}

// ctxtSwitches sums the voluntary_ctxt_switches and
// nonvoluntary_ctxt_switches lines of a /proc status file.
func ctxtSwitches(status []byte) uint64 {
	var n uint64
	for line := range bytes.Lines(status) {
		key, v, ok := bytes.Cut(line, []byte(":"))
		if ok && (string(key) == "voluntary_ctxt_switches" || string(key) == "nonvoluntary_ctxt_switches") {
			k, _ := strconv.ParseUint(string(bytes.TrimSpace(v)), 10, 64)
			n += k
		}
	}
	return n
}

// cpuSample is the CPU time of a row's processes at one moment, by part.
type cpuSample struct{ init, worker, target cpuTime }

func (a cpuSample) sub(b cpuSample) cpuSample {
	return cpuSample{a.init.sub(b.init), a.worker.sub(b.worker), a.target.sub(b.target)}
}

func (a cpuSample) add(b cpuSample) cpuSample {
	return cpuSample{a.init.add(b.init), a.worker.add(b.worker), a.target.add(b.target)}
}

// sampleCPU reads the CPU time of the initiators, of the row's RDMO worker
// (workerPID 0: none) and of the target.
func (d *driver) sampleCPU(workerPID int) cpuSample {
	var s cpuSample
	for _, c := range d.inits {
		s.init = s.init.add(readCPU(c.pid()))
	}
	s.worker = readCPU(workerPID)
	if d.target != nil {
		s.target = readCPU(d.target.pid())
	}
	return s
}

// StableSpread bounds a stable row: its measured rounds' rates (rounds
// shorter than an interval counted together, rowState.addRate) span at
// most this fraction of their median ((max - min) / median), over at
// least StableRounds rounds. A goal compares rows only when both are
// stable.
const (
	StableSpread = 0.30
	StableRounds = 3
)

// spread is (max - min) / median of rates (0 for fewer than two).
func spread(rates []float64) float64 {
	if len(rates) < 2 {
		return 0
	}
	s := append([]float64(nil), rates...)
	sort.Float64s(s)
	med := s[len(s)/2]
	if len(s)%2 == 0 {
		med = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	if med <= 0 {
		return 0
	}
	return (s[len(s)-1] - s[0]) / med
}
