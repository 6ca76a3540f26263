package prefault

import (
	"bufio"
	"bytes"
	"os"
	"strconv"
	"syscall"
	"testing"
	"unsafe"
)

// Both ways of populating make every page of a shared mapping resident in
// this process's page tables and leave its bytes as they were: pages
// written before keep their contents, pages never written stay zero.
func TestPopulate(t *testing.T) {
	for _, tc := range []struct {
		name string
		fill func([]byte) (Method, error)
	}{
		{"Populate", Populate},
		{"touch", func(b []byte) (Method, error) { touch(b); return Touch, nil }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			page := os.Getpagesize()
			const pages = 64
			m, err := syscall.Mmap(-1, 0, pages*page, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED|syscall.MAP_ANON)
			if err != nil {
				t.Fatal(err)
			}
			defer syscall.Munmap(m)
			for p := 0; p < pages; p += 4 {
				for i := p * page; i < (p+1)*page; i++ {
					m[i] = byte(p + i)
				}
			}
			if got := rss(t, m); got != pages/4*page {
				t.Fatalf("before: %d bytes resident, want the %d written", got, pages/4*page)
			}
			// An unaligned range inside the mapping commits the pages it
			// touches.
			method, err := tc.fill(m[3:])
			if err != nil {
				t.Fatal(err)
			}
			if got := rss(t, m); got != pages*page {
				t.Errorf("after %v: %d bytes resident, want %d", method, got, pages*page)
			}
			for i := range m {
				want := byte(0)
				if p := i / page; p%4 == 0 {
					want = byte(p + i)
				}
				if m[i] != want {
					t.Fatalf("byte %d is %#x after %v, was %#x", i, m[i], method, want)
				}
			}
		})
	}
}

func TestPopulateEmpty(t *testing.T) {
	if m, err := Populate(nil); m != 0 || err != nil {
		t.Errorf("Populate(nil) = %v, %v", m, err)
	}
}

// An unmapped range fails with the kernel's error instead of crashing.
func TestPopulateUnmapped(t *testing.T) {
	page := os.Getpagesize()
	m, err := syscall.Mmap(-1, 0, 4*page, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANON)
	if err != nil {
		t.Fatal(err)
	}
	b := unsafe.Slice(unsafe.SliceData(m), len(m)) // outlives the mapping
	if err := syscall.Munmap(m); err != nil {
		t.Fatal(err)
	}
	method, err := Populate(b)
	if err == nil {
		t.Fatalf("Populate of an unmapped range succeeded (%v)", method)
	}
	if method == Touch {
		t.Fatal("an unmapped range was touched")
	}
}

// rss is the resident bytes of the mapping that holds b (/proc/self/smaps).
func rss(t *testing.T, b []byte) int {
	t.Helper()
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	addr := uint64(uintptr(unsafe.Pointer(unsafe.SliceData(b))))
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Bytes()
		if r, _, ok := bytes.Cut(line, []byte(" ")); ok {
			if lo, hi, ok := bytes.Cut(r, []byte("-")); ok {
				l, err1 := strconv.ParseUint(string(lo), 16, 64)
				h, err2 := strconv.ParseUint(string(hi), 16, 64)
				if err1 == nil && err2 == nil {
					in = l <= addr && addr < h
					continue
				}
			}
		}
		if v, ok := bytes.CutPrefix(line, []byte("Rss:")); ok && in {
			kb, err := strconv.Atoi(string(bytes.TrimSuffix(bytes.TrimSpace(v), []byte(" kB"))))
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatalf("no mapping holds %#x", addr)
	return 0
}
