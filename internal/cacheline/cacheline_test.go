package cacheline

import (
	"bytes"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
)

// TestEvictKeepsBytes evicts ranges of every alignment and length against
// line boundaries and checks that no byte of the buffer, inside the range
// or beside it, changed.
func TestEvictKeepsBytes(t *testing.T) {
	buf := make([]byte, 5*Size+7)
	for i := range buf {
		buf[i] = byte(i*131 + 7)
	}
	want := bytes.Clone(buf)
	for off := 0; off <= 2*Size+1; off++ {
		for _, n := range []int{0, 1, Size - 1, Size, Size + 1, 3*Size - off%5} {
			if off+n > len(buf) {
				continue
			}
			Evict(buf[off : off+n])
			if !bytes.Equal(buf, want) {
				t.Fatalf("Evict(buf[%d:%d]) changed the buffer", off, off+n)
			}
		}
	}
	Evict(nil)
}

// TestSupportedMatchesKernel holds the CPUID check against what the
// kernel says the CPU has: on amd64, Evict works exactly when
// /proc/cpuinfo lists clflushopt.
func TestSupportedMatchesKernel(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		if Supported {
			t.Fatal("Supported off amd64")
		}
		return
	}
	info, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		t.Fatalf("reading /proc/cpuinfo: %v", err)
	}
	var flags []string
	for _, line := range strings.Split(string(info), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "flags" {
			flags = strings.Fields(v)
			break
		}
	}
	if flags == nil {
		t.Fatal("no flags line in /proc/cpuinfo")
	}
	want := false
	for _, f := range flags {
		want = want || f == "clflushopt"
	}
	if Supported != want {
		t.Fatalf("Supported = %v, /proc/cpuinfo lists clflushopt: %v", Supported, want)
	}
}

// BenchmarkEvict is what evicting a lent record costs the worker, by size
// (the lines were just read, so they are in this core's caches).
func BenchmarkEvict(b *testing.B) {
	for _, size := range []int{4 << 10, 64 << 10, 1 << 20} {
		buf := make([]byte, size)
		b.Run("size="+byteSize(size), func(b *testing.B) {
			b.SetBytes(int64(size))
			var sink byte
			for range b.N {
				for i := 0; i < size; i += Size {
					sink += buf[i]
				}
				Evict(buf)
			}
			_ = sink
		})
	}
}

func byteSize(n int) string {
	if n >= 1<<20 {
		return strconv.Itoa(n>>20) + "MiB"
	}
	return strconv.Itoa(n>>10) + "KiB"
}
