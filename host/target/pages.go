package target

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"syscall"

	"github.com/openrdmo/rdmo/ucp"
)

// Pages says how target memory is backed: a worker that writes a region
// through its mapping faults once per page it first touches, so 2 MiB
// pages fault 512 times less than 4 KiB ones (docs/BENCHMARKS.md).
type Pages struct {
	// PageSize is the kernel's page size for the mapping: 4 KiB, or the
	// hugetlb page size when UCX got hugetlb memory (UCX_SYSV_HUGETLB_MODE
	// tries it by default).
	PageSize int
	// HugeBytes are the bytes in transparent huge pages now (only pages
	// already touched count).
	HugeBytes int
}

// Huge reports whether any of the memory is in huge pages.
func (p Pages) Huge() bool { return p.PageSize > 4096 || p.HugeBytes > 0 }

func (p Pages) String() string {
	switch {
	case p.PageSize > 4096:
		return fmt.Sprintf("hugetlb %d KiB", p.PageSize>>10)
	case p.HugeBytes > 0:
		return fmt.Sprintf("4 KiB, %d MiB in THP", p.HugeBytes>>20)
	}
	return fmt.Sprintf("%d KiB", p.PageSize>>10)
}

// AdviseHugePages asks the kernel for transparent huge pages for m
// (madvise MADV_HUGEPAGE), which it grants where THP is enabled for the
// memory's kind (for UCX's shared memory, /sys/kernel/mm/transparent_hugepage/shmem_enabled
// "advise" or "always"). Where it is not, nothing changes and the memory
// stays in small pages: callers may ignore the error.
func AdviseHugePages(m *ucp.Memory) error {
	b := m.Bytes()
	if len(b) == 0 {
		return nil
	}
	return syscall.Madvise(b, syscall.MADV_HUGEPAGE)
}

// PagesOf reads how m is backed from /proc/self/smaps.
func PagesOf(m *ucp.Memory) (Pages, error) {
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		return Pages{}, err
	}
	defer f.Close()
	lo, hi := m.Address(), m.Address()+uint64(m.Len())
	var p Pages
	in, found := false, false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Bytes()
		if start, end, ok := vmaRange(line); ok {
			in = start < hi && lo < end
			found = found || in
			continue
		}
		if !in {
			continue
		}
		k, v, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			continue
		}
		kb, err := strconv.Atoi(string(bytes.TrimSuffix(bytes.TrimSpace(v), []byte(" kB"))))
		if err != nil {
			continue
		}
		switch string(k) {
		case "KernelPageSize":
			if p.PageSize == 0 || kb<<10 < p.PageSize {
				p.PageSize = kb << 10
			}
		case "AnonHugePages", "ShmemPmdMapped", "FilePmdMapped":
			p.HugeBytes += kb << 10
		}
	}
	if err := sc.Err(); err != nil {
		return Pages{}, err
	}
	if !found || p.PageSize == 0 {
		return Pages{}, fmt.Errorf("target: no mapping of [%#x, %#x) in /proc/self/smaps", lo, hi)
	}
	return p, nil
}

// vmaRange parses the "start-end perms ..." line that opens a mapping.
func vmaRange(line []byte) (start, end uint64, ok bool) {
	r, _, ok := bytes.Cut(line, []byte(" "))
	if !ok {
		return 0, 0, false
	}
	a, b, ok := bytes.Cut(r, []byte("-"))
	if !ok {
		return 0, 0, false
	}
	s, err1 := strconv.ParseUint(string(a), 16, 64)
	e, err2 := strconv.ParseUint(string(b), 16, 64)
	return s, e, err1 == nil && err2 == nil
}
