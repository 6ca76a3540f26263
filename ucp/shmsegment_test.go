package ucp_test

import (
	"bytes"
	"testing"

	"github.com/openrdmo/rdmo/ucp"
	"github.com/openrdmo/rdmo/ucp/ucptest"
)

func TestShmSegmentsLarge(t *testing.T) {
	for _, c := range []struct {
		name string
		env  map[string]string
		cfg  map[string]string
		want bool
	}{
		{name: "nothing set", want: true},
		{name: "mm large", env: map[string]string{"UCX_MM_SEG_SIZE": "65528"}, want: true},
		{name: "mm just below", env: map[string]string{"UCX_MM_SEG_SIZE": "65520"}, want: false},
		{name: "mm larger", env: map[string]string{"UCX_MM_SEG_SIZE": "128K"}, want: true},
		{name: "mm default", env: map[string]string{"UCX_MM_SEG_SIZE": "8256"}, want: false},
		{name: "mm unreadable", env: map[string]string{"UCX_MM_SEG_SIZE": "auto"}, want: false},
		{name: "posix only", env: map[string]string{"UCX_POSIX_SEG_SIZE": "1m"}, want: false},
		{name: "both transports", env: map[string]string{"UCX_POSIX_SEG_SIZE": "1m", "UCX_SYSV_SEG_SIZE": "65528b"}, want: true},
		{name: "mm and a small sysv", env: map[string]string{"UCX_MM_SEG_SIZE": "1m", "UCX_SYSV_SEG_SIZE": "8k"}, want: false},
		{name: "config mm", cfg: map[string]string{"MM_SEG_SIZE": "65528"}, want: true},
		{name: "config mm small", cfg: map[string]string{"MM_SEG_SIZE": "16384"}, want: false},
		{name: "config posix", cfg: map[string]string{"POSIX_SEG_SIZE": "1m"}, want: false}, // does not reach the transport
		{name: "config wins over env", env: map[string]string{"UCX_MM_SEG_SIZE": "8256"}, cfg: map[string]string{"MM_SEG_SIZE": "1m"}, want: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			ucptest.UnsetShmSegmentEnv(t)
			for k, v := range c.env {
				t.Setenv(k, v)
			}
			if got := ucp.ShmSegmentsLarge(c.cfg); got != c.want {
				t.Errorf("ShmSegmentsLarge(%v) with %v = %v, want %v", c.cfg, c.env, got, c.want)
			}
		})
	}
}

// TestLargeShmSegmentsMessage sends messages up to the large segment's size
// between two workers of a context with large segments, over shared
// memory, and checks every byte; and that a context says whether its
// segments are large.
func TestLargeShmSegmentsMessage(t *testing.T) {
	ucptest.CheckLeaks(t)
	ucptest.UnsetShmSegmentEnv(t)
	tr := ucptest.Transports[0] // shm
	ctx := ucptest.NewContextWith(t, tr, ucp.ContextOptions{LargeShmSegments: true})
	if !ctx.LargeShmSegments() {
		t.Fatal("a context made with LargeShmSegments says its segments are small")
	}
	plain := ucptest.NewContext(t, tr)
	if plain.LargeShmSegments() {
		t.Error("a context made without LargeShmSegments says its segments are large")
	}

	p := newPairIn(t, ctx)
	var got [][]byte
	if err := p.b.SetHandler(1, ucp.MessageHandlerFunc(func(_ *ucp.Worker, msgs []ucp.Message) {
		for _, m := range msgs {
			got = append(got, append([]byte(nil), m.Data...))
		}
	})); err != nil {
		t.Fatal(err)
	}
	sizes := []int{4 << 10, 60 << 10, ucp.ShmSegmentLarge - 64, 64 << 10, 200 << 10}
	var want [][]byte
	var sent done
	for i, n := range sizes {
		msg := make([]byte, n)
		for j := range msg {
			msg[j] = byte(i*31 + j*7)
		}
		want = append(want, msg)
		if err := p.ab.SendAM(1, []byte{byte(i)}, msg, ucp.SendEager, &sent, uint64(i)); err != nil {
			t.Fatalf("send %d bytes: %v", n, err)
		}
	}
	p.progress(func() bool { return len(got) == len(sizes) && sent.n == len(sizes) })
	if len(sent.errs) > 0 {
		t.Fatalf("sends failed: %v", sent.errs)
	}
	for i := range want {
		if !bytes.Equal(got[i], want[i]) {
			t.Errorf("message %d (%d bytes) arrived as %d bytes, not as sent", i, len(want[i]), len(got[i]))
		}
	}
}

func TestShmSelected(t *testing.T) {
	t.Setenv("UCX_TLS", "")
	for tls, want := range map[string]bool{
		"": true, "all": true, "tcp,self": false, "tcp": false, "shm,self": true, "sm": true, "mm": true,
		"sysv": true, "posix,tcp": true, "SHM": true, " tcp , self ": false, "^shm": false, "^sm": false,
		"^sysv": true, "^sysv,posix": false, "^tcp": true, "rc,ud,self": false, "cma,tcp": false,
	} {
		if got := ucp.ShmSelected(map[string]string{"TLS": tls}); got != want {
			t.Errorf("TLS %q: %v, want %v", tls, got, want)
		}
	}
	// Without TLS in the Config, UCX_TLS decides.
	t.Setenv("UCX_TLS", "tcp")
	if ucp.ShmSelected(nil) {
		t.Error("UCX_TLS=tcp: shared memory selected")
	}
	if !ucp.ShmSelected(map[string]string{"TLS": "shm"}) {
		t.Error("Config TLS=shm over UCX_TLS=tcp: not selected")
	}
}
