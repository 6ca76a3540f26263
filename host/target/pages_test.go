package target_test

import (
	"strings"
	"testing"

	"github.com/openrdmo/rdmo/host/target"
	"github.com/openrdmo/rdmo/ucp/ucptest"
)

// Allocate's memory says which pages back it: small pages where the host
// has no huge pages for the memory's kind (the fallback: UCX's shared
// memory with shmem THP off), huge ones where it has (hugetlb, or THP for
// the anonymous memory UCX allocates when no shared-memory transport is
// on); either way the memory works and PagesOf finds it.
func TestAllocatePages(t *testing.T) {
	ucptest.ForEachTransport(t, func(t *testing.T, tr ucptest.Transport) {
		local := newLocal(t, tr)
		defer local.Close()
		const n = 8 << 20
		m, err := local.Allocate(n)
		if err != nil {
			t.Fatal(err)
		}
		b := m.Bytes()
		for i := 0; i < len(b); i += 4096 {
			b[i] = byte(i >> 12)
		}
		p, err := target.PagesOf(m)
		if err != nil {
			t.Fatal(err)
		}
		if p.PageSize < 4096 || p.PageSize&(p.PageSize-1) != 0 {
			t.Errorf("page size %d", p.PageSize)
		}
		if p.HugeBytes < 0 || p.HugeBytes > n+2<<20 {
			t.Errorf("%d bytes in THP of an %d-byte region", p.HugeBytes, n)
		}
		hugetlb := p.PageSize > 4096
		if hugetlb && p.String() != "hugetlb "+itoa(p.PageSize>>10)+" KiB" || !hugetlb && !strings.HasPrefix(p.String(), "4 KiB") {
			t.Errorf("Pages %+v reads %q", p, p.String())
		}
		t.Logf("%d MiB allocated: %v", n>>20, p)
	})
}

func itoa(n int) string {
	var b []byte
	for {
		b = append([]byte{byte('0' + n%10)}, b...)
		if n /= 10; n == 0 {
			return string(b)
		}
	}
}
